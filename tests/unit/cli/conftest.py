"""A moto account holding what the CLI reads: a stack whose Outputs name a data bucket, an artifact
bucket, the ledger and run tables, a state machine and a topic (created directly; the stack only
carries the Outputs, as the deployed template's stack does)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from controller import names
from retrain.deployment import Deployment, connect
from retrain.dev import tables

STACK = "retrain-cli-test"
PASS_DEFINITION = json.dumps(
    {"StartAt": "Prepare the run", "States": {"Prepare the run": {"Type": "Pass", "End": True}}}
)


@dataclass(frozen=True)
class FakeStack:
    name: str
    outputs: dict[str, str]

    def output(self, short: str) -> str:
        return self.outputs[names.STACK_OUTPUTS[short]]


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


@pytest.fixture
def stack(aws: None) -> FakeStack:
    return make_stack()


def make_stack() -> FakeStack:
    """Create the stack's resources and Outputs in the moto account that is active now."""
    s3 = boto3.client("s3")
    dynamodb = boto3.client("dynamodb")
    for bucket in ("retrain-data-test", "retrain-artifacts-test"):
        s3.create_bucket(Bucket=bucket)
    tables.create_tables(dynamodb, ledger="retrain-ledger", runs="retrain-runs", datasets="retrain-datasets")
    role = boto3.client("iam").create_role(
        RoleName="retrain-sfn",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    machine = boto3.client("stepfunctions").create_state_machine(
        name="retrain-training", definition=PASS_DEFINITION, roleArn=role
    )["stateMachineArn"]
    topic = boto3.client("sns").create_topic(Name="retrain-notifications")["TopicArn"]
    values = {
        "data_bucket": "retrain-data-test",
        "artifact_bucket": "retrain-artifacts-test",
        "state_machine": machine,
        "ledger_table": "retrain-ledger",
        "runs_table": "retrain-runs",
        "datasets_table": "retrain-datasets",
        "topic": topic,
    }
    outputs = {names.STACK_OUTPUTS[k]: v for k, v in values.items()}
    template = {
        "Resources": {"Marker": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation").create_stack(StackName=STACK, TemplateBody=json.dumps(template))
    return FakeStack(name=STACK, outputs=outputs)


DATA_DIR = __import__("pathlib").Path(__file__).resolve().parent / "data"


class RecordedSageMaker:
    """SageMaker's answers about one finished run, recorded in boto3's response shapes.

    moto records tuning jobs but has no ListTrainingJobsForHyperParameterTuningJob and no spot timings,
    so the CLI's reads of a finished run are answered here, at the service boundary.
    """

    def __init__(self, path: Any = None) -> None:
        self.responses = json.loads((path or DATA_DIR / "sagemaker_run.json").read_text())

    def describe_hyper_parameter_tuning_job(self, HyperParameterTuningJobName: str) -> dict[str, Any]:  # noqa: N803
        response = self.responses["describe_hyper_parameter_tuning_job"]
        if response["HyperParameterTuningJobName"] != HyperParameterTuningJobName:
            raise _not_found(HyperParameterTuningJobName)
        return dict(response)

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        self.describe_hyper_parameter_tuning_job(request["HyperParameterTuningJobName"])
        return dict(self.responses["list_training_jobs_for_hyper_parameter_tuning_job"])

    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]:  # noqa: N803
        try:
            return dict(self.responses["describe_training_job"][TrainingJobName])
        except KeyError:
            raise _not_found(TrainingJobName) from None


def recorded_deployment(stack: FakeStack) -> Deployment:
    """The CLI's connection to `stack`, SageMaker's answers about the recorded run in place of moto's."""
    deployment = connect(stack.name)
    deployment.clients["sagemaker"] = RecordedSageMaker()
    return deployment


def _not_found(name: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": "ValidationException", "Message": f"Requested resource not found: {name}"}},
        "Describe",
    )


@pytest.fixture
def recorded_sagemaker() -> RecordedSageMaker:
    return RecordedSageMaker()
