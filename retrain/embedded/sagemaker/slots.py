"""Slots: at most N processing jobs run their program at once on this machine, the newest waiter first.

On SageMaker every processing job has its own instance; here they share this machine's cores with the
training jobs. Checkpoint evaluations arrive as a stream while trials train, and a first-come queue held
a run's own next job (its rule check, its challenger evaluation, created after them) behind that backlog
for minutes. The job that asked last is the run's current step, so it takes the next free slot; the
backlog drains when nothing newer waits.
"""

from __future__ import annotations

import threading
from types import TracebackType


class NewestFirstSlots:
    """A bound on concurrent holders; a freed slot goes to the holder that began waiting last."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError(f"processing slots must be at least 1, not {count}")
        self._free = count
        self._waiting: list[object] = []  # one ticket per waiter, oldest first
        self._changed = threading.Condition()

    @property
    def waiting(self) -> int:
        with self._changed:
            return len(self._waiting)

    def __enter__(self) -> None:
        ticket = object()
        with self._changed:
            self._waiting.append(ticket)
            while not (self._free and self._waiting[-1] is ticket):
                self._changed.wait()
            self._waiting.pop()
            self._free -= 1
            if self._free:
                self._changed.notify_all()  # the next newest may take the slot still free

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        with self._changed:
            self._free += 1
            self._changed.notify_all()
