"""The handlers' AWS clients: one per execution environment, never one made for another endpoint."""

from __future__ import annotations

import pytest

from controller import clients


def test_a_client_is_made_once_and_reused() -> None:
    # GIVEN no clients yet
    clients.reset()
    # WHEN a handler asks for the same client twice THEN it gets the one made first
    assert clients.dynamodb() is clients.dynamodb()
    assert clients.s3() is not clients.dynamodb()


def test_a_changed_endpoint_or_region_gets_a_client_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a client made against the default endpoint
    clients.reset()
    default = clients.sfn()
    # WHEN the environment points the clients at another endpoint, then at another region
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    local = clients.sfn()
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    elsewhere = clients.sfn()
    # THEN each got a client for where it points, and going back finds the first one again
    assert default.meta.endpoint_url != "http://127.0.0.1:4566"
    assert local.meta.endpoint_url == "http://127.0.0.1:4566"
    assert elsewhere is not local and elsewhere.meta.region_name == "eu-west-1"
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert clients.sfn() is default


def test_reset_forgets_every_client() -> None:
    first = clients.sns()
    clients.reset()
    assert clients.sns() is not first


def test_a_ledger_write_ends_within_the_bound_the_freezing_job_waits_for():
    # two attempts of (connect + read) timeouts, and standard mode's backoff of at most 1 s between them
    from controller.clients import LEDGER_WRITES
    from retrain_contract import ledger

    attempts = LEDGER_WRITES.retries["total_max_attempts"]
    worst = attempts * (LEDGER_WRITES.connect_timeout + LEDGER_WRITES.read_timeout) + (attempts - 1)
    assert worst <= ledger.RECORD_PUT_BOUND_SECONDS < ledger.RECORD_FENCE_SECONDS
