"""The Task states patched into moto's ASL interpreter: ``arn:aws:states:::sagemaker:<action>[.sync]``
against the installed SageMaker service, ``aws-sdk:fsx|sagemaker:*`` against the installed services (other
``aws-sdk`` calls keep moto's path), and a :class:`TaskFailed` failing the state as the service would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from retrain.embedded.stepfunctions.calls import call_service, execution_role, snake_case
from retrain.embedded.stepfunctions.errors import TaskFailed
from retrain.embedded.stepfunctions.services import ACTIVE
from retrain.embedded.stepfunctions.sync import SYNC_JOBS, sync_job_outcome


def task_classes() -> tuple[type, type]:
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
            service = ACTIVE.sagemaker
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
            if action not in SYNC_JOBS:
                raise TaskFailed(
                    "States.Runtime", f"sagemaker:{self.resource.api_action}.sync is not supported"
                )
            env.stack.pop()
            describe, name_key, _ = SYNC_JOBS[action]
            name = normalised_parameters[name_key]
            service = ACTIVE.sagemaker

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
            service: object | None = {"fsx": ACTIVE.fsx, "sagemaker": ACTIVE.sagemaker}.get(api)
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
