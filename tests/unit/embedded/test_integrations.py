"""The Step Functions integrations and Lambda invoke path patched into the pinned moto."""

from __future__ import annotations

import datetime
import inspect
import io
import json
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from retrain.embedded.stepfunctions.errors import SAGEMAKER_API_ERROR, TASK_FAILED, TaskFailed
from retrain.embedded.stepfunctions.integrations import installed
from tests.unit.embedded.executions import run_execution


def _client_error(code: str, message: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 400}},
        "CreateTrainingJob",
    )


class ScriptedSageMaker:
    """A SageMaker double at the service boundary: jobs finish after `polls` describes in `final`."""

    def __init__(
        self, *, final: str = "Completed", polls: int = 2, create_errors: list[ClientError] | None = None
    ):
        self.final, self.polls = final, polls
        self.create_errors = list(create_errors or [])
        self.jobs: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []

    def create_training_job(self, **request: Any) -> dict[str, Any]:
        if self.create_errors:
            raise self.create_errors.pop(0)
        self.requests.append(request)
        self.jobs[request["TrainingJobName"]] = 0
        arn = f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{request['TrainingJobName']}"
        return {"TrainingJobArn": arn}

    def describe_training_job(self, **request: Any) -> dict[str, Any]:
        name = request["TrainingJobName"]
        if name not in self.jobs:
            raise _client_error("ValidationException", f"Requested resource not found: {name}")
        self.jobs[name] += 1
        done = self.jobs[name] > self.polls
        out: dict[str, Any] = {
            "TrainingJobName": name,
            "TrainingJobStatus": self.final if done else "InProgress",
            "CreationTime": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        }
        if done and self.final == "Failed":
            out["FailureReason"] = "AlgorithmError: loss is NaN"
        return out

    create_processing_job = describe_processing_job = create_training_job
    create_hyper_parameter_tuning_job = describe_hyper_parameter_tuning_job = create_training_job


class ScriptedFsx:
    def __init__(self, error: ClientError | None = None) -> None:
        self.error = error
        self.requests: list[dict[str, Any]] = []

    def create_data_repository_task(self, **request: Any) -> dict[str, Any]:
        if self.error:
            raise self.error
        self.requests.append(request)
        return {"DataRepositoryTask": {"TaskId": "task-0123", "Lifecycle": "PENDING"}}

    def describe_data_repository_tasks(self, **request: Any) -> dict[str, Any]:
        return {"DataRepositoryTasks": []}

    def describe_file_systems(self, **request: Any) -> dict[str, Any]:
        return {"FileSystems": []}

    def mount_path(self, file_system_id: str, directory_path: str) -> Path:
        return Path("/nonexistent")


@pytest.fixture
def sfn() -> Iterator[Any]:
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield boto3.client("stepfunctions", region_name="us-east-1")


def _task(resource: str, parameters: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "StartAt": "Task",
        "States": {
            "Task": {"Type": "Task", "Resource": resource, "Parameters": parameters, "End": True, **extra},
            "Caught": {"Type": "Pass", "End": True},
        },
    }


TRAIN_SYNC = "arn:aws:states:::sagemaker:createTrainingJob.sync"


def test_moto_still_has_the_symbols_the_patch_replaces() -> None:
    from moto.awslambda.models import LambdaFunction
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_factory
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_factory,
    )

    assert "sagemaker" in state_task_service_factory._UNSUPPORTED_SERVICE_NAMES
    assert callable(state_task_factory.state_task_service_for)
    from moto.events.models import Rule

    assert list(inspect.signature(Rule.send_to_targets).parameters) == [
        "self",
        "original_event",
        "transform_input",
    ]
    assert list(inspect.signature(LambdaFunction.invoke).parameters) == [
        "self",
        "body",
        "request_headers",
        "response_headers",
    ]


def test_moto_parallel_and_map_still_rethrow_through_custom_error_name() -> None:
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import iteration_worker
    from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import branches_decl

    assert branches_decl.CustomErrorName.__name__ == "CustomErrorName"
    assert iteration_worker.CustomErrorName.__name__ == "CustomErrorName"


def test_a_failed_sync_job_in_a_parallel_branch_is_caught_as_states_task_failed(sfn: Any) -> None:
    branch = _task(TRAIN_SYNC, {"TrainingJobName": "in-branch"})
    del branch["States"]["Caught"]
    definition = {
        "StartAt": "Both",
        "States": {
            "Both": {
                "Type": "Parallel",
                "Branches": [branch],
                "Catch": [{"ErrorEquals": [TASK_FAILED], "ResultPath": "$.error", "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Pass", "End": True},
        },
    }
    with installed(sagemaker=ScriptedSageMaker(final="Failed", polls=0)):
        result = run_execution(sfn, definition, {})

    assert result["status"] == "SUCCEEDED"
    assert json.loads(result["output"])["error"]["Error"] == TASK_FAILED


def test_patches_are_removed_on_exit() -> None:
    from moto.awslambda.models import LambdaFunction
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_factory

    before = (state_task_factory.state_task_service_for, LambdaFunction.invoke)
    with installed(sagemaker=ScriptedSageMaker()):
        assert state_task_factory.state_task_service_for is not before[0]
    assert (state_task_factory.state_task_service_for, LambdaFunction.invoke) == before


def test_sync_training_job_waits_and_outputs_the_description(sfn: Any) -> None:
    service = ScriptedSageMaker(polls=2)
    with installed(sagemaker=service):
        result = run_execution(
            sfn,
            _task(TRAIN_SYNC, {"TrainingJobName.$": "$.name", "HyperParameters": {"lr": "0.1"}}),
            {"name": "j1"},
        )

    assert result["status"] == "SUCCEEDED"
    output = json.loads(result["output"])
    assert output["TrainingJobStatus"] == "Completed"
    assert output["CreationTime"] == 1767225600000
    assert service.jobs["j1"] == 3
    assert service.requests == [{"TrainingJobName": "j1", "HyperParameters": {"lr": "0.1"}}]


def test_failed_training_job_fails_the_state_with_states_task_failed(sfn: Any) -> None:
    with installed(sagemaker=ScriptedSageMaker(final="Failed", polls=0)):
        result = run_execution(sfn, _task(TRAIN_SYNC, {"TrainingJobName": "bad"}), {})

    assert result["status"] == "FAILED"
    assert result["error"] == TASK_FAILED
    assert json.loads(result["cause"])["FailureReason"] == "AlgorithmError: loss is NaN"


def test_throttled_create_is_retried_under_the_sagemaker_error_name(sfn: Any) -> None:
    service = ScriptedSageMaker(
        polls=0, create_errors=[_client_error("ThrottlingException", "Rate exceeded")]
    )
    retry = [{"ErrorEquals": [SAGEMAKER_API_ERROR], "IntervalSeconds": 1, "MaxAttempts": 2}]
    with installed(sagemaker=service):
        result = run_execution(sfn, _task(TRAIN_SYNC, {"TrainingJobName": "t"}, Retry=retry), {})

    assert result["status"] == "SUCCEEDED"
    assert len(service.requests) == 1


def test_a_modelled_error_fails_the_task_with_its_own_name(sfn: Any) -> None:
    # GIVEN SageMaker refuses with ResourceLimitExceeded, an error its API model declares
    service = ScriptedSageMaker(create_errors=[_client_error("ResourceLimitExceeded", "too many jobs")])
    catch = [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Caught"}]
    with installed(sagemaker=service):
        result = run_execution(sfn, _task(TRAIN_SYNC, {"TrainingJobName": "t"}, Catch=catch), {})
    # THEN the Task fails with the SDK's exception name (what a Retry matches), the code in the cause
    assert result["status"] == "SUCCEEDED"
    error = json.loads(result["output"])["error"]
    assert error["Error"] == "SageMaker.ResourceLimitExceededException"
    assert "Error Code: ResourceLimitExceeded" in error["Cause"]


@pytest.mark.parametrize("code", ["ValidationException", "ThrottlingException", "AccessDeniedException"])
def test_an_unmodelled_error_is_the_catch_all_name_with_its_code_in_the_cause(sfn: Any, code: str) -> None:
    service = ScriptedSageMaker(create_errors=[_client_error(code, "no")])
    catch = [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Caught"}]
    with installed(sagemaker=service):
        result = run_execution(sfn, _task(TRAIN_SYNC, {"TrainingJobName": "t"}, Catch=catch), {})
    error = json.loads(result["output"])["error"]
    assert error["Error"] == SAGEMAKER_API_ERROR and f"Error Code: {code};" in error["Cause"]


def test_aws_sdk_fsx_calls_reach_the_fsx_service(sfn: Any) -> None:
    fsx = ScriptedFsx()
    params = {
        "FileSystemId": "fs-1",
        "Type": "IMPORT_METADATA_FROM_REPOSITORY",
        "Paths": ["d"],
        "Report": {"Enabled": False},
    }
    with installed(fsx=fsx):
        result = run_execution(
            sfn, _task("arn:aws:states:::aws-sdk:fsx:createDataRepositoryTask", params), {}
        )

    assert result["status"] == "SUCCEEDED"
    assert json.loads(result["output"])["DataRepositoryTask"]["TaskId"] == "task-0123"
    assert fsx.requests == [params]


def test_aws_sdk_fsx_error_uses_the_step_functions_sdk_error_name(sfn: Any) -> None:
    fsx = ScriptedFsx(_client_error("DataRepositoryTaskExecuting", "a task is running"))
    with installed(fsx=fsx):
        result = run_execution(
            sfn, _task("arn:aws:states:::aws-sdk:fsx:createDataRepositoryTask", {"FileSystemId": "fs-1"}), {}
        )

    assert result["status"] == "FAILED"
    assert result["error"] == "FSx.DataRepositoryTaskExecutingException"


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    return event\n")
    return buffer.getvalue()


@pytest.fixture
def function(sfn: Any) -> str:
    iam = boto3.client("iam", region_name="us-east-1")
    role = iam.create_role(RoleName="fn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    boto3.client("lambda", region_name="us-east-1").create_function(
        FunctionName="echo", Runtime="python3.11", Role=role, Handler="app.handler", Code={"ZipFile": _zip()}
    )
    return "echo"


def test_lambda_invoke_task_runs_the_installed_invoker(sfn: Any, function: str) -> None:
    calls: list[tuple[str, Any]] = []

    def invoker(name: str, payload: dict[str, Any]) -> Any:
        calls.append((name, payload))
        return {"doubled": payload["n"] * 2}

    definition = _task("arn:aws:states:::lambda:invoke", {"FunctionName": function, "Payload.$": "$"})
    with installed(lambda_invoker=invoker):
        result = run_execution(sfn, definition, {"n": 21})

    assert result["status"] == "SUCCEEDED"
    assert json.loads(result["output"])["Payload"] == {"doubled": 42}
    assert calls == [("echo", {"n": 21})]


def test_lambda_handler_error_fails_the_state_with_its_error_type(sfn: Any, function: str) -> None:
    def invoker(name: str, payload: dict[str, Any]) -> Any:
        raise TaskFailed("LockHeld", "dataset digits is locked by run r-1")

    definition = _task("arn:aws:states:::lambda:invoke", {"FunctionName": function, "Payload": {}})
    with installed(lambda_invoker=invoker):
        result = run_execution(sfn, definition, {})

    assert result["status"] == "FAILED"
    assert result["error"] == "LockHeld"
    assert json.loads(result["cause"])["errorMessage"] == "dataset digits is locked by run r-1"


def test_lambda_invoke_api_runs_the_invoker_and_reports_function_errors(sfn: Any, function: str) -> None:
    def invoker(name: str, payload: dict[str, Any]) -> Any:
        if payload.get("fail"):
            raise ValueError("bad input: fail")
        return payload

    client = boto3.client("lambda", region_name="us-east-1")
    with installed(lambda_invoker=invoker):
        ok = client.invoke(FunctionName=function, Payload=json.dumps({"a": 1}))
        bad = client.invoke(FunctionName=function, Payload=json.dumps({"fail": True}))

    assert json.loads(ok["Payload"].read()) == {"a": 1}
    assert "FunctionError" not in ok
    assert bad["FunctionError"] == "Unhandled"
    assert json.loads(bad["Payload"].read())["errorType"] == "ValueError"


def test_an_event_invoke_runs_on_a_thread_of_its_own_and_a_dry_run_not_at_all(
    sfn: Any, function: str
) -> None:
    # GIVEN an invoker that records the thread it runs on
    threads: list[str] = []
    ran = threading.Event()

    def invoker(name: str, payload: dict[str, Any]) -> Any:
        threads.append(threading.current_thread().name)
        ran.set()

    client = boto3.client("lambda", region_name="us-east-1")
    with installed(lambda_invoker=invoker):
        dry = client.invoke(FunctionName=function, InvocationType="DryRun", Payload=b"{}")
        queued = client.invoke(FunctionName=function, InvocationType="Event", Payload=b"{}")
        assert ran.wait(30)
    # THEN the Event invocation ran asynchronously, not on the caller's thread, and the dry run never ran
    assert (dry["StatusCode"], queued["StatusCode"]) == (204, 202)
    assert threads == [f"lambda-{function}"]


def test_an_eventbridge_rule_with_a_lambda_target_invokes_it_with_the_event(sfn: Any, function: str) -> None:
    events = boto3.client("events", region_name="us-east-1")
    events.put_rule(Name="done", EventPattern=json.dumps({"source": ["aws.sagemaker"]}))
    events.put_targets(
        Rule="done",
        Targets=[{"Id": "fn", "Arn": f"arn:aws:lambda:us-east-1:123456789012:function:{function}"}],
    )
    calls: list[tuple[str, Any]] = []

    with installed(lambda_invoker=lambda name, payload: calls.append((name, payload))):
        events.put_events(
            Entries=[{"Source": "aws.sagemaker", "DetailType": "Done", "Detail": json.dumps({"n": 1})}]
        )
        deadline = time.monotonic() + 10
        while not calls and time.monotonic() < deadline:
            time.sleep(0.05)

    assert [name for name, _ in calls] == [function]
    assert calls[0][1]["detail"] == {"n": 1}
    assert calls[0][1]["detail-type"] == "Done"


def test_a_schedule_rule_receives_no_bus_events(sfn: Any, function: str) -> None:
    # GIVEN a schedule-only rule and a pattern rule, both targeting the function
    events = boto3.client("events", region_name="us-east-1")
    events.put_rule(Name="every-minute", ScheduleExpression="rate(1 minute)")
    events.put_rule(Name="done", EventPattern=json.dumps({"source": ["aws.sagemaker"]}))
    for rule in ("every-minute", "done"):
        events.put_targets(
            Rule=rule,
            Targets=[{"Id": "fn", "Arn": f"arn:aws:lambda:us-east-1:123456789012:function:{function}"}],
        )
    calls: list[tuple[str, Any]] = []

    # WHEN an event goes on the bus
    with installed(lambda_invoker=lambda name, payload: calls.append((name, payload))):
        events.put_events(Entries=[{"Source": "aws.sagemaker", "DetailType": "Done", "Detail": "{}"}])
        time.sleep(1.0)

    # THEN only the pattern rule delivers it (moto's empty pattern would match every event)
    assert len(calls) == 1
