"""The embedded services Task states and Lambda invokes reach, as protocols (boto3's shapes), and the
ones :func:`retrain.embedded.stepfunctions.integrations.installed` has installed in this process."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

LambdaInvoker = Callable[[str, dict[str, Any]], Any]


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


class Installed:
    """What the integrations reach while installed; None outside ``installed()``."""

    lambda_invoker: LambdaInvoker | None = None
    sagemaker: SageMakerService | None = None
    fsx: FsxService | None = None
    gate: TaskGate | None = None
    on_execution_end: Callable[[dict[str, Any]], None] | None = None
    # The `duplicate-events` fault: seconds after which EventBridge delivers each event again, or None.
    redelivery: Callable[[], float | None] | None = None


ACTIVE = Installed()

# The role of the execution whose state runs on this thread (Parallel branches run on threads of their own,
# and each of their states sets it again).
ACTING = threading.local()
