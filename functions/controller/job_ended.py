"""When a training or tuning job of a run ends (EventBridge "SageMaker Training Job State Change",
"SageMaker HyperParameter Tuning Job State Change"): free the checkpoints nobody resumes from, and add a
tuning trial's training and billable seconds to the run's totals.

The trials of one tuning job share its CheckpointConfig.S3Uri (HyperParameterTrainingJobDefinition has
one CheckpointConfig; each trial writes under its own job name, /opt/ml/checkpoints/<job>/<host>/), and
SageMaker copies everything under S3Uri into a job's LocalPath when it starts or restarts ("Use
checkpoints in Amazon SageMaker"). That copy lists the prefix, then reads each object: an object deleted
in between fails it, and the tuning job starts its next trial in the very slot an ended trial frees,
while that trial's end event is handled. So an ended trial's checkpoints are emptied in place (each
overwritten with zero bytes: what a starting trial listed stays readable, and costs it nothing to copy),
and deleted when the tuning job has ended and no trial of it starts again. The final training job has a
prefix of its own, deleted when it ends. An ended job is never resumed, and evaluations read copies.

The times are what DescribeTrainingJob says of each trial, counted once per trial (runs.add_job_time) as
trials end, so that picking the best candidate reads sums instead of describing every trial
(best_candidate.py counts any trial whose event it finds missing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from controller import names, runs
from controller.config import Config
from controller.observability import logger

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from aws_lambda_powertools.utilities.data_classes.event_bridge_event import EventBridgeEvent
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef, ObjectTypeDef
    from mypy_boto3_sagemaker import SageMakerClient

TERMINAL = ("Completed", "Failed", "Stopped")
DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys (Amazon S3 API Reference)
TRIALS_PAGE = 100  # ListTrainingJobsForHyperParameterTuningJob's MaxResults is at most 100
# A conditional PutObject's answers when the object is gone (404), another than listed (412) or being
# written or deleted at the same moment (409): "How to prevent object overwrites with conditional
# writes", Amazon S3 User Guide.
GONE_OR_CHANGED = ("NoSuchKey", "404", "PreconditionFailed", "412", "ConditionalRequestConflict", "409")


def job_seconds(description: dict[str, Any]) -> tuple[int, int]:
    """(training, billable) seconds of one described job; billable is the training time on demand."""
    training = int(description.get("TrainingTimeInSeconds") or 0)
    billable = int(description.get("BillableTimeInSeconds") or training)
    return training, billable


def count_trial(
    dataset: str,
    run_id: str,
    description: dict[str, Any],
    *,
    config: Config,
    dynamodb: DynamoDBClient,
) -> bool:
    """Add a described tuning trial's seconds to the run's totals, once; True when this call added them."""
    training, billable = job_seconds(description)
    return runs.add_job_time(
        dataset,
        run_id,
        str(description["TrainingJobName"]),
        training_seconds=training,
        billable_seconds=billable,
        table_name=config.runs_table,
        client=dynamodb,
    )


def _objects(prefix: str, *, config: Config, s3: S3Client) -> Iterator[list[ObjectTypeDef]]:
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=config.artifact_bucket, Prefix=prefix, PaginationConfig={"PageSize": DELETE_BATCH}
    ):
        yield page.get("Contents", [])


def drop_checkpoints(
    prefix: str, *, config: Config, s3: S3Client, keep: Callable[[str], bool] | None = None
) -> int:
    """Delete the current objects under `prefix` (those `keep` does not claim); how many."""
    dropped = 0
    for objects in _objects(prefix, config=config, s3=s3):
        keys: list[ObjectIdentifierTypeDef] = [
            {"Key": obj["Key"]} for obj in objects if keep is None or not keep(obj["Key"])
        ]
        if keys:
            s3.delete_objects(Bucket=config.artifact_bucket, Delete={"Objects": keys, "Quiet": True})
            dropped += len(keys)
    return dropped


def empty_checkpoints(prefix: str, *, config: Config, s3: S3Client) -> int:
    """Overwrite each non-empty object under `prefix` with zero bytes, as long as it is the object
    listed (a conditional write: the tuning job's end may have deleted it meanwhile, and an emptied copy
    must not come back after that); how many."""
    emptied = 0
    for objects in _objects(prefix, config=config, s3=s3):
        for obj in objects:
            if obj.get("Size", 0) == 0:
                continue
            try:
                s3.put_object(Bucket=config.artifact_bucket, Key=obj["Key"], Body=b"", IfMatch=obj["ETag"])
            except ClientError as error:
                if error.response["Error"]["Code"] not in GONE_OR_CHANGED:
                    raise
                continue
            emptied += 1
    return emptied


def event_tags(event: EventBridgeEvent) -> dict[str, str]:
    """A SageMaker state-change event's tags, as a map (the event holds one; a list is taken too)."""
    tags = event.detail.get("Tags") or {}
    if isinstance(tags, list):
        return {str(t["Key"]): str(t["Value"]) for t in tags}
    return {str(k): str(v) for k, v in tags.items()}


def _run_of(event: EventBridgeEvent) -> tuple[str | None, str | None]:
    tags = event_tags(event)
    return tags.get(names.TAG_DATASET), tags.get(names.TAG_RUN_ID)


def on_training_job_ended(
    event: EventBridgeEvent,
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sagemaker: SageMakerClient,
    s3: S3Client,
) -> dict[str, Any]:
    detail = event.detail
    dataset, run_id = _run_of(event)
    name, status = str(detail.get("TrainingJobName", "")), str(detail.get("TrainingJobStatus", ""))
    if not dataset or not run_id or not name or status not in TERMINAL:
        return {"action": "ignored", "reason": "not an ended training job of a run"}
    description = dict(sagemaker.describe_training_job(TrainingJobName=name))
    trial = bool(description.get("TuningJobArn"))
    timed = trial and count_trial(dataset, run_id, description, config=config, dynamodb=dynamodb)
    prefix = names.job_checkpoint_prefix(dataset, run_id, name)
    if trial:  # deleted once its tuning job ends (on_tuning_job_ended)
        freed = {"checkpoints_emptied": empty_checkpoints(prefix, config=config, s3=s3)}
    else:
        freed = {"checkpoints_dropped": drop_checkpoints(prefix, config=config, s3=s3)}
    logger.info("training job ended", extra={"job": name, "status": status, "timed": timed, **freed})
    return {"action": "ended", "job": name, "timed": timed, **freed}


def trial_names(tuning_job: str, *, sagemaker: SageMakerClient) -> list[str]:
    """The tuning job's trials: ceil(trials / 100) list calls (MaxTuningJobs is at most 500)."""
    found: list[str] = []
    request: dict[str, Any] = {"HyperParameterTuningJobName": tuning_job, "MaxResults": TRIALS_PAGE}
    while True:
        page = sagemaker.list_training_jobs_for_hyper_parameter_tuning_job(**request)
        found.extend(str(s["TrainingJobName"]) for s in page.get("TrainingJobSummaries", []))
        if not page.get("NextToken"):
            return found
        request["NextToken"] = page["NextToken"]


def on_tuning_job_ended(
    event: EventBridgeEvent, *, config: Config, sagemaker: SageMakerClient, s3: S3Client
) -> dict[str, Any]:
    """Drop the checkpoints of every trial of an ended tuning job, and nothing else under the run's
    prefix (the final job, which may already run, writes under its own name there)."""
    detail = event.detail
    dataset, run_id = _run_of(event)
    name = str(detail.get("HyperParameterTuningJobName", ""))
    status = str(detail.get("HyperParameterTuningJobStatus", ""))
    if not dataset or not run_id or not name or status not in TERMINAL:
        return {"action": "ignored", "reason": "not an ended tuning job of a run"}
    trials = set(trial_names(name, sagemaker=sagemaker))
    prefix = names.checkpoint_prefix(dataset, run_id)

    def not_a_trials(key: str) -> bool:
        return key[len(prefix) :].split("/", 1)[0] not in trials

    dropped = drop_checkpoints(prefix, config=config, s3=s3, keep=not_a_trials)
    logger.info(
        "tuning job ended", extra={"job": name, "status": status, "trials": len(trials), "dropped": dropped}
    )
    return {"action": "ended", "job": name, "trials": len(trials), "checkpoints_dropped": dropped}
