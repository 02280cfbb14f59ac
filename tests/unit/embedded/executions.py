"""A state machine run to its end on moto's Step Functions, for the tests of the embedded interpreter."""

from __future__ import annotations

import json
import time
from typing import Any

ROLE = "arn:aws:iam::123456789012:role/sfn"


def run_execution(sfn: Any, definition: dict[str, Any], payload: Any) -> dict[str, Any]:
    """Create a state machine of `definition`, start it with `payload`, and describe the execution once it
    ends (within 30 s)."""
    arn = sfn.create_state_machine(
        name=f"m{time.monotonic_ns()}", definition=json.dumps(definition), roleArn=ROLE
    )["stateMachineArn"]
    execution = sfn.start_execution(stateMachineArn=arn, input=json.dumps(payload))["executionArn"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution)
        if described["status"] != "RUNNING":
            return described
        time.sleep(0.1)
    raise AssertionError("execution did not finish in 30 s")
