"""Catch-all of the state machine: record why the run failed (in words a person can act on), release the
data set's lock, and hold the next automatic run back for a while so a broken run does not loop."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from controller import clients, datasets, names, notes, runs
from controller.config import Config, get_config
from controller.observability import logger, metrics, tracer
from controller.runs import serialize

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient

ERROR_CODE = re.compile(r"Error Code: (?P<code>[A-Za-z]+)")
# API errors that no retry can clear, and what to do about each.
REFUSALS = {
    "ValidationException": "Fix the stack parameter or run override that feeds the field it names.",
    "AccessDeniedException": "The role named there lacks the permission: update template.yaml and deploy.",
}
FAIL_ERROR_LIMIT = 256  # a Fail state's Error and Cause (Step Functions' limits)
STATES_PREFIX = "States."
FAIL_CAUSE_LIMIT = 32768


def explain(error: str, cause: str) -> str:
    """One sentence on what failed and what to do, from a Task's Error and Cause."""
    code = ERROR_CODE.search(cause)
    if code and code.group("code") == "ResourceLimitExceeded":
        return (
            "SageMaker refused the job: an account quota (ResourceLimitExceeded) is reached, and "
            "retries with a long backoff did not clear it. Request a quota increase for the instance "
            "type, or lower "
            f"MaxParallelTuningJobs / choose another instance type. ({cause[:300]})"
        )
    if code and code.group("code") in REFUSALS:
        service, refusal = error.split(".", 1)[0], code.group("code")
        api_message = cause.split(" (Service: ", 1)[0][:1000]
        return f"the {service} API refused the request ({refusal}): {api_message}. {REFUSALS[refusal]}"
    try:
        document = json.loads(cause) if cause.startswith("{") else {}
    except json.JSONDecodeError:
        document = {}
    if not isinstance(document, dict):
        document = {}
    if "errorMessage" in document:  # a Lambda step raised: its message is meant for people
        return f"{document.get('errorType', error)}: {str(document['errorMessage'])[:1000]}"
    if error == "States.TaskFailed" and document:
        job = next((document[k] for k in document if k.endswith("JobName")), "the SageMaker job")
        reason = document.get("FailureReason") or document.get("ExitMessage") or "no failure reason"
        return f"{job} failed: {reason}. See its logs under /aws/sagemaker/."
    return f"{error}: {cause[:1000]}"


def execution_error(error: str) -> str:
    """The error the execution ends with: the run's, without Step Functions' reserved 'States.' prefix
    (a Fail state may not report it): States.TaskFailed -> TaskFailed."""
    return error.removeprefix(STATES_PREFIX)[:FAIL_ERROR_LIMIT] or "RunFailed"


def final_job(state: dict[str, Any]) -> dict[str, str]:
    """The final training job a failed run reached, for the CLI's job list."""
    model = state.get("model") or {}
    return {"final_training_job": str(model["training_job"])} if model.get("final") else {}


def record_failure(
    event: dict[str, Any], *, config: Config, dynamodb: DynamoDBClient, now: datetime | None = None
) -> dict[str, Any]:
    state = event.get("state") or {}
    failure = state.get("error") or {}
    error, cause = str(failure.get("Error", "Unknown")), str(failure.get("Cause", ""))
    run = state.get("run") or {}
    execution_input = event.get("input") or {}
    dataset = str(run.get("dataset") or execution_input.get("dataset") or "")
    run_id = str(run.get("run_id") or event.get("execution_name") or "")
    message = explain(error, cause)
    moment = now or datetime.now(UTC)
    at = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    recorded = False
    record: runs.RunRecord | None = None
    if dataset and run_id and names.DATASET_RE.fullmatch(dataset):
        record = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb)
        if record is not None:
            runs.mark_failed(
                dataset,
                run_id,
                error=error,
                cause=message,
                at=at,
                table_name=config.runs_table,
                client=dynamodb,
                extra=final_job(state),
            )
            recorded = True
        not_before = (moment + timedelta(seconds=config.failure_backoff_seconds)).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ"
        )
        released = datasets.release(
            dataset,
            run_id,
            table_name=config.datasets_table,
            client=dynamodb,
            updates={"last_run": run_id, "last_run_status": "FAILED", "not_before": not_before},
        )
        if not released:
            logger.info("lock not held by this run; left as is", extra={"dataset": dataset, "run_id": run_id})
    metrics.add_metric(name=names.METRIC_RUNS_FAILED, unit="Count", value=1)
    logger.error(
        "run failed", extra={"dataset": dataset, "run_id": run_id, "error": error, "reason": message}
    )
    subject = f"retrain {dataset or '?'}: run {run_id} failed"[:100]
    # error/cause become the execution's own (the Fail state's ErrorPath/CausePath): what the record says.
    return {
        "recorded": recorded,
        "subject": subject,
        "message": "\n".join(
            [
                f"Run {run_id} of data set {dataset or '?'} failed.",
                message,
                *notes.start_line(record),
                *notes.data_lines(record, bucket=config.artifact_bucket),
            ]
        ),
        "error": execution_error(error),
        "cause": message[:FAIL_CAUSE_LIMIT],
    }


def clear_backoff(dataset: str, *, config: Config, dynamodb: DynamoDBClient) -> None:
    dynamodb.update_item(
        TableName=config.datasets_table,
        Key=serialize({names.DATASETS_PK: dataset}),
        UpdateExpression="REMOVE not_before",
    )


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return record_failure(event, config=get_config(), dynamodb=clients.dynamodb())
