"""Fixtures for the SageMaker emulator: moto-backed S3 and CloudWatch Logs, the training image with the
stand-in programs in place of its scripts, and an emulator factory that stops its jobs afterwards."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import boto3
import psutil
import pytest
from moto import mock_aws

from retrain.embedded.sagemaker import JobContext, SageMakerEmulator, SchedulerSettings
from retrain.embedded.sagemaker.image import ContainerImage, build_image

BUCKET = "retrain-emulator-tests"
ROLE = "arn:aws:iam::123456789012:role/retrain-training"
PROGRAMS = Path(__file__).resolve().parent / "programs"
REPO = Path(__file__).resolve().parents[4]


@pytest.fixture
def aws() -> Iterator[dict[str, Any]]:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        logs = boto3.client("logs", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        yield {"s3": s3, "logs": logs}


def stand_in_image(root: Path) -> ContainerImage:
    """The project's training image (its entrypoint, environment and contract) with the stand-in
    programs in place of train.py, evaluate.py and rule_check.py."""
    image = build_image(root)
    for program in PROGRAMS.glob("*.py"):
        shutil.copy(program, image.code_dir / program.name)
    return image


@pytest.fixture
def image(tmp_path: Path) -> ContainerImage:
    return stand_in_image(tmp_path / "image")


@pytest.fixture
def code_dir(image: ContainerImage) -> Path:
    """The image's /opt/ml/code (as laid out here: what every job's container starts with)."""
    return image.code_dir


@pytest.fixture
def make_emulator(
    aws: dict[str, Any], image: ContainerImage, tmp_path: Path
) -> Iterator[Callable[..., SageMakerEmulator]]:
    made: list[SageMakerEmulator] = []

    def make(**kwargs: Any) -> SageMakerEmulator:
        kwargs.setdefault("image", image)
        kwargs.setdefault("grace_seconds", 3.0)
        workdir = kwargs.pop("workdir", tmp_path / "sagemaker")
        settings = {f.name: kwargs.pop(f.name) for f in fields(SchedulerSettings) if f.name in kwargs}
        emulator = SageMakerEmulator(
            workdir,
            JobContext(s3=aws["s3"], logs=aws["logs"], **kwargs),
            settings=SchedulerSettings(**settings),
        )
        made.append(emulator)
        return emulator

    yield make
    for emulator in made:
        emulator.close(timeout=30)


@pytest.fixture
def emulator(aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]) -> SageMakerEmulator:
    """An emulator with the fixture's defaults, over images in S3 under data/train (put there first)."""
    put_images(aws["s3"], "data/train")
    return make_emulator()


class ClockFromLine:
    """A limit clock (JobContext.limit_clock) at 0 until the job's first attempt logs a line matching
    `pattern`, then the real seconds since: MaxRuntimeInSeconds and MaxWaitTimeInSeconds count from a
    point of the job's program, not from a container start that a loaded machine makes slow."""

    def __init__(self, workdir: Path, job: str, pattern: str) -> None:
        self.log = workdir / "training" / job / "logs" / "attempt-1.log"
        self.pattern = re.compile(pattern)
        self.opened: float | None = None

    def __call__(self) -> float:
        if self.opened is None:
            if not self.log.is_file() or not self.pattern.search(self.log.read_text(errors="replace")):
                return 0.0
            self.opened = time.time()
        return time.time() - self.opened


def put_images(s3: Any, prefix: str, labels: tuple[str, ...] = ("cat", "dog"), per_label: int = 2) -> None:
    for label in labels:
        for index in range(per_label):
            s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{label}/{index}.png", Body=b"png")


def training_request(name: str, **overrides: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/retrain-training:latest",
            "TrainingInputMode": "File",
            "MetricDefinitions": [
                {"Name": "val-accuracy", "Regex": r"(?:^|\s)val-accuracy: ([-+]?[0-9]*\.?[0-9]+)"},
                {"Name": "train-loss", "Regex": r"(?:^|\s)train-loss: ([-+]?[0-9]*\.?[0-9]+)"},
            ],
        },
        "RoleArn": ROLE,
        "HyperParameters": {"epochs": "2", "steps-per-epoch": "4", "lr": "0.05"},
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {
                    "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/data/train"}
                },
            }
        ],
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 5},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }
    request.update(overrides)
    return request


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def training_done(job: dict[str, Any]) -> bool:
    """The job ended and so did its Debugger rule evaluations (they finish after a Completed job)."""
    rules = [*job.get("DebugRuleEvaluationStatuses", []), *job.get("ProfilerRuleEvaluationStatuses", [])]
    return job["TrainingJobStatus"] in ("Completed", "Failed", "Stopped") and all(
        r["RuleEvaluationStatus"] not in ("InProgress", "Stopping") for r in rules
    )


def wait_training(emulator: SageMakerEmulator, name: str, timeout: float = 60.0) -> dict[str, Any]:
    wait_until(
        lambda: training_done(emulator.describe_training_job(TrainingJobName=name)),
        timeout,
        f"training job {name}",
    )
    return emulator.describe_training_job(TrainingJobName=name)


def container_processes() -> list[str]:
    """This process's descendants that are job containers: `unshare ... container_init.py` and what it
    started, zombies included (a zombie keeps its name, not its command line)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            name, command = child.name(), " ".join(child.cmdline())
        except psutil.ZombieProcess:
            name, command = child.name(), "<zombie>"
        except psutil.NoSuchProcess:
            continue
        if name == "unshare" or "container_init.py" in command:
            found.append(f"{child.pid} {name}: {command}")
    return found
