"""Done-when test of the embedded runtime: an upload, and nothing else, runs the whole retraining flow.

The project's own template.yaml, state machine, Lambda handlers and training_image/ run on the embedded
stack: ingest -> dispatch -> FSx import -> tuning (3 trials, 2 in parallel, each interrupted once on
spot and resumed from its checkpoint) -> rule check -> evaluation (also of checkpoints) -> gate ->
registry -> notification. Then the stack stops, a new one starts from the same state directory, and a
second upload's run warm-starts its tuning from the first run's tuning job. The injected faults are
test_e2e_faults.py's subject.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import names, runs
from retrain.embedded.faults import Faults
from tests.integration.embedded.flow import DATASET, IMAGES, Finished, Uploads, lock_holder, run_to_the_end

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LATER_IMAGES = 60
# The second run's subjects are the warm start and the template's default FinalTraining=true (the final
# training job runs the real container): one epoch, two trials at once, no checkpoint evaluations.
QUICK = {"CheckpointEvaluationEvery": "0", "Epochs": "1", "MaxTuningJobs": "2", "FinalTraining": "true"}


def test_an_upload_alone_runs_the_whole_flow_and_a_later_run_warm_starts_after_a_restart(
    tmp_path: Path,
) -> None:
    # One test, one stack at a time (a module-scoped stack could outlive its tests beside other stacks'
    # tests under xdist): the first three checks read the same finished run.
    with run_to_the_end(tmp_path / "state", Uploads(tmp_path / "images"), Faults(), keep_state=True) as happy:
        _ends_registered_with_the_lock_released(happy)
        _tuning_ran_three_trials_two_at_a_time_each_resumed_after_a_spot_interruption(happy)
        _the_run_record_holds_every_field(happy)
        _every_role_was_authorised_and_none_was_refused(happy)
    first = happy.record

    # A new stack process from the same state directory (a second `retrain demo`), more digits uploaded.
    with run_to_the_end(
        tmp_path / "state",
        Uploads(tmp_path / "more", start=IMAGES, count=LATER_IMAGES),
        Faults(),
        overrides=QUICK,
    ) as later:
        tuning = later.stack.client("sagemaker").describe_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=later.record["tuning_job"]
        )
        known = {
            r["run_id"]
            for r in runs.list_runs(
                table_name=later.outputs[names.STACK_OUTPUTS["runs_table"]],
                dataset=DATASET,
                client=later.stack.client("dynamodb"),
            )
        }
        final = later.stack.client("sagemaker").describe_training_job(
            TrainingJobName=later.record["final_training_job"]
        )
        assert later.stack.gatekeeper.denied() == []

    assert later.record["status"] in ("SUCCEEDED", "REJECTED"), later.record.get("failure")
    assert later.record["new_images"] == LATER_IMAGES
    assert first["run_id"] in known  # the first run's record outlived its stack
    parents = tuning["WarmStartConfig"]["ParentHyperParameterTuningJobs"]
    assert [p["HyperParameterTuningJobName"] for p in parents] == [first["tuning_job"]]
    assert later.record["tuning_job"] != first["tuning_job"]
    # The final training job ran the container with the best trial's hyperparameters, and its model is
    # the one the gate judged.
    assert final["TrainingJobStatus"] == "Completed"
    assert final["HyperParameters"]["lr"] == later.record["best_hyperparameters"]["lr"]
    assert later.record["model_data"] == final["ModelArtifacts"]["S3ModelArtifacts"]


def _every_role_was_authorised_and_none_was_refused(happy: Finished) -> None:
    decided = {role.rsplit("/", 1)[-1].split("-")[1] for role in happy.stack.gatekeeper.roles_seen}
    assert {"IngestFunctionRole", "PrepareRunFunctionRole", "TrainingStateMachineRole"} <= decided
    assert "SageMakerExecutionRole" in decided
    assert happy.stack.gatekeeper.denied() == []


def _ends_registered_with_the_lock_released(happy: Finished) -> None:
    record = happy.record

    assert record["status"] == "SUCCEEDED", record.get("failure")
    assert record["trigger"] in ("upload", "schedule")
    assert record["data_source"] == "fsx"
    assert record["gate"]["decision"] == "accepted"
    assert record["model_package_arn"].startswith("arn:aws:sagemaker:")
    assert lock_holder(happy) is None


def _tuning_ran_three_trials_two_at_a_time_each_resumed_after_a_spot_interruption(happy: Finished) -> None:
    sagemaker = happy.stack.client("sagemaker")
    tuning = sagemaker.describe_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=happy.record["tuning_job"]
    )
    trials = sagemaker.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=happy.record["tuning_job"]
    )["TrainingJobSummaries"]

    assert tuning["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxParallelTrainingJobs"] == 2
    assert len(trials) >= 3
    best = sagemaker.describe_training_job(TrainingJobName=happy.record["best_training_job"])
    assert best["EnableManagedSpotTraining"] is True
    assert any(
        "Interrupted" in t.get("StatusMessage", "") or t["Status"] == "Interrupted"
        for t in best["SecondaryStatusTransitions"]
    )
    assert happy.record["billable_seconds"] < happy.record["training_seconds"]


def _the_run_record_holds_every_field(happy: Finished) -> None:
    record = happy.record

    for field in (
        "execution_arn",
        "created_at",
        "finished_at",
        "manifest_uri",
        "new_images",
        "labels",
        "data_source",
        "import_task",
        "tuning_job",
        "best_training_job",
        "best_hyperparameters",
        "best_objective",
        "model_data",
        "training_seconds",
        "billable_seconds",
        "spot_saving",
        "rule_results",
        "challenger",
        "checkpoint_evaluations",
        "gate",
        "model_package_arn",
    ):
        assert field in record, f"run record lacks {field}: {sorted(record)}"
    assert record["new_images"] == IMAGES
    assert {r["status"] for r in record["rule_results"]} <= {"NoIssuesFound", "IssuesFound", "Error"}
    assert record["challenger"]["top1"] > 0
    assert any(point.get("status") == "Completed" for point in record["checkpoint_evaluations"])
