"""Managed spot: interruptions on a schedule, restart from S3 checkpoints, billable time, faults."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from retrain.embedded.faults import Faults
from retrain.embedded.sagemaker import INTERRUPTIONS_FIELD, SageMakerEmulator, SpotSchedule

from .conftest import BUCKET, ClockFromLine, put_images, training_request, wait_training

CHECKPOINTS = f"s3://{BUCKET}/checkpoints"


def spot_request(name: str, **hyperparameters: str) -> dict[str, Any]:
    return training_request(
        name,
        HyperParameters={"epochs": "2", "steps-per-epoch": "6", "step-seconds": "0.15", **hyperparameters},
        EnableManagedSpotTraining=True,
        StoppingCondition={"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 1200},
        CheckpointConfig={"S3Uri": CHECKPOINTS, "LocalPath": "/opt/ml/checkpoints"},
    )


def _log_text(emulator: SageMakerEmulator, name: str) -> list[str]:
    logs = sorted((emulator.workdir / "training" / name / "logs").glob("attempt-*.log"))
    return [path.read_text(encoding="utf-8") for path in logs]


def test_interrupted_job_restarts_from_its_newest_checkpoint_step(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN a spot market that reclaims each job once after its first checkpoint reached S3
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(
        spot=SpotSchedule(interruptions=1, after_checkpoints=1, capacity_wait_seconds=0.5)
    )

    # WHEN a managed spot job runs
    emulator.create_training_job(**spot_request("spot-resume"))
    job = wait_training(emulator, "spot-resume")

    # THEN it completed after one interruption, and the second attempt began at the newest S3 checkpoint step
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    statuses = [t["Status"] for t in job["SecondaryStatusTransitions"]]
    assert statuses == [
        "Starting",
        "Downloading",
        "Training",
        "Interrupted",
        "Restarting",
        "Training",
        "Uploading",
        "Completed",
    ]
    interruptions = job[INTERRUPTIONS_FIELD]
    assert len(interruptions) == 1
    newest = interruptions[0]["NewestCheckpointStep"]
    first, second = _log_text(emulator, "spot-resume")
    stopped_at = int(re.search(r"interrupted at step (\d+)", first).group(1))  # type: ignore[union-attr]
    assert newest == stopped_at
    assert f"starting at step {newest} " in second
    assert "finished at step 12" in second
    keys = {o["Key"] for o in aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="checkpoints/")["Contents"]}
    assert f"checkpoints/spot-resume/algo-1/ckpt-{newest:09d}.pt" in keys


def test_spot_job_bills_less_than_it_trains(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN a spot price of a fifth of on-demand and no interruption
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(spot=SpotSchedule(price_ratio=0.2))

    # WHEN a spot job runs for some 7-8 s (long enough for whole seconds to tell 0.2 from 0.3 or 1)
    emulator.create_training_job(**spot_request("spot-bill", **{"step-seconds": "0.5"}))
    job = wait_training(emulator, "spot-bill")

    # THEN billable time is its time on the instance at a fifth of the price, rounded up to a second
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    on_instance = (job["TrainingEndTime"] - job["TrainingStartTime"]).total_seconds()
    assert job["TrainingTimeInSeconds"] == math.ceil(on_instance)
    assert job["BillableTimeInSeconds"] == max(1, math.ceil(on_instance * 0.2))
    assert job["BillableTimeInSeconds"] < job["TrainingTimeInSeconds"]


def test_max_wait_time_stops_a_job_still_waiting_for_capacity(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator], tmp_path: Path
) -> None:
    # GIVEN capacity that comes back only after the job's MaxWaitTimeInSeconds, both limits counted from
    # its program's first line (its first checkpoint comes 0.3 s later, within the runtime limit however
    # slowly the machine starts the container)
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(
        spot=SpotSchedule(interruptions=1, after_checkpoints=1, capacity_wait_seconds=120),
        limit_clock=ClockFromLine(tmp_path / "sagemaker", "spot-wait", r"starting at step"),
    )
    request = spot_request("spot-wait")
    request["StoppingCondition"] = {"MaxRuntimeInSeconds": 3, "MaxWaitTimeInSeconds": 4}

    # WHEN it is interrupted
    emulator.create_training_job(**request)
    job = wait_training(emulator, "spot-wait", timeout=90)

    # THEN it ends Stopped with MaxWaitTimeExceeded
    assert job["TrainingJobStatus"] == "Stopped"
    assert job["SecondaryStatus"] == "MaxWaitTimeExceeded"


def test_schedule_only_interrupts_matching_spot_jobs(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN a schedule for jobs named final-* only
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(
        spot=SpotSchedule(interruptions=1, job_pattern="final-*", capacity_wait_seconds=0.1)
    )

    # WHEN another spot job runs
    emulator.create_training_job(**spot_request("trial-1"))
    job = wait_training(emulator, "trial-1")

    # THEN it is never interrupted
    assert job[INTERRUPTIONS_FIELD] == []
    assert "Interrupted" not in [t["Status"] for t in job["SecondaryStatusTransitions"]]


def test_kill_during_checkpoint_write_leaves_a_torn_checkpoint_and_spot_restarts(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN the runtime's fault that kills the instance while it writes a checkpoint
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(
        faults=Faults.parse(["kill-checkpoint-write"]), spot=SpotSchedule(capacity_wait_seconds=0.1)
    )

    # WHEN a spot job writes its first checkpoint
    emulator.create_training_job(**spot_request("spot-torn"))
    job = wait_training(emulator, "spot-torn")

    # THEN the restart found the torn first checkpoint in S3, skipped it, and the job still completed
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert [i["Cause"] for i in job[INTERRUPTIONS_FIELD]] == ["checkpoint-write"]
    first, second = _log_text(emulator, "spot-torn")
    torn = re.search(r"instance lost while writing (ckpt-\d{9}\.pt)", first)
    assert torn is not None
    assert f"skipping torn checkpoint {torn.group(1)}" in second


def _on_demand_under_the_checkpoint_write_fault(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator], name: str, **overrides: Any
) -> dict[str, Any]:
    """On an emulator with the fault that kills the instance while it writes a checkpoint: on-demand job
    `name` (with `overrides`), which checkpoints, run to its end; its description."""
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(faults=Faults.parse(["kill-checkpoint-write"]))
    request = training_request(
        name,
        HyperParameters={"epochs": "2", "steps-per-epoch": "6", "step-seconds": "0.15"},
        CheckpointConfig={"S3Uri": CHECKPOINTS},
        **overrides,
    )
    emulator.create_training_job(**request)
    return wait_training(emulator, name)


def test_kill_during_checkpoint_write_fails_an_on_demand_job(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN the same fault and a job without managed spot
    # WHEN it writes a checkpoint
    job = _on_demand_under_the_checkpoint_write_fault(aws, make_emulator, "ondemand-torn")

    # THEN it fails with an InternalServerError naming the checkpoint
    assert job["TrainingJobStatus"] == "Failed"
    assert re.search(
        r"InternalServerError: .* while it wrote checkpoint ckpt-\d{9}\.pt", job["FailureReason"]
    )


def test_retry_strategy_restarts_an_on_demand_job_after_an_internal_error(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN the checkpoint-write fault and an on-demand job with RetryStrategy, as the state machine sends
    # WHEN it runs
    job = _on_demand_under_the_checkpoint_write_fault(
        aws, make_emulator, "retried", RetryStrategy={"MaximumRetryAttempts": 1}
    )

    # THEN it was restarted once and completed
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    restarts = [t for t in job["SecondaryStatusTransitions"] if t["Status"] == "Restarting"]
    assert len(restarts) == 1 and "InternalServerError" in restarts[0]["StatusMessage"]
