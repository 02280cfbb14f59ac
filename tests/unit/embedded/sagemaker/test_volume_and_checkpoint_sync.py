"""What SageMaker's instance storage and checkpoint sync do: File-mode inputs must fit the ML storage
volume, and a checkpoint the job deletes is deleted in S3 too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from retrain.embedded.sagemaker import INTERRUPTIONS_FIELD, SageMakerEmulator, SpotSchedule, s3io
from retrain_contract import container as contract

from .conftest import BUCKET, training_request, wait_training
from .test_channels_and_processing import _wait_processing, processing_request

# The tests scale a volume's "GB" down to 1,000 bytes, so that a few objects overfill a 1 GB volume.
SCALED_GB = 1000


def _put_inputs(s3: Any, prefix: str, count: int, size: int) -> None:
    for index in range(count):
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/cat/{index}.png", Body=b"x" * size)


def _one_gb_job(name: str, mode: str) -> dict[str, Any]:
    channel = {
        "ChannelName": "train",
        "InputMode": mode,
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/data/train"}},
    }
    return training_request(
        name,
        InputDataConfig=[channel],
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
    )


def test_file_mode_inputs_larger_than_the_volume_fail_the_job_as_sagemaker_does(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN 1,800 bytes of images and jobs with a 1 GB volume (scaled: 1,000 bytes)
    monkeypatch.setattr(s3io, "GIB", SCALED_GB)
    _put_inputs(aws["s3"], "data/train", count=3, size=600)
    emulator = make_emulator()

    # WHEN one job copies them in File mode and another streams them in FastFile mode
    emulator.create_training_job(**_one_gb_job("too-big", "File"))
    emulator.create_training_job(**_one_gb_job("streamed", "FastFile"))
    too_big, streamed = wait_training(emulator, "too-big"), wait_training(emulator, "streamed")

    # THEN the File-mode job fails before training with SageMaker's reason, naming the channel and the fix
    assert too_big["TrainingJobStatus"] == "Failed"
    reason = too_big["FailureReason"]
    assert reason.startswith("ClientError: Data download failed:Insufficient disk space")
    assert "'train'" in reason and "VolumeSizeInGB" in reason
    assert "Training" not in [t["Status"] for t in too_big["SecondaryStatusTransitions"]]
    # AND the FastFile job, whose inputs take no volume space, completes
    assert streamed["TrainingJobStatus"] == "Completed", streamed.get("FailureReason")


def test_file_mode_processing_inputs_larger_than_the_volume_fail_the_job(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN 1,800 bytes of images and an evaluation job with a 1 GB volume (scaled: 1,000 bytes)
    monkeypatch.setattr(s3io, "GIB", SCALED_GB)
    _put_inputs(aws["s3"], "data/train", count=3, size=600)
    request = processing_request("eval-too-big")
    request["ProcessingResources"]["ClusterConfig"]["VolumeSizeInGB"] = 1
    emulator = make_emulator()

    # WHEN it runs
    emulator.create_processing_job(**request)
    job = _wait_processing(emulator, "eval-too-big")

    # THEN it fails with SageMaker's reason and the fix
    assert job["ProcessingJobStatus"] == "Failed"
    assert job["FailureReason"].startswith("ClientError: Data download failed:Insufficient disk space")
    assert "ClusterConfig.VolumeSizeInGB" in job["FailureReason"]


def _checkpoint_keys(s3: Any, prefix: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"].rsplit("/", 1)[-1] for o in listed)


def test_checkpoints_the_job_deletes_are_deleted_in_s3(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN a job that checkpoints every 2 of its 8 steps and keeps only its newest 2 checkpoints
    _put_inputs(aws["s3"], "data/train", count=2, size=10)
    request = training_request(
        "pruning",
        HyperParameters={
            "epochs": "2",
            "steps-per-epoch": "4",
            "step-seconds": "0.3",
            "checkpoint-every-steps": "2",
            "keep-checkpoints": "2",
        },
        CheckpointConfig={
            "S3Uri": f"s3://{BUCKET}/checkpoints/run/",
            "LocalPath": contract.CHECKPOINT_LOCAL_PATH,
        },
    )
    emulator = make_emulator()

    # WHEN it runs to the end
    emulator.create_training_job(**request)
    job = wait_training(emulator, "pruning")

    # THEN S3 holds the two checkpoints the job kept, not the four it wrote
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    kept = [contract.checkpoint_name(6), contract.checkpoint_name(8)]
    assert _checkpoint_keys(aws["s3"], "checkpoints/run/") == kept


def test_a_job_with_a_checkpoint_prefix_of_its_own_resumes_from_its_newest_checkpoint(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN a spot market that reclaims a job once after its first checkpoint, and another job's checkpoint
    # under the run's prefix
    _put_inputs(aws["s3"], "data/train", count=2, size=10)
    aws["s3"].put_object(Bucket=BUCKET, Key="checkpoints/run/trial/algo-1/ckpt-000000004.pt", Body=b"theirs")
    emulator = make_emulator(
        spot=SpotSchedule(interruptions=1, after_checkpoints=1, capacity_wait_seconds=0.5)
    )
    # AND a spot job with a CheckpointConfig of its own: <run prefix><job>/, /opt/ml/checkpoints/<job>
    request = training_request(
        "final",
        HyperParameters={"epochs": "2", "steps-per-epoch": "6", "step-seconds": "0.15"},
        EnableManagedSpotTraining=True,
        StoppingCondition={"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 1200},
        CheckpointConfig={
            "S3Uri": f"s3://{BUCKET}/checkpoints/run/final/",
            "LocalPath": contract.job_checkpoint_local_path("final"),
        },
    )

    # WHEN it runs
    emulator.create_training_job(**request)
    job = wait_training(emulator, "final")

    # THEN it resumed from its own newest checkpoint, whose key has the trials' layout
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    [interruption] = job[INTERRUPTIONS_FIELD]
    newest = interruption["NewestCheckpointStep"]
    assert newest is not None
    keys = {o["Key"] for o in aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="checkpoints/run/")["Contents"]}
    assert f"checkpoints/run/final/algo-1/{contract.checkpoint_name(newest)}" in keys
    # AND its instance never held the other job's checkpoint
    local = emulator.workdir / "training" / "final" / "opt" / "ml" / "checkpoints"
    assert not [p for p in local.rglob("*") if "trial" in p.parts]


def test_a_checkpoint_the_job_deletes_before_its_upload_is_skipped_not_fatal(
    aws: dict[str, Any], tmp_path: Any
) -> None:
    from retrain.embedded.sagemaker.training import CheckpointSync

    # GIVEN a checkpoint that has stopped changing, so the next poll uploads it
    local = tmp_path / "checkpoints"
    sync = CheckpointSync(aws["s3"], local, s3io.S3Uri.parse(f"s3://{BUCKET}/checkpoints/run/"))
    sync.restore()
    path = local / "job" / "algo-1" / contract.checkpoint_name(2)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"weights")
    sync.stable_new_files()
    [ready] = sync.stable_new_files()
    # WHEN the trainer prunes it before the upload reaches it
    ready.unlink()
    uploaded = sync.upload(ready)
    # THEN nothing is uploaded and the job goes on, as SageMaker's agent syncs what the job keeps
    assert uploaded is False
    assert _checkpoint_keys(aws["s3"], "checkpoints/run/") == []
    assert sync.deleted_files() == []
