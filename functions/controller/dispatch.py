"""Debounce uploads into runs: start a run of a data set when enough images wait and uploads paused
(or the oldest has waited too long), never while another run of the data set is active.

Runs on a schedule (EventBridge) and after each ingest batch. The execution name is the run id, which
the lock fixes before StartExecution, so a retried dispatch resumes the same start instead of making a
second run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from controller import clients, datasets, ledger, names, runs
from controller.config import Config, DispatchPolicy, get_config
from controller.observability import logger, metrics, tracer

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_stepfunctions import SFNClient


def parse_time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def due_reason(stats: ledger.PendingStats, policy: DispatchPolicy, now: datetime) -> str | None:
    """Why a run is due now, or None. Pure: the debounce rule in one place."""
    if stats.count == 0 or stats.oldest is None or stats.newest is None:
        return None
    waited = (now - parse_time(stats.oldest)).total_seconds()
    if waited >= policy.max_wait_seconds:
        return f"the oldest of {_count(stats)} pending images waited {waited:.0f}s (MaxWaitSeconds)"
    quiet = (now - parse_time(stats.newest)).total_seconds()
    if stats.count >= policy.min_new_images and quiet >= policy.quiet_period_seconds:
        return f"{_count(stats)} pending images and no upload for {quiet:.0f}s"
    return None


def _count(stats: ledger.PendingStats) -> str:
    return f"{stats.count}{' or more' if stats.at_least else ''}"


@dataclass(frozen=True)
class Outcome:
    dataset: str
    action: Literal["started", "resumed", "busy", "not-due"]
    run_id: str | None = None
    reason: str = ""


def start_execution(
    dataset: str, run_id: str, trigger: str, *, config: Config, sfn: SFNClient, dynamodb: DynamoDBClient
) -> str:
    """StartExecution named by the run id; a repeat with the same input returns the same execution."""
    run_input = {"dataset": dataset, "run_id": run_id, "trigger": trigger}
    try:
        arn = sfn.start_execution(
            stateMachineArn=config.state_machine_arn, name=run_id, input=json.dumps(run_input, sort_keys=True)
        )["executionArn"]
    except sfn.exceptions.ExecutionAlreadyExists:
        arn = f"{config.state_machine_arn.replace(':stateMachine:', ':execution:')}:{run_id}"
    runs.update_run(dataset, run_id, {"execution_arn": arn}, table_name=config.runs_table, client=dynamodb)
    return arn


def consider(
    dataset: str,
    *,
    now: datetime,
    config: Config,
    dynamodb: DynamoDBClient,
    sfn: SFNClient,
    trigger: str = "schedule",
) -> Outcome:
    """Start a run of `dataset` if one is due and none is active."""
    state = datasets.get(dataset, table_name=config.datasets_table, client=dynamodb)
    active = state.get(names.LOCK_ATTRIBUTE)
    if active:
        existing = runs.get_run(dataset, str(active), table_name=config.runs_table, client=dynamodb)
        if existing is not None and existing["status"] == "STARTING" and not existing.get("execution_arn"):
            start_execution(
                dataset,
                str(active),
                existing.get("trigger", trigger),
                config=config,
                sfn=sfn,
                dynamodb=dynamodb,
            )
            return Outcome(
                dataset, "resumed", str(active), "a previous dispatch stopped before StartExecution"
            )
        return Outcome(dataset, "busy", str(active), f"run {active} is active")
    not_before = state.get("not_before")
    if not_before and now < parse_time(str(not_before)):
        return Outcome(
            dataset, "not-due", None, f"the last run failed; automatic runs resume at {not_before}"
        )
    stats = ledger.pending_stats(
        datasets.partitions_in(dataset, state),
        str(state.get(names.TRAINED_THROUGH, "")),
        limit=config.policy.min_new_images,
        table_name=config.ledger_table,
        client=dynamodb,
    )
    reason = due_reason(stats, config.policy, now)
    if reason is None:
        return Outcome(dataset, "not-due", None, f"{_count(stats)} pending images")
    at = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    run_id = datasets.acquire(dataset, None, at, table_name=config.datasets_table, client=dynamodb)
    if run_id is None:
        return Outcome(dataset, "busy", None, "another dispatcher took the lock first")
    record: runs.RunRecord = {
        "dataset": dataset,
        "run_id": run_id,
        "status": "STARTING",
        "trigger": trigger,
        "created_at": at,
        "updated_at": at,
        "new_images": stats.count,
    }
    runs.put_run(record, table_name=config.runs_table, client=dynamodb)
    start_execution(dataset, run_id, trigger, config=config, sfn=sfn, dynamodb=dynamodb)
    metrics.add_metric(name=names.METRIC_RUNS_STARTED, unit="Count", value=1)
    logger.info("run started", extra={"dataset": dataset, "run_id": run_id, "reason": reason})
    return Outcome(dataset, "started", run_id, reason)


def dispatch_all(
    *, now: datetime, config: Config, dynamodb: DynamoDBClient, sfn: SFNClient, trigger: str = "schedule"
) -> list[Outcome]:
    """Consider every data set that ever received an upload; report runs that hold a lock too long."""
    outcomes = [
        consider(dataset, now=now, config=config, dynamodb=dynamodb, sfn=sfn, trigger=trigger)
        for dataset in datasets.all_datasets(table_name=config.datasets_table, client=dynamodb)
    ]
    stuck = stuck_runs(now=now, config=config, dynamodb=dynamodb)
    metrics.add_metric(name=names.METRIC_STUCK_RUNS, unit="Count", value=len(stuck))
    for dataset, run_id in stuck:
        logger.warning("run holds its lock too long", extra={"dataset": dataset, "run_id": run_id})
    return outcomes


def stuck_runs(*, now: datetime, config: Config, dynamodb: DynamoDBClient) -> list[tuple[str, str]]:
    """(data set, run) pairs of held locks whose run passed its deadline (deadline.py: its time limits
    plus StuckRunSeconds), or, for a run not prepared yet, whose lock is older than StuckRunSeconds."""
    stuck = []
    for dataset in datasets.all_datasets(table_name=config.datasets_table, client=dynamodb):
        state = datasets.get(dataset, table_name=config.datasets_table, client=dynamodb)
        held = state.get(names.LOCK_ATTRIBUTE)
        if not held:
            continue
        record = runs.get_run(dataset, str(held), table_name=config.runs_table, client=dynamodb)
        due = record.get("deadline") if record is not None else None
        if due:
            late = now > parse_time(str(due))
        else:
            locked_at = state.get("locked_at")
            late = (
                bool(locked_at)
                and (now - parse_time(str(locked_at))).total_seconds() > config.stuck_run_seconds
            )
        if late:
            stuck.append((dataset, str(held)))
    return stuck


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    outcomes = dispatch_all(
        now=datetime.now(UTC),
        config=get_config(),
        dynamodb=clients.dynamodb(),
        sfn=clients.sfn(),
    )
    return {"outcomes": [o.__dict__ for o in outcomes]}
