"""Evaluate checkpoints off the training instance while training runs, for an accuracy-against-step curve.

Two events reach this function (EventBridge): a checkpoint object written under the run's checkpoint prefix
(every Nth of a training job starts an evaluation Processing job, tagged with its run and step), and the
state change of such a job (its evaluation.json becomes a point of the run's curve).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes.event_bridge_event import EventBridgeEvent
from aws_lambda_powertools.utilities.data_classes.event_source import event_source
from aws_lambda_powertools.utilities.data_classes.s3_event import S3EventBridgeNotificationEvent
from botocore.exceptions import ClientError

from controller import clients, names, runs
from controller.config import Config, get_config
from controller.observability import logger, metrics, tracer
from controller.runs import serialize
from controller.s3io import read_json
from retrain_contract import container

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sagemaker import SageMakerClient


def job_name(training_job: str, step: int) -> str:
    digest = hashlib.sha1(training_job.encode(), usedforsecurity=False).hexdigest()[:10]
    return f"rt-ckpt-{digest}-{step:09d}"


def count_checkpoint(
    dataset: str, run_id: str, training_job: str, *, config: Config, dynamodb: DynamoDBClient
) -> int:
    """The number of checkpoints of `training_job` seen so far (this one included)."""
    response = dynamodb.update_item(
        TableName=config.runs_table,
        Key=serialize({names.RUNS_PK: dataset, names.RUNS_SK: run_id}),
        UpdateExpression="ADD #counts.#job :one",
        ConditionExpression="attribute_exists(#counts)",
        ExpressionAttributeNames={"#counts": "checkpoint_counts", "#job": training_job},
        ExpressionAttributeValues=serialize({":one": 1}),
        ReturnValues="UPDATED_NEW",
    )
    return int(runs.deserialize(response["Attributes"])["checkpoint_counts"][training_job])


def _count(dataset: str, run_id: str, training_job: str, *, config: Config, dynamodb: DynamoDBClient) -> int:
    try:
        return count_checkpoint(dataset, run_id, training_job, config=config, dynamodb=dynamodb)
    except dynamodb.exceptions.ConditionalCheckFailedException:
        dynamodb.update_item(
            TableName=config.runs_table,
            Key=serialize({names.RUNS_PK: dataset, names.RUNS_SK: run_id}),
            UpdateExpression="SET #counts = if_not_exists(#counts, :empty)",
            ExpressionAttributeNames={"#counts": "checkpoint_counts"},
            ExpressionAttributeValues=serialize({":empty": {}}),
        )
        return count_checkpoint(dataset, run_id, training_job, config=config, dynamodb=dynamodb)


def processing_request(
    *, name: str, dataset: str, run_id: str, step: int, training_job: str, checkpoint_uri: str, config: Config
) -> dict[str, Any]:
    settings = config.settings
    artifact = f"s3://{config.artifact_bucket}/"

    def s3_input(input_name: str, uri: str, local: str) -> dict[str, Any]:
        return {
            "InputName": input_name,
            "S3Input": {"S3Uri": uri, "LocalPath": local, "S3DataType": "S3Prefix", "S3InputMode": "File"},
        }

    subnets = [s for s in str(settings.get("subnets", "")).split(",") if s]
    groups = [g for g in str(settings.get("security_groups", "")).split(",") if g]
    network: dict[str, Any] = {"EnableNetworkIsolation": True, "EnableInterContainerTrafficEncryption": True}
    if subnets and groups:
        network["VpcConfig"] = {"Subnets": subnets, "SecurityGroupIds": groups}
    return {
        "ProcessingJobName": name,
        "RoleArn": config.sagemaker_role_arn,
        "AppSpecification": {
            "ImageUri": str(settings.get("training_image", "")),
            "ContainerEntrypoint": container.entrypoint(container.EVALUATE_PROGRAM),
            "ContainerArguments": container.evaluation_arguments(
                f"{container.EVALUATION_MODEL_DIR}/{checkpoint_uri.rsplit('/', 1)[-1]}"
            ),
        },
        "ProcessingInputs": [
            s3_input(container.EVALUATION_INPUT_MODEL, checkpoint_uri, container.EVALUATION_MODEL_DIR),
            s3_input(
                container.CHANNEL_TRAIN,
                f"s3://{config.data_bucket}/{names.dataset_prefix(dataset)}",
                container.EVALUATION_DATA_DIR,
            ),
            s3_input(
                container.CHANNEL_MANIFEST,
                artifact + names.manifest_prefix(dataset, run_id),
                container.EVALUATION_MANIFEST_DIR,
            ),
        ],
        "ProcessingOutputConfig": {
            "Outputs": [
                {
                    "OutputName": container.EVALUATION_OUTPUT,
                    "S3Output": {
                        "S3Uri": artifact + names.checkpoint_eval_prefix(dataset, run_id, training_job, step),
                        "LocalPath": container.PROCESSING_OUTPUT_DIR,
                        "S3UploadMode": "EndOfJob",
                    },
                }
            ]
        },
        "ProcessingResources": {
            "ClusterConfig": {
                "InstanceCount": 1,
                "InstanceType": str(settings.get("evaluation_instance_type", "ml.m5.xlarge")),
                "VolumeSizeInGB": 30,
            }
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "NetworkConfig": network,
        "Tags": [
            {"Key": names.TAG_DATASET, "Value": dataset},
            {"Key": names.TAG_RUN_ID, "Value": run_id},
            {"Key": names.TAG_CHECKPOINT_STEP, "Value": str(step)},
            {"Key": names.TAG_TRAINING_JOB, "Value": training_job},
        ],
    }


def on_checkpoint(
    event: S3EventBridgeNotificationEvent,
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sagemaker: SageMakerClient,
) -> dict[str, Any]:
    key = str(event.detail.object["key"])  # as S3's EventBridge event holds it (`.key` would unquote it)
    match = names.CHECKPOINT_KEY_RE.match(key)
    if match is None or config.checkpoint_eval_every <= 0:
        return {"action": "ignored", "reason": "not a checkpoint, or checkpoint evaluation is off"}
    dataset, run_id, job = match["dataset"], match["run_id"], match["job"]
    step = int(match["step"])
    record = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb)
    if record is None or record["status"] not in ("STARTING", "RUNNING"):
        return {"action": "ignored", "reason": f"run {run_id} is not active"}
    count = _count(dataset, run_id, job, config=config, dynamodb=dynamodb)
    if count % config.checkpoint_eval_every != 0:
        return {
            "action": "skipped",
            "reason": f"checkpoint {count} of {job}; every {config.checkpoint_eval_every}th",
        }
    name = job_name(job, step)
    request = processing_request(
        name=name,
        dataset=dataset,
        run_id=run_id,
        step=step,
        training_job=job,
        checkpoint_uri=f"s3://{config.artifact_bucket}/{key}",
        config=config,
    )
    try:
        sagemaker.create_processing_job(**request)
    except ClientError as error:
        if "already exists" in str(error) or error.response["Error"]["Code"] == "ResourceInUse":
            return {"action": "duplicate", "job": name}
        raise
    metrics.add_metric(name=names.METRIC_CHECKPOINT_EVALS, unit="Count", value=1)
    logger.info("checkpoint evaluation started", extra={"job": name, "step": step, "training_job": job})
    return {"action": "started", "job": name, "step": step}


def on_job_done(
    event: EventBridgeEvent, *, config: Config, dynamodb: DynamoDBClient, s3: S3Client
) -> dict[str, Any]:
    detail = event.detail
    tags = detail.get("Tags") or {}
    if isinstance(tags, list):
        tags = {t["Key"]: t["Value"] for t in tags}
    dataset, run_id = tags.get(names.TAG_DATASET), tags.get(names.TAG_RUN_ID)
    training_job = tags.get(names.TAG_TRAINING_JOB)
    if not dataset or not run_id or not training_job or names.TAG_CHECKPOINT_STEP not in tags:
        return {"action": "ignored", "reason": "not a checkpoint evaluation job"}
    step = int(tags[names.TAG_CHECKPOINT_STEP])
    point: runs.CheckpointEvaluation = {
        "step": step,
        "training_job": str(training_job),
        "job": str(detail.get("ProcessingJobName", "")),
        "status": str(detail.get("ProcessingJobStatus", "")),
    }
    if point["status"] == "Completed":
        prefix = names.checkpoint_eval_prefix(dataset, run_id, training_job, step)
        report = read_json(
            f"s3://{config.artifact_bucket}/{prefix}{container.EVALUATION_FILE}",
            s3=s3,
            what=f"evaluation of {training_job}'s step {step}",
        )
        point["top1"] = float(report["top1"])
        point["top3"] = float(report.get("top3", report["top1"]))
    runs.append_checkpoint_evaluation(dataset, run_id, point, table_name=config.runs_table, client=dynamodb)
    return {"action": "recorded", **point}


def evaluate_checkpoints(
    event: EventBridgeEvent,
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sagemaker: SageMakerClient,
    s3: S3Client,
) -> dict[str, Any]:
    kind = event.detail_type
    if kind == "Object Created":
        checkpoint = S3EventBridgeNotificationEvent(event.raw_event)
        return on_checkpoint(checkpoint, config=config, dynamodb=dynamodb, sagemaker=sagemaker)
    if kind == "SageMaker Processing Job State Change":
        return on_job_done(event, config=config, dynamodb=dynamodb, s3=s3)
    return {"action": "ignored", "reason": f"unexpected event {kind!r}"}


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
@event_source(data_class=EventBridgeEvent)
def handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    return evaluate_checkpoints(
        event,
        config=get_config(),
        dynamodb=clients.dynamodb(),
        sagemaker=clients.sagemaker(),
        s3=clients.s3(),
    )
