"""Each injected fault ends the run in the state the state machine defines, with the lock released.

Its own module, so the happy path's module-scoped stack has stopped before these start their own (one
embedded stack per process).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow import MlflowClient

from controller import names, runs, tracking
from retrain.embedded.faults import REDELIVERY_SECONDS, Faults
from retrain.embedded.mlflow_app import store_uri
from retrain.embedded.sagemaker import INTERRUPTIONS_FIELD
from tests.integration.embedded.flow import (
    DATASET,
    IMAGES,
    Finished,
    Uploads,
    lock_holder,
    run_to_the_end,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The end state is the subject here, not the model or its curve: fewer images and epochs (still ~8
# steps, enough for the planted bottleneck's patience of 5), no checkpoint evaluations.
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
    ) as finished:
        assert finished.record["status"] == status, finished.record.get("failure")
        if error is not None:
            assert finished.record["failure"]["error"] == error
        assert lock_holder(finished) is None
        found = {r["rule"] for r in finished.record.get("rule_results", []) if r["status"] == "IssuesFound"}
        assert found_by <= found, finished.record.get("rule_results")
        fired(finished)


def test_every_event_delivered_twice_late_and_out_of_order_ends_as_one_delivery(tmp_path: Path) -> None:
    # GIVEN an emulated EventBridge that delivers every event (the uploads', SageMaker's jobs', Step
    # Functions' execution's, the checkpoints') a second time 0.5-4 s later, as at-least-once delivery may
    with run_to_the_end(
        tmp_path / "state",
        Uploads(tmp_path / "images"),
        Faults.parse(["duplicate-events"]),
        overrides={"Epochs": "3", "BlockingRules": ""},
    ) as finished:
        stack, record = finished.stack, finished.record
        # WHEN the run has ended, and the last copies have had time to arrive
        client = MlflowClient(tracking_uri=store_uri(stack.state_dir))
        deadline = time.monotonic() + 120
        while names.RUN_TRACKING_DONE_AT not in record and time.monotonic() < deadline:
            time.sleep(2)
            record = runs.get_run(DATASET, record["run_id"], table_name=_runs_table(finished),
                                  client=stack.client("dynamodb")) or record  # fmt: skip
        time.sleep(max(REDELIVERY_SECONDS) + 4)
        record = runs.get_run(DATASET, record["run_id"], table_name=_runs_table(finished),
                              client=stack.client("dynamodb")) or record  # fmt: skip
        # THEN events were delivered twice (uploads, jobs, checkpoints, the execution's end: dozens) and
        # the run ended as with single delivery: one run of every upload, one registered package
        assert stack.faults.redelivered > IMAGES
        assert record["status"] == "SUCCEEDED", record.get("failure")
        every_run = runs.list_runs(
            table_name=_runs_table(finished), dataset=DATASET, client=stack.client("dynamodb")
        )
        assert [r["run_id"] for r in every_run] == [record["run_id"]]
        assert record["manifest_size"] == IMAGES
        group = record["model_package_arn"].rsplit("/", 1)[0].split(":model-package/", 1)[1]
        packages = stack.client("sagemaker").list_model_packages(ModelPackageGroupName=group)
        assert [p["ModelPackageArn"] for p in packages["ModelPackageSummaryList"]] == [
            record["model_package_arn"]
        ]
        # AND every checkpoint evaluation recorded once
        jobs = [point["job"] for point in record["checkpoint_evaluations"]]
        assert jobs and len(jobs) == len(set(jobs)) and record["checkpoint_evaluation_jobs"] == jobs
        # AND in MLflow one parent for the run and one child per training job, under it
        experiment = client.get_experiment_by_name(tracking.experiment_name(DATASET))
        assert experiment is not None
        every = client.search_runs([experiment.experiment_id])
        parents = [r for r in every if tracking.TAG_PARENT not in r.data.tags]
        assert [p.info.run_id for p in parents] == [record["mlflow_run_id"]]
        trials = stack.client("sagemaker").list_training_jobs_for_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=record["tuning_job"]
        )["TrainingJobSummaries"]
        per_job = Counter(r.data.tags[tracking.TAG_JOB] for r in every if tracking.TAG_PARENT in r.data.tags)
        assert per_job == {t["TrainingJobName"]: 1 for t in trials}
        assert record["mlflow_children"].keys() == per_job.keys()
        assert lock_holder(finished) is None


def _runs_table(finished: Finished) -> str:
    return finished.outputs[names.STACK_OUTPUTS["runs_table"]]
