"""One run of the state machine against the real SageMaker emulator: tuning runs training_image/train.py,
the rule check runs rule_check.py and the evaluations run evaluate.py, all with the requests the ASL
builds, and every step is the deployed Lambda handler (environment as the template sets it, boto3 clients
of its own), so the control plane, its handlers and the container contract are proven to fit."""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
import torch
from moto.server import ThreadedMotoServer
from PIL import Image

from controller import names
from controller.config import Config, get_config
from retrain.dev.template_model import default_environment
from retrain.embedded.sagemaker import JobContext, SageMakerEmulator, api_installed
from retrain.embedded.stepfunctions.integrations import installed
from retrain.serve import predict
from retrain_training import data, evaluate
from tests.integration.test_statemachine_branches import (
    FUNCTIONS,
    SETTINGS,
    Harness,
    Script,
    ScriptedFsx,
    _zip,
)
from tests.unit.functions.support import make_config, moto_aws

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
TINY = {
    **SETTINGS,
    "data_source": "s3",
    "spot": False,
    "epochs": 1,
    "image_size": 32,
    "batch_size": 8,
    "checkpoint_every_steps": 2,
    "min_training_steps": 8,  # the recipe's floor of steps, at this test's scale
    "max_jobs": 1,
    "parallel_jobs": 1,
    "final_training": False,
}


HANDLERS = {
    "PrepareRunFunction": "prepare",
    "ReadFrozenManifestFunction": "frozen",
    "ImportReportFunction": "import_report",
    "PickBestCandidateFunction": "best_candidate",
    "GateFunction": "gate",
    "RegisterModelFunction": "register",
    "FinalizeRunFunction": "finalize",
    "RecordFailureFunction": "record_failure",
}


class LambdaContext:
    memory_limit_in_mb = 512
    aws_request_id = "request-1"

    def __init__(self, name: str) -> None:
        self.function_name = name
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{name}"


def invoke_handler(function_name: str, payload: dict[str, Any]) -> Any:
    """What the Lambda service does: the template's handler, with a context."""
    module = importlib.import_module(f"controller.{HANDLERS[function_name]}")
    return json.loads(json.dumps(module.handler(payload, LambdaContext(function_name))))


def environment(config: Config) -> dict[str, str]:
    return {
        **default_environment("PrepareRunFunction"),
        names.ENV_DATA_BUCKET: config.data_bucket,
        names.ENV_ARTIFACT_BUCKET: config.artifact_bucket,
        names.ENV_LEDGER_TABLE: config.ledger_table,
        names.ENV_RUNS_TABLE: config.runs_table,
        names.ENV_DATASETS_TABLE: config.datasets_table,
        names.ENV_TOPIC_ARN: config.topic_arn,
        names.ENV_SAGEMAKER_ROLE_ARN: config.sagemaker_role_arn,
        names.ENV_SETTINGS: json.dumps(TINY),
        names.ENV_MIN_ACCURACY: "0.0",
        names.ENV_MODEL_APPROVAL_STATUS: "Approved",
        names.ENV_INFERENCE_IMAGE_URI: default_environment("RegisterModelFunction")[
            names.ENV_INFERENCE_IMAGE_URI
        ],
    }


@pytest.fixture
def emulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    for aws in moto_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        config = dataclasses.replace(make_config(aws), settings=TINY, min_accuracy=0.0)
        role = "arn:aws:iam::123456789012:role/retrain-states"
        lam = boto3.client("lambda", region_name="us-east-1")
        definition = (REPO / "statemachine" / "training.asl.json").read_text()
        substitutions = {
            "SageMakerRoleArn": config.sagemaker_role_arn,
            "NotificationTopicArn": aws.topic_arn,
            "DebuggerRuleImage": "unused",
            "SystemRulePatience": "1000",
        }
        for function in FUNCTIONS:
            substitutions[f"{function}Arn"] = lam.create_function(
                FunctionName=function,
                Runtime="python3.13",
                Role=role,
                Handler="index.handler",
                Code={"ZipFile": _zip()},
            )["FunctionArn"]
        for key, value in substitutions.items():
            definition = definition.replace("${" + key + "}", value)
        arn = aws.sfn.create_state_machine(name="retrain-emulated", definition=definition, roleArn=role)[
            "stateMachineArn"
        ]
        # a job that calls AWS (the freezing job reads the ledger) reaches this moto through its server,
        # which shares the in-process backends
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        job_aws = {
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        context = JobContext(
            s3=aws.s3, role_environment=lambda role, env=job_aws: env, role_arn=config.sagemaker_role_arn
        )
        emulator = SageMakerEmulator(tmp_path / "sagemaker", context)
        script = Script()
        harness = Harness(aws, Config(**config.__dict__), emulator, ScriptedFsx(aws.s3, script), script, arn)  # type: ignore[arg-type]
        rng = np.random.default_rng(0)
        keys = []
        for label in ("cat", "dog"):
            for index in range(20):
                buffer = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, size=(36, 44, 3), dtype=np.uint8)).save(
                    buffer, format="JPEG"
                )
                key = f"data/flowers/{label}/{index:03d}.jpg"
                aws.s3.put_object(Bucket=aws.data_bucket, Key=key, Body=buffer.getvalue())
                keys.append(key)
        harness.upload(*keys)
        for key, value in environment(harness.config).items():
            monkeypatch.setenv(key, value)
        get_config.cache_clear()
        try:
            with (
                api_installed(emulator),
                installed(lambda_invoker=invoke_handler, sagemaker=emulator, fsx=harness.fsx),
            ):
                yield harness
        finally:
            emulator.hosting.close()
            get_config.cache_clear()
            server.stop()


def test_a_run_trains_checks_rules_evaluates_registers_and_serves_with_the_real_container(
    emulated: Harness, tmp_path: Path
) -> None:
    # GIVEN 40 uploaded images of two labels and a one-trial tuning budget
    # WHEN a run executes against the SageMaker emulator
    result = emulated.run({"dataset": "flowers"}, timeout=540)
    # THEN it completes; the record holds the trial, its real metrics-based accuracy and the rule results
    assert result["status"] == "SUCCEEDED", result
    record = emulated.record()
    assert record["status"] == "SUCCEEDED", record.get("failure")
    sagemaker, s3 = emulated.sagemaker, emulated.aws.s3
    # AND the best trial trained with the real train.py, its objective its own validation accuracy
    assert record["best_training_job"].startswith(record["tuning_job"])
    trial = sagemaker.describe_training_job(TrainingJobName=record["best_training_job"])
    assert trial["TrainingJobStatus"] == "Completed"
    metrics = {m["MetricName"]: m["Value"] for m in trial["FinalMetricDataList"]}
    assert record["best_objective"] == metrics["val-accuracy"]
    assert record["model_data"] == trial["ModelArtifacts"]["S3ModelArtifacts"]
    # AND the challenger's top-1 is what evaluate.py measured on the validation images of that model
    bucket, key = record["challenger"]["report_uri"].removeprefix("s3://").split("/", 1)
    report = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    counts_bucket, counts_key = record["class_counts_uri"].removeprefix("s3://").split("/", 1)
    counts = json.loads(s3.get_object(Bucket=counts_bucket, Key=counts_key)["Body"].read())["class_counts"]
    validation = {label: c["validation"] for label, c in counts.items()}
    assert report["labels"] == ["cat", "dog"] and report["samples"] == sum(validation.values()) > 0
    assert {label: c["support"] for label, c in report["per_class"].items()} == validation
    confusion = np.array(report["confusion_matrix"])
    assert confusion.sum() == report["samples"]
    assert record["challenger"]["top1"] == report["top1"] == np.trace(confusion) / report["samples"]
    evaluation = sagemaker.describe_processing_job(ProcessingJobName=record["challenger"]["job"])
    assert evaluation["ProcessingJobStatus"] == "Completed"
    model_input = {i["InputName"]: i["S3Input"]["S3Uri"] for i in evaluation["ProcessingInputs"]}
    assert record["model_data"] in model_input.values()
    # AND it downloaded the validation split's images and no other of the data set's 40
    downloaded = (
        emulated.sagemaker.workdir / "processing" / record["challenger"]["job"] / "opt" / "ml" / "processing"
    )
    images = [p for p in (downloaded / "input" / "data" / "train").rglob("*") if p.is_file()]
    assert len(images) == sum(validation.values()) == record["validation_images"] < 40
    # AND every rule was evaluated (none failed; a rule short of data, or unsure, says so), and the
    # registered package is that model
    assert {r["rule"] for r in record["rule_results"]} >= {"LossNotDecreasing"}
    evaluated = {"NoIssuesFound", "IssuesFound", "IssuesSuspected", "InsufficientData"}
    assert {r["status"] for r in record["rule_results"]} <= evaluated
    package = sagemaker.describe_model_package(ModelPackageName=record["model_package_arn"])
    assert package["ModelApprovalStatus"] == "Approved"
    [container] = package["InferenceSpecification"]["Containers"]
    assert container["ModelDataUrl"] == record["model_data"]
    assert record["training_seconds"] > 0
    # AND that package deploys and answers as evaluate.py does
    _serves_what_evaluate_ranks(emulated, dict(record), tmp_path)


def _serves_what_evaluate_ranks(emulated: Harness, record: dict[str, Any], tmp_path: Path) -> None:
    """The run's package deploys (CreateModel from it, CreateEndpointConfig, CreateEndpoint) and
    classifies images no run saw through InvokeEndpoint, answering the labels evaluate.py's forward pass
    ranks first."""
    s3 = emulated.aws.s3
    client = boto3.client("sagemaker", region_name="us-east-1")  # boto3's, as the CLI deploys it
    package = predict.describe_package(client, record["model_package_arn"])
    endpoint = predict.deploy(client, package, emulated.config.sagemaker_role_arn)
    held_out = []
    for index, fmt in enumerate(("JPEG", "PNG", "JPEG", "PNG")):
        path = tmp_path / "held-out" / f"{index}.{fmt.lower()}"
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = np.random.default_rng(100 + index).integers(0, 256, size=(36, 44, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path, format=fmt)
        held_out.append(path)
    answers = predict.classify(boto3.client("sagemaker-runtime", region_name="us-east-1"), endpoint, held_out)
    archive = tmp_path / "model.tar.gz"
    bucket, key = record["model_data"].removeprefix("s3://").split("/", 1)
    archive.write_bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    artifact = evaluate.load_artifact(archive, tmp_path)
    logits = evaluate.predict(
        evaluate.build(artifact, torch.device("cpu")),
        [data.Sample(p, 0, p.name) for p in held_out],
        image_size=artifact.image_size,
        batch_size=8,
        num_workers=0,
        device=torch.device("cpu"),
    )
    for answer, row in zip(answers, torch.softmax(logits, dim=1), strict=True):
        expected = row.topk(len(artifact.labels))
        assert [p["label"] for p in answer.predictions] == [artifact.labels[int(i)] for i in expected.indices]
        assert [p["probability"] for p in answer.predictions] == pytest.approx(
            expected.values.tolist(), abs=1e-5
        )
