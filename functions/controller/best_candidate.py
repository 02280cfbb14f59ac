"""Pick the tuning job's best trial: its hyperparameters, model, and the run's training vs billable time."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from controller import clients, job_ended, names, runs
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
    training = sum(job_ended.job_seconds(d)[0] for d in descriptions)
    billable = sum(job_ended.job_seconds(d)[1] for d in descriptions)
    return {
        "training_seconds": training,
        "billable_seconds": billable,
        "spot_saving": saving(training, billable),
    }


def saving(training: int, billable: int) -> float:
    return round(1 - billable / training, 4) if training else 0.0


def count_untimed_trials(
    dataset: str,
    run_id: str,
    tuning_job: str,
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sagemaker: SageMakerClient,
) -> int:
    """Count the trials whose end event has not added their seconds yet (job_ended.py normally has: the
    tuning job ends after its last trial); how many this added. One DescribeHyperParameterTuningJob when
    none is missing; else the list of trials and one DescribeTrainingJob per missing trial."""
    tuning = sagemaker.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=tuning_job)
    counters = tuning.get("TrainingJobStatusCounters")
    launched = sum(int(n) for n in counters.values() if isinstance(n, int)) if counters else 0
    record = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb)
    timed = set(record.get("timed_jobs", [])) if record is not None else set()
    if len(timed) >= launched:
        return 0
    added = 0
    for name in job_ended.trial_names(tuning_job, sagemaker=sagemaker):
        if name not in timed:
            description = dict(sagemaker.describe_training_job(TrainingJobName=name))
            added += job_ended.count_trial(dataset, run_id, description, config=config, dynamodb=dynamodb)
    return added


def pick(
    event: dict[str, Any], *, config: Config, dynamodb: DynamoDBClient, sagemaker: SageMakerClient
) -> dict[str, Any]:
    """The tuning job's BestTrainingJob (its .sync result): its hyperparameters and model (one
    DescribeTrainingJob), and the run's summed trial seconds (job_ended.py counts them as trials end)."""
    run, tuning = event["run"], event["tuning"]
    dataset, run_id, tuning_job = run["dataset"], run["run_id"], str(tuning["name"])
    best = tuning.get("best") or {}
    name = best.get("TrainingJobName")
    if not name:
        raise JobOutputMissingError(
            f"tuning job {tuning.get('name')} finished without a best training job (every trial failed?); "
            "see the trials' logs in /aws/sagemaker/TrainingJobs"
        )
    tuned = {k: plain(str(v)) for k, v in (best.get("TunedHyperParameters") or {}).items()}
    hyperparameters = {**run["static_hyperparameters"], **tuned}
    best_description: dict[str, Any] = dict(sagemaker.describe_training_job(TrainingJobName=name))
    model_data = str((best_description.get("ModelArtifacts") or {}).get("S3ModelArtifacts", ""))
    objective = (best.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value")
    count_untimed_trials(dataset, run_id, tuning_job, config=config, dynamodb=dynamodb, sagemaker=sagemaker)
    record = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb)
    totals = {
        "training_seconds": int(record.get("training_seconds", 0)) if record is not None else 0,
        "billable_seconds": int(record.get("billable_seconds", 0)) if record is not None else 0,
    }
    runs.update_run(
        dataset,
        run_id,
        {
            "tuning_job": tuning_job,
            "best_training_job": name,
            "best_hyperparameters": hyperparameters,
            **({"best_objective": float(objective)} if objective is not None else {}),
            "spot_saving": saving(totals["training_seconds"], totals["billable_seconds"]),
        },
        table_name=config.runs_table,
        client=dynamodb,
    )
    dynamodb.update_item(
        TableName=config.datasets_table,
        Key=serialize({names.DATASETS_PK: dataset}),
        UpdateExpression="SET #job = :job, #names = :names",
        ExpressionAttributeNames={"#job": names.LAST_TUNING_JOB, "#names": names.LAST_TUNING_HYPERPARAMETERS},
        ExpressionAttributeValues=serialize(
            {
                ":job": tuning_job,
                ":names": names.tuning_hyperparameter_names(
                    run["static_hyperparameters"], run["parameter_ranges"]
                ),
            }
        ),
    )
    logger.info("best candidate", extra={"training_job": name, "objective": objective, **totals})
    return {"training_job": name, "model_data": model_data, "hyperparameters": hyperparameters}


@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return pick(event, config=get_config(), dynamodb=clients.dynamodb(), sagemaker=clients.sagemaker())
