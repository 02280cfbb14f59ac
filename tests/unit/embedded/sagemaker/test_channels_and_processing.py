"""Channels (S3Prefix, ManifestFile, FastFile, FSx) and processing jobs."""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from retrain.embedded.sagemaker import SageMakerEmulator
from retrain.embedded.sagemaker.slots import NewestFirstSlots
from retrain_contract import container as contract

from .conftest import BUCKET, ROLE, put_images, training_request, wait_training, wait_until


def _seen_channels_files(emulator: SageMakerEmulator, name: str, channel: str) -> list[str]:
    root = emulator.workdir / "training" / name / "opt" / "ml" / "input" / "data" / channel
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_manifest_and_fastfile_channels_materialise_their_objects(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN a manifest listing two of four images, and a FastFile validation channel
    put_images(aws["s3"], "data/train")
    manifest = [{"prefix": f"s3://{BUCKET}/data/train/"}, "cat/0.png", "dog/1.png"]
    aws["s3"].put_object(Bucket=BUCKET, Key="manifests/m.json", Body=json.dumps(manifest).encode())
    channels = [
        {
            "ChannelName": "train",
            "DataSource": {
                "S3DataSource": {"S3DataType": "ManifestFile", "S3Uri": f"s3://{BUCKET}/manifests/m.json"}
            },
        },
        {
            "ChannelName": "validation",
            "InputMode": "FastFile",
            "DataSource": {
                "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/data/train/cat"}
            },
        },
    ]
    emulator = make_emulator()

    # WHEN the job runs
    emulator.create_training_job(**training_request("channels", InputDataConfig=channels))
    job = wait_training(emulator, "channels")

    # THEN each channel holds exactly its objects
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert _seen_channels_files(emulator, "channels", "train") == ["cat/0.png", "dog/1.png"]
    assert _seen_channels_files(emulator, "channels", "validation") == ["0.png", "1.png"]


def test_file_system_channel_mounts_the_fsx_directory(
    tmp_path: Path, make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN an FSx file system whose /fsx/data/train directory holds images
    mounted = tmp_path / "fsx-root" / "data" / "train" / "cat"
    mounted.mkdir(parents=True)
    (mounted / "1.png").write_bytes(b"png")
    asked: list[tuple[str, str]] = []

    def fsx_root(file_system_id: str, directory_path: str) -> Path:
        asked.append((file_system_id, directory_path))
        return tmp_path / "fsx-root" / directory_path.removeprefix("/fsx/")

    channel = {
        "ChannelName": "train",
        "DataSource": {
            "FileSystemDataSource": {
                "FileSystemId": "fs-0123456789abcdef0",
                "FileSystemType": "FSxLustre",
                "FileSystemAccessMode": "ro",
                "DirectoryPath": "/fsx/data/train",
            }
        },
    }
    emulator = make_emulator(fsx_root=fsx_root)

    # WHEN a job uses it as its train channel
    emulator.create_training_job(**training_request("fsx-job", InputDataConfig=[channel]))
    job = wait_training(emulator, "fsx-job")

    # THEN the channel is the mounted directory
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert asked == [("fs-0123456789abcdef0", "/fsx/data/train")]
    assert _seen_channels_files(emulator, "fsx-job", "train") == ["cat/1.png"]


def test_pipe_mode_is_refused(make_emulator: Callable[..., SageMakerEmulator]) -> None:
    request = training_request("pipe")
    request["AlgorithmSpecification"]["TrainingInputMode"] = "Pipe"
    with pytest.raises(ClientError) as error:
        make_emulator().create_training_job(**request)
    assert "Pipe input mode is not supported" in error.value.response["Error"]["Message"]


def processing_request(name: str, *arguments: str) -> dict[str, Any]:
    return {
        "ProcessingJobName": name,
        "RoleArn": ROLE,
        "AppSpecification": {
            "ImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/retrain-training:latest",
            "ContainerEntrypoint": contract.entrypoint(contract.EVALUATE_PROGRAM),
            "ContainerArguments": [
                "--input",
                "/opt/ml/processing/input/data",
                "--output=/opt/ml/processing/evaluation",
                *arguments,
            ],
        },
        "ProcessingInputs": [
            {
                "InputName": "data",
                "S3Input": {
                    "S3Uri": f"s3://{BUCKET}/data/train",
                    "LocalPath": "/opt/ml/processing/input/data",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                },
            }
        ],
        "ProcessingOutputConfig": {
            "Outputs": [
                {
                    "OutputName": "evaluation",
                    "S3Output": {
                        "S3Uri": f"s3://{BUCKET}/evaluations/{name}",
                        "LocalPath": "/opt/ml/processing/evaluation",
                        "S3UploadMode": "EndOfJob",
                    },
                }
            ]
        },
        "ProcessingResources": {
            "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 5}
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 300},
    }


def _wait_processing(emulator: SageMakerEmulator, name: str) -> dict[str, Any]:
    wait_until(
        lambda: (
            emulator.describe_processing_job(ProcessingJobName=name)["ProcessingJobStatus"]
            in ("Completed", "Failed", "Stopped")
        ),
        60,
        f"processing job {name}",
    )
    return emulator.describe_processing_job(ProcessingJobName=name)


def test_processing_job_runs_the_image_script_on_its_inputs_and_uploads_outputs(
    aws: dict[str, Any], emulator: SageMakerEmulator
) -> None:
    # GIVEN images in S3 and an evaluation processing job over them
    # WHEN it runs
    arn = emulator.create_processing_job(**processing_request("eval-ok"))["ProcessingJobArn"]
    job = _wait_processing(emulator, "eval-ok")

    # THEN evaluate.py saw the inputs at the rewritten path and its output reached S3; logs went to CloudWatch
    assert arn.endswith(":processing-job/eval-ok")
    assert job["ProcessingJobStatus"] == "Completed", job.get("FailureReason")
    body = aws["s3"].get_object(Bucket=BUCKET, Key="evaluations/eval-ok/evaluation.json")["Body"].read()
    assert json.loads(body)["files"] == ["cat/0.png", "cat/1.png", "dog/0.png", "dog/1.png"]
    streams = aws["logs"].describe_log_streams(logGroupName="/aws/sagemaker/ProcessingJobs")["logStreams"]
    assert re.fullmatch(r"eval-ok/algo-1-\d{10}", streams[0]["logStreamName"])


def test_processing_jobs_wait_for_a_free_core(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN a machine with one slot for processing jobs, and two evaluations started together
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(processing_slots=NewestFirstSlots(1))
    for name in ("eval-a", "eval-b"):
        emulator.create_processing_job(**processing_request(name, "--sleep", "1.5"))
    # WHEN both have run
    jobs = [_wait_processing(emulator, name) for name in ("eval-a", "eval-b")]
    # THEN both completed, one after the other
    assert [j["ProcessingJobStatus"] for j in jobs] == ["Completed", "Completed"]
    (a0, a1), (b0, b1) = (
        json.loads(
            aws["s3"].get_object(Bucket=BUCKET, Key=f"evaluations/{n}/evaluation.json")["Body"].read()
        )["ran"]
        for n in ("eval-a", "eval-b")
    )
    assert a1 <= b0 or b1 <= a0


def test_failing_processing_job_reports_its_failure_reason(emulator: SageMakerEmulator) -> None:
    # GIVEN an evaluation that fails
    # WHEN it runs
    emulator.create_processing_job(**processing_request("eval-bad", "--fail", "no model"))
    job = _wait_processing(emulator, "eval-bad")

    # THEN it is Failed with the failure file's reason
    assert job["ProcessingJobStatus"] == "Failed"
    assert job["FailureReason"] == "AlgorithmError: RuntimeError: no model"


def test_processing_entrypoint_without_an_image_script_fails_clearly(emulator: SageMakerEmulator) -> None:
    # GIVEN an entrypoint that names a script the image lacks
    request = processing_request("eval-missing")
    request["AppSpecification"]["ContainerEntrypoint"] = ["python3", "/opt/ml/code/nope.py"]

    # WHEN it runs THEN it fails as the container's python does, and the reason quotes it
    emulator.create_processing_job(**request)
    job = _wait_processing(emulator, "eval-missing")
    assert job["ProcessingJobStatus"] == "Failed"
    assert job["FailureReason"] == (
        "AlgorithmError: exit code 2; last log line: python3: can't open file '/opt/ml/code/nope.py': "
        "[Errno 2] No such file or directory"
    )


def test_model_archive_holds_the_model_directory_contents(
    aws: dict[str, Any], emulator: SageMakerEmulator
) -> None:
    # GIVEN a completed job
    emulator.create_training_job(**training_request("archive"))
    wait_training(emulator, "archive")

    # WHEN its model.tar.gz is opened
    body = aws["s3"].get_object(Bucket=BUCKET, Key="output/archive/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        names = tar.getnames()

    # THEN members are relative to /opt/ml/model, as SageMaker packs them
    assert names == ["model.pt"]
