"""How much memory a Lambda environment uses: the resident memory of its worker's process tree.

Lambda gives a function ``MemorySize`` MB and kills its environment when it uses more
(``Runtime.OutOfMemory``: "Runtime exited with error: signal: killed"); the kill cannot be caught. The
embedded runtime does the same by watching: while an invocation runs it reads the worker's resident set
(``VmRSS`` of the worker and its descendants, from ``/proc``) every :data:`POLL_SECONDS` and kills the
worker once it is over the limit.

Why watching rather than a kernel limit: a cgroup v2 ``memory.max`` would be exact, but needs a delegated,
writable cgroup v2 subtree, which neither this development machine (cgroup v1) nor an unprivileged CI
runner has; ``RLIMIT_AS``/``RLIMIT_DATA`` bound virtual memory rather than resident memory (thread stacks
and allocator arenas count in full) and make an allocation raise ``MemoryError``, which a handler's
``except Exception`` catches, where Lambda's kill ends the environment. What watching misses is a spike
shorter than the poll interval that is freed again before the next reading.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

POLL_SECONDS: Final = 0.05
PROC: Final = Path("/proc")


def _rss_bytes(pid: int) -> int:
    try:
        status = (PROC / str(pid) / "status").read_text()
    except OSError:
        return 0  # the process has ended
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0  # a zombie has no resident set


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found.extend(int(child) for child in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process under it, parents first."""
    found: list[int] = []
    pending = [pid]
    while pending:
        current = pending.pop(0)
        if current not in found:
            found.append(current)
            pending.extend(_children(current))
    return found


def resident_bytes(pid: int) -> int:
    """The resident memory of ``pid`` and every process under it, in bytes (0 once it has ended)."""
    return sum(_rss_bytes(member) for member in process_tree(pid))
