"""What moto's CloudFormation leaves undone once it has created the stack: its state machines registered
with the ASL interpreter's backend (where executions run), and its SQS event source mappings detached
(moto would deliver inline; the embedded pollers deliver as Lambda does)."""

from __future__ import annotations

from retrain.embedded.account import ACCOUNT_ID, REGION


def register_state_machines(arns: list[str]) -> None:
    """moto's CloudFormation creates state machines in the plain backend; executions run in the
    interpreter's backend. Register each there under the same name (so the same ARN)."""
    from moto.stepfunctions.models import stepfunctions_backends
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    for arn in arns:
        plain = stepfunctions_backends[ACCOUNT_ID][REGION].describe_state_machine(arn)
        stepfunctions_parser_backends[ACCOUNT_ID][REGION].create_state_machine(
            name=plain.name, definition=plain.definition, roleArn=plain.roleArn
        )


def detach_moto_sqs_delivery() -> None:
    """moto delivers SQS messages to mapped functions inline at SendMessage; the pollers do it instead."""
    from moto.sqs.models import sqs_backends

    for queue in sqs_backends[ACCOUNT_ID][REGION].queues.values():
        queue.lambda_event_source_mappings.clear()
