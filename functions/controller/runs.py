"""The run table: one record per training run, written by the Lambdas and read by the CLI.

Readers use `get_run` and `list_runs` only; numbers come back as int or float (not Decimal).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, NotRequired, Required, TypedDict, cast

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from controller import clients, names

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

RunStatus = Literal["STARTING", "RUNNING", "SUCCEEDED", "REJECTED", "NOT_NEEDED", "FAILED"]
ACTIVE_STATUSES: tuple[RunStatus, ...] = ("STARTING", "RUNNING")
FINAL_STATUSES: tuple[RunStatus, ...] = ("SUCCEEDED", "REJECTED", "NOT_NEEDED", "FAILED")


class RuleResult(TypedDict):
    rule: str
    status: str  # Debugger's words (NoIssuesFound, IssuesFound, Error), or open mode's WARN_ONLY verdicts
    step: NotRequired[int | None]
    detail: NotRequired[str]
    action: NotRequired[str]  # block | warn: what the gate does with a finding (retrain_contract.rules)
    blocking: NotRequired[bool]  # BlockingRules names the rule


class Evaluation(TypedDict, total=False):
    """Accuracy of one model on the run's frozen validation set (evaluation.json's headline numbers)."""

    top1: float
    top3: float
    job: str
    model_data: str
    checkpoint_step: int | None
    report_uri: str


class CheckpointEvaluation(TypedDict, total=False):
    """One point of the accuracy-against-step curve, measured off the training instance."""

    step: int
    training_job: str
    job: str
    status: str  # InProgress | Completed | Failed
    top1: float
    top3: float


class Gate(TypedDict):
    decision: Literal["accepted", "rejected", "not_needed"]  # not_needed: TrainWhen=drift
    reason: str


class Failure(TypedDict):
    error: str
    cause: str


class RunRecord(TypedDict, total=False):
    dataset: Required[str]
    run_id: Required[str]
    status: Required[RunStatus]
    trigger: str  # schedule | upload | manual
    execution_arn: str
    created_at: str  # ISO 8601, UTC
    updated_at: str
    finished_at: str
    cut: str  # uploads recorded before it are the run's (ISO 8601, UTC)
    manifest_uri: str
    manifest_size: int
    new_images: int
    accepted_uploads: int  # accepted uploads recorded before the cut (frozen, before balancing)
    # Per-label facts live in S3 (frozen_s3_uri: labels.json, class_counts.json), so that no record
    # grows with the labels; the record keeps their number and a sample.
    label_count: int
    labels_uri: str  # ["label", ...]
    class_counts_uri: (
        str  # {"class_counts": {label: {images, validation, train, train_lines}}, "excluded_labels"}
    )
    data_source: str  # fsx | s3
    class_balance: dict[str, str | int | float]  # the manifest's policy (balance.Policy.record)
    excluded_label_count: int
    validation_images: int  # the split every evaluation of the run reads
    evaluation_volume_gb: int  # its jobs' VolumeSizeInGB, from the split's bytes
    excluded_labels: dict[str, str]  # label -> why it was set aside (the first FROZEN_EXCLUDED_SAMPLE)
    started_from: dict[str, str]  # lineage: kind (champion|pretrained|scratch), uri, package arn, reason
    rejected_uploads: dict[str, int]  # refused uploads still in the bucket, by problem (names.PROBLEM_*)
    unreadable_images: list[dict[str, str]]  # {"key", "reason"}: what training could not decode
    import_task: str
    tuning_job: str
    best_training_job: str
    best_hyperparameters: dict[str, str]
    best_objective: float
    final_training_job: str
    model_data: str
    deadline: str  # ISO 8601, UTC: when the run has outlived its time limits (deadline.py)
    training_seconds: int
    billable_seconds: int
    spot_saving: float  # 1 - billable / training, over every job of the run
    timed_jobs: list[str]  # the tuning trials counted in training_seconds (at most MaxTuningJobs)
    rule_results: list[RuleResult]
    rules_blocked: bool
    challenger: Evaluation
    champion: Evaluation
    checkpoint_evaluations: list[CheckpointEvaluation]  # at most CheckpointEvaluationMaxPerRun points
    checkpoint_evaluation_jobs: list[str]  # the evaluation jobs those points came from, each once
    mlflow_children: dict[str, str]  # training job -> its MLflow child run, set once per job
    checkpoint_evaluations_started: int  # the run's checkpoint evaluation jobs, counted against that bound
    # evaluation jobs counted there that a delivery may not have made yet (a retry makes them)
    checkpoint_evaluations_pending: list[str]
    checkpoint_counts: dict[str, int]  # checkpoints seen per training job (every Nth is evaluated)
    checkpoint_last_steps: dict[str, int]  # the last step counted per training job
    gate: Gate
    # the champion on the run's new uploads: figures, suspects, TrainWhen's decision (arrivals.py)
    arrivals: dict[str, Any]
    model_package_arn: str
    failure: Failure
    mlflow_run_id: str  # the run's parent run in MLflow (tracking.py), written once
    tracking_warnings: list[str]  # what MLflow tracking could not do (at most tracking.MAX_WARNINGS)
    tracking_done_at: str  # names.RUN_TRACKING_DONE_AT: the run's end is tracked (or warned about)


STARTED_EVALUATIONS, PENDING_EVALUATIONS = "checkpoint_evaluations_started", "checkpoint_evaluations_pending"

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, Mapping):
        return {k: _to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_dynamo(v) for v in value]
    return value


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    if isinstance(value, set):  # a string set: read as a sorted list, as JSON can hold it
        return sorted(_from_dynamo(v) for v in value)
    return value


def serialize(values: Mapping[str, Any]) -> dict[str, Any]:
    """Plain Python values as DynamoDB attribute values (floats become Decimals)."""
    return {k: _serializer.serialize(_to_dynamo(v)) for k, v in values.items()}


def deserialize(item: Mapping[str, Any]) -> dict[str, Any]:
    """DynamoDB attribute values as plain Python values (numbers as int or float)."""
    return {k: _from_dynamo(_deserializer.deserialize(v)) for k, v in item.items()}


def _client(client: DynamoDBClient | None) -> DynamoDBClient:
    return client if client is not None else clients.dynamodb()


def get_run(
    dataset: str, run_id: str, *, table_name: str, client: DynamoDBClient | None = None
) -> RunRecord | None:
    """The record of one run, or None when the table has no such run."""
    response = _client(client).get_item(
        TableName=table_name,
        Key=serialize({names.RUNS_PK: dataset, names.RUNS_SK: run_id}),
        ConsistentRead=True,
    )
    item = response.get("Item")
    return cast(RunRecord, deserialize(item)) if item else None


def list_runs(
    *, table_name: str, dataset: str | None = None, client: DynamoDBClient | None = None
) -> list[RunRecord]:
    """Runs of one data set (or of all), newest first."""
    dynamodb = _client(client)
    items: list[dict[str, Any]] = []
    if dataset is not None:
        paginator = dynamodb.get_paginator("query")
        pages = paginator.paginate(
            TableName=table_name,
            KeyConditionExpression="#pk = :dataset",
            ExpressionAttributeNames={"#pk": names.RUNS_PK},
            ExpressionAttributeValues=serialize({":dataset": dataset}),
            ConsistentRead=True,
        )
        for page in pages:
            items.extend(page.get("Items", []))
    else:
        for page in dynamodb.get_paginator("scan").paginate(TableName=table_name, ConsistentRead=True):
            items.extend(page.get("Items", []))
    runs = [cast(RunRecord, deserialize(item)) for item in items]
    runs.sort(key=lambda run: (run.get("created_at", ""), run["run_id"]), reverse=True)
    return runs


def put_run(record: RunRecord, *, table_name: str, client: DynamoDBClient | None = None) -> bool:
    """Create a run record; False when one with the same key exists already (a retried start)."""
    dynamodb = _client(client)
    try:
        dynamodb.put_item(
            TableName=table_name,
            Item=serialize(cast(Mapping[str, Any], record)),
            ConditionExpression="attribute_not_exists(#sk)",
            ExpressionAttributeNames={"#sk": names.RUNS_SK},
        )
    except dynamodb.exceptions.ConditionalCheckFailedException:
        return False
    return True


def update_run(
    dataset: str,
    run_id: str,
    fields: Mapping[str, Any],
    *,
    table_name: str,
    client: DynamoDBClient | None = None,
    if_status: tuple[RunStatus, ...] = (),
) -> bool:
    """Set `fields` on an existing run record (an absent record is an error, never created here); with
    `if_status`, only while the record's status is one of those: whether they were set (of concurrent
    callers, one sets them)."""
    if not fields:
        return True
    dynamodb = _client(client)
    attribute_names = {f"#f{i}": name for i, name in enumerate(fields)}
    attribute_values = {f":v{i}": value for i, value in enumerate(fields.values())}
    assignments = ", ".join(f"#f{i} = :v{i}" for i in range(len(fields)))
    condition = "attribute_exists(#sk)"
    if if_status:
        attribute_names["#status"] = "status"
        attribute_values |= {f":s{i}": status for i, status in enumerate(if_status)}
        condition += f" AND #status IN ({', '.join(f':s{i}' for i in range(len(if_status)))})"
    try:
        dynamodb.update_item(
            TableName=table_name,
            Key=serialize({names.RUNS_PK: dataset, names.RUNS_SK: run_id}),
            UpdateExpression=f"SET {assignments}",
            ConditionExpression=condition,
            ExpressionAttributeNames={**attribute_names, "#sk": names.RUNS_SK},
            ExpressionAttributeValues=serialize(attribute_values),
        )
    except dynamodb.exceptions.ConditionalCheckFailedException:
        if not if_status:
            raise
        return False
    return True


def _update_if(
    dataset: str,
    run_id: str,
    field: str,
    *,
    update: str,
    condition: str,
    values: Mapping[str, Any],
    table_name: str,
    client: DynamoDBClient | None,
) -> bool:
    """One UpdateItem of `field` (#f; a "field.key" path: #f and its entry #k) of an existing record under
    `condition`; whether it was made."""
    dynamodb = _client(client)
    top, _, key = field.partition(".")
    attribute_names = {"#f": top, "#sk": names.RUNS_SK, **({"#k": key} if key else {})}
    try:
        dynamodb.update_item(
            TableName=table_name,
            Key=serialize({names.RUNS_PK: dataset, names.RUNS_SK: run_id}),
            UpdateExpression=update,
            ConditionExpression=f"attribute_exists(#sk) AND {condition}",
            ExpressionAttributeNames=attribute_names,
            ExpressionAttributeValues=serialize(values),
        )
    except dynamodb.exceptions.ConditionalCheckFailedException:
        return False
    return True


def set_once(
    dataset: str,
    run_id: str,
    field: str,
    value: str,
    *,
    table_name: str,
    client: DynamoDBClient | None = None,
) -> bool:
    """Set `field` of an existing record unless it is set already; whether this call set it."""
    return _update_if(
        dataset,
        run_id,
        field,
        update="SET #f = :v",
        condition="attribute_not_exists(#f)",
        values={":v": value},
        table_name=table_name,
        client=client,
    )


def set_key_once(
    dataset: str,
    run_id: str,
    field: str,
    key: str,
    value: str,
    *,
    table_name: str,
    client: DynamoDBClient | None = None,
) -> bool:
    """Set entry `key` of the map `field` of an existing record unless it is set already (concurrent
    callers: one wins); whether this call set it. The map is made first: a nested path needs its parent."""
    _update_if(
        dataset,
        run_id,
        field,
        update="SET #f = if_not_exists(#f, :empty)",
        condition="attribute_exists(#sk)",
        values={":empty": {}},
        table_name=table_name,
        client=client,
    )
    return _update_if(
        dataset,
        run_id,
        f"{field}.{key}",
        update="SET #f.#k = :v",
        condition="attribute_not_exists(#f.#k)",
        values={":v": value},
        table_name=table_name,
        client=client,
    )


def add_warning(
    dataset: str,
    run_id: str,
    field: str,
    message: str,
    *,
    limit: int,
    table_name: str,
    client: DynamoDBClient | None = None,
) -> bool:
    """Append `message` to the list `field` of an existing record while it holds fewer than `limit`."""
    return _update_if(
        dataset,
        run_id,
        field,
        update="SET #f = list_append(if_not_exists(#f, :empty), :new)",
        condition="(attribute_not_exists(#f) OR size(#f) < :limit)",
        values={":empty": [], ":new": [message], ":limit": limit},
        table_name=table_name,
        client=client,
    )


def _failed(error: str, cause: str, at: str) -> dict[str, Any]:
    return {
        "status": "FAILED",
        "finished_at": at,
        "updated_at": at,
        "failure": {"error": error, "cause": cause},
    }


def mark_failed(
    dataset: str,
    run_id: str,
    *,
    error: str,
    cause: str,
    at: str,
    table_name: str,
    client: DynamoDBClient | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """End a run FAILED with the error and why (what the CLI prints), and any `extra` fields."""
    fields = {**_failed(error, cause, at), **(extra or {})}
    update_run(dataset, run_id, fields, table_name=table_name, client=client)


def fail_active_run(
    dataset: str,
    run_id: str,
    *,
    error: str,
    cause: str,
    at: str,
    table_name: str,
    client: DynamoDBClient | None = None,
) -> bool:
    """mark_failed while the record still says STARTING or RUNNING: whether this call ended the run (of
    two concurrent callers, one does)."""
    fields = _failed(error, cause, at)
    return update_run(
        dataset, run_id, fields, table_name=table_name, client=client, if_status=ACTIVE_STATUSES
    )


def append_checkpoint_evaluation(
    dataset: str,
    run_id: str,
    point: CheckpointEvaluation,
    *,
    limit: int,
    table_name: str,
    client: DynamoDBClient | None = None,
) -> bool:
    """Add one point to the run's accuracy-against-step curve while it has fewer than `limit` points, once
    per evaluation job (its end event may come twice); False when it is full, the job's point is there
    already, or the run has no record: the item never grows past `limit` points."""
    dynamodb = _client(client)
    try:
        dynamodb.update_item(
            TableName=table_name,
            Key=serialize({names.RUNS_PK: dataset, names.RUNS_SK: run_id}),
            UpdateExpression=(
                "SET #curve = list_append(if_not_exists(#curve, :empty), :point), "
                "#jobs = list_append(if_not_exists(#jobs, :empty), :job)"
            ),
            ConditionExpression=(
                "attribute_exists(#sk) AND (attribute_not_exists(#curve) OR size(#curve) < :limit) "
                "AND (attribute_not_exists(#jobs) OR NOT contains(#jobs, :name))"
            ),
            ExpressionAttributeNames={
                "#curve": "checkpoint_evaluations",
                "#jobs": "checkpoint_evaluation_jobs",
                "#sk": names.RUNS_SK,
            },
            ExpressionAttributeValues=serialize(
                {
                    ":empty": [],
                    ":point": [point],
                    ":limit": limit,
                    ":job": [point["job"]],
                    ":name": point["job"],
                }
            ),
        )
    except dynamodb.exceptions.ConditionalCheckFailedException:
        return False
    return True


def release_checkpoint_evaluation(
    dataset: str, run_id: str, job: str, *, table_name: str, client: DynamoDBClient | None = None
) -> None:
    """Give back the place the evaluation `job` claimed (checkpoint_eval.py) and started no job with; once
    however often it is called."""
    dynamodb = _client(client)
    with contextlib.suppress(dynamodb.exceptions.ConditionalCheckFailedException):
        dynamodb.update_item(
            TableName=table_name,
            Key=serialize({names.RUNS_PK: dataset, names.RUNS_SK: run_id}),
            UpdateExpression="ADD #started :minus DELETE #pending :job",
            ConditionExpression="contains(#pending, :name)",
            ExpressionAttributeNames={"#started": STARTED_EVALUATIONS, "#pending": PENDING_EVALUATIONS},
            ExpressionAttributeValues=serialize({":minus": -1, ":job": {job}, ":name": job}),
        )


def checkpoint_evaluation_made(
    dataset: str, run_id: str, job: str, *, table_name: str, client: DynamoDBClient | None = None
) -> None:
    """The evaluation `job` exists: its place stays taken and a later delivery has nothing left to do."""
    _client(client).update_item(
        TableName=table_name,
        Key=serialize({names.RUNS_PK: dataset, names.RUNS_SK: run_id}),
        UpdateExpression="DELETE #pending :job",
        ExpressionAttributeNames={"#pending": PENDING_EVALUATIONS},
        ExpressionAttributeValues=serialize({":job": {job}}),
    )


def add_job_time(
    dataset: str,
    run_id: str,
    training_job: str,
    *,
    training_seconds: int,
    billable_seconds: int,
    table_name: str,
    client: DynamoDBClient | None = None,
) -> bool:
    """Add one ended training job's training and billable seconds to the run's totals, once: False when
    the job was counted already (a repeated event, or the pick step counting a job its event had not)."""
    dynamodb = _client(client)
    try:
        dynamodb.update_item(
            TableName=table_name,
            Key=serialize({names.RUNS_PK: dataset, names.RUNS_SK: run_id}),
            UpdateExpression="ADD #training :training, #billable :billable, #timed :job",
            ConditionExpression="attribute_exists(#sk) AND NOT contains(#timed, :name)",
            ExpressionAttributeNames={
                "#training": "training_seconds",
                "#billable": "billable_seconds",
                "#timed": "timed_jobs",
                "#sk": names.RUNS_SK,
            },
            ExpressionAttributeValues={
                **serialize(
                    {":training": training_seconds, ":billable": billable_seconds, ":name": training_job}
                ),
                ":job": {"SS": [training_job]},
            },
        )
    except dynamodb.exceptions.ConditionalCheckFailedException:
        return False
    return True
