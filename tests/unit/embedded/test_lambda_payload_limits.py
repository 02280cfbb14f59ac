"""Lambda's payload limits in the embedded stack: 6 MB requests and responses for synchronous invokes,
1 MB requests for asynchronous ones (https://docs.aws.amazon.com/lambda/latest/dg/API_Invoke.html)."""

from __future__ import annotations

import io
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from retrain.embedded.awslambda.runtime import RESPONSE_TOO_LARGE, FunctionSpec, LambdaRuntime
from retrain.embedded.limits import (
    LAMBDA_ASYNC_REQUEST_BYTES,
    LAMBDA_RESPONSE_BYTES,
    LAMBDA_SYNC_REQUEST_BYTES,
)
from retrain.embedded.provisioning.sam import load_template
from retrain.embedded.stepfunctions.errors import TaskFailed
from retrain.embedded.stepfunctions.integrations import installed

REPO_ROOT = Path(__file__).resolve().parents[3]
RUNTIME = load_template(REPO_ROOT / "template.yaml")["Globals"]["Function"]["Runtime"]


@pytest.fixture
def lambda_client() -> Iterator[Any]:
    with mock_aws():
        iam = boto3.client("iam", region_name="us-east-1")
        role = iam.create_role(RoleName="fn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w") as zipped:
            zipped.writestr("app.py", "def handler(event, context):\n    return event\n")
        client = boto3.client("lambda", region_name="us-east-1")
        client.create_function(
            FunctionName="fn",
            Runtime=RUNTIME,
            Role=role,
            Handler="app.handler",
            Code={"ZipFile": archive.getvalue()},
        )
        yield client


def _payload(size: int) -> bytes:
    """A JSON string of exactly ``size`` bytes."""
    return json.dumps("x" * (size - 2)).encode()


def test_a_sync_invoke_over_6_mb_is_refused_before_the_function_runs(lambda_client: Any) -> None:
    calls: list[Any] = []
    with (
        installed(lambda_invoker=lambda name, payload: calls.append(name)),
        pytest.raises(ClientError) as refused,
    ):
        lambda_client.invoke(FunctionName="fn", Payload=_payload(LAMBDA_SYNC_REQUEST_BYTES + 1))

    error = refused.value.response
    assert error["Error"]["Code"] == "RequestEntityTooLargeException"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 413
    assert error["Error"]["Message"].startswith(
        f"Request must be smaller than {LAMBDA_SYNC_REQUEST_BYTES} bytes for the InvokeFunction operation"
    )
    assert f"is {LAMBDA_SYNC_REQUEST_BYTES + 1} bytes" in error["Error"]["Message"]
    assert calls == []


def test_a_sync_invoke_of_exactly_6_mb_runs(lambda_client: Any) -> None:
    with installed(lambda_invoker=lambda name, payload: len(payload)):
        response = lambda_client.invoke(FunctionName="fn", Payload=_payload(LAMBDA_SYNC_REQUEST_BYTES))

    assert json.loads(response["Payload"].read()) == LAMBDA_SYNC_REQUEST_BYTES - 2


def test_an_async_invoke_over_1_mb_is_refused(lambda_client: Any) -> None:
    calls: list[Any] = []
    with (
        installed(lambda_invoker=lambda name, payload: calls.append(name)),
        pytest.raises(ClientError) as refused,
    ):
        lambda_client.invoke(
            FunctionName="fn", InvocationType="Event", Payload=_payload(LAMBDA_ASYNC_REQUEST_BYTES + 1)
        )

    assert refused.value.response["Error"] == {
        "Code": "RequestEntityTooLargeException",
        "Message": f"{LAMBDA_ASYNC_REQUEST_BYTES + 1} byte payload is too large for the Event "
        f"invocation type (limit {LAMBDA_ASYNC_REQUEST_BYTES} bytes)",
    }
    assert calls == []


def test_an_async_invoke_of_exactly_1_mb_is_accepted(lambda_client: Any) -> None:
    ran = threading.Event()
    with installed(lambda_invoker=lambda name, payload: ran.set()):
        response = lambda_client.invoke(
            FunctionName="fn", InvocationType="Event", Payload=_payload(LAMBDA_ASYNC_REQUEST_BYTES)
        )
        assert ran.wait(30)

    assert response["StatusCode"] == 202


HANDLERS = """
def sized(event, context):
    return "x" * event["characters"]
"""


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LambdaRuntime]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "app.py").write_text(HANDLERS)
    spec = FunctionSpec("fn", "app.sized", tmp_path / "code", timeout_seconds=30, runtime=RUNTIME)
    runtime = LambdaRuntime({"fn": spec}, endpoint_url="http://127.0.0.1:5999", log_dir=tmp_path / "logs")
    yield runtime
    runtime.close()


def test_a_response_over_the_limit_fails_with_response_size_too_large(runtime: LambdaRuntime) -> None:
    # GIVEN a handler whose result is one byte over the limit as JSON (the string and its two quotes)
    with pytest.raises(TaskFailed) as failed:
        runtime.invoke("fn", {"characters": LAMBDA_RESPONSE_BYTES - 1})

    assert failed.value.error == RESPONSE_TOO_LARGE
    assert failed.value.cause.startswith(
        f"Response payload size exceeded maximum allowed payload size ({LAMBDA_RESPONSE_BYTES} bytes)."
    )
    assert f"is {LAMBDA_RESPONSE_BYTES + 1} bytes" in failed.value.cause


def test_a_response_at_the_limit_is_returned(runtime: LambdaRuntime) -> None:
    assert len(runtime.invoke("fn", {"characters": LAMBDA_RESPONSE_BYTES - 2})) == LAMBDA_RESPONSE_BYTES - 2


def test_the_invoke_api_reports_a_too_large_response_as_an_unhandled_function_error(
    lambda_client: Any, runtime: LambdaRuntime
) -> None:
    with installed(lambda_invoker=runtime.invoke):
        response = lambda_client.invoke(
            FunctionName="fn", Payload=json.dumps({"characters": LAMBDA_RESPONSE_BYTES})
        )

    assert response["FunctionError"] == "Unhandled"
    assert json.loads(response["Payload"].read())["errorType"] == RESPONSE_TOO_LARGE
