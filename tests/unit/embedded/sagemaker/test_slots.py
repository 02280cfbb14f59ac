from __future__ import annotations

import threading
import time

import pytest

from retrain.embedded.sagemaker.slots import NewestFirstSlots


def _wait_until(condition, seconds: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_freed_slot_goes_to_the_job_that_asked_last() -> None:
    # GIVEN one slot held, and jobs that began waiting in the order a, b, c (c: a run's next step)
    slots = NewestFirstSlots(1)
    order: list[str] = []

    def job(name: str) -> None:
        with slots:
            order.append(name)

    slots.__enter__()
    threads = []
    for count, name in enumerate("abc", start=1):
        thread = threading.Thread(target=job, args=(name,))
        thread.start()
        threads.append(thread)
        _wait_until(lambda count=count: slots.waiting == count)  # type: ignore[misc]
    # WHEN the slot is freed
    slots.__exit__(None, None, None)
    for thread in threads:
        thread.join(5)
    # THEN the newest waiter ran first, the backlog after it, newest first too
    assert order == ["c", "b", "a"]


def test_no_more_than_the_bound_hold_slots_at_once() -> None:
    # GIVEN two slots and six jobs that each hold one for a moment
    slots = NewestFirstSlots(2)
    holding, most = 0, 0
    lock = threading.Lock()

    def job() -> None:
        nonlocal holding, most
        with slots:
            with lock:
                holding += 1
                most = max(most, holding)
            time.sleep(0.02)
            with lock:
                holding -= 1

    threads = [threading.Thread(target=job) for _ in range(6)]
    # WHEN they all run
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    # THEN all ran, and never more than two at once, and both slots were used
    assert holding == 0 and slots.waiting == 0
    assert most == 2


def test_a_bound_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1, not 0"):
        NewestFirstSlots(0)
