"""Each injected fault ends the run in the state the state machine defines, with the lock released.

Its own module, so the happy path's module-scoped stack has stopped before these start their own (one
embedded stack per process).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain.embedded.faults import Faults
from tests.integration.embedded.flow import Uploads, lock_holder, run_to_the_end

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The end state is the subject here, not the model or its curve: fewer images and epochs (still ~8
# steps, enough for the planted bottleneck's patience of 5), no checkpoint evaluations.
FAULT_IMAGES = 150
QUICK = {"CheckpointEvaluationEvery": "0", "Epochs": "2"}


@pytest.mark.parametrize(
    ("fault", "status", "error", "found_by"),
    [
        ("import-fails", "FAILED", "ImportFailedError", set()),
        ("resource-limit:2", "SUCCEEDED", None, set()),
        ("kill-checkpoint-write", "SUCCEEDED", None, set()),
        # The planted slow loader, found by the rule that looks for it.
        ("rule-finds-issues", "REJECTED", None, {"CPUBottleneck"}),
    ],
    ids=["import-fails", "resource-limit", "kill-checkpoint-write", "rule-finds-issues"],
)
def test_an_injected_fault_ends_in_the_state_machines_state_with_the_lock_released(
    tmp_path: Path, fault: str, status: str, error: str | None, found_by: set[str]
) -> None:
    with run_to_the_end(
        tmp_path / "state",
        Uploads(tmp_path / "images", count=FAULT_IMAGES),
        Faults.parse([fault]),
        overrides=QUICK,
    ) as finished:
        assert finished.record["status"] == status, finished.record.get("failure")
        if error is not None:
            assert finished.record["failure"]["error"] == error
        assert lock_holder(finished) is None
        found = {r["rule"] for r in finished.record.get("rule_results", []) if r["status"] == "IssuesFound"}
        assert found_by <= found, finished.record.get("rule_results")
