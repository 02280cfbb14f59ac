"""Shared fixtures. Fake credentials and a region are set before anything imports boto3, and every
socket is refused unless it goes to this machine, so no test can ever reach real AWS."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "POWERTOOLS_METRICS_NAMESPACE": "retrain-tests",
    "POWERTOOLS_SERVICE_NAME": "retrain-tests",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "SAM_CLI_TELEMETRY": "0",
}
os.environ.update(FAKE_ENV)
for _name in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
    os.environ.pop(_name, None)
# The pytest workers (four in `make pytest`) share two cores: torch's default of an intra-op thread per
# core in every worker (and in every process a test starts without its own setting) oversubscribes them,
# and waiting OpenMP threads spin. One thread each: `pytest -n 3 tests/unit/training tests/unit/debugger
# -m "not slow"` used 86 s of user CPU with the default, 69 s with this. The embedded stack's jobs get the
# instance's own setting.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO_ROOT = Path(__file__).resolve().parent.parent
EVENTS_DIR = Path(__file__).resolve().parent / "events"

_real_connect = socket.socket.connect
_real_getaddrinfo = socket.getaddrinfo


def _is_local(host: Any) -> bool:
    if not isinstance(host, str):
        return True
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _guarded_connect(self: socket.socket, address: Any) -> None:
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
        raise OSError(f"tests may only connect to this machine, not to {address[0]!r}")
    _real_connect(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host is not None and not _is_local(host.decode() if isinstance(host, bytes) else host):
        raise OSError(f"tests may only resolve this machine, not {host!r}")
    return _real_getaddrinfo(host, *args, **kwargs)


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.getaddrinfo = _guarded_getaddrinfo


@pytest.fixture(autouse=True)
def _fake_aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Re-assert the fake environment for every test: a test that changes it cannot leak."""
    for key, value in FAKE_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield


@pytest.fixture
def events_dir() -> Path:
    return EVENTS_DIR


# The longest tests, in seconds each (CI's `--durations` on this 2-core machine): the embedded stack's
# end-to-end runs. Under xdist's `--dist worksteal` each worker starts with one contiguous share of the
# collection and an idle worker takes the back half of the longest queue. The long and slow tests go to the
# front of every share but the last, spread by their seconds (longest first, each to the share with the
# fewest); the last share is quick tests only. An end-to-end run waits on its stack's clocks (quiet period,
# schedule, polls) and a unit test does not, so a worker of quick tests keeps the cores busy while the
# others wait: with 2 workers each given half of the long tests, CI took 28 min 51 s, both waiting at
# once (35% idle), against 28 min 27 s with them all on the first (CI runs 6 and 7, per-10-s idle from
# /proc/stat). (`--dist load`, which deals the first quarter out in turn, left both workers on long tests
# at the end: over 32 minutes.)
LONG_TESTS: dict[str, float] = {
    "tests/integration/embedded/test_e2e_catalogue.py": 240,
    "tests/integration/embedded/test_e2e.py": 250,
    "tests/integration/test_cli_demo.py": 200,
    "tests/integration/embedded/test_e2e_faults.py": 110,
    "tests/integration/embedded/test_e2e_data.py": 95,
}
SLOW_TEST_SECONDS = 20.0  # any other test marked slow, for the spread


def expected_seconds(item: pytest.Item) -> float:
    """A test's seconds for the spread: its file's in LONG_TESTS, SLOW_TEST_SECONDS if marked slow, else 0."""
    path = item.path.relative_to(REPO_ROOT).as_posix()
    if path in LONG_TESTS:
        return LONG_TESTS[path]
    return SLOW_TEST_SECONDS if item.get_closest_marker("slow") else 0.0


def share_sizes(count: int, workers: int) -> list[int]:
    """How worksteal first deals `count` tests to `workers` idle workers: each takes the pending tests
    divided by the workers still to serve, from the front."""
    sizes, left = [], count
    for served in range(workers):
        sizes.append(left // (workers - served))
        left -= sizes[-1]
    return sizes


def spread(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The collection ordered so that each worker's first share but the last starts with its part of the
    long and slow tests (longest first to the share with the fewest seconds), quick tests filling them;
    the last share (of two or more) is quick tests only. A file's slow tests stay in one share: its
    module-scoped fixtures (a training job, a stack) are made once by each worker that runs any of them,
    and dealt one by one the 15 tests of one file had their training job made on three workers. The long
    files' tests (each with a stack of its own) are dealt one by one."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        if expected_seconds(item):
            path = item.path.relative_to(REPO_ROOT).as_posix()
            groups.setdefault(path if path not in LONG_TESTS else f"{path}::{len(groups)}", []).append(item)
    # the long tests first (each alone), then the slow files, most seconds first: within a share the tests'
    # seconds never increase
    heavy = sorted(
        groups.values(),
        key=lambda group: (max(map(expected_seconds, group)), sum(map(expected_seconds, group))),
        reverse=True,
    )
    quick = [item for item in items if not expected_seconds(item)]
    sizes = share_sizes(len(items), workers)
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    carriers = range(max(1, workers - 1))
    for group in heavy:
        fits = [w for w in range(workers) if len(shares[w]) + len(group) <= sizes[w]]
        if not fits:  # no share has room for the whole file: its tests go one by one
            heavy.extend([item] for item in group)
            continue
        target = min([w for w in fits if w in carriers] or fits, key=lambda w: loads[w])
        shares[target].extend(group)
        loads[target] += sum(map(expected_seconds, group))
    for share, size in zip(shares, sizes, strict=True):
        need = size - len(share)
        share.extend(quick[:need])
        del quick[:need]
    return [item for share in shares for item in share]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    items[:] = spread(items, workers)
