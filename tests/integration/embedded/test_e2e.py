"""Done-when test of the embedded runtime: an upload, and nothing else, runs the whole retraining flow.

The project's own template.yaml, state machine, Lambda handlers and training_image/ run on the embedded
stack: ingest -> dispatch -> FSx import -> tuning (3 trials, 2 in parallel, each interrupted once on
spot and resumed from its checkpoint) -> rule check -> evaluation (also of checkpoints) -> gate ->
registry -> notification. Each injected fault must end the run in the state the state machine defines,
with the data set's run lock released.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controller import names, runs
from retrain import demo_data
from retrain.cli import DEMO_PARAMETERS
from retrain.embedded.faults import Faults
from retrain.embedded.sagemaker import SpotSchedule
from retrain.embedded.stack import EmbeddedStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DATASET = "digits"
IMAGES = 200
RUN_TIMEOUT_SECONDS = 1200


@dataclass
class Finished:
    stack: EmbeddedStack
    outputs: dict[str, str]
    record: runs.RunRecord


def _outputs(stack: EmbeddedStack) -> dict[str, str]:
    described = stack.client("cloudformation").describe_stacks(StackName=stack.stack_name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}


def _run_to_the_end(state_dir: Path, images: Path, faults: Faults) -> Iterator[Finished]:
    files = demo_data.write_digits(images, limit=IMAGES).files
    # A few hundred images for two epochs train a weak model: the quality bar is the gate's own tests'
    # subject, here the path through the gate to the registry is.
    parameters = {**DEMO_PARAMETERS, "MinNewImages": str(len(files)), "MinAccuracy": "0.0"}
    with EmbeddedStack(
        state_dir, parameter_overrides=parameters, faults=faults, spot=SpotSchedule(interruptions=1)
    ) as stack:
        outputs = _outputs(stack)
        s3, dynamodb = stack.client("s3"), stack.client("dynamodb")
        started = time.monotonic()
        for path in files:  # the only call: the rest is the stack's own event path
            key = names.upload_key(DATASET, path.parent.name, path.name)
            s3.put_object(Bucket=outputs[names.STACK_OUTPUTS["data_bucket"]], Key=key, Body=path.read_bytes())
        table = outputs[names.STACK_OUTPUTS["runs_table"]]
        record: runs.RunRecord | None = None
        while time.monotonic() - started < RUN_TIMEOUT_SECONDS:
            found = runs.list_runs(table_name=table, dataset=DATASET, client=dynamodb)
            if found and found[0]["status"] in runs.FINAL_STATUSES:
                record = found[0]
                break
            time.sleep(2)
        assert record is not None, f"no finished run after {RUN_TIMEOUT_SECONDS} s"
        yield Finished(stack, outputs, record)


def _lock_holder(finished: Finished) -> Any:
    item = finished.stack.client("dynamodb").get_item(
        TableName=finished.outputs[names.STACK_OUTPUTS["datasets_table"]],
        Key={names.DATASETS_PK: {"S": DATASET}},
        ConsistentRead=True,
    )
    return item.get("Item", {}).get(names.LOCK_ATTRIBUTE)


@pytest.fixture(scope="module")
def happy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Finished]:
    yield from _run_to_the_end(tmp_path_factory.mktemp("state"), tmp_path_factory.mktemp("images"), Faults())


def test_an_upload_alone_runs_the_whole_flow_to_a_registered_model(happy: Finished) -> None:
    record = happy.record

    assert record["status"] == "SUCCEEDED", record.get("failure")
    assert record["trigger"] in ("upload", "schedule")
    assert record["data_source"] == "fsx"
    assert record["gate"]["decision"] == "accepted"
    assert record["model_package_arn"].startswith("arn:aws:sagemaker:")
    assert _lock_holder(happy) is None


def test_tuning_ran_three_trials_two_at_a_time_each_resumed_after_a_spot_interruption(
    happy: Finished,
) -> None:
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


def test_the_run_record_holds_every_field(happy: Finished) -> None:
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


@pytest.mark.parametrize(
    ("fault", "status", "error"),
    [
        ("import-fails", "FAILED", "ImportFailedError"),
        ("resource-limit:2", "SUCCEEDED", None),
        ("kill-checkpoint-write", "SUCCEEDED", None),
        ("rule-finds-issues", "REJECTED", None),
    ],
)
def test_an_injected_fault_ends_in_the_state_machines_state_with_the_lock_released(
    tmp_path: Path, fault: str, status: str, error: str | None
) -> None:
    for finished in _run_to_the_end(tmp_path / "state", tmp_path / "images", Faults.parse([fault])):
        assert finished.record["status"] == status, finished.record.get("failure")
        if error is not None:
            assert finished.record["failure"]["error"] == error
        assert _lock_holder(finished) is None
