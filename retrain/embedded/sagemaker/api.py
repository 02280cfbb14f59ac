"""Make moto's SageMaker HTTP API (what boto3 with AWS_ENDPOINT_URL reaches) answer from the emulator.

moto's `SageMakerResponse` has one method per operation; the emulator's operations replace those
methods in this one place (ADDED ones moto 5.2.5 lacks are added: its dispatcher looks operations up
as methods of that class). If a moto upgrade renames or removes one, `install_api` raises instead of
letting the stock moto answer (which records jobs as Completed at once).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import moto
from botocore.exceptions import ClientError
from moto.core.responses import ActionResult, BaseResponse
from moto.sagemaker.exceptions import SagemakerClientError
from moto.sagemaker.responses import SageMakerResponse

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


def install_api(emulator: Any) -> Callable[[], None]:
    """Route moto's SageMaker operations listed in OPERATIONS to `emulator`; returns the undo function."""
    missing = [op for op in REPLACED if not callable(getattr(SageMakerResponse, op, None))]
    if not callable(getattr(BaseResponse, "call_action", None)):
        missing.append("call_action (the dispatcher)")
    if missing:
        raise RuntimeError(
            f"moto {moto.__version__} has no SageMakerResponse.{', '.join(missing)}; the embedded "
            f"runtime was written against moto {TESTED_MOTO_VERSION}: pin that version or update "
            "retrain/embedded/sagemaker/api.py"
        )
    lacking = [op for op in OPERATIONS if not callable(getattr(emulator, op, None))]
    if lacking:
        raise TypeError(f"{type(emulator).__name__} lacks the SageMaker operations {lacking}")
    originals = {op: SageMakerResponse.__dict__[op] for op in OPERATIONS if op in SageMakerResponse.__dict__}
    for op in OPERATIONS:
        setattr(SageMakerResponse, op, _handler(emulator, op))

    def uninstall() -> None:
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
