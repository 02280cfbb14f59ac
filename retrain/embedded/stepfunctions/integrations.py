"""The Step Functions integrations and the Lambda invoke path that moto 5.2.5 lacks, patched into moto.

moto's ASL interpreter refuses ``arn:aws:states:::sagemaker:*`` (it is in its unsupported set), sends
``aws-sdk:fsx`` calls to a backend without data repository tasks, and invokes Lambda code only in Docker.
``installed()`` patches these symbols of the pinned moto, in this process (so it works under ``mock_aws``
and in a ``ThreadedMotoServer`` thread alike):

- ``state_task_factory.state_task_service_for``: ``sagemaker`` Task states run against a
  :class:`SageMakerService` (create, then for ``.sync`` poll describe until terminal, failing the state
  with the error names and causes Step Functions uses); ``aws-sdk:fsx:*`` and ``aws-sdk:sagemaker:*``
  reach the :class:`FsxService` / :class:`SageMakerService` when they implement the call;
- ``LambdaFunction.invoke``: every Lambda invoke moto serves (the Invoke API, ``lambda:invoke`` and
  function-ARN Task states, S3 notifications) runs ``lambda_invoker(function_name, payload)``;
- ``events.models.Rule.send_to_targets``: EventBridge rules with Lambda targets (moto raises for them)
  invoke the function asynchronously with the event or the target's Input/InputPath/InputTransformer;
- ``CustomErrorName`` in moto's Parallel and Map states: a branch's ``States.*`` error is re-raised as
  such instead of crashing the execution;
- ``BaseExecutionWorkerCommunication.terminated``: an ended execution is reported as Step Functions'
  "Execution Status Change" event (``on_execution_end``), as EventBridge delivers it on AWS;
- with a :class:`TaskGate`, every Task acts as the state machine's role: the calls served in-process
  are held against the API contract and the role's policies (``.sync`` with what Step Functions does
  behind the scenes), and the calls moto's interpreter sends over HTTP are signed with the role's
  credentials (``boto_client_for``), so the gated server authorises them.

``tests/unit/embedded/test_integrations.py`` asserts the patched symbols exist with the shapes relied on,
so a moto upgrade that moves them fails loudly there.
"""

from __future__ import annotations

import copy
import datetime
import functools
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from botocore.exceptions import ClientError

LOG = logging.getLogger(__name__)

LambdaInvoker = Callable[[str, dict[str, Any]], Any]

# Terminal statuses of the SageMaker jobs a .sync Task waits for, by create action.
_SYNC_JOBS: Final[dict[str, tuple[str, str, str]]] = {
    # action: (describe method, name parameter/response key, status key)
    "create_training_job": ("describe_training_job", "TrainingJobName", "TrainingJobStatus"),
    "create_processing_job": ("describe_processing_job", "ProcessingJobName", "ProcessingJobStatus"),
    "create_hyper_parameter_tuning_job": (
        "describe_hyper_parameter_tuning_job",
        "HyperParameterTuningJobName",
        "HyperParameterTuningJobStatus",
    ),
    "create_transform_job": ("describe_transform_job", "TransformJobName", "TransformJobStatus"),
}
_SUCCEEDED: Final = "Completed"
_FAILED_TERMINAL: Final[frozenset[str]] = frozenset({"Failed", "Stopped"})
SAGEMAKER_API_ERROR: Final = "SageMaker.AmazonSageMakerException"
TASK_FAILED: Final = "States.TaskFailed"
SYNC_POLL_SECONDS: Final = 0.5

# Pascal-cased service names Step Functions puts in front of aws-sdk error names.
_SDK_ERROR_SERVICE_NAMES: Final[dict[str, str]] = {
    "fsx": "FSx",
    "sagemaker": "SageMaker",
    "dynamodb": "DynamoDb",
    "sfn": "Sfn",
    "s3": "S3",
    "sqs": "Sqs",
    "sns": "Sns",
}


class TaskFailed(Exception):  # noqa: N818 - the name the interface fixes
    """Fails the Task state that raised it with this Error and Cause (Retry/Catch match ``error``)."""

    def __init__(self, error: str, cause: str) -> None:
        super().__init__(f"{error}: {cause}")
        self.error = error
        self.cause = cause


@runtime_checkable
class SageMakerService(Protocol):
    """The SageMaker calls a state machine makes, with boto3's request and response shapes."""

    def create_training_job(self, **request: Any) -> dict[str, Any]: ...
    def describe_training_job(self, **request: Any) -> dict[str, Any]: ...
    def create_processing_job(self, **request: Any) -> dict[str, Any]: ...
    def describe_processing_job(self, **request: Any) -> dict[str, Any]: ...
    def create_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]: ...
    def describe_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]: ...


class TaskGate(Protocol):
    """Authorises a Task's request as the state machine's role (raises ``RequestRefused``-likes with
    ``client_error(operation)``), and signs the calls moto's interpreter makes for it."""

    def check_task(
        self, role_arn: str, service: str, operation: str, params: dict[str, Any], *, sync: bool
    ) -> None: ...
    def credentials(self, role_arn: str) -> tuple[str, str]: ...


@runtime_checkable
class FsxService(Protocol):
    """FSx for Lustre file systems and data repository tasks, with boto3's shapes."""

    def create_data_repository_task(self, **request: Any) -> dict[str, Any]: ...
    def describe_data_repository_tasks(self, **request: Any) -> dict[str, Any]: ...
    def describe_file_systems(self, **request: Any) -> dict[str, Any]: ...
    def mount_path(self, file_system_id: str, directory_path: str) -> Path: ...


def snake_case(action: str) -> str:
    """``createTrainingJob`` -> ``create_training_job`` (boto3 method names)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", action).lower()


def to_sfn_json(value: Any) -> Any:
    """A boto3 response as Step Functions hands it to the next state: timestamps as epoch milliseconds."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, Mapping):
        return {key: to_sfn_json(item) for key, item in value.items() if key != "ResponseMetadata"}
    if isinstance(value, list | tuple):
        return [to_sfn_json(item) for item in value]
    return value


@functools.cache
def _sagemaker_modeled_errors() -> frozenset[str]:
    """The error codes SageMaker's API model declares (ResourceLimitExceeded, ResourceInUse, ...)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return frozenset(shape for shape in model.shape_names if model.shape_for(shape).metadata.get("exception"))


def sagemaker_error_name(code: str) -> str:
    """The error a SageMaker Task state fails with: a modelled error by its SDK exception class
    (SageMaker.ResourceLimitExceededException); every other one (ValidationException, throttling,
    AccessDeniedException) as SageMaker.AmazonSageMakerException, the cause telling them apart."""
    if code in _sagemaker_modeled_errors():
        return f"SageMaker.{code}" if code.endswith("Exception") else f"SageMaker.{code}Exception"
    return SAGEMAKER_API_ERROR


def sagemaker_api_failure(error: ClientError) -> TaskFailed:
    """The Error/Cause Step Functions' optimized SageMaker integration reports for a failed API call."""
    err = error.response.get("Error", {})
    meta = error.response.get("ResponseMetadata", {})
    code = str(err.get("Code", "Unknown"))
    cause = (
        f"{err.get('Message', '')} (Service: AmazonSageMaker; "
        f"Status Code: {meta.get('HTTPStatusCode', 400)}; "
        f"Error Code: {code}; Request ID: {meta.get('RequestId', uuid.uuid4())}; "
        "Proxy: null)"
    )
    return TaskFailed(sagemaker_error_name(code), cause)


def sdk_api_failure(service: str, error: ClientError) -> TaskFailed:
    """The Error/Cause of an ``aws-sdk:<service>:<action>`` Task whose call failed."""
    code = str(error.response.get("Error", {}).get("Code", "Unknown"))
    if not code.endswith("Exception"):
        code += "Exception"
    pascal = _SDK_ERROR_SERVICE_NAMES.get(service.lower(), service[:1].upper() + service[1:])
    meta = error.response.get("ResponseMetadata", {})
    cause = (
        f"{error.response.get('Error', {}).get('Message', '')} (Service: {pascal}, "
        f"Status Code: {meta.get('HTTPStatusCode', 400)}, Request ID: {meta.get('RequestId', uuid.uuid4())})"
    )
    return TaskFailed(f"{pascal}.{code}", cause)


def sync_job_outcome(action: str, description: Mapping[str, Any]) -> dict[str, Any] | None:
    """None while the job runs; its description once Completed; raises TaskFailed if Failed/Stopped."""
    _, _, status_key = _SYNC_JOBS[action]
    status = description.get(status_key)
    if status == _SUCCEEDED:
        return dict(to_sfn_json(description))
    if status in _FAILED_TERMINAL:
        raise TaskFailed(TASK_FAILED, json.dumps(to_sfn_json(description), separators=(",", ":")))
    return None


def operation_name(action: str) -> str:
    """``create_training_job`` / ``createTrainingJob`` -> ``CreateTrainingJob`` (botocore's name)."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"_", action))


def call_service(
    service: object,
    action: str,
    request: dict[str, Any],
    *,
    api: str,
    role_arn: str | None = None,
    sync: bool = False,
) -> dict[str, Any]:
    """Call ``service.<action>(**request)`` as ``role_arn`` (gated when a gate is installed); a
    ClientError becomes the Task failure Step Functions reports."""
    method = getattr(service, action, None)
    if method is None:
        raise TaskFailed(
            "States.Runtime",
            f"The embedded {api} service does not implement {action!r}; add it to the emulator.",
        )
    try:
        gate = _ACTIVE.gate
        if gate is not None and role_arn is not None:
            try:
                gate.check_task(role_arn, api, operation_name(action), request, sync=sync)
            except Exception as refused:
                if not hasattr(refused, "client_error"):
                    raise
                raise refused.client_error(operation_name(action)) from None
        response = method(**request)
    except ClientError as exc:
        raise (sagemaker_api_failure(exc) if api == "sagemaker" else sdk_api_failure(api, exc)) from exc
    return dict(to_sfn_json(response or {}))


def execution_role(env: Any) -> str | None:
    """The role an execution acts as (its state machine's), from the context object."""
    try:
        return str(env.states.context_object.context_object_data["Execution"]["RoleArn"]) or None
    except (AttributeError, KeyError, TypeError):
        return None


class _Installed:
    lambda_invoker: LambdaInvoker | None = None
    sagemaker: SageMakerService | None = None
    fsx: FsxService | None = None
    gate: TaskGate | None = None
    on_execution_end: Callable[[dict[str, Any]], None] | None = None


_ACTIVE = _Installed()
_LOCK = threading.Lock()
# The role of the execution whose state runs on this thread (Parallel branches run on threads of their own,
# and each of their states sets it again).
_ACTING = threading.local()


def _header(headers: Any, name: str) -> str | None:
    if headers is None:
        return None
    for key in headers:
        if str(key).lower() == name:
            value = headers[key]
            return str(value) if value is not None else None
    return None


def lambda_error_payload(exc: BaseException) -> dict[str, Any]:
    """The payload Lambda returns for an unhandled handler error (Step Functions reads ``errorType``)."""
    if isinstance(exc, TaskFailed):
        return {"errorType": exc.error, "errorMessage": exc.cause}
    return {"errorType": type(exc).__name__, "errorMessage": str(exc), "stackTrace": []}


def _run_invoker(function_name: str, payload: dict[str, Any]) -> tuple[bytes, bool]:
    invoker = _ACTIVE.lambda_invoker
    if invoker is None:
        raise RuntimeError("no Lambda runtime is installed")
    try:
        result = invoker(function_name, payload)
    except Exception as exc:
        LOG.info("function %s failed: %s", function_name, exc)
        return json.dumps(lambda_error_payload(exc)).encode(), True
    return json.dumps(result).encode(), False


def _patched_lambda_invoke(
    original: Callable[..., Any],
) -> Callable[[Any, Any, Any, Any], str | bytes]:
    def invoke(fn: Any, body: Any, request_headers: Any, response_headers: Any) -> str | bytes:
        if _ACTIVE.lambda_invoker is None:
            return original(fn, body, request_headers, response_headers)  # type: ignore[no-any-return]
        if isinstance(body, bytes | bytearray):
            body = body.decode()
        payload = json.loads(body) if isinstance(body, str) and body else (body or {})
        invocation_type = _header(request_headers, "x-amz-invocation-type") or "RequestResponse"
        if invocation_type == "DryRun":
            return b""
        if invocation_type == "Event":
            threading.Thread(
                target=_run_invoker, args=(fn.function_name, payload), name=f"lambda-{fn.function_name}"
            ).start()
            return b""
        result, errored = _run_invoker(fn.function_name, payload)
        if errored:
            response_headers["x-amz-function-error"] = "Unhandled"
        return result

    return invoke


def _task_classes() -> tuple[type, type]:
    """The moto Task-state classes for sagemaker and aws-sdk, built on moto's own base classes."""
    from moto.stepfunctions.parser.api import HistoryEventType, TaskFailedEventDetails
    from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import (
        CustomErrorName,
    )
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
        FailureEvent,
        FailureEventException,
    )
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import (
        StatesErrorName,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_aws_sdk,
        state_task_service_callback,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import (
        ResourceCondition,
    )
    from moto.stepfunctions.parser.asl.eval.event import event_detail

    event_details: Any = event_detail.EventDetails
    base_sdk: Any = state_task_service_aws_sdk.StateTaskServiceAwsSdk
    base_callback: Any = state_task_service_callback.StateTaskServiceCallback
    sync: Any = ResourceCondition.Sync
    wait_for_token: Any = ResourceCondition.WaitForTaskToken

    def failure(task: Any, env: Any, exc: TaskFailed) -> Any:
        return FailureEvent(
            env=env,
            error_name=(
                StatesErrorName.from_name(exc.error)
                if exc.error.startswith("States.")
                else CustomErrorName(exc.error)
            ),
            event_type=HistoryEventType.TaskFailed,
            event_details=event_details(
                taskFailedEventDetails=TaskFailedEventDetails(
                    error=exc.error,
                    cause=exc.cause,
                    resource=task._get_sfn_resource(),
                    resourceType=task._get_sfn_resource_type(),
                )
            ),
        )

    class FailsAsTheService:
        """A TaskFailed raised by an embedded service fails the state with the service's error name."""

        def _from_error(self, env: Any, ex: Exception) -> Any:
            if isinstance(ex, TaskFailed):
                return failure(self, env, ex)
            return super()._from_error(env=env, ex=ex)  # type: ignore[misc]

    class SageMakerTask(FailsAsTheService, base_callback):  # type: ignore[misc]
        """``arn:aws:states:::sagemaker:<action>[.sync]`` against the installed SageMakerService."""

        def __init__(self) -> None:
            # moto 5.2.5's _eval_integration_pattern dereferences the callback endpoint unconditionally,
            # which exists only when WaitForTaskToken is among the supported patterns.
            super().__init__(supported_integration_patterns={sync, wait_for_token})

        def _get_supported_parameters(self) -> set[str]:
            return set()  # every parameter passes through, as the service validates its own request

        def _eval_service_task(
            self,
            env: Any,
            resource_runtime_part: Any,
            normalised_parameters: dict[str, Any],
            state_credentials: Any,
        ) -> None:
            service = _ACTIVE.sagemaker
            if service is None:
                raise TaskFailed(
                    "States.Runtime", "no SageMaker service is installed in the embedded runtime"
                )
            env.stack.append(
                call_service(
                    service,
                    snake_case(self.resource.api_action),
                    normalised_parameters,
                    api="sagemaker",
                    role_arn=execution_role(env),
                    sync=self.resource.condition == sync,
                )
            )

        def _build_sync_resolver(
            self,
            env: Any,
            resource_runtime_part: Any,
            normalised_parameters: dict[str, Any],
            state_credentials: Any,
        ) -> Callable[[], Any]:
            action = snake_case(self.resource.api_action)
            if action not in _SYNC_JOBS:
                raise TaskFailed(
                    "States.Runtime", f"sagemaker:{self.resource.api_action}.sync is not supported"
                )
            env.stack.pop()
            describe, name_key, _ = _SYNC_JOBS[action]
            name = normalised_parameters[name_key]
            service = _ACTIVE.sagemaker

            def resolve() -> dict[str, Any] | None:
                try:
                    return sync_job_outcome(
                        action, call_service(service, describe, {name_key: name}, api="sagemaker")
                    )
                except TaskFailed as exc:
                    raise FailureEventException(failure(self, env, exc)) from exc

            return resolve

    class AwsSdkTask(FailsAsTheService, base_sdk):  # type: ignore[misc]
        """``aws-sdk:*``: fsx and sagemaker calls reach the installed services; others keep moto's path."""

        def _embedded_service(self) -> object | None:
            api = self.resource.api_name.lower()
            service: object | None = {"fsx": _ACTIVE.fsx, "sagemaker": _ACTIVE.sagemaker}.get(api)
            if service is not None and hasattr(service, self._get_boto_service_action()):
                return service
            return None

        def _eval_service_task(
            self,
            env: Any,
            resource_runtime_part: Any,
            normalised_parameters: dict[str, Any],
            state_credentials: Any,
        ) -> None:
            service = self._embedded_service()
            if service is None:
                super()._eval_service_task(
                    env, resource_runtime_part, normalised_parameters, state_credentials
                )
                return
            env.stack.append(
                call_service(
                    service,
                    self._get_boto_service_action(),
                    normalised_parameters,
                    api=self.resource.api_name.lower(),
                    role_arn=execution_role(env),
                )
            )

    return SageMakerTask, AwsSdkTask


EXECUTION_STATUS_CHANGE: Final = "Step Functions Execution Status Change"


def _millis(moment: Any) -> int | None:
    return int(moment.timestamp() * 1000) if isinstance(moment, datetime.datetime) else None


def execution_status_event(execution: Any) -> dict[str, Any]:
    """The PutEvents entry Step Functions sends when an execution ends (source aws.states)."""
    status = str(getattr(execution.exec_status, "value", execution.exec_status))  # moto's enum, or its text
    detail = {
        "executionArn": execution.exec_arn,
        "stateMachineArn": execution.state_machine_arn,
        "name": execution.name,
        "status": status,
        "startDate": _millis(execution.start_date),
        "stopDate": _millis(execution.stop_date),
        "input": json.dumps(execution.input_data),
        "output": json.dumps(execution.output) if execution.output is not None else None,
        "error": execution.error,
        "cause": execution.cause,
    }
    return {
        "Source": "aws.states",
        "DetailType": EXECUTION_STATUS_CHANGE,
        "Detail": json.dumps(detail, default=str),
        "Resources": [execution.exec_arn],
    }


def _reporting_end(original: Callable[..., None]) -> Callable[..., None]:
    def terminated(self: Any) -> None:
        original(self)
        publish = _ACTIVE.on_execution_end
        if publish is not None:
            try:
                publish(execution_status_event(self.execution))
            except Exception:
                LOG.exception("could not report the end of execution %s", self.execution.exec_arn)

    return terminated


def target_input(target: Mapping[str, Any], event: dict[str, Any]) -> Any:
    """What EventBridge delivers to a target: the event, or the target's Input / InputPath / transformer."""
    if target.get("Input"):
        return json.loads(str(target["Input"]))
    if target.get("InputPath"):
        value: Any = event
        for part in str(target["InputPath"]).lstrip("$").strip(".").split("."):
            value = value.get(part) if part and isinstance(value, dict) else value
        return value
    if target.get("InputTransformer"):
        from moto.events import utils as events_utils

        parser: Any = events_utils.EventTemplateParser
        transformer = target["InputTransformer"]
        rendered = parser.parse(
            input_template=transformer.get("InputTemplate"),
            input_paths_map=transformer.get("InputPathsMap", {}),
            event=event,
        )
        return json.loads(rendered) if isinstance(rendered, str) else rendered
    return event


def _patched_send_to_targets(original: Callable[..., None]) -> Callable[..., None]:
    """moto's Rule.send_to_targets knows SQS, logs and buses but raises for Lambda targets (PutEvents and
    S3 -> EventBridge both go through it). Lambda targets are invoked asynchronously, as EventBridge does."""

    def send_to_targets(rule: Any, original_event: Any, transform_input: bool = True) -> None:
        if not rule.event_pattern.get_pattern():
            # A rule without an event pattern is a schedule: EventBridge never hands it bus events
            # (moto's empty pattern matches every event). The embedded scheduler fires it.
            return
        lambda_targets = [t for t in rule.targets if ":lambda:" in str(t.get("Arn", ""))]
        if lambda_targets and _ACTIVE.lambda_invoker is not None:
            if rule.event_pattern.matches_event(original_event):
                for target in lambda_targets:
                    payload = target_input(target, original_event)
                    name = str(target["Arn"]).rsplit(":function:", 1)[-1]
                    threading.Thread(
                        target=_run_invoker, args=(name, payload), daemon=True, name=f"rule-{rule.name}"
                    ).start()
            others = copy.copy(rule)
            others.targets = [t for t in rule.targets if t not in lambda_targets]
            original(others, original_event, transform_input)
            return
        original(rule, original_event, transform_input)

    return send_to_targets


def _error_name_modules() -> list[Any]:
    """moto's Parallel and Map states re-raise a branch's error as CustomErrorName, which refuses the
    ``States.*`` names (``States.TaskFailed`` from a .sync job) and crashes the whole execution."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import iteration_worker
    from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import branches_decl

    return [branches_decl, iteration_worker]


def _rethrown_error_name(error_name: str) -> Any:
    """The error name a Parallel/Map state re-raises: States.* as moto's StatesErrorName."""
    from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName

    if error_name.startswith("States."):
        return StatesErrorName.from_name(error_name)
    return CustomErrorName(error_name=error_name)


def _boto_client_modules() -> list[Any]:
    """The modules of moto's interpreter that build their clients with ``boto_client_for``."""
    import importlib
    import pkgutil

    from moto.stepfunctions.parser.asl.component.state.exec import state_task

    found = []
    for info in pkgutil.walk_packages(state_task.__path__, state_task.__name__ + "."):
        module = importlib.import_module(info.name)
        if hasattr(module, "boto_client_for"):
            found.append(module)
    return found


def _signed_as_the_role(original: Callable[..., Any]) -> Callable[..., Any]:
    """``boto_client_for`` that signs with the acting execution's role (moto signs every call as 'ak')."""

    def boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        gate, role = _ACTIVE.gate, getattr(_ACTING, "role", None)
        client = original(region, service, state_credentials)
        if gate is None or role is None:
            return client
        key, secret = gate.credentials(role)
        import boto3

        return boto3.client(  # type: ignore[call-overload]
            service,
            region_name=region,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            endpoint_url=client.meta.endpoint_url,
            config=client.meta.config,
        )

    return boto_client_for


def _acting_state(original: Callable[..., Any]) -> Callable[..., Any]:
    def _eval_state(self: Any, env: Any) -> Any:
        _ACTING.role = execution_role(env)
        return original(self, env)

    return _eval_state


@contextmanager
def installed(
    *,
    lambda_invoker: LambdaInvoker | None = None,
    sagemaker: SageMakerService | None = None,
    fsx: FsxService | None = None,
    gate: TaskGate | None = None,
    on_execution_end: Callable[[dict[str, Any]], None] | None = None,
) -> Iterator[None]:
    """Patch moto in this process so Task states and Lambda invokes reach the embedded services (and, with a
    gate, act as the state machine's role)."""
    from moto.awslambda import models as lambda_models
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_factory as factory

    state_task_factory: Any = factory
    lambda_function: Any = lambda_models.LambdaFunction

    if not _LOCK.acquire(blocking=False):
        raise RuntimeError("the embedded integrations are already installed in this process; nest nothing")
    original_factory = state_task_factory.state_task_service_for
    original_invoke = lambda_function.invoke
    sagemaker_task, aws_sdk_task = _task_classes()

    def service_for(service_name: str) -> Any:
        if service_name == "sagemaker":
            return sagemaker_task()
        if service_name == "aws-sdk":
            return aws_sdk_task()
        return original_factory(service_name)

    from moto.events import models as events_models

    rule_class: Any = events_models.Rule
    original_send = rule_class.send_to_targets
    error_name_modules = _error_name_modules()
    original_error_names = [module.CustomErrorName for module in error_name_modules]
    from moto.stepfunctions.parser.asl.component.state.exec.execute_state import ExecutionState

    execution_state: Any = ExecutionState
    original_eval_state = execution_state._eval_state
    client_modules = _boto_client_modules()
    original_clients = [module.boto_client_for for module in client_modules]
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication

    communication: Any = BaseExecutionWorkerCommunication
    original_terminated = communication.terminated
    _ACTIVE.lambda_invoker, _ACTIVE.sagemaker, _ACTIVE.fsx = lambda_invoker, sagemaker, fsx
    _ACTIVE.gate, _ACTIVE.on_execution_end = gate, on_execution_end
    communication.terminated = _reporting_end(original_terminated)
    state_task_factory.state_task_service_for = service_for
    lambda_function.invoke = _patched_lambda_invoke(original_invoke)
    rule_class.send_to_targets = _patched_send_to_targets(original_send)
    for module in error_name_modules:
        module.CustomErrorName = _rethrown_error_name
    execution_state._eval_state = _acting_state(original_eval_state)
    for module, original_client in zip(client_modules, original_clients, strict=True):
        module.boto_client_for = _signed_as_the_role(original_client)
    try:
        yield
    finally:
        state_task_factory.state_task_service_for = original_factory
        lambda_function.invoke = original_invoke
        rule_class.send_to_targets = original_send
        for module, original in zip(error_name_modules, original_error_names, strict=True):
            module.CustomErrorName = original
        execution_state._eval_state = original_eval_state
        communication.terminated = original_terminated
        _ACTIVE.on_execution_end = None
        for module, original_client in zip(client_modules, original_clients, strict=True):
            module.boto_client_for = original_client
        _ACTIVE.lambda_invoker = _ACTIVE.sagemaker = _ACTIVE.fsx = _ACTIVE.gate = None
        _LOCK.release()
