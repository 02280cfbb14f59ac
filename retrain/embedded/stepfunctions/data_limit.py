"""Step Functions' payload limit in moto's ASL interpreter, and the errors ``States.ALL`` cannot catch.

AWS fails a state with ``States.DataLimitExceeded`` when a task's result, a state's output, or a state's
input after ``Parameters`` is over 256 KiB of UTF-8 JSON (:data:`~retrain.embedded.limits.
STATES_PAYLOAD_BYTES`), and ``States.ALL`` in a Retry or Catch matches neither that error nor
``States.Runtime``: only an ``ErrorEquals`` that names it does
(https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html).

moto 5.2.5 measures results and outputs with a limit of its own (``quotas.is_within_size_quota``: one
byte short, spaced JSON), never measures the input after ``Parameters``, and lets ``States.ALL`` catch
everything. :func:`enforced` replaces its measure with this limit, names the size and the limit in the
cause, checks a service Task's parameters before the call, and keeps the terminal errors uncaught.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

from retrain.embedded.limits import STATES_PAYLOAD_BYTES, json_bytes

DATA_LIMIT_EXCEEDED: Final = "States.DataLimitExceeded"
# The errors States.ALL does not match (the Error handling page: "can't catch States.DataLimitExceeded
# terminal error or Runtime error types").
UNCATCHABLE_BY_ALL: Final = frozenset({DATA_LIMIT_EXCEEDED, "States.Runtime"})
_ADVICE: Final = "keep large data in S3 and pass its URI between states."


def within_limit(value: Any) -> bool:
    """Whether ``value`` fits Step Functions' payload limit (moto's ``is_within_size_quota``)."""
    return json_bytes(value) <= STATES_PAYLOAD_BYTES


def size_quota_owners() -> list[Any]:
    """moto's modules that measure with ``is_within_size_quota`` and the classes that do it."""
    from moto.stepfunctions.parser.asl.component.state import state
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_lambda
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service

    return [
        (state, state.CommonStateField),
        (state_task_service, state_task_service.StateTaskService),
        (state_task_lambda, state_task_lambda.StateTaskLambda),
    ]


def _explained(original: Callable[..., None]) -> Callable[..., None]:
    """``_verify_size_quota`` whose cause says how big the result was and what the limit is."""
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
        FailureEventException,
    )

    def _verify_size_quota(self: Any, env: Any, value: Any) -> None:
        try:
            original(self, env, value)
        except FailureEventException as failed:
            details: Any = next(iter((failed.failure_event.event_details or {}).values()), None)
            if details is not None:
                details["cause"] = (
                    f"{details.get('cause', '')} It is {json_bytes(value)} bytes; the limit is "
                    f"{STATES_PAYLOAD_BYTES} bytes of UTF-8 JSON: {_ADVICE}"
                )
            raise

    return _verify_size_quota


def _input_checked(original: Callable[..., None]) -> Callable[..., None]:
    """A service Task's ``_before_eval_execution`` that first fails a state whose input after
    ``Parameters`` is over the limit, as Step Functions does before it calls the service."""
    from moto.stepfunctions.parser.api import HistoryEventType, TaskFailedEventDetails
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
        FailureEvent,
        FailureEventException,
    )
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import (
        StatesErrorName,
    )
    from moto.stepfunctions.parser.asl.eval.event import event_detail

    event_details: Any = event_detail.EventDetails

    def _before_eval_execution(
        self: Any, env: Any, resource_runtime_part: Any, raw_parameters: Any, state_credentials: Any
    ) -> None:
        size = json_bytes(raw_parameters)
        if size > STATES_PAYLOAD_BYTES:
            cause = (
                f"The state/task '{self._get_sfn_resource()}' has an input of {size} bytes after its "
                f"Parameters; the limit is {STATES_PAYLOAD_BYTES} bytes of UTF-8 JSON: {_ADVICE}"
            )
            raise FailureEventException(
                FailureEvent(
                    env=env,
                    error_name=StatesErrorName.from_name(DATA_LIMIT_EXCEEDED),
                    event_type=HistoryEventType.TaskFailed,
                    event_details=event_details(
                        taskFailedEventDetails=TaskFailedEventDetails(
                            error=DATA_LIMIT_EXCEEDED,
                            cause=cause,
                            resource=self._get_sfn_resource(),
                            resourceType=self._get_sfn_resource_type(),
                        )
                    ),
                )
            )
        original(
            self,
            env=env,
            resource_runtime_part=resource_runtime_part,
            raw_parameters=raw_parameters,
            state_credentials=state_credentials,
        )

    return _before_eval_execution


def _all_but_terminal(original: Callable[..., None]) -> Callable[..., None]:
    """``ErrorEqualsDecl._eval_body`` where ``States.ALL`` does not match the errors AWS keeps uncaught."""

    def _eval_body(self: Any, env: Any) -> None:
        error_name = env.stack[-1]
        if getattr(error_name, "error_name", None) in UNCATCHABLE_BY_ALL:
            env.stack.pop()
            env.stack.append(error_name in self.error_names)
            return
        original(self, env)

    return _eval_body


@contextmanager
def enforced() -> Iterator[None]:
    """The limit and the uncatchable errors in moto's interpreter while the context lasts."""
    from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import (
        ErrorEqualsDecl,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (
        StateTaskService,
    )

    patches: list[tuple[Any, str, Any]] = []
    for module, owner in size_quota_owners():
        patches.append((module, "is_within_size_quota", within_limit))
        patches.append((owner, "_verify_size_quota", _explained(owner.__dict__["_verify_size_quota"])))
    before: Any = StateTaskService.__dict__["_before_eval_execution"]
    patches.append((StateTaskService, "_before_eval_execution", _input_checked(before)))
    patches.append((ErrorEqualsDecl, "_eval_body", _all_but_terminal(ErrorEqualsDecl.__dict__["_eval_body"])))
    originals = [(target, name, target.__dict__[name]) for target, name, _ in patches]
    for target, name, patch in patches:
        setattr(target, name, patch)
    try:
        yield
    finally:
        for target, name, original in originals:
            setattr(target, name, original)
