"""What moto 5.2.5 lacks for Step Functions and Lambda, installed into moto: :func:`installed`.

moto's ASL interpreter refuses ``arn:aws:states:::sagemaker:*`` (it is in its unsupported set), sends
``aws-sdk:fsx`` calls to a backend without data repository tasks, and invokes Lambda code only in Docker.
``installed()`` patches these symbols of the pinned moto, in this process (so it works under ``mock_aws``
and in a ``ThreadedMotoServer`` thread alike), each with the module that does it:

- ``state_task_factory.state_task_service_for`` (:mod:`.task_states`): ``sagemaker`` Task states run
  against a :class:`~.services.SageMakerService` (create, then for ``.sync`` poll describe until terminal
  (:mod:`.sync`), failing the state with the error names and causes Step Functions uses (:mod:`.errors`));
  ``aws-sdk:fsx:*`` and ``aws-sdk:sagemaker:*`` reach the :class:`~.services.FsxService` /
  :class:`~.services.SageMakerService` when they implement the call (:mod:`.calls`);
- ``LambdaFunction.invoke`` (:mod:`.lambda_invoke`): every Lambda invoke moto serves (the Invoke API,
  ``lambda:invoke`` and function-ARN Task states, S3 notifications) runs ``lambda_invoker(function_name,
  payload)``;
- ``events.models.Rule.send_to_targets`` (:mod:`.eventbridge_targets`): EventBridge rules with Lambda
  targets (moto raises for them) invoke the function asynchronously with the event or the target's
  Input/InputPath/InputTransformer;
- ``CustomErrorName`` in moto's Parallel and Map states (:mod:`.branch_errors`): a branch's ``States.*``
  error is re-raised as such instead of crashing the execution;
- the payload measure and ``ErrorEquals`` matching of moto's interpreter (:mod:`.data_limit`): a result,
  output or input after ``Parameters`` over 256 KiB fails with ``States.DataLimitExceeded``, which
  ``States.ALL`` does not catch (nor ``States.Runtime``), as on AWS;
- ``BaseExecutionWorkerCommunication.terminated`` (:mod:`.execution_events`): an ended execution is
  reported as Step Functions' "Execution Status Change" event (``on_execution_end``), as EventBridge
  delivers it on AWS;
- with a :class:`~.services.TaskGate`, every Task acts as the state machine's role (:mod:`.role_signing`):
  the calls served in-process are held against the API contract and the role's policies (``.sync`` with
  what Step Functions does behind the scenes), and the calls moto's interpreter sends over HTTP are signed
  with the role's credentials (``boto_client_for``), so the gated server authorises them.

What is installed lives in :mod:`.services` (``ACTIVE``) while the ``with`` block lasts.
``tests/unit/embedded/test_integrations.py`` asserts the patched symbols exist with the shapes relied on,
so a moto upgrade that moves them fails loudly there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from retrain.embedded.stepfunctions.branch_errors import error_name_modules, rethrown_error_name
from retrain.embedded.stepfunctions.data_limit import enforced
from retrain.embedded.stepfunctions.eventbridge_targets import patched_send_to_targets
from retrain.embedded.stepfunctions.execution_events import reporting_end
from retrain.embedded.stepfunctions.lambda_invoke import patched_lambda_invoke
from retrain.embedded.stepfunctions.role_signing import acting_state, boto_client_modules, signed_as_the_role
from retrain.embedded.stepfunctions.services import (
    ACTIVE,
    FsxService,
    LambdaInvoker,
    SageMakerService,
    TaskGate,
)
from retrain.embedded.stepfunctions.task_states import task_classes

_LOCK = threading.Lock()


@contextmanager
def installed(
    *,
    lambda_invoker: LambdaInvoker | None = None,
    sagemaker: SageMakerService | None = None,
    fsx: FsxService | None = None,
    gate: TaskGate | None = None,
    on_execution_end: Callable[[dict[str, Any]], None] | None = None,
    redelivery: Callable[[], float | None] | None = None,
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
    sagemaker_task, aws_sdk_task = task_classes()

    def service_for(service_name: str) -> Any:
        if service_name == "sagemaker":
            return sagemaker_task()
        if service_name == "aws-sdk":
            return aws_sdk_task()
        return original_factory(service_name)

    from moto.events import models as events_models

    rule_class: Any = events_models.Rule
    original_send = rule_class.send_to_targets
    branch_modules = error_name_modules()
    original_error_names = [module.CustomErrorName for module in branch_modules]
    from moto.stepfunctions.parser.asl.component.state.exec.execute_state import ExecutionState

    execution_state: Any = ExecutionState
    original_eval_state = execution_state._eval_state
    client_modules = boto_client_modules()
    original_clients = [module.boto_client_for for module in client_modules]
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication

    communication: Any = BaseExecutionWorkerCommunication
    original_terminated = communication.terminated
    ACTIVE.lambda_invoker, ACTIVE.sagemaker, ACTIVE.fsx = lambda_invoker, sagemaker, fsx
    ACTIVE.gate, ACTIVE.on_execution_end, ACTIVE.redelivery = gate, on_execution_end, redelivery
    communication.terminated = reporting_end(original_terminated)
    state_task_factory.state_task_service_for = service_for
    lambda_function.invoke = patched_lambda_invoke(original_invoke)
    rule_class.send_to_targets = patched_send_to_targets(original_send)
    for module in branch_modules:
        module.CustomErrorName = rethrown_error_name
    execution_state._eval_state = acting_state(original_eval_state)
    for module, original_client in zip(client_modules, original_clients, strict=True):
        module.boto_client_for = signed_as_the_role(original_client)
    try:
        with enforced():
            yield
    finally:
        state_task_factory.state_task_service_for = original_factory
        lambda_function.invoke = original_invoke
        rule_class.send_to_targets = original_send
        for module, original in zip(branch_modules, original_error_names, strict=True):
            module.CustomErrorName = original
        execution_state._eval_state = original_eval_state
        communication.terminated = original_terminated
        ACTIVE.on_execution_end = ACTIVE.redelivery = None
        for module, original_client in zip(client_modules, original_clients, strict=True):
            module.boto_client_for = original_client
        ACTIVE.lambda_invoker = ACTIVE.sagemaker = ACTIVE.fsx = ACTIVE.gate = None
        _LOCK.release()
