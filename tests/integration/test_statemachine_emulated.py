"""One run of the state machine against the real SageMaker emulator: tuning runs training_image/train.py,
the rule check runs rule_check.py and the evaluations run evaluate.py, all with the requests the ASL
builds, so the control plane and the container contract are proven to fit."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from pathlib import Path

import boto3
import numpy as np
import pytest
from PIL import Image

from controller.config import Config
from retrain.embedded.integrations import installed
from retrain.embedded.sagemaker import SageMakerEmulator
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
    "max_jobs": 1,
    "parallel_jobs": 1,
    "final_training": False,
}


@pytest.fixture
def emulated(tmp_path: Path) -> Iterator[Harness]:
    for aws in moto_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        config = dataclasses.replace(make_config(aws), settings=TINY, min_accuracy=0.0)
        role = "arn:aws:iam::123456789012:role/retrain-states"
        lam = boto3.client("lambda", region_name="us-east-1")
        definition = (REPO / "statemachine" / "training.asl.json").read_text()
        substitutions = {
            "SageMakerRoleArn": config.sagemaker_role_arn,
            "NotificationTopicArn": aws.topic_arn,
            "DebuggerRuleImage": "unused",
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
        emulator = SageMakerEmulator(
            tmp_path / "sagemaker", s3_client=aws.s3, code_dir=REPO / "training_image"
        )
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
        with installed(lambda_invoker=harness.invoke, sagemaker=emulator, fsx=harness.fsx):
            yield harness


def test_a_run_trains_checks_rules_evaluates_and_registers_with_the_real_container(emulated: Harness) -> None:
    # GIVEN 40 uploaded images of two labels and a one-trial tuning budget
    # WHEN a run executes against the SageMaker emulator
    result = emulated.run({"dataset": "flowers"}, timeout=540)
    # THEN it completes; the record holds the trial, its real metrics-based accuracy and the rule results
    assert result["status"] == "SUCCEEDED", result
    record = emulated.record()
    assert record["status"] == "SUCCEEDED", record.get("failure")
    assert record["best_training_job"].startswith(record["tuning_job"])
    assert 0.0 <= record["challenger"]["top1"] <= 1.0
    assert {r["rule"] for r in record["rule_results"]} >= {"LossNotDecreasing"}
    assert record["model_package_arn"]
    assert record["training_seconds"] > 0
