"""`retrain predict` against a stack on AWS (moto): the champion's package, and what to do without an
endpoint. Deploying and classifying on the embedded stack: tests/unit/embedded/sagemaker/test_hosting.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

import retrain.cli
from controller import names, runs
from retrain.dev import tables
from retrain_contract import serving

runner = CliRunner()
STACK = "retrain-predict-test"
ROLE = "arn:aws:iam::123456789012:role/retrain-sagemaker"


def _stack(champion_status: str | None) -> dict[str, Any]:
    """A deployed stack's datasets table and SageMaker role, with the digits' champion registered."""
    dynamodb, sagemaker = boto3.client("dynamodb"), boto3.client("sagemaker")
    tables.create_tables(dynamodb, ledger="retrain-ledger", runs="retrain-runs", datasets="retrain-datasets")
    outputs = {
        names.STACK_OUTPUTS["datasets_table"]: "retrain-datasets",
        names.STACK_OUTPUTS["sagemaker_role"]: ROLE,
    }
    template = {
        "Resources": {"Marker": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation").create_stack(StackName=STACK, TemplateBody=json.dumps(template))
    arn = ""
    if champion_status is not None:
        sagemaker.create_model_package_group(ModelPackageGroupName="retrain-digits")
        spec = {
            "Containers": [
                {
                    "Image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.6-cpu-py312",
                    "ModelDataUrl": "s3://retrain-artifacts/model.tar.gz",
                }
            ]
        }
        arn = sagemaker.create_model_package(
            ModelPackageGroupName="retrain-digits",
            ModelApprovalStatus=champion_status,
            InferenceSpecification=spec,
        )["ModelPackageArn"]
        dynamodb.put_item(
            TableName="retrain-datasets",
            Item=runs.serialize({names.DATASETS_PK: "digits", "champion": {"model_package_arn": arn}}),
        )
    return {"arn": arn}


def _image(tmp_path: Path) -> Path:
    path = tmp_path / "seven.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n")
    return path


@pytest.mark.parametrize("status", ["Approved", "PendingManualApproval"])
def test_without_an_endpoint_on_aws_it_prints_the_commands_that_deploy_the_champion(
    aws: None, tmp_path: Path, status: str
) -> None:
    # GIVEN a stack on AWS whose digits champion has no endpoint
    arn = _stack(status)["arn"]
    # WHEN an image is to be classified
    result = runner.invoke(
        retrain.cli.app, ["predict", str(_image(tmp_path)), "--dataset", "digits", "--stack", STACK]
    )
    # THEN nothing is deployed (an endpoint costs money) and the error holds the exact commands
    assert result.exit_code == 8, result.output
    name = serving.endpoint_name("retrain-digits", 1)
    expected = [
        f"aws sagemaker create-model --model-name {name} --execution-role-arn {ROLE} "
        f"--primary-container ModelPackageName={arn}",
        f"aws sagemaker create-endpoint-config --endpoint-config-name {name} --production-variants",
        f'"InstanceType": "{serving.DEFAULT_INSTANCE_TYPE}"',
        f"aws sagemaker create-endpoint --endpoint-name {name} --endpoint-config-name {name}",
        f"aws sagemaker delete-endpoint --endpoint-name {name}",
    ]
    output = " ".join(result.output.split())
    assert all(" ".join(line.split()) in output for line in expected), result.output
    approval = (
        f"aws sagemaker update-model-package --model-package-arn {arn} --model-approval-status Approved"
    )
    assert (approval in output) == (status != "Approved")
    assert boto3.client("sagemaker").list_endpoints()["Endpoints"] == []


def test_a_data_set_without_a_champion_says_how_to_get_one(aws: None, tmp_path: Path) -> None:
    _stack(None)
    result = runner.invoke(
        retrain.cli.app, ["predict", str(_image(tmp_path)), "--dataset", "digits", "--stack", STACK]
    )
    assert result.exit_code == 2
    assert "data set 'digits' has no champion yet" in result.output


@pytest.mark.parametrize(
    ("name", "words"), [("missing.jpg", "is not a file"), ("notes.txt", "is not a .jpg, .jpeg or .png file")]
)
def test_an_image_that_cannot_be_sent_is_named_before_any_call(
    aws: None, tmp_path: Path, name: str, words: str
) -> None:
    _stack("Approved")
    if name.endswith(".txt"):
        (tmp_path / name).write_text("not an image")
    result = runner.invoke(
        retrain.cli.app, ["predict", str(tmp_path / name), "--dataset", "digits", "--stack", STACK]
    )
    assert result.exit_code == 2
    assert str(tmp_path / name) in result.output and words in result.output
