"""Job records shaped as boto3's SageMaker responses, and requests made plain for the records.

Records keep times as epoch seconds (JSON); responses carry the timezone-aware datetimes boto3 returns.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from retrain.embedded.sagemaker.scheduler import ACTIVE
from retrain.embedded.sagemaker.tuning import TERMINAL, objective_value

TIME_FIELDS = frozenset(
    {
        "CreationTime",
        "LastModifiedTime",
        "TrainingStartTime",
        "TrainingEndTime",
        "ProcessingStartTime",
        "ProcessingEndTime",
        "HyperParameterTuningEndTime",
        "StartTime",
        "EndTime",
        "Timestamp",
        "Time",
    }
)
INTERRUPTIONS_FIELD = "retrain:interruptions"
# DescribeTrainingJob: what the record adds when the job has it, and what the request had.
_TRAINING_RECORD_KEYS = (
    "TuningJobArn",
    "FailureReason",
    "TrainingStartTime",
    "TrainingEndTime",
    "FinalMetricDataList",
    "TrainingTimeInSeconds",
    "BillableTimeInSeconds",
    "DebugRuleEvaluationStatuses",
    "ProfilerRuleEvaluationStatuses",
)
_TRAINING_REQUEST_KEYS = (
    "VpcConfig",
    "CheckpointConfig",
    "DebugHookConfig",
    "DebugRuleConfigurations",
    "TensorBoardOutputConfig",
    "ExperimentConfig",
    "ProfilerConfig",
    "ProfilerRuleConfigurations",
    "Environment",
    "RetryStrategy",
)
_PROCESSING_RECORD_KEYS = (
    "ProcessingJobStatus",
    "CreationTime",
    "LastModifiedTime",
    "ProcessingStartTime",
    "ProcessingEndTime",
    "FailureReason",
    "ExitMessage",
)
_SCORE = "FinalHyperParameterTuningJobObjectiveMetric"


def aware(value: Any, key: str = "") -> Any:
    """Epoch seconds in a record -> the timezone-aware datetimes boto3 returns."""
    if key in TIME_FIELDS and isinstance(value, int | float):
        return datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, dict):
        return {k: aware(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [aware(v, key) for v in value]
    return value


def plain(request: dict[str, Any]) -> dict[str, Any]:
    """A deep, JSON-safe copy of a request (datetimes as epoch seconds, null members dropped as
    Step Functions may pass `"VpcConfig.$"` paths that resolve to null)."""

    def default(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.timestamp()
        raise TypeError(f"{type(value).__name__} is not JSON serialisable")

    def drop_nulls(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: drop_nulls(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [drop_nulls(v) for v in value]
        return value

    result: dict[str, Any] = drop_nulls(json.loads(json.dumps(request, default=default)))
    return result


def _copy_present(target: dict[str, Any], source: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        if key in source:
            target[key] = source[key]


# -- training and processing jobs ---------------------------------------------------------------------


def training_description(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """DescribeTrainingJob's response for a training job's record."""
    job = record["request"]
    response: dict[str, Any] = {
        "TrainingJobName": name,
        "TrainingJobArn": record["TrainingJobArn"],
        "TrainingJobStatus": record["TrainingJobStatus"],
        "SecondaryStatus": record["SecondaryStatus"],
        "HyperParameters": job.get("HyperParameters") or {},
        "AlgorithmSpecification": job["AlgorithmSpecification"],
        "RoleArn": job["RoleArn"],
        "InputDataConfig": job.get("InputDataConfig") or [],
        "OutputDataConfig": job["OutputDataConfig"],
        "ResourceConfig": job["ResourceConfig"],
        "StoppingCondition": job["StoppingCondition"],
        "CreationTime": record["CreationTime"],
        "LastModifiedTime": record["LastModifiedTime"],
        "SecondaryStatusTransitions": record["SecondaryStatusTransitions"],
        "EnableNetworkIsolation": bool(job.get("EnableNetworkIsolation", False)),
        "EnableInterContainerTrafficEncryption": bool(
            job.get("EnableInterContainerTrafficEncryption", False)
        ),
        "EnableManagedSpotTraining": bool(job.get("EnableManagedSpotTraining", False)),
        "ModelArtifacts": record.get("ModelArtifacts") or {"S3ModelArtifacts": ""},
        INTERRUPTIONS_FIELD: record.get("Interruptions") or [],
    }
    _copy_present(response, record, _TRAINING_RECORD_KEYS)
    _copy_present(response, job, _TRAINING_REQUEST_KEYS)
    result: dict[str, Any] = aware(response)
    return result


def training_summary(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """A ListTrainingJobs entry (times as epoch seconds). No WarmPoolStatus: the embedded stack keeps no
    warm pools."""
    summary = {
        "TrainingJobName": name,
        "TrainingJobArn": record["TrainingJobArn"],
        "CreationTime": record["CreationTime"],
        "LastModifiedTime": record["LastModifiedTime"],
        "TrainingJobStatus": record["TrainingJobStatus"],
        "SecondaryStatus": record["SecondaryStatus"],
    }
    _copy_present(summary, record, ("TrainingEndTime",))
    _copy_present(summary, record["request"]["ResourceConfig"], ("TrainingPlanArn",))
    return summary


def processing_description(record: dict[str, Any]) -> dict[str, Any]:
    """DescribeProcessingJob's response: the request (less its tags) and the job's status and times."""
    response = {k: v for k, v in record["request"].items() if k != "Tags"}
    response["ProcessingJobArn"] = record["ProcessingJobArn"]
    _copy_present(response, record, _PROCESSING_RECORD_KEYS)
    result: dict[str, Any] = aware(response)
    return result


def processing_summary(record: dict[str, Any]) -> dict[str, Any]:
    """A ListProcessingJobs entry (times as epoch seconds)."""
    summary = {
        "ProcessingJobName": record["request"]["ProcessingJobName"],
        "ProcessingJobArn": record["ProcessingJobArn"],
        "CreationTime": record["CreationTime"],
        "LastModifiedTime": record["LastModifiedTime"],
        "ProcessingJobStatus": record["ProcessingJobStatus"],
    }
    _copy_present(summary, record, ("ProcessingEndTime", "FailureReason", "ExitMessage"))
    return summary


# -- tuning jobs ---------------------------------------------------------------------------------------


def trial_summaries(
    name: str, record: dict[str, Any], trainings: dict[str, dict[str, Any] | None]
) -> list[dict[str, Any]]:
    """The TrainingJobSummaries of a tuning job's trials, from its record and theirs."""
    objective = record["request"]["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]
    summaries = []
    for trial in record["Trials"]:
        training = trainings.get(trial["TrainingJobName"])
        if training is not None:
            summaries.append(_trial_summary(name, trial, training, objective))
    return summaries


def _trial_summary(
    name: str, trial: dict[str, Any], training: dict[str, Any], objective: dict[str, Any]
) -> dict[str, Any]:
    status = training["TrainingJobStatus"]
    value = objective_value(training, objective["MetricName"])
    summary: dict[str, Any] = {
        "TrainingJobName": trial["TrainingJobName"],
        "TrainingJobArn": training["TrainingJobArn"],
        "TuningJobName": name,
        "CreationTime": training["CreationTime"],
        "TrainingJobStatus": status,
        "TunedHyperParameters": trial["TunedHyperParameters"],
        "ObjectiveStatus": "Succeeded"
        if value is not None
        else ("Failed" if status in TERMINAL else "Pending"),
    }
    _copy_present(summary, training, ("TrainingStartTime", "TrainingEndTime", "FailureReason"))
    if value is not None:
        summary[_SCORE] = {"Type": objective["Type"], "MetricName": objective["MetricName"], "Value": value}
    return summary


def status_counters(summaries: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """TrainingJobStatusCounters and ObjectiveStatusCounters of a tuning job's trials."""
    counters = {"Completed": 0, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0, "Stopped": 0}
    objectives = {"Succeeded": 0, "Pending": 0, "Failed": 0}
    for summary in summaries:
        status = summary["TrainingJobStatus"]
        if status in ACTIVE:
            counters["InProgress"] += 1
        elif status == "Failed":
            retryable = str(summary.get("FailureReason", "")).startswith("InternalServerError")
            counters["RetryableError" if retryable else "NonRetryableError"] += 1
        else:
            counters[status] += 1
        objectives[summary["ObjectiveStatus"]] += 1
    return counters, objectives


def tuning_description(
    name: str,
    record: dict[str, Any],
    summaries: list[dict[str, Any]],
    parent_summaries: list[dict[str, Any]],
) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob's response; `parent_summaries` are the trials of the warm start
    parents, which count for OverallBestTrainingJob."""
    job = record["request"]
    objective_type = job["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]["Type"]
    counters, objectives = status_counters(summaries)
    response: dict[str, Any] = {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobArn": record["HyperParameterTuningJobArn"],
        "HyperParameterTuningJobConfig": job["HyperParameterTuningJobConfig"],
        "TrainingJobDefinition": job["TrainingJobDefinition"],
        "HyperParameterTuningJobStatus": record["HyperParameterTuningJobStatus"],
        "CreationTime": record["CreationTime"],
        "LastModifiedTime": record["LastModifiedTime"],
        "TrainingJobStatusCounters": counters,
        "ObjectiveStatusCounters": objectives,
    }
    _copy_present(response, record, ("HyperParameterTuningEndTime", "FailureReason"))
    if job.get("WarmStartConfig"):
        response["WarmStartConfig"] = job["WarmStartConfig"]
    best = best_trial(summaries, objective_type)
    if best is not None:
        response["BestTrainingJob"] = best
    if job.get("WarmStartConfig"):
        overall = best_trial([*summaries, *parent_summaries], objective_type)
        if overall is not None:
            response["OverallBestTrainingJob"] = overall
    result: dict[str, Any] = aware(response)
    return result


def tuning_summary(name: str, record: dict[str, Any], summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """A ListHyperParameterTuningJobs entry (times as epoch seconds); `summaries` are its trials'."""
    config = record["request"]["HyperParameterTuningJobConfig"]
    counters, objectives = status_counters(summaries)
    summary = {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobArn": record["HyperParameterTuningJobArn"],
        "HyperParameterTuningJobStatus": record["HyperParameterTuningJobStatus"],
        "Strategy": config["Strategy"],
        "CreationTime": record["CreationTime"],
        "LastModifiedTime": record["LastModifiedTime"],
        "TrainingJobStatusCounters": counters,
        "ObjectiveStatusCounters": objectives,
    }
    _copy_present(summary, record, ("HyperParameterTuningEndTime",))
    _copy_present(summary, config, ("ResourceLimits",))
    return summary


def best_trial(summaries: list[dict[str, Any]], objective_type: str) -> dict[str, Any] | None:
    scored = [s for s in summaries if _SCORE in s]
    if not scored:
        return None
    sign = 1.0 if objective_type == "Maximize" else -1.0
    return max(scored, key=lambda s: sign * float(s[_SCORE]["Value"]))
