"""Each injected fault ends the run in the state the state machine defines, with the lock released.

Its own module, so the happy path's module-scoped stack has stopped before these start their own (one
embedded stack per process).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from retrain.embedded.faults import Faults
from retrain.embedded.sagemaker import INTERRUPTIONS_FIELD
from tests.integration.embedded.flow import Finished, Uploads, lock_holder, run_to_the_end

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The end state is the subject here, not the model or its curve: fewer images and epochs (still ~8
# steps, enough for the planted bottleneck's patience of 5), no checkpoint evaluations, and no spot
# interruptions (each a second container per trial; test_e2e.py and the demo's test resume from them).
FAULT_IMAGES = 150
QUICK = {"CheckpointEvaluationEvery": "0", "Epochs": "2"}


def _the_tuning_job_met_the_injected_limit_twice(finished: Finished) -> None:
    """resource-limit:2: the trials' CreateTrainingJob calls (the run's only ones: no final training)
    met ResourceLimitExceeded, the fault fired both its times, and the tuner asked again."""
    tuning = finished.stack.sagemaker._tuning[finished.record["tuning_job"]]
    assert "(ResourceLimitExceeded) when calling the CreateTrainingJob operation" in tuning["LastLaunchError"]
    assert finished.stack.faults.create_training_job_error("after the run") is None


def _a_trial_lost_its_instance_mid_write_and_skipped_the_torn_checkpoint(finished: Finished) -> None:
    """kill-checkpoint-write: one trial's instance died while it wrote a checkpoint (an interruption of
    its own cause, besides the spot schedule's), and its next attempt refused the torn file."""
    emulator = finished.stack.sagemaker
    summaries = emulator.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=finished.record["tuning_job"]
    )["TrainingJobSummaries"]
    jobs = [emulator.describe_training_job(TrainingJobName=t["TrainingJobName"]) for t in summaries]
    killed = [(j, i) for j in jobs for i in j[INTERRUPTIONS_FIELD] if i["Cause"] == "checkpoint-write"]
    assert len(killed) == 1, [j[INTERRUPTIONS_FIELD] for j in jobs]
    [(job, interruption)] = killed
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    logs = emulator.workdir / "training" / job["TrainingJobName"] / "logs"
    lost = (logs / f"attempt-{interruption['Attempt']}.log").read_text(encoding="utf-8")
    torn = re.search(r"instance lost while writing (ckpt-\d{9}\.pt)", lost)
    assert torn is not None, lost[-2000:]
    after = (logs / f"attempt-{interruption['Attempt'] + 1}.log").read_text(encoding="utf-8")
    assert f"{torn.group(1)} is unusable" in after, after[-2000:]


def _the_training_fault_blocked_and_the_slow_loader_warned(finished: Finished) -> None:
    """rule-finds-issues+vanishing-gradient: each trial ran slow and learnt nothing; with the stack's
    default BlockingRules the rules that judge the training rejected the model (VanishingGradient, and
    LossNotDecreasing for the flat loss it leaves), the one that judges the machine is a warning, and the
    gate's reason names the blocking ones only."""
    found = [r for r in finished.record["rule_results"] if r["status"] == "IssuesFound"]
    actions = {r["rule"]: r.get("action") for r in found}
    assert actions["VanishingGradient"] == "block" and actions["CPUBottleneck"] == "warn", found
    assert finished.record["rules_blocked"] is True
    reason = finished.record["gate"]["reason"]
    assert "VanishingGradient" in reason and "CPUBottleneck" not in reason


def _nothing_more(finished: Finished) -> None:
    """The fault's trace is the end state itself (the failure's error, the rule that found the issue)."""


@pytest.mark.parametrize(
    ("fault", "status", "error", "found_by", "fired"),
    [
        ("import-fails", "FAILED", "ImportFailedError", set(), _nothing_more),
        ("resource-limit:2", "SUCCEEDED", None, set(), _the_tuning_job_met_the_injected_limit_twice),
        (
            "kill-checkpoint-write",
            "SUCCEEDED",
            None,
            set(),
            _a_trial_lost_its_instance_mid_write_and_skipped_the_torn_checkpoint,
        ),
        # A planted slow loader and a planted vanishing gradient, each found by the rule that looks for it.
        (
            "rule-finds-issues+vanishing-gradient",
            "REJECTED",
            None,
            {"CPUBottleneck", "VanishingGradient"},
            _the_training_fault_blocked_and_the_slow_loader_warned,
        ),
    ],
    ids=["import-fails", "resource-limit", "kill-checkpoint-write", "rule-finds-issues"],
)
def test_an_injected_fault_ends_in_the_state_machines_state_with_the_lock_released(
    tmp_path: Path,
    fault: str,
    status: str,
    error: str | None,
    found_by: set[str],
    fired: Callable[[Finished], None],
) -> None:
    with run_to_the_end(
        tmp_path / "state",
        Uploads(tmp_path / "images", count=FAULT_IMAGES),
        Faults.parse(fault.split("+")),
        overrides=QUICK,
        interruptions=0,
    ) as finished:
        assert finished.record["status"] == status, finished.record.get("failure")
        if error is not None:
            assert finished.record["failure"]["error"] == error
        assert lock_holder(finished) is None
        found = {r["rule"] for r in finished.record.get("rule_results", []) if r["status"] == "IssuesFound"}
        assert found_by <= found, finished.record.get("rule_results")
        fired(finished)
