"""The gated moto server: every request is held against the API contract and its role's IAM policies."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.gatekeeper.gate import Gatekeeper, RequestRefusedError
from retrain.embedded.gatekeeper.iam.evaluator import Policy, PolicyEvaluator
from retrain.embedded.gatekeeper.iam.principals import Principals
from retrain.embedded.server import gated_moto_server

ACCOUNT = ACCOUNT_ID
ROLE = f"arn:aws:iam::{ACCOUNT}:role/reader"
TABLE, OTHER = "runs", "datasets"
BUCKET = "artifacts"


def _policy(*statements: dict[str, Any]) -> Policy:
    return Policy("inline", {"Version": "2012-10-17", "Statement": list(statements)})


READER = _policy(
    {
        "Effect": "Allow",
        "Action": "dynamodb:GetItem",
        "Resource": f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{TABLE}",
    },
    {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}/runs/*"},
)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def stack() -> Iterator[dict[str, Any]]:
    principals = Principals()
    credentials = principals.add(ROLE, [READER])
    with PolicyEvaluator(account=ACCOUNT) as evaluator:
        gatekeeper = Gatekeeper(principals, evaluator, region=REGION, account=ACCOUNT)
        port = _port()
        server = gated_moto_server(gatekeeper, ip_address="127.0.0.1", port=port)
        endpoint = f"http://127.0.0.1:{port}"
        config = Config(retries={"max_attempts": 1})

        def client(service: str, *, as_role: bool) -> Any:
            key = credentials.access_key_id if as_role else "operator"
            secret = credentials.secret_access_key if as_role else "operator"
            return boto3.client(
                service,
                region_name=REGION,
                endpoint_url=endpoint,
                aws_access_key_id=key,
                aws_secret_access_key=secret,
                config=config,
            )

        operator_ddb = client("dynamodb", as_role=False)
        for name in (TABLE, OTHER):
            operator_ddb.create_table(
                TableName=name,
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            )
        operator_s3 = client("s3", as_role=False)
        operator_s3.create_bucket(Bucket=BUCKET)
        operator_s3.put_object(Bucket=BUCKET, Key="runs/a.json", Body=b"{}")
        operator_s3.put_object(Bucket=BUCKET, Key="secrets/b.json", Body=b"{}")
        try:
            yield {"client": client, "gatekeeper": gatekeeper}
        finally:
            server.stop()


def test_a_role_reads_what_its_policy_allows(stack: dict[str, Any]) -> None:
    ddb = stack["client"]("dynamodb", as_role=True)
    assert "Item" not in ddb.get_item(TableName=TABLE, Key={"k": {"S": "x"}})
    s3 = stack["client"]("s3", as_role=True)
    assert s3.get_object(Bucket=BUCKET, Key="runs/a.json")["Body"].read() == b"{}"


def test_a_denied_call_names_the_action_the_resource_and_the_role(stack: dict[str, Any]) -> None:
    # GIVEN a role allowed GetItem on one table only
    ddb = stack["client"]("dynamodb", as_role=True)
    # WHEN it updates another table
    with pytest.raises(ClientError) as raised:
        ddb.update_item(
            TableName=OTHER,
            Key={"k": {"S": "x"}},
            UpdateExpression="SET a = :a",
            ExpressionAttributeValues={":a": {"S": "b"}},
        )
    # THEN DynamoDB's AccessDeniedException says who may not do what on which resource, and nothing changed
    error = raised.value.response["Error"]
    assert error["Code"] == "AccessDeniedException"
    assert error["Message"] == (
        f"User: arn:aws:sts::{ACCOUNT}:assumed-role/reader/retrain-embedded is not authorized to perform: "
        f"dynamodb:UpdateItem on resource: arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{OTHER} "
        "because no identity-based policy allows the dynamodb:UpdateItem action"
    )
    operator = stack["client"]("dynamodb", as_role=False)
    assert "Item" not in operator.get_item(TableName=OTHER, Key={"k": {"S": "x"}})


def test_s3_refuses_in_its_own_xml_error_format(stack: dict[str, Any]) -> None:
    s3 = stack["client"]("s3", as_role=True)
    with pytest.raises(ClientError) as raised:
        s3.get_object(Bucket=BUCKET, Key="secrets/b.json")
    assert raised.value.response["Error"]["Code"] == "AccessDenied"
    assert (
        "s3:GetObject on resource: arn:aws:s3:::artifacts/secrets/b.json"
        in raised.value.response["Error"]["Message"]
    )
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_a_denied_head_request_is_a_bare_403(stack: dict[str, Any]) -> None:
    s3 = stack["client"]("s3", as_role=True)
    with pytest.raises(ClientError) as raised:
        s3.head_object(Bucket=BUCKET, Key="secrets/b.json")
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_sns_refuses_with_its_query_protocol_error(stack: dict[str, Any]) -> None:
    topic = stack["client"]("sns", as_role=False).create_topic(Name="t")["TopicArn"]
    with pytest.raises(ClientError) as raised:
        stack["client"]("sns", as_role=True).publish(TopicArn=topic, Message="hi")
    assert raised.value.response["Error"]["Code"] == "AuthorizationError"
    assert "sns:Publish" in raised.value.response["Error"]["Message"]


def test_the_operator_is_not_authorised_but_still_held_to_the_contract(stack: dict[str, Any]) -> None:
    # GIVEN the operator's credentials (the CLI's, the stack's own set-up)
    sagemaker = stack["client"]("sagemaker", as_role=False)
    # WHEN it names a model package group SageMaker's pattern refuses
    with pytest.raises(ClientError) as raised:
        sagemaker.create_model_package_group(ModelPackageGroupName="retrain-my_flowers")
    # THEN SageMaker's ValidationException names the member and the pattern, as AWS words it
    error = raised.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert error["Message"].startswith(
        "1 validation error detected: Value 'retrain-my_flowers' at 'modelPackageGroupName' failed to "
        "satisfy constraint: Member must satisfy regular expression pattern"
    )


def test_a_role_calling_an_operation_without_an_iam_mapping_is_refused(stack: dict[str, Any]) -> None:
    ddb = stack["client"]("dynamodb", as_role=True)
    with pytest.raises(ClientError) as raised:
        ddb.list_backups()
    assert raised.value.response["Error"]["Code"] == "AccessDeniedException"
    assert "cannot authorise dynamodb:ListBackups" in raised.value.response["Error"]["Message"]


def test_a_sync_task_is_refused_when_the_role_cannot_follow_the_job(stack: dict[str, Any]) -> None:
    # GIVEN a state machine role that may create training jobs and pass the role, nothing more
    principals: Principals = stack["gatekeeper"].principals
    machine = f"arn:aws:iam::{ACCOUNT}:role/machine"
    principals.add(
        machine,
        [
            _policy(
                {"Effect": "Allow", "Action": "sagemaker:CreateTrainingJob", "Resource": "*"},
                {"Effect": "Allow", "Action": "iam:PassRole", "Resource": ROLE},
            )
        ],
    )
    request = {
        "TrainingJobName": "job",
        "RoleArn": ROLE,
        "AlgorithmSpecification": {
            "TrainingImage": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/retrain-training:latest",
            "TrainingInputMode": "File",
        },
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/runs/output/"},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }
    gatekeeper: Gatekeeper = stack["gatekeeper"]
    # WHEN a .sync Task creates a job (the request-response one passes the IAM part)
    with pytest.raises(RequestRefusedError) as raised:
        gatekeeper.check_task(machine, "sagemaker", "CreateTrainingJob", request, sync=True)
    # THEN the first thing Step Functions does behind the scenes is refused
    assert raised.value.code == "AccessDeniedException"
    assert (
        "sagemaker:DescribeTrainingJob" in raised.value.message
        and "assumed-role/machine" in raised.value.message
    )


def test_requests_are_routed_without_listing_motos_package(
    stack: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # moto's own dispatcher lists its package directory (and stats every entry) for every request
    from moto import backends

    listed: list[int] = []
    original = backends.list_of_moto_modules

    def counted() -> Any:
        listed.append(1)
        return original()

    monkeypatch.setattr(backends, "list_of_moto_modules", counted)
    s3, ddb = stack["client"]("s3", as_role=False), stack["client"]("dynamodb", as_role=False)
    assert s3.get_object(Bucket=BUCKET, Key="runs/a.json")["Body"].read() == b"{}"
    assert "Item" not in ddb.get_item(TableName=TABLE, Key={"k": {"S": "x"}})
    assert listed == []


def test_two_conditional_writes_of_one_item_at_once_let_one_succeed(
    stack: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN two writers of one item, each `SET v` only where it is absent, and moto made to wait after a
    # condition holds until the other request's condition has held too (at most 2 s)
    from moto.dynamodb import models

    both_checked = threading.Barrier(2, timeout=2)
    parser = models.create_condition_expression_parser

    def waiting_parser(*args: Any, **kwargs: Any) -> Any:
        parsed = parser(*args, **kwargs).parse()

        class Waiting:
            def parse(self) -> Any:
                return self

            def expr(self, item: Any) -> bool:
                held = bool(parsed.expr(item))
                with contextlib.suppress(threading.BrokenBarrierError):
                    both_checked.wait()
                return held

        return Waiting()

    monkeypatch.setattr(models, "create_condition_expression_parser", waiting_parser)
    ddb = stack["client"]("dynamodb", as_role=False)
    key = {"k": {"S": "written-once"}}
    ddb.put_item(TableName=TABLE, Item=key)

    def write(value: str) -> bool:
        try:
            ddb.update_item(
                TableName=TABLE,
                Key=key,
                UpdateExpression="SET v = :v",
                ConditionExpression="attribute_not_exists(v)",
                ExpressionAttributeValues={":v": {"S": value}},
            )
        except ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    # WHEN both write at once
    with ThreadPoolExecutor(2) as pool:
        made = list(pool.map(write, ["first", "second"]))
    # THEN one write was made, and the item holds its value (as DynamoDB's atomic conditional writes do)
    assert sorted(made) == [False, True]
    stored = ddb.get_item(TableName=TABLE, Key=key)["Item"]["v"]["S"]
    assert stored == ["first", "second"][made.index(True)]
