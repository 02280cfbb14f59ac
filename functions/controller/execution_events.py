"""Release a run's lock when its execution ends without reaching a Catch (stopped by hand, timed out).

Step Functions sends an "Execution Status Change" event for every execution; the template's rule
forwards ABORTED and TIMED_OUT ones of the training state machine here. A run whose record is still
active is marked FAILED with that status, and its data set's lock is freed for the next run.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3

from controller import datasets, names, runs
from controller.config import Config, get_config
from controller.observability import logger, metrics, tracer

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient


def on_execution_end(
    event: dict[str, Any], *, config: Config, dynamodb: DynamoDBClient, now: datetime | None = None
) -> dict[str, Any]:
    detail = event.get("detail") or {}
    status, run_id = str(detail.get("status", "")), str(detail.get("name", ""))
    try:
        dataset = str(json.loads(detail.get("input") or "{}").get("dataset", ""))
    except (json.JSONDecodeError, AttributeError):
        dataset = ""
    if not dataset or not names.DATASET_RE.fullmatch(dataset):
        return {"action": "ignored", "reason": "the execution input names no data set"}
    at = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    record = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb)
    if record is not None and record["status"] in runs.ACTIVE_STATUSES:
        cause = f"the execution ended {status} before the run finished (stopped by hand, or timed out)"
        runs.mark_failed(
            dataset, run_id, error=status, cause=cause, at=at, table_name=config.runs_table, client=dynamodb
        )
        metrics.add_metric(name=names.METRIC_RUNS_FAILED, unit="Count", value=1)
    released = datasets.release(
        dataset,
        run_id,
        table_name=config.datasets_table,
        client=dynamodb,
        updates={"last_run": run_id, "last_run_status": status},
    )
    logger.info(
        "execution ended",
        extra={"dataset": dataset, "run_id": run_id, "status": status, "released": released},
    )
    return {"action": "released" if released else "not-held", "run_id": run_id}


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return on_execution_end(event, config=get_config(), dynamodb=boto3.client("dynamodb"))
