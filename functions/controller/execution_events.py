"""Close a run whose execution ended without its own bookkeeping: stopped, timed out, or failed so early
or so badly that "Record the failure" did not finish.

Step Functions sends an "Execution Status Change" event for every execution; the template's rule
forwards the FAILED, ABORTED and TIMED_OUT ones of the training state machine here. A run whose record
is still active is marked FAILED with the execution's status (and its error), its data set's lock is
freed if this run holds it, and the run's subscribers are told. Every step is idempotent: a run the
state machine already recorded as failed is left as it is and announced once only (by the flow).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes.event_bridge_event import EventBridgeEvent
from aws_lambda_powertools.utilities.data_classes.event_source import event_source

from controller import clients, datasets, names, runs
from controller.config import Config, get_config
from controller.observability import logger, metrics, tracer

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sns import SNSClient

ENDED_WITHOUT_CATCH = ("ABORTED", "TIMED_OUT")  # no state of the flow ran: nothing was announced


def dataset_of(detail: dict[str, Any]) -> str:
    """The data set an execution's input names ("" when none: not a run's execution)."""
    try:
        document = json.loads(detail.get("input") or "{}")
    except (json.JSONDecodeError, TypeError):
        return ""
    return str(document.get("dataset", "")) if isinstance(document, dict) else ""


def _cause(status: str, detail: dict[str, Any]) -> str:
    if status == "FAILED":
        error, cause = detail.get("error") or "?", str(detail.get("cause") or "")[:1000]
        return f"the execution failed before it recorded why ({error}: {cause})"
    return f"the execution ended {status} before the run finished (stopped by hand, or timed out)"


def on_execution_end(
    event: EventBridgeEvent,
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sns: SNSClient | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    detail = event.detail
    status, run_id = str(detail.get("status", "")), str(detail.get("name", ""))
    dataset = dataset_of(detail)
    if not dataset or not names.DATASET_RE.fullmatch(dataset):
        return {"action": "ignored", "reason": "the execution input names no data set"}
    moment = now or datetime.now(UTC)
    at = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    record = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb)
    cause = _cause(status, detail)
    # Closed under a condition on its status: of two copies of the event that both read it active, one
    # closes (and announces) it.
    unrecorded = (
        record is not None
        and record["status"] in runs.ACTIVE_STATUSES
        and runs.fail_active_run(
            dataset, run_id, error=status, cause=cause, at=at, table_name=config.runs_table, client=dynamodb
        )
    )
    if unrecorded:
        metrics.add_metric(name=names.METRIC_RUNS_FAILED, unit="Count", value=1)
    updates: dict[str, Any] = {"last_run": run_id, "last_run_status": status}
    if status == "FAILED":  # as "Record the failure" does: a broken run must not restart at once
        backoff = moment + timedelta(seconds=config.failure_backoff_seconds)
        updates["not_before"] = backoff.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    released = datasets.release(
        dataset, run_id, table_name=config.datasets_table, client=dynamodb, updates=updates
    )
    notified = False
    # Announced by the delivery that closed the run (its event may come twice): a run that has a record is
    # announced when it was still active; one without (it ended before Prepare wrote it), each time.
    announce = unrecorded or (status in ENDED_WITHOUT_CATCH and record is None)
    if sns is not None and config.topic_arn and announce:
        sns.publish(
            TopicArn=config.topic_arn,
            Subject=f"retrain {dataset}: run {run_id} {status.lower().replace('_', ' ')}"[:100],
            Message=f"Run {run_id} of data set {dataset} ended {status}: {cause}.",
        )
        notified = True
    logger.info(
        "execution ended",
        extra={"dataset": dataset, "run_id": run_id, "status": status, "released": released},
    )
    return {"action": "released" if released else "not-held", "run_id": run_id, "notified": notified}


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
@event_source(data_class=EventBridgeEvent)
def handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    return on_execution_end(event, config=get_config(), dynamodb=clients.dynamodb(), sns=clients.sns())
