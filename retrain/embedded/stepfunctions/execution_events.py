"""An ended execution reported as Step Functions' "Execution Status Change" event (source aws.states),
as EventBridge delivers it on AWS."""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Callable
from typing import Any, Final

from retrain.embedded.stepfunctions.services import ACTIVE

LOG = logging.getLogger(__name__)

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


def reporting_end(original: Callable[..., None]) -> Callable[..., None]:
    def terminated(self: Any) -> None:
        original(self)
        publish = ACTIVE.on_execution_end
        if publish is not None:
            try:
                publish(execution_status_event(self.execution))
            except Exception:
                LOG.exception("could not report the end of execution %s", self.execution.exec_arn)

    return terminated
