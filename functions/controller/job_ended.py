"""When a training job of a run ends (EventBridge "SageMaker Training Job State Change"): drop its
checkpoints, and add a tuning trial's training and billable seconds to the run's totals.

The trials of one tuning job share its CheckpointConfig.S3Uri (HyperParameterTrainingJobDefinition has
one CheckpointConfig; each trial writes under its own job name, /opt/ml/checkpoints/<job>/<host>/), and
SageMaker copies everything under S3Uri into a job's LocalPath when it starts ("Use checkpoints in
Amazon SageMaker"): the checkpoints of an ended job are dropped so that a later trial downloads only
those of the trials still running. An ended job is never resumed, and evaluations read copies.

The times are what DescribeTrainingJob says of each trial, counted once per trial (runs.add_job_time) as
trials end, so that picking the best candidate reads sums instead of describing every trial
(best_candidate.py counts any trial whose event it finds missing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controller import names, runs
from controller.config import Config
from controller.observability import logger

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.event_bridge_event import EventBridgeEvent
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef
    from mypy_boto3_sagemaker import SageMakerClient

TERMINAL = ("Completed", "Failed", "Stopped")
DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys (Amazon S3 API Reference)


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


def drop_checkpoints(dataset: str, run_id: str, training_job: str, *, config: Config, s3: S3Client) -> int:
    """Delete the current objects under the job's checkpoint prefix; how many."""
    prefix = names.job_checkpoint_prefix(dataset, run_id, training_job)
    dropped = 0
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=config.artifact_bucket, Prefix=prefix, PaginationConfig={"PageSize": DELETE_BATCH}
    ):
        keys: list[ObjectIdentifierTypeDef] = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=config.artifact_bucket, Delete={"Objects": keys, "Quiet": True})
            dropped += len(keys)
    return dropped


def on_training_job_ended(
    event: EventBridgeEvent,
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sagemaker: SageMakerClient,
    s3: S3Client,
) -> dict[str, Any]:
    detail = event.detail
    tags = detail.get("Tags") or {}
    if isinstance(tags, list):
        tags = {t["Key"]: t["Value"] for t in tags}
    dataset, run_id = tags.get(names.TAG_DATASET), tags.get(names.TAG_RUN_ID)
    name, status = str(detail.get("TrainingJobName", "")), str(detail.get("TrainingJobStatus", ""))
    if not dataset or not run_id or not name or status not in TERMINAL:
        return {"action": "ignored", "reason": "not an ended training job of a run"}
    dropped = drop_checkpoints(dataset, run_id, name, config=config, s3=s3)
    description = dict(sagemaker.describe_training_job(TrainingJobName=name))
    timed = bool(description.get("TuningJobArn")) and count_trial(
        dataset, run_id, description, config=config, dynamodb=dynamodb
    )
    logger.info(
        "training job ended", extra={"job": name, "status": status, "dropped": dropped, "timed": timed}
    )
    return {"action": "ended", "job": name, "checkpoints_dropped": dropped, "timed": timed}
