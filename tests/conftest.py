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


# The longest tests, minutes each (the embedded stack's end-to-end runs; CI's `--durations`), start first and
# the rest follow; `make pytest`'s `--dist worksteal` lets a worker that runs out take half of the other's
# queue. (`--dist load`, which deals the first quarter out in turn, left both workers on long tests at the
# end: CI took over 32 minutes against 26 with worksteal.)
LONGEST_FIRST = (
    "tests/integration/embedded/test_e2e_catalogue.py",
    "tests/integration/embedded/test_e2e.py",
    "tests/integration/test_cli_demo.py",
    "tests/integration/embedded/test_e2e_faults.py",
    "tests/integration/embedded/test_e2e_data.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.path.relative_to(REPO_ROOT).as_posix()
        if path in LONGEST_FIRST:
            return LONGEST_FIRST.index(path)
        return len(LONGEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)

    items.sort(key=rank)  # stable: collection order within each rank
