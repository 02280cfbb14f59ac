"""What an ended job leaves on disk when the runtime does not keep its instance files (the embedded stack):
its logs, while its model, output and checkpoints are in S3 and a mounted file system is untouched."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from retrain.embedded.sagemaker import SageMakerEmulator

from .conftest import BUCKET, put_images, training_request, wait_training
from .test_channels_and_processing import _wait_processing, processing_request

CHECKPOINTS = f"s3://{BUCKET}/checkpoints/lean"


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink())


def _keys(s3: Any, prefix: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]


def test_an_ended_training_job_leaves_its_logs_and_no_copy_of_its_data(
    aws: dict[str, Any], tmp_path: Path, make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN a job with an S3 channel, a channel on a mounted file system, and checkpoints
    put_images(aws["s3"], "data/train")
    mounted = tmp_path / "fsx-root" / "data" / "validation" / "cat"
    mounted.mkdir(parents=True)
    (mounted / "1.png").write_bytes(b"png")
    channels = [
        *training_request("x")["InputDataConfig"],
        {
            "ChannelName": "validation",
            "DataSource": {
                "FileSystemDataSource": {
                    "FileSystemId": "fs-0123456789abcdef0",
                    "FileSystemType": "FSxLustre",
                    "FileSystemAccessMode": "ro",
                    "DirectoryPath": "/fsx/data/validation",
                }
            },
        },
    ]
    emulator = make_emulator(
        keep_instance_files=False,
        fsx_root=lambda _id, path: tmp_path / "fsx-root" / path.removeprefix("/fsx/"),
    )

    # WHEN it runs to its end
    emulator.create_training_job(
        **training_request("lean", InputDataConfig=channels, CheckpointConfig={"S3Uri": CHECKPOINTS})
    )
    job = wait_training(emulator, "lean")
    assert emulator.wait(timeout=30)

    # THEN its directory holds its log only; what it made is in S3; the file system still has its images
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert _files(emulator.workdir / "training" / "lean") == ["logs/attempt-1.log"]
    assert _keys(aws["s3"], "output/lean/output/") == [
        "output/lean/output/model.tar.gz",
        "output/lean/output/output.tar.gz",
    ]
    assert _keys(aws["s3"], "checkpoints/lean/")
    assert (mounted / "1.png").read_bytes() == b"png"


def test_a_failed_training_job_leaves_no_copy_of_its_data_either(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(keep_instance_files=False)
    request = training_request("lean-fails")
    request["HyperParameters"]["fail"] = "bad data"
    emulator.create_training_job(**request)
    job = wait_training(emulator, "lean-fails")
    assert emulator.wait(timeout=30)
    assert job["TrainingJobStatus"] == "Failed"
    assert _files(emulator.workdir / "training" / "lean-fails") == ["logs/attempt-1.log"]


def test_an_ended_processing_job_leaves_its_log_and_no_copy_of_its_inputs(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(keep_instance_files=False)
    emulator.create_processing_job(**processing_request("lean-eval"))
    job = _wait_processing(emulator, "lean-eval")
    assert job["ProcessingJobStatus"] == "Completed", job.get("FailureReason")
    assert _files(emulator.workdir / "processing" / "lean-eval") == ["logs/job.log"]
    assert _keys(aws["s3"], "evaluations/lean-eval/") == ["evaluations/lean-eval/evaluation.json"]


def test_by_default_an_ended_jobs_instance_files_stay_for_inspection(emulator: SageMakerEmulator) -> None:
    emulator.create_training_job(**training_request("kept"))
    assert wait_training(emulator, "kept")["TrainingJobStatus"] == "Completed"
    assert emulator.wait(timeout=30)
    files = _files(emulator.workdir / "training" / "kept")
    assert "opt/ml/input/data/train/cat/0.png" in files and "artifacts/model.tar.gz" in files
