"""The SageMaker emulator running the REAL training image (training_image/train.py) behind a moto server
on 127.0.0.1, reached by boto3 over HTTP as the CLI and the Lambdas reach it: a training job produces
model.tar.gz and metrics, a spot interruption resumes at the exact checkpoint step, a tuning job runs 3
trials 2 at a time and warm-starts a child, and a failing job reports its FailureReason."""

from __future__ import annotations

import io
import json
import re
import socket
import tarfile
import time
from collections.abc import Iterator
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer
from PIL import Image

from retrain.embedded.sagemaker import (
    INTERRUPTIONS_FIELD,
    JobContext,
    SageMakerEmulator,
    SchedulerSettings,
    SpotSchedule,
    api_installed,
)
from retrain_contract import container as contract
from tests.unit.embedded.sagemaker.conftest import container_processes, training_done

pytestmark = [pytest.mark.slow, pytest.mark.integration]

BUCKET = "retrain-emulator-integration"
ROLE = "arn:aws:iam::123456789012:role/retrain-training"
# 40 images, ~8 hashed into validation -> ~32 train = 4 steps of 8 per epoch.
STATIC = {
    "model": "resnet18",
    "epochs": "2",
    "batch-size": "8",
    "image-size": "32",
    "checkpoint-every-steps": "2",
    "num-workers": "0",
    "loader": "torch",
    "debug-hook": "false",
    "seed": "3",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=endpoint)
    logs = boto3.client("logs", region_name="us-east-1", endpoint_url=endpoint)
    s3.create_bucket(Bucket=BUCKET)
    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        for index in range(20):
            buffer = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, size=(36, 44, 3), dtype=np.uint8)).save(
                buffer, format="JPEG"
            )
            s3.put_object(Bucket=BUCKET, Key=f"data/train/{label}/{index:03d}.jpg", Body=buffer.getvalue())
    emulator = SageMakerEmulator(
        tmp_path_factory.mktemp("sagemaker"),
        JobContext(
            s3=s3,
            logs=logs,
            spot=SpotSchedule(
                interruptions=1, after_checkpoints=1, capacity_wait_seconds=0.5, job_pattern="spot-*"
            ),
            grace_seconds=60,
        ),
        settings=SchedulerSettings(tuning_seed=0),
    )
    with api_installed(emulator):
        sagemaker = boto3.client("sagemaker", region_name="us-east-1", endpoint_url=endpoint)
        yield {"s3": s3, "logs": logs, "sagemaker": sagemaker, "emulator": emulator}
    emulator.close()
    server.stop()


def definition(**hyperparameters: str) -> dict[str, Any]:
    return {
        "AlgorithmSpecification": {
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/retrain-training:latest",
            "TrainingInputMode": "File",
            "MetricDefinitions": list(contract.METRIC_DEFINITIONS),
        },
        "RoleArn": ROLE,
        "InputDataConfig": [
            {
                "ChannelName": contract.CHANNEL_TRAIN,
                "DataSource": {
                    "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/data/train"}
                },
            }
        ],
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 5},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "Environment": {"OMP_NUM_THREADS": "1"},
        "HyperParameters": {**STATIC, **hyperparameters},
    }


def wait_training(sagemaker: Any, name: str, timeout: float = 240) -> dict[str, Any]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        job: dict[str, Any] = sagemaker.describe_training_job(TrainingJobName=name)
        if training_done(job):
            return job
        time.sleep(0.5)
    raise AssertionError(f"training job {name} did not end within {timeout}s")


def wait_tuning(sagemaker: Any, name: str, timeout: float = 400) -> dict[str, Any]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        job: dict[str, Any] = sagemaker.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
        if job["HyperParameterTuningJobStatus"] in ("Completed", "Failed", "Stopped"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"tuning job {name} did not end within {timeout}s")


def test_real_training_job_produces_model_and_metrics(stack: dict[str, Any]) -> None:
    # GIVEN images in the emulated bucket
    sagemaker = stack["sagemaker"]

    # WHEN the real train.py runs as a training job created over HTTP
    sagemaker.create_training_job(TrainingJobName="real-train", **definition())
    job = wait_training(sagemaker, "real-train")

    # THEN the model archive holds the model and the contract's metrics are in FinalMetricDataList
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    body = stack["s3"].get_object(Bucket=BUCKET, Key="output/real-train/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        assert contract.MODEL_FILE in tar.getnames()
    metrics = {m["MetricName"] for m in job["FinalMetricDataList"]}
    assert {contract.METRIC_TRAIN_LOSS, contract.METRIC_VAL_ACCURACY, contract.METRIC_VAL_LOSS} <= metrics


def test_real_evaluation_processing_job_scores_the_trained_model(stack: dict[str, Any]) -> None:
    # GIVEN the model the training job above wrote (made here when pytest-xdist ran that test on the
    # other worker, whose module stack this one does not share), and the images
    sagemaker = stack["sagemaker"]
    try:
        sagemaker.describe_training_job(TrainingJobName="real-train")
    except ClientError:
        sagemaker.create_training_job(TrainingJobName="real-train", **definition())
    assert wait_training(sagemaker, "real-train")["TrainingJobStatus"] == "Completed"

    # WHEN the real evaluate.py runs as a processing job over them, as the state machine calls it
    sagemaker.create_processing_job(
        ProcessingJobName="real-eval",
        RoleArn=ROLE,
        AppSpecification={
            "ImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/retrain-training:latest",
            "ContainerEntrypoint": ["python3", "/opt/ml/code/evaluate.py"],
            "ContainerArguments": [
                "--model",
                "/opt/ml/processing/input/model",
                "--data",
                "/opt/ml/processing/input/data/train",
                "--split",
                "all",
                "--output",
                "/opt/ml/processing/evaluation",
            ],
        },
        ProcessingInputs=[
            {
                "InputName": "model",
                "S3Input": {
                    "S3Uri": f"s3://{BUCKET}/output/real-train/output/model.tar.gz",
                    "LocalPath": "/opt/ml/processing/input/model",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                },
            },
            {
                "InputName": "data",
                "S3Input": {
                    "S3Uri": f"s3://{BUCKET}/data/train",
                    "LocalPath": "/opt/ml/processing/input/data/train",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                },
            },
        ],
        ProcessingOutputConfig={
            "Outputs": [
                {
                    "OutputName": "evaluation",
                    "S3Output": {
                        "S3Uri": f"s3://{BUCKET}/evaluations/real-eval",
                        "LocalPath": "/opt/ml/processing/evaluation",
                        "S3UploadMode": "EndOfJob",
                    },
                }
            ]
        },
        ProcessingResources={
            "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 5}
        },
        StoppingCondition={"MaxRuntimeInSeconds": 600},
        Environment={"OMP_NUM_THREADS": "1"},
    )
    deadline = time.time() + 240
    while (job := sagemaker.describe_processing_job(ProcessingJobName="real-eval"))[
        "ProcessingJobStatus"
    ] not in ("Completed", "Failed", "Stopped") and time.time() < deadline:
        time.sleep(0.5)

    # THEN it completed and its evaluation.json reached S3 with the contract's keys
    assert job["ProcessingJobStatus"] == "Completed", job.get("FailureReason")
    key = f"evaluations/real-eval/{contract.EVALUATION_FILE}"
    evaluation = json.loads(stack["s3"].get_object(Bucket=BUCKET, Key=key)["Body"].read())
    assert {"top1", "top3", "per_class", "confusion_matrix", "labels"} <= evaluation.keys()
    assert evaluation["labels"] == ["cat", "dog"]


def test_real_spot_job_resumes_at_the_exact_checkpoint_step(stack: dict[str, Any]) -> None:
    # GIVEN a spot market that reclaims spot-* jobs once, after their first checkpoint reached S3
    sagemaker, emulator = stack["sagemaker"], stack["emulator"]
    request = definition()
    request.update(
        EnableManagedSpotTraining=True,
        StoppingCondition={"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 900},
        CheckpointConfig={"S3Uri": f"s3://{BUCKET}/checkpoints"},
    )

    # WHEN a managed spot job runs
    sagemaker.create_training_job(TrainingJobName="spot-real", **request)
    job = wait_training(sagemaker, "spot-real")

    # THEN it was interrupted once, restarted from S3, and train.py resumed at the newest checkpoint's step
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    statuses = [t["Status"] for t in job["SecondaryStatusTransitions"]]
    assert statuses.count("Interrupted") == 1 and statuses.count("Restarting") == 1
    newest = emulator.describe_training_job(TrainingJobName="spot-real")[INTERRUPTIONS_FIELD][0][
        "NewestCheckpointStep"
    ]
    # AND that checkpoint is the one train.py wrote on SageMaker's SIGTERM, which the emulator sent to the
    # container's first process only: the image's entrypoint passed it on
    logs = emulator.workdir / "training" / "spot-real" / "logs"
    first_attempt = (logs / "attempt-1.log").read_text()
    assert "SIGTERM received" in first_attempt, first_attempt[-2000:]
    # mid-epoch train.py names the step; a SIGTERM at an epoch's end (step 8 here, when the first checkpoint
    # S3 sees is the last, as on an idle machine) names the epoch; a SIGTERM after the last step (a loaded
    # machine: S3 saw no checkpoint before the last) leaves nothing to interrupt, and train.py ends as it
    # would have, its last step's checkpoint the newest, and the restart resumes there
    interrupted = re.search(rf"interrupted (at step {newest}|after epoch \d+);", first_attempt)
    last_step = max(int(step) for step in re.findall(r"epoch=\d+ step=(\d+) ", first_attempt))
    finished = "job phases (s):" in first_attempt and last_step == newest
    assert interrupted is not None or finished, first_attempt[-2000:]
    second_attempt = (logs / "attempt-2.log").read_text()
    resumed = re.search(
        r"resumed from (ckpt-\d{9}\.pt) at epoch \d+ batch \d+ \(step (\d+)\)", second_attempt
    )
    assert resumed is not None, second_attempt[-2000:]
    assert resumed.group(1) == contract.checkpoint_name(newest)
    assert int(resumed.group(2)) == newest
    key = f"checkpoints/spot-real/{contract.DEFAULT_HOST}/{contract.checkpoint_name(newest)}"
    assert stack["s3"].head_object(Bucket=BUCKET, Key=key)["ContentLength"] > 0
    assert job["BillableTimeInSeconds"] < job["TrainingTimeInSeconds"]


def test_real_tuning_runs_three_trials_two_at_a_time_and_a_child_warm_starts(stack: dict[str, Any]) -> None:
    # GIVEN a Random tuning job over lr: 3 trials, 2 in parallel
    sagemaker, emulator = stack["sagemaker"], stack["emulator"]
    training = definition()
    training["StaticHyperParameters"] = {**training.pop("HyperParameters"), "epochs": "1"}
    config = {
        "Strategy": "Random",
        "HyperParameterTuningJobObjective": {
            "Type": contract.OBJECTIVE_TYPE,
            "MetricName": contract.OBJECTIVE_METRIC,
        },
        "ResourceLimits": {"MaxNumberOfTrainingJobs": 3, "MaxParallelTrainingJobs": 2},
        "ParameterRanges": {
            "ContinuousParameterRanges": [
                {"Name": "lr", "MinValue": "0.001", "MaxValue": "0.1", "ScalingType": "Logarithmic"}
            ]
        },
        "TrainingJobEarlyStoppingType": "Off",
    }

    # WHEN it runs, and then a child tuning job warm-starts from it
    sagemaker.create_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="tune-real",
        HyperParameterTuningJobConfig=config,
        TrainingJobDefinition=training,
    )
    parent = wait_tuning(sagemaker, "tune-real")
    child_config = {**config, "ResourceLimits": {"MaxNumberOfTrainingJobs": 1, "MaxParallelTrainingJobs": 1}}
    warm = {
        "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "tune-real"}],
        "WarmStartType": "IdenticalDataAndAlgorithm",
    }
    sagemaker.create_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="tune-child",
        HyperParameterTuningJobConfig=child_config,
        TrainingJobDefinition=training,
        WarmStartConfig=warm,
    )
    child = wait_tuning(sagemaker, "tune-child")

    # THEN 3 trials ran, at most 2 at once, the best is the top objective, and the child saw the 3 trials
    assert parent["HyperParameterTuningJobStatus"] == "Completed"
    assert parent["TrainingJobStatusCounters"]["Completed"] == 3
    trials = sagemaker.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="tune-real", SortBy="FinalObjectiveMetricValue", SortOrder="Descending"
    )["TrainingJobSummaries"]
    assert len(trials) == 3
    # (two trials may tie on val-accuracy over 8 validation images: the best is one of the top value)
    top = trials[0]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
    best = parent["BestTrainingJob"]
    assert best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == top
    assert top == max(t["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for t in trials)
    assert best["TrainingJobName"] in {t["TrainingJobName"] for t in trials}
    windows = [(t["TrainingStartTime"], t["TrainingEndTime"]) for t in trials]
    assert max(sum(s <= start < e for s, e in windows) for start, _ in windows) == 2
    assert child["HyperParameterTuningJobStatus"] == "Completed"
    assert emulator._tuning["tune-child"]["WarmStartedTrials"] == 3
    assert "OverallBestTrainingJob" in child


def test_real_managed_debugger_job_reports_its_rule_statuses(stack: dict[str, Any]) -> None:
    # GIVEN a job configured as the state machine's managed-Debugger branch configures it
    sagemaker = stack["sagemaker"]
    request = definition(**{"debug-hook": "true"})
    rule = {
        "RuleEvaluatorImage": "503895931360.dkr.ecr.us-east-1.amazonaws.com/sagemaker-debugger-rules:latest"
    }
    request.update(
        DebugHookConfig={
            "LocalPath": "/opt/ml/output/tensors",
            "S3OutputPath": f"s3://{BUCKET}/debug",
            "HookParameters": {"save_interval": "1"},
            "CollectionConfigurations": [
                {"CollectionName": name, "CollectionParameters": {"save_interval": "1"}}
                for name in ("losses", "gradients", "weights")
            ],
        },
        DebugRuleConfigurations=[
            {
                **rule,
                "RuleConfigurationName": "LossNotDecreasing",
                "RuleParameters": {"rule_to_invoke": "LossNotDecreasing"},
            },
            {
                **rule,
                "RuleConfigurationName": "VanishingGradient",
                "RuleParameters": {"rule_to_invoke": "VanishingGradient"},
            },
        ],
        ProfilerConfig={"S3OutputPath": f"s3://{BUCKET}/debug", "ProfilingIntervalInMilliseconds": 500},
        ProfilerRuleConfigurations=[
            {
                **rule,
                "RuleConfigurationName": "CPUBottleneck",
                "RuleParameters": {"rule_to_invoke": "CPUBottleneck"},
            },
        ],
    )

    # WHEN it runs with the real train.py hook and the real rule_check.py
    sagemaker.create_training_job(TrainingJobName="real-managed", **request)
    job = wait_training(sagemaker, "real-managed")

    # THEN every rule reached a verdict from the hook's tensors and the profile, and the tensors are in S3
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    statuses = job["DebugRuleEvaluationStatuses"] + job["ProfilerRuleEvaluationStatuses"]
    verdicts = {s["RuleConfigurationName"]: s["RuleEvaluationStatus"] for s in statuses}
    assert set(verdicts) == {"LossNotDecreasing", "VanishingGradient", "CPUBottleneck"}
    assert set(verdicts.values()) <= {"NoIssuesFound", "IssuesFound"}, statuses
    keys = stack["s3"].list_objects_v2(Bucket=BUCKET, Prefix="debug/real-managed/debug-output/")
    assert keys["KeyCount"] > 0


def test_real_failing_job_reports_its_failure_reason(stack: dict[str, Any]) -> None:
    # GIVEN a hyperparameter train.py rejects
    sagemaker = stack["sagemaker"]

    # WHEN the job runs
    sagemaker.create_training_job(TrainingJobName="real-fails", **definition(model="resnet999"))
    job = wait_training(sagemaker, "real-fails")

    # THEN it is Failed with the reason train.py wrote to <base>/output/failure
    assert job["TrainingJobStatus"] == "Failed"
    assert job["FailureReason"].startswith("AlgorithmError: invalid hyperparameters:")
    assert "resnet999" in job["FailureReason"]


def test_training_jobs_left_no_child_process_behind(stack: dict[str, Any]) -> None:
    # GIVEN a training job whose container is running, seen among this process's descendants
    sagemaker, emulator = stack["sagemaker"], stack["emulator"]
    sagemaker.create_training_job(TrainingJobName="left-behind", **definition(epochs="100"))
    deadline = time.time() + 120
    while not any("/training/left-behind/container/" in p for p in container_processes()):
        assert time.time() < deadline, f"the job's container never showed up: {container_processes()}"
        time.sleep(0.2)

    # WHEN it is stopped and the emulator has no job running (with the other jobs of this module)
    sagemaker.stop_training_job(TrainingJobName="left-behind")
    job = wait_training(sagemaker, "left-behind")
    assert emulator.wait(timeout=60)  # a hang guard: the job threads end once their jobs have

    # THEN it ended Stopped and no container process of any job survives, not even as a zombie
    assert job["TrainingJobStatus"] == "Stopped", job.get("FailureReason")
    assert container_processes() == []
