"""Evaluate checkpoints off the training instance while training runs, for an accuracy-against-step curve.

Three events reach this function (EventBridge): a checkpoint object written under the run's checkpoint
prefix (every Nth of a training job starts an evaluation Processing job, tagged with its run and step), the
state change of such a job (its evaluation.json becomes a point of the run's curve), and the end of a
training or tuning job of the run (job_ended.py: checkpoints no job resumes from are dropped, a trial's
time counted).

The trainer keeps only its newest checkpoints and SageMaker deletes the pruned ones in S3 too ("Use
checkpoints in Amazon SageMaker"), while a Processing job takes minutes to start: so the checkpoint's
version named by the event (the artifact bucket is versioned; a deleted version stays a noncurrent one
for a day) is first copied out of the checkpoint prefix, and the job reads the copy. The trainer cannot
keep checkpoints until they are evaluated instead: it runs without network access and cannot learn that.
A run starts at most CheckpointEvaluationMaxPerRun jobs (a counter in its record, claimed atomically with
the checkpoint's count), and its curve holds at most as many points. A claimed checkpoint stays pending in
the record until its job exists: a delivery that failed before that (a throttle, a time-out, a crash) is
retried by Lambda, and the retry makes the job, by its own name, so at most once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from aws_lambda_powertools.utilities.data_classes.event_bridge_event import EventBridgeEvent
from aws_lambda_powertools.utilities.data_classes.event_source import event_source
from aws_lambda_powertools.utilities.data_classes.s3_event import S3EventBridgeNotificationEvent
from botocore.exceptions import ClientError

from controller import clients, job_ended, names, runs
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
    return f"{names.CHECKPOINT_EVAL_JOB_PREFIX}{digest}-{step:09d}"


COUNTS, LAST_STEPS = "checkpoint_counts", "checkpoint_last_steps"
CLAIM_ATTEMPTS = 10  # reads and conditional writes of the run's counts (a lost race reads again)


def _init_counts(dataset: str, run_id: str, *, config: Config, dynamodb: DynamoDBClient) -> None:
    """The per-job maps (a nested path needs its parent)."""
    dynamodb.update_item(
        TableName=config.runs_table,
        Key=serialize({names.RUNS_PK: dataset, names.RUNS_SK: run_id}),
        UpdateExpression="SET #counts = if_not_exists(#counts, :empty), #last = if_not_exists(#last, :empty)",
        ExpressionAttributeNames={"#counts": COUNTS, "#last": LAST_STEPS},
        ExpressionAttributeValues=serialize({":empty": {}}),
    )


def count_and_claim(
    dataset: str, run_id: str, training_job: str, step: int, *, config: Config, dynamodb: DynamoDBClient
) -> dict[str, Any] | None:
    """Count this checkpoint of `training_job` and, when it is due (every Nth) and the run has a place
    left, claim one: None when the checkpoint holds a place whose job may not exist yet (claimed now, or
    by an earlier delivery that failed before it made the job: a retry makes it); else why it starts none.

    One conditional write counts the checkpoint, claims the place (CheckpointEvaluationMaxPerRun, never
    exceeded) and marks the job pending, so no failure can leave a counted step's evaluation unknown. S3's
    Object Created event of a checkpoint may come twice, or after a later one's (EventBridge delivers at
    least once, in no set order): a step counts once, and only after the job's last counted step."""
    name = job_name(training_job, step)
    limit, every = config.checkpoint_eval_max_per_run, config.checkpoint_eval_every
    for _ in range(CLAIM_ATTEMPTS):
        found = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb)
        if found is None or found["status"] not in runs.ACTIVE_STATUSES:
            return {"action": "ignored", "reason": f"run {run_id} is not active"}
        record = cast(Mapping[str, Any], found)
        if name in record.get(runs.PENDING_EVALUATIONS, ()):
            return None
        started = int(record.get(runs.STARTED_EVALUATIONS, 0))
        if started >= limit:
            return {"action": "skipped", "reason": _limit_reason(config)}
        if COUNTS not in record or LAST_STEPS not in record:
            _init_counts(dataset, run_id, config=config, dynamodb=dynamodb)
            continue
        last = record[LAST_STEPS].get(training_job)
        if last is not None and int(last) >= step:
            return {"action": "duplicate", "reason": f"step {step} of {training_job} was counted already"}
        previous = int(record[COUNTS].get(training_job, 0))
        due = (previous + 1) % every == 0
        update = "SET #counts.#job = :count, #last.#job = :step"
        condition = (
            "attribute_exists(#counts) AND attribute_exists(#last) "
            "AND (attribute_not_exists(#last.#job) OR #last.#job < :step) AND "
            + ("#counts.#job = :previous" if previous else "attribute_not_exists(#counts.#job)")
        )
        attribute_names = {"#counts": COUNTS, "#last": LAST_STEPS, "#job": training_job}
        values: dict[str, Any] = {":count": previous + 1, ":step": step}
        if previous:
            values[":previous"] = previous
        if due:
            update += " ADD #started :one, #pending :name"
            condition += " AND (attribute_not_exists(#started) OR #started < :limit)"
            attribute_names |= {"#started": runs.STARTED_EVALUATIONS, "#pending": runs.PENDING_EVALUATIONS}
            values |= {":one": 1, ":name": {name}, ":limit": limit}
        try:
            dynamodb.update_item(
                TableName=config.runs_table,
                Key=serialize({names.RUNS_PK: dataset, names.RUNS_SK: run_id}),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=attribute_names,
                ExpressionAttributeValues=serialize(values),
            )
        except dynamodb.exceptions.ConditionalCheckFailedException:
            continue  # another delivery counted or claimed meanwhile: read again
        if not due:
            return {
                "action": "skipped",
                "reason": f"checkpoint {previous + 1} of {training_job}; every {every}th",
            }
        return None
    raise RuntimeError(f"the counts of run {run_id} kept changing under step {step} of {training_job}")


def processing_request(
    *,
    name: str,
    dataset: str,
    run_id: str,
    step: int,
    training_job: str,
    checkpoint_uri: str,
    config: Config,
    volume_gb: int = container.EVALUATION_VOLUME_BASE_GB,
) -> dict[str, Any]:
    """The evaluation of one checkpoint on the run's validation split: the images that split lists (a
    ManifestFile the freezing job wrote) and its manifest lines, on a volume sized from the split."""
    settings = config.settings
    artifact = f"s3://{config.artifact_bucket}/"

    def s3_input(input_name: str, uri: str, local: str, kind: str = "S3Prefix") -> dict[str, Any]:
        return {
            "InputName": input_name,
            "S3Input": {"S3Uri": uri, "LocalPath": local, "S3DataType": kind, "S3InputMode": "File"},
        }

    frozen = artifact + names.frozen_prefix(dataset, run_id)

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
                frozen + container.VALIDATION_MANIFEST_FILE,
                container.EVALUATION_DATA_DIR,
                "ManifestFile",
            ),
            s3_input(
                container.CHANNEL_MANIFEST,
                f"{frozen}{container.VALIDATION_LINES_DIR}/",
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
                "InstanceType": str(settings["evaluation_instance_type"]),
                "VolumeSizeInGB": volume_gb,
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


# CopyObject copies an object of at most 5 GB in one call (Amazon S3 API Reference, CopyObject).
MAX_COPY_BYTES = 5 * 1024**3


class CheckpointGoneError(Exception):
    """The checkpoint version named by the event can no longer be copied."""


def keep_checkpoint(
    key: str, version: str | None, size: int | None, copy_key: str, *, config: Config, s3: S3Client
) -> str:
    """Copy the checkpoint `key` (its `version`) to `copy_key`, where no pruning reaches it; its S3 URI."""
    if size is not None and size > MAX_COPY_BYTES:
        raise CheckpointGoneError(f"{key} has {size} bytes, more than CopyObject copies (5 GB)")
    source: dict[str, str] = {"Bucket": config.artifact_bucket, "Key": key}
    if version:
        source["VersionId"] = version
    try:
        # a checksum of the copy's own bytes (a multipart checkpoint's is one of its parts)
        s3.copy_object(
            Bucket=config.artifact_bucket,
            Key=copy_key,
            CopySource=source,  # type: ignore[arg-type]
            ChecksumAlgorithm="CRC32",
        )
    except ClientError as error:
        code = error.response["Error"]["Code"]
        if code not in ("NoSuchKey", "NoSuchVersion", "404", "InvalidRequest"):
            raise
        if not _copied(copy_key, config=config, s3=s3):
            raise CheckpointGoneError(f"{key} (version {version or 'current'}) is gone: {code}") from error
    return f"s3://{config.artifact_bucket}/{copy_key}"


def _copied(copy_key: str, *, config: Config, s3: S3Client) -> bool:
    """Whether an earlier delivery of the checkpoint's event copied it (then it may have made its job)."""
    try:
        s3.head_object(Bucket=config.artifact_bucket, Key=copy_key)
    except ClientError as error:
        if error.response["Error"]["Code"] in ("404", "NoSuchKey"):
            return False
        raise
    return True


def _limit_reason(config: Config) -> str:
    return (
        f"the run started its {config.checkpoint_eval_max_per_run} checkpoint evaluations "
        "(CheckpointEvaluationMaxPerRun)"
    )


def on_checkpoint(
    event: S3EventBridgeNotificationEvent,
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sagemaker: SageMakerClient,
    s3: S3Client,
) -> dict[str, Any]:
    detail = event.detail.object
    key = str(detail["key"])  # as S3's EventBridge event holds it (`.key` would unquote it)
    match = names.CHECKPOINT_KEY_RE.match(key)
    if match is None or config.checkpoint_eval_every <= 0 or config.checkpoint_eval_max_per_run <= 0:
        return {"action": "ignored", "reason": "not a checkpoint, or checkpoint evaluation is off"}
    if detail.get("size") == 0:
        return {"action": "ignored", "reason": "an ended trial's checkpoint, emptied (job_ended.py)"}
    dataset, run_id, job, step = match["dataset"], match["run_id"], match["job"], int(match["step"])
    skip = count_and_claim(dataset, run_id, job, step, config=config, dynamodb=dynamodb)
    if skip is not None:
        return skip
    # The job's name is the checkpoint's own: a retry or a copy of the event makes it at most once.
    name = job_name(job, step)
    try:
        copy = keep_checkpoint(
            key,
            detail.get("version-id"),
            int(detail["size"]) if detail.get("size") is not None else None,
            names.checkpoint_copy_key(dataset, run_id, job, step),
            config=config,
            s3=s3,
        )
        found = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb)
        volume = found.get("evaluation_volume_gb") if found is not None else None
        request = processing_request(
            name=name,
            dataset=dataset,
            run_id=run_id,
            step=step,
            training_job=job,
            checkpoint_uri=copy,
            config=config,
            volume_gb=int(volume or container.EVALUATION_VOLUME_BASE_GB),
        )
        sagemaker.create_processing_job(**request)
    except (CheckpointGoneError, ClientError) as error:
        result = _not_started(name, key, error)  # or raised: the place stays pending, for the retry
        if result["action"] == "duplicate":  # an earlier delivery made the job
            runs.checkpoint_evaluation_made(
                dataset, run_id, name, table_name=config.runs_table, client=dynamodb
            )
        else:
            runs.release_checkpoint_evaluation(
                dataset, run_id, name, table_name=config.runs_table, client=dynamodb
            )
        return result
    runs.checkpoint_evaluation_made(dataset, run_id, name, table_name=config.runs_table, client=dynamodb)
    metrics.add_metric(name=names.METRIC_CHECKPOINT_EVALS, unit="Count", value=1)
    logger.info("checkpoint evaluation started", extra={"job": name, "step": step, "training_job": job})
    return {"action": "started", "job": name, "step": step}


def _not_started(name: str, key: str, error: CheckpointGoneError | ClientError) -> dict[str, Any]:
    """What became of a checkpoint whose evaluation did not start, or the error (a throttle, a time-out:
    the event's retry makes the job)."""
    if isinstance(error, CheckpointGoneError):
        logger.warning("checkpoint not evaluated", extra={"key": key, "reason": str(error)})
        return {"action": "skipped", "reason": str(error)}
    code = error.response["Error"]["Code"]
    if "already exists" in str(error) or code == "ResourceInUse":
        return {"action": "duplicate", "job": name}
    if code == "ResourceLimitExceeded":
        # The account's Processing quota is full: this checkpoint goes unevaluated, its place given back;
        # the run's own jobs are not affected.
        logger.warning("checkpoint evaluation not started", extra={"job": name, "reason": str(error)})
        return {"action": "not-started", "job": name, "reason": str(error)}
    raise error


def job_tags(event: EventBridgeEvent, *, sagemaker: SageMakerClient) -> dict[str, str]:
    """The ended Processing job's tags. Its state-change event has none (AWS's documented sample shows
    `Tags` in the training, tuning, transform and endpoint events only), so they are read with ListTags on
    the job's ARN: the event's `resources`, as EventBridge sends every event."""
    arn = next(iter(event.resources), "") or str(event.detail.get("ProcessingJobArn", ""))
    tags: dict[str, str] = {}
    request: dict[str, Any] = {"ResourceArn": arn, "MaxResults": 50}
    while True:
        page = sagemaker.list_tags(**request)
        tags.update({str(t["Key"]): str(t["Value"]) for t in page.get("Tags", [])})
        if not page.get("NextToken"):
            return tags
        request["NextToken"] = page["NextToken"]


def on_job_done(
    event: EventBridgeEvent,
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    s3: S3Client,
    sagemaker: SageMakerClient,
) -> dict[str, Any]:
    detail = event.detail
    tags = job_tags(event, sagemaker=sagemaker)
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
    if not runs.append_checkpoint_evaluation(
        dataset,
        run_id,
        point,
        limit=config.checkpoint_eval_max_per_run,
        table_name=config.runs_table,
        client=dynamodb,
    ):
        return {
            "action": "not-recorded",
            "reason": f"the curve of run {run_id} is full or gone, or holds this job's point already",
            **point,
        }
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
        return on_checkpoint(checkpoint, config=config, dynamodb=dynamodb, sagemaker=sagemaker, s3=s3)
    if kind == "SageMaker Processing Job State Change":
        return on_job_done(event, config=config, dynamodb=dynamodb, s3=s3, sagemaker=sagemaker)
    if kind == "SageMaker Training Job State Change":
        return job_ended.on_training_job_ended(
            event, config=config, dynamodb=dynamodb, sagemaker=sagemaker, s3=s3
        )
    if kind == "SageMaker HyperParameter Tuning Job State Change":
        return job_ended.on_tuning_job_ended(event, config=config, sagemaker=sagemaker, s3=s3)
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
