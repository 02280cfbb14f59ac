"""Pick the tuning job's best trial: its hyperparameters, model, and the run's training vs billable time."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from controller import clients, names, runs
from controller.config import Config, get_config
from controller.errors import JobOutputMissingError
from controller.observability import logger, tracer
from controller.runs import serialize

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sagemaker import SageMakerClient


def plain(value: str) -> str:
    """Tuned categorical values may arrive JSON-quoted ('"sgd"'); the container wants sgd."""
    try:
        decoded = json.loads(value)
    except (json.JSONDecodeError, TypeError):
        return value
    return decoded if isinstance(decoded, str) else value


def seconds(descriptions: list[dict[str, Any]]) -> dict[str, Any]:
    """Training vs billable seconds over jobs, and the spot saving (1 - billable / training)."""
    training = sum(int(d.get("TrainingTimeInSeconds") or 0) for d in descriptions)
    billable = sum(
        int(d.get("BillableTimeInSeconds") or d.get("TrainingTimeInSeconds") or 0) for d in descriptions
    )
    saving = round(1 - billable / training, 4) if training else 0.0
    return {"training_seconds": training, "billable_seconds": billable, "spot_saving": saving}


def trial_descriptions(tuning_job: str, *, sagemaker: SageMakerClient) -> list[dict[str, Any]]:
    summaries: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"HyperParameterTuningJobName": tuning_job, "MaxResults": 100}
        if token:
            kwargs["NextToken"] = token
        page = sagemaker.list_training_jobs_for_hyper_parameter_tuning_job(**kwargs)
        summaries.extend(dict(s) for s in page.get("TrainingJobSummaries", []))
        token = page.get("NextToken")
        if not token:
            break
    return [dict(sagemaker.describe_training_job(TrainingJobName=s["TrainingJobName"])) for s in summaries]


def pick(
    event: dict[str, Any], *, config: Config, dynamodb: DynamoDBClient, sagemaker: SageMakerClient
) -> dict[str, Any]:
    run, tuning = event["run"], event["tuning"]
    best = tuning.get("best") or {}
    name = best.get("TrainingJobName")
    if not name:
        raise JobOutputMissingError(
            f"tuning job {tuning.get('name')} finished without a best training job (every trial failed?); "
            "see the trials' logs in /aws/sagemaker/TrainingJobs"
        )
    tuned = {k: plain(str(v)) for k, v in (best.get("TunedHyperParameters") or {}).items()}
    hyperparameters = {**run["static_hyperparameters"], **tuned}
    descriptions = trial_descriptions(str(tuning["name"]), sagemaker=sagemaker)
    by_name = {d["TrainingJobName"]: d for d in descriptions}
    best_description = by_name.get(name) or dict(sagemaker.describe_training_job(TrainingJobName=name))
    model_data = str((best_description.get("ModelArtifacts") or {}).get("S3ModelArtifacts", ""))
    objective = (best.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value")
    totals = seconds(descriptions)
    runs.update_run(
        run["dataset"],
        run["run_id"],
        {
            "tuning_job": str(tuning["name"]),
            "best_training_job": name,
            "best_hyperparameters": hyperparameters,
            **({"best_objective": float(objective)} if objective is not None else {}),
            **totals,
        },
        table_name=config.runs_table,
        client=dynamodb,
    )
    dynamodb.update_item(
        TableName=config.datasets_table,
        Key=serialize({names.DATASETS_PK: run["dataset"]}),
        UpdateExpression="SET last_tuning_job = :job",
        ExpressionAttributeValues=serialize({":job": str(tuning["name"])}),
    )
    logger.info("best candidate", extra={"training_job": name, "objective": objective})
    return {"training_job": name, "model_data": model_data, "hyperparameters": hyperparameters}


@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return pick(event, config=get_config(), dynamodb=clients.dynamodb(), sagemaker=clients.sagemaker())
