"""Make moto's SageMaker HTTP API (what boto3 with AWS_ENDPOINT_URL reaches) answer from the emulator.

moto's `SageMakerResponse` has one method per operation; the emulator's operations replace those
methods in this one place (ADDED ones moto 5.2.5 lacks are added: its dispatcher looks operations up
as methods of that class). If a moto upgrade renames or removes one, `install_api` raises instead of
letting the stock moto answer (which records jobs as Completed at once, and endpoints InService with
canned answers). SageMaker Runtime's InvokeEndpoint (`SageMakerRuntimeResponse`) goes to the emulator's
endpoints the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

import moto
from botocore.exceptions import ClientError
from moto.core.responses import ActionResult, BaseResponse
from moto.sagemaker.exceptions import SagemakerClientError
from moto.sagemaker.responses import SageMakerResponse
from moto.sagemakerruntime.responses import SageMakerRuntimeResponse

REPLACED = (
    "create_training_job",
    "describe_training_job",
    "list_training_jobs",
    "create_processing_job",
    "describe_processing_job",
    "stop_processing_job",
    "list_processing_jobs",
    "create_hyper_parameter_tuning_job",
    "describe_hyper_parameter_tuning_job",
    "list_hyper_parameter_tuning_jobs",
    "create_model_package_group",
    "describe_model_package_group",
    "create_model_package",
    "describe_model_package",
    "update_model_package",
    "list_model_packages",
    "list_model_package_groups",
    "create_model",
    "describe_model",
    "delete_model",
    "create_endpoint_config",
    "describe_endpoint_config",
    "delete_endpoint_config",
    "create_endpoint",
    "describe_endpoint",
    "list_endpoints",
    "delete_endpoint",
    "list_tags",
)
ADDED = (
    "stop_training_job",
    "list_training_jobs_for_hyper_parameter_tuning_job",
    "stop_hyper_parameter_tuning_job",
)
OPERATIONS = REPLACED + ADDED
TESTED_MOTO_VERSION = "5.2.5"


def _handler(emulator: Any, operation: str) -> Callable[[SageMakerResponse], ActionResult]:
    def handle(self: SageMakerResponse) -> ActionResult:
        body = self.body.decode() if isinstance(self.body, bytes) else self.body
        params = json.loads(body) if body else {}
        try:
            result = getattr(emulator, operation)(**params)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise SagemakerClientError(
                error.get("Code", "ValidationException"), error.get("Message", str(exc))
            ) from exc
        return ActionResult(result)

    handle.__name__ = operation
    return handle


def _invoke_endpoint(emulator: Any) -> Callable[[SageMakerRuntimeResponse], Any]:
    def handle(self: SageMakerRuntimeResponse) -> Any:
        name = unquote(self.path.split("/")[2])  # /endpoints/{EndpointName}/invocations
        body = self.raw_body if isinstance(self.raw_body, bytes) else str(self.raw_body or "").encode()
        answer = emulator.invoke_endpoint(
            EndpointName=name,
            Body=body,
            ContentType=self.headers.get("Content-Type"),
            Accept=self.headers.get("Accept"),
        )
        # moto's dispatcher takes the status from the headers' "status" entry.
        return answer.status, {**answer.headers, "status": str(answer.status)}, answer.body

    handle.__name__ = "invoke_endpoint"
    return handle


def install_api(emulator: Any) -> Callable[[], None]:
    """Route moto's SageMaker operations listed in OPERATIONS, and InvokeEndpoint, to `emulator`; returns
    the undo function."""
    missing = [op for op in REPLACED if not callable(getattr(SageMakerResponse, op, None))]
    if not callable(getattr(SageMakerRuntimeResponse, "invoke_endpoint", None)):
        missing.append("(SageMakerRuntimeResponse.)invoke_endpoint")
    if not callable(getattr(BaseResponse, "call_action", None)):
        missing.append("call_action (the dispatcher)")
    if missing:
        raise RuntimeError(
            f"moto {moto.__version__} has no SageMakerResponse.{', '.join(missing)}; the embedded "
            f"runtime was written against moto {TESTED_MOTO_VERSION}: pin that version or update "
            "retrain/embedded/sagemaker/api.py"
        )
    lacking = [op for op in (*OPERATIONS, "invoke_endpoint") if not callable(getattr(emulator, op, None))]
    if lacking:
        raise TypeError(f"{type(emulator).__name__} lacks the SageMaker operations {lacking}")
    originals = {op: SageMakerResponse.__dict__[op] for op in OPERATIONS if op in SageMakerResponse.__dict__}
    for op in OPERATIONS:
        setattr(SageMakerResponse, op, _handler(emulator, op))
    original_invoke = SageMakerRuntimeResponse.__dict__["invoke_endpoint"]
    SageMakerRuntimeResponse.invoke_endpoint = _invoke_endpoint(emulator)  # type: ignore[method-assign,assignment]
    # An image body is not UTF-8 text, which moto decodes every body as unless told not to.
    SageMakerRuntimeResponse.use_raw_body = True

    def uninstall() -> None:
        SageMakerRuntimeResponse.invoke_endpoint = original_invoke  # type: ignore[method-assign]
        del SageMakerRuntimeResponse.use_raw_body
        for op in OPERATIONS:
            if op in originals:
                setattr(SageMakerResponse, op, originals[op])
            else:
                delattr(SageMakerResponse, op)

    return uninstall


@contextmanager
def api_installed(emulator: Any) -> Iterator[None]:
    """install_api for the length of a with-block."""
    uninstall = install_api(emulator)
    try:
        yield
    finally:
        uninstall()
