"""The last step of a completed run (accepted or rejected): record the outcome, move the data set's
watermark to the run's cut (its images are no longer new), release the lock, and start the next run at
once if uploads that came meanwhile are due. Its work is the same for ten images or ten million: no row
of the ledger is rewritten (retrain_contract.ledger)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from controller import arrivals, clients, datasets, dispatch, names, notes, runs
from controller.best_candidate import seconds
from controller.config import Config, get_config
from controller.observability import logger, metrics, tracer
from retrain_contract import container

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sagemaker import SageMakerClient
    from mypy_boto3_stepfunctions import SFNClient


def time_totals(
    run: dict[str, Any], record: runs.RunRecord | None, *, sagemaker: SageMakerClient
) -> dict[str, Any]:
    """Training vs billable seconds of the whole run: tuning trials (already summed) plus the final job."""
    final = run.get("final_training_job")
    if not final:
        return {}
    described = dict(sagemaker.describe_training_job(TrainingJobName=str(final)))
    totals = seconds([described])
    if record is not None:
        totals["training_seconds"] += int(record.get("training_seconds", 0))
        totals["billable_seconds"] += int(record.get("billable_seconds", 0))
        training, billable = totals["training_seconds"], totals["billable_seconds"]
        totals["spot_saving"] = round(1 - billable / training, 4) if training else 0.0
    return {"final_training_job": str(final), **totals}


def finalize(
    event: dict[str, Any],
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sagemaker: SageMakerClient,
    sfn: SFNClient | None,
    now: datetime | None = None,
) -> dict[str, Any]:
    run, decision = event["run"], event["gate"]
    model = event.get("model") or {}
    registered = event.get("registered") or {}
    dataset, run_id = run["dataset"], run["run_id"]
    moment = now or datetime.now(UTC)
    at = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    accepted = decision["decision"] == "accepted"
    not_needed = decision["decision"] == arrivals.NOT_NEEDED  # TrainWhen=drift: nothing to learn
    record = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb)
    if model.get("final"):
        run = {**run, "final_training_job": model.get("training_job")}
    fields: dict[str, Any] = {
        "status": "SUCCEEDED" if accepted else "NOT_NEEDED" if not_needed else "REJECTED",
        "finished_at": at,
        "updated_at": at,
        **time_totals(run, record, sagemaker=sagemaker),
        # the gate records its own decision; a run that never reached it records TrainWhen's here
        **({"gate": dict(decision)} if not_needed else {}),
    }
    import_task = str((event.get("import") or {}).get("task_id") or "")
    if import_task:
        fields["import_task"] = import_task
    runs.update_run(dataset, run_id, fields, table_name=config.runs_table, client=dynamodb)
    # the watermark: uploads recorded before the run's cut are trained (or set aside) from now on
    updates: dict[str, Any] = {
        "last_run": run_id,
        "last_run_status": fields["status"],
        names.TRAINED_THROUGH: str(run["cut"]),
    }
    if accepted:
        updates["champion"] = {
            "model_data": str(model.get("model_data", "")),
            "model_package_arn": str(registered.get("model_package_arn", "")),
            "run_id": run_id,
            "top1": float(decision.get("top1", 0.0)),
            # the architecture, so that the next run starts from this model only when it trains the same
            "model": str(run.get("hyperparameters", {}).get(container.HP_MODEL, "")),
        }
    datasets.release(dataset, run_id, table_name=config.datasets_table, client=dynamodb, updates=updates)
    metrics.add_metric(
        name=names.METRIC_RUNS_SUCCEEDED
        if accepted
        else names.METRIC_RUNS_NOT_NEEDED
        if not_needed
        else names.METRIC_RUNS_REJECTED,
        unit="Count",
        value=1,
    )
    next_run = None
    if sfn is not None and config.state_machine_arn:
        outcome = dispatch.consider(dataset, now=moment, config=config, dynamodb=dynamodb, sfn=sfn)
        next_run = outcome.run_id if outcome.action == "started" else None
    verdict = "registered" if accepted else "rejected"
    subject = f"retrain {dataset}: " + ("no retraining needed" if not_needed else f"model {verdict}")
    lines = [
        f"Run {run_id} of data set {dataset}: "
        + ("no retraining needed, the champion stays." if not_needed else f"model {verdict}."),
        f"Reason: {decision['reason']}.",
        f"Images: {run.get('manifest_size')} ({run.get('new_images')} new), {run.get('label_count')} labels.",
    ]
    if registered.get("model_package_arn"):
        lines.append(f"Model package: {registered['model_package_arn']}")
    lines += notes.start_line(record)
    lines += notes.arrival_lines(record)
    lines += notes.rule_lines(record)
    lines += notes.data_lines(record, bucket=config.artifact_bucket)
    if next_run:
        lines.append(f"Uploads that arrived during the run started run {next_run}.")
    logger.info("run finalized", extra={"run_id": run_id, "status": fields["status"], "next_run": next_run})
    return {
        "status": fields["status"],
        "subject": subject[:100],
        "message": "\n".join(lines),
        "next_run": next_run,
    }


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return finalize(
        event,
        config=get_config(),
        dynamodb=clients.dynamodb(),
        sagemaker=clients.sagemaker(),
        sfn=clients.sfn(),
    )
