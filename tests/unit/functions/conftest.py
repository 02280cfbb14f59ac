"""moto-backed AWS for the control-plane Lambdas: the tables, buckets and queue the template makes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from controller import names


@dataclass
class Aws:
    """Clients on one moto account, and the names of the resources the stack would hold."""

    s3: Any
    dynamodb: Any
    sfn: Any
    sagemaker: Any
    sns: Any
    data_bucket: str = "retrain-data"
    artifact_bucket: str = "retrain-artifacts"
    ledger_table: str = "retrain-ledger"
    runs_table: str = "retrain-runs"
    datasets_table: str = "retrain-datasets"
    state_machine_arn: str = ""
    topic_arn: str = ""


def create_tables(dynamodb: Any, aws: Aws) -> None:
    dynamodb.create_table(
        TableName=aws.ledger_table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": names.LEDGER_PK, "AttributeType": "S"},
            {"AttributeName": names.LEDGER_SK, "AttributeType": "S"},
            {"AttributeName": names.LEDGER_PENDING_PK, "AttributeType": "S"},
            {"AttributeName": names.LEDGER_PENDING_SK, "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": names.LEDGER_PK, "KeyType": "HASH"},
            {"AttributeName": names.LEDGER_SK, "KeyType": "RANGE"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": names.LEDGER_PENDING_INDEX,
                "KeySchema": [
                    {"AttributeName": names.LEDGER_PENDING_PK, "KeyType": "HASH"},
                    {"AttributeName": names.LEDGER_PENDING_SK, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
    )
    dynamodb.create_table(
        TableName=aws.runs_table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": names.RUNS_PK, "AttributeType": "S"},
            {"AttributeName": names.RUNS_SK, "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": names.RUNS_PK, "KeyType": "HASH"},
            {"AttributeName": names.RUNS_SK, "KeyType": "RANGE"},
        ],
    )
    dynamodb.create_table(
        TableName=aws.datasets_table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": names.DATASETS_PK, "AttributeType": "S"}],
        KeySchema=[{"AttributeName": names.DATASETS_PK, "KeyType": "HASH"}],
    )


@pytest.fixture
def aws() -> Iterator[Aws]:
    with mock_aws():
        region = "us-east-1"
        aws = Aws(
            s3=boto3.client("s3", region_name=region),
            dynamodb=boto3.client("dynamodb", region_name=region),
            sfn=boto3.client("stepfunctions", region_name=region),
            sagemaker=boto3.client("sagemaker", region_name=region),
            sns=boto3.client("sns", region_name=region),
        )
        aws.s3.create_bucket(Bucket=aws.data_bucket)
        aws.s3.create_bucket(Bucket=aws.artifact_bucket)
        create_tables(aws.dynamodb, aws)
        aws.topic_arn = aws.sns.create_topic(Name="retrain-notifications")["TopicArn"]
        role = boto3.client("iam", region_name=region).create_role(
            RoleName="retrain-states", AssumeRolePolicyDocument="{}"
        )["Role"]["Arn"]
        aws.state_machine_arn = aws.sfn.create_state_machine(
            name="retrain-training",
            definition='{"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}',
            roleArn=role,
        )["stateMachineArn"]
        yield aws
