"""Step Functions' 256 KiB payload limit in the embedded interpreter, and the errors States.ALL cannot catch
(https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html)."""

from __future__ import annotations

import inspect
import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from retrain.embedded.gatekeeper import contracts
from retrain.embedded.limits import STATES_PAYLOAD_BYTES, json_bytes
from retrain.embedded.stepfunctions.data_limit import DATA_LIMIT_EXCEEDED, size_quota_owners
from retrain.embedded.stepfunctions.integrations import installed
from tests.unit.embedded.executions import run_execution

INVOKE = "arn:aws:states:::lambda:invoke"
CATCH_ALL = [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Caught"}]


@pytest.fixture
def sfn() -> Iterator[Any]:
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        iam = boto3.client("iam", region_name="us-east-1")
        role = iam.create_role(RoleName="fn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w") as zipped:
            zipped.writestr("app.py", "def handler(event, context):\n    return event\n")
        boto3.client("lambda", region_name="us-east-1").create_function(
            FunctionName="fn",
            Runtime="python3.13",
            Role=role,
            Handler="app.handler",
            Code={"ZipFile": archive.getvalue()},
        )
        yield boto3.client("stepfunctions", region_name="us-east-1")


def _invoke_task(parameters: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "StartAt": "Task",
        "States": {
            "Task": {"Type": "Task", "Resource": INVOKE, "Parameters": parameters, "End": True, **extra},
            "Caught": {"Type": "Pass", "End": True},
        },
    }


def _returning(size: int) -> Any:
    """A Lambda invoker whose result is a string of ``size`` ASCII characters."""
    return lambda name, payload: "x" * size


def test_moto_still_has_the_symbols_the_limit_patches_with_the_shapes_relied_on() -> None:
    from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import (
        ErrorEqualsDecl,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (
        StateTaskService,
    )

    for module, owner in size_quota_owners():
        assert callable(module.is_within_size_quota)
        assert list(inspect.signature(owner._verify_size_quota).parameters) == ["self", "env", "value"]
    assert list(inspect.signature(StateTaskService._before_eval_execution).parameters) == [
        "self",
        "env",
        "resource_runtime_part",
        "raw_parameters",
        "state_credentials",
    ]
    assert list(inspect.signature(ErrorEqualsDecl._eval_body).parameters) == ["self", "env"]


def test_a_task_result_over_the_limit_is_not_caught_by_states_all(sfn: Any) -> None:
    # GIVEN a Lambda whose result is over 256 KiB, in a Task that catches States.ALL
    definition = _invoke_task({"FunctionName": "fn", "Payload": {}}, Catch=CATCH_ALL)
    with installed(lambda_invoker=_returning(STATES_PAYLOAD_BYTES)):
        result = run_execution(sfn, definition, {})
    # THEN the execution fails with States.DataLimitExceeded: a terminal error States.ALL does not match
    assert result["status"] == "FAILED"
    assert result["error"] == DATA_LIMIT_EXCEEDED
    assert f"the limit is {STATES_PAYLOAD_BYTES} bytes" in result["cause"]


def test_an_explicit_catch_of_data_limit_exceeded_catches_it(sfn: Any) -> None:
    catch = [{"ErrorEquals": [DATA_LIMIT_EXCEEDED], "ResultPath": "$.error", "Next": "Caught"}]
    definition = _invoke_task({"FunctionName": "fn", "Payload": {}}, Catch=catch)
    with installed(lambda_invoker=_returning(STATES_PAYLOAD_BYTES)):
        result = run_execution(sfn, definition, {})

    assert result["status"] == "SUCCEEDED"
    assert json.loads(result["output"])["error"]["Error"] == DATA_LIMIT_EXCEEDED


def test_a_retry_on_states_all_does_not_retry_data_limit_exceeded(sfn: Any) -> None:
    calls: list[str] = []

    def invoker(name: str, payload: Any) -> str:
        calls.append(name)
        return "x" * STATES_PAYLOAD_BYTES

    retry = [{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 1, "MaxAttempts": 2}]
    with installed(lambda_invoker=invoker):
        result = run_execution(sfn, _invoke_task({"FunctionName": "fn", "Payload": {}}, Retry=retry), {})

    assert result["error"] == DATA_LIMIT_EXCEEDED
    assert calls == ["fn"]


def test_a_task_result_at_the_limit_passes(sfn: Any) -> None:
    # GIVEN a result whose whole lambda:invoke output is exactly 256 KiB of compact JSON
    with installed(lambda_invoker=_returning(0)):
        probe = run_execution(sfn, _invoke_task({"FunctionName": "fn", "Payload": {}}), {})
    empty_output = json_bytes(json.loads(probe["output"]))

    with installed(lambda_invoker=_returning(STATES_PAYLOAD_BYTES - empty_output)):
        result = run_execution(sfn, _invoke_task({"FunctionName": "fn", "Payload": {}}), {})

    assert result["status"] == "SUCCEEDED"
    assert json_bytes(json.loads(result["output"])) == STATES_PAYLOAD_BYTES


def test_a_state_output_over_the_limit_fails_the_execution(sfn: Any) -> None:
    # GIVEN a Pass state that builds an output over the limit from a small input
    big = "y" * (STATES_PAYLOAD_BYTES // 2)
    definition = {
        "StartAt": "Grow",
        "States": {"Grow": {"Type": "Pass", "Parameters": {"a.$": "$.s", "b.$": "$.s"}, "End": True}},
    }
    with installed():
        result = run_execution(sfn, definition, {"s": big})

    assert result["status"] == "FAILED"
    assert result["error"] == DATA_LIMIT_EXCEEDED
    assert "It is 262" in result["cause"]


def test_a_task_input_over_the_limit_after_parameters_fails_before_the_call(sfn: Any) -> None:
    # GIVEN a Task whose Parameters double a 150 KB input into the Lambda's payload
    calls: list[Any] = []
    half = "z" * 150_000
    definition = _invoke_task(
        {"FunctionName": "fn", "Payload": {"a.$": "$.s", "b.$": "$.s"}},
        Catch=CATCH_ALL,
    )
    with installed(lambda_invoker=lambda name, payload: calls.append(payload)):
        result = run_execution(sfn, definition, {"s": half})
    # THEN the state fails with States.DataLimitExceeded, uncaught, and the function never runs
    assert result["status"] == "FAILED"
    assert result["error"] == DATA_LIMIT_EXCEEDED
    assert "after its Parameters" in result["cause"]
    assert calls == []


def test_states_all_still_catches_an_ordinary_task_failure(sfn: Any) -> None:
    def invoker(name: str, payload: Any) -> Any:
        raise ValueError("no")

    definition = _invoke_task({"FunctionName": "fn", "Payload": {}}, Catch=CATCH_ALL)
    with installed(lambda_invoker=invoker):
        result = run_execution(sfn, definition, {})

    assert result["status"] == "SUCCEEDED"
    assert json.loads(result["output"])["error"]["Error"] == "ValueError"


def test_start_execution_input_over_the_limit_in_utf8_bytes_is_refused() -> None:
    # GIVEN an input under 262,144 characters but over 262,144 bytes in UTF-8 (two bytes per 'é')
    text = json.dumps({"s": "é" * (STATES_PAYLOAD_BYTES // 2)}, ensure_ascii=False)
    assert len(text) < STATES_PAYLOAD_BYTES < len(text.encode())
    request = {"stateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:m", "input": text}
    # THEN the API refuses it with the model's length constraint, counted in bytes as AWS documents
    with pytest.raises(contracts.ContractError) as refused:
        contracts.check("stepfunctions", "StartExecution", request)
    assert refused.value.code == "ValidationException"
    assert refused.value.message == (
        "1 validation error detected: Value at 'input' failed to satisfy constraint: "
        f"Member must have length less than or equal to {STATES_PAYLOAD_BYTES}"
    )


def test_the_model_limit_of_execution_input_is_the_states_payload_limit() -> None:
    import botocore.session

    model = botocore.session.get_session().get_service_model("stepfunctions")
    shape = model.operation_model("StartExecution").input_shape.members["input"]
    assert shape.metadata["max"] == STATES_PAYLOAD_BYTES


def test_start_execution_input_at_the_limit_is_accepted() -> None:
    compact = (",", ":")
    text = json.dumps({"s": "é" * ((STATES_PAYLOAD_BYTES - 8) // 2)}, ensure_ascii=False, separators=compact)
    assert len(text.encode()) == STATES_PAYLOAD_BYTES
    contracts.check(
        "stepfunctions",
        "StartExecution",
        {"stateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:m", "input": text},
    )
