"""How a Task state calls an embedded service: boto3's method and botocore's operation names, the
gate (as the execution's role), a ClientError as the Task failure, the response as Step Functions JSON."""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from retrain.embedded.stepfunctions.errors import TaskFailed, sagemaker_api_failure, sdk_api_failure
from retrain.embedded.stepfunctions.services import ACTIVE


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
        gate = ACTIVE.gate
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
