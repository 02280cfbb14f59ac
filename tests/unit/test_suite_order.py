"""The suite's order under xdist (tests/conftest.py): every worker's first share but the last starts with
its part of the long tests; the last share is quick tests, which keep the cores busy while the others
wait on their stacks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LONG_TESTS, REPO_ROOT, expected_seconds, share_sizes, spread


@dataclass(frozen=True)
class Collected:
    """What spread() reads of a collected test: its file and its markers."""

    path: Path
    name: str
    slow: bool = False

    def get_closest_marker(self, name: str) -> Any:
        return object() if (name == "slow" and self.slow) else None


def _collection() -> list[Any]:
    """Collection order as pytest makes it: the long files' tests in a row, then the rest."""
    items: list[Any] = []
    for file, _ in LONG_TESTS.items():
        items += [Collected(REPO_ROOT / file, f"{file}::{n}") for n in range(4 if "faults" in file else 1)]
    items += [
        Collected(REPO_ROOT / "tests/integration/test_slow.py", f"slow{n}", slow=True) for n in range(6)
    ]
    items += [
        Collected(REPO_ROOT / "tests/integration/test_other_slow.py", f"other{n}", slow=True)
        for n in range(3)
    ]
    items += [Collected(REPO_ROOT / "tests/unit/test_quick.py", f"quick{n}") for n in range(300)]
    return items


def test_share_sizes_are_worksteals_first_deal() -> None:
    assert share_sizes(10, 3) == [3, 3, 4]
    assert share_sizes(1178, 2) == [589, 589]
    assert sum(share_sizes(1001, 3)) == 1001


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_the_long_tests_lead_every_share_but_the_last_spread_by_their_seconds(workers: int) -> None:
    items = _collection()
    ordered: list[Any] = spread(list(items), workers)
    # the same tests, each once
    assert sorted(i.name for i in ordered) == sorted(i.name for i in items)
    start, loads, share_of = 0, [], {}
    for index, size in enumerate(share_sizes(len(items), workers)):
        share = ordered[start : start + size]
        start += size
        share_of.update({i.name: index for i in share})
        seconds = [expected_seconds(i) for i in share]
        heavy = [s for s in seconds if s]
        # the share's long and slow tests come first, longest first, then only quick ones
        assert seconds[: len(heavy)] == sorted(heavy, reverse=True)
        assert not any(seconds[len(heavy) :])
        loads.append(sum(heavy))
    carriers = loads[:-1] if workers > 1 else loads
    if workers > 1:  # the last share holds none of them
        assert loads[-1] == 0
    # no share that carries them has more seconds of them than another by more than the longest test
    assert max(carriers) - min(carriers) <= max(LONG_TESTS.values())
    assert sum(carriers) == sum(expected_seconds(i) for i in items)
    if workers > 2:  # the two longest are on different workers
        longest, second = sorted(LONG_TESTS, key=LONG_TESTS.__getitem__, reverse=True)[:2]
        assert share_of[f"{longest}::0"] != share_of[f"{second}::0"]


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_a_files_slow_tests_share_one_worker_and_its_module_fixtures(workers: int) -> None:
    # GIVEN two files of slow tests (module-scoped fixtures are made once per worker that runs the file)
    items = _collection()
    # WHEN the collection is spread
    ordered: list[Any] = spread(list(items), workers)
    start, share_of = 0, {}
    for index, size in enumerate(share_sizes(len(items), workers)):
        share_of.update({i.name: index for i in ordered[start : start + size]})
        start += size
    # THEN each file's tests are in one worker's share, and the long files' tests are dealt one by one
    for prefix in ("slow", "other"):
        assert len({index for name, index in share_of.items() if name.startswith(prefix)}) == 1
    faults = {index for name, index in share_of.items() if "faults" in name}
    assert len(faults) == min(4, workers - 1)
