"""The data set table: one row per data set holding the run lock and the run counter.

The lock is a conditional write: `active_run` is set only where it is absent, so two dispatchers (or
a dispatcher and a manual start) can never both start a run of one data set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controller import names
from controller.runs import deserialize, serialize

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def get(dataset: str, *, table_name: str, client: DynamoDBClient) -> dict[str, Any]:
    item = client.get_item(
        TableName=table_name, Key=serialize({names.DATASETS_PK: dataset}), ConsistentRead=True
    ).get("Item")
    return deserialize(item) if item else {names.DATASETS_PK: dataset}


def touch(dataset: str, uploads: int, at: str, *, table_name: str, client: DynamoDBClient) -> None:
    """Note that `dataset` received uploads (the dispatcher visits the data sets listed here)."""
    client.update_item(
        TableName=table_name,
        Key=serialize({names.DATASETS_PK: dataset}),
        UpdateExpression="SET last_upload_recorded_at = :at ADD accepted_uploads :n",
        ExpressionAttributeValues=serialize({":at": at, ":n": uploads}),
    )


def all_datasets(*, table_name: str, client: DynamoDBClient) -> list[str]:
    found: list[str] = []
    for page in client.get_paginator("scan").paginate(
        TableName=table_name, ProjectionExpression="#pk", ExpressionAttributeNames={"#pk": names.DATASETS_PK}
    ):
        found.extend(str(deserialize(item)[names.DATASETS_PK]) for item in page["Items"])
    return sorted(found)


def run_id_for(dataset: str, number: int) -> str:
    """Run ids are `<dataset>-<number>`: deterministic, so a retried start reuses the same name."""
    return f"{dataset}-{number:05d}"


def acquire(
    dataset: str, run_id: str | None, at: str, *, table_name: str, client: DynamoDBClient
) -> str | None:
    """Take the data set's lock for a new run; the run id (given, or the next number), or None if held."""
    current = get(dataset, table_name=table_name, client=client)
    if current.get(names.LOCK_ATTRIBUTE):
        return None
    previous = int(current.get("run_count", 0))
    chosen = run_id or run_id_for(dataset, previous + 1)
    try:
        client.update_item(
            TableName=table_name,
            Key=serialize({names.DATASETS_PK: dataset}),
            UpdateExpression="SET #lock = :run, locked_at = :at, run_count = :next",
            ConditionExpression="attribute_not_exists(#lock) AND "
            "(attribute_not_exists(run_count) OR run_count = :previous)",
            ExpressionAttributeNames={"#lock": names.LOCK_ATTRIBUTE},
            ExpressionAttributeValues=serialize(
                {":run": chosen, ":at": at, ":next": previous + 1, ":previous": previous}
            ),
        )
    except client.exceptions.ConditionalCheckFailedException:
        return None
    return chosen


def release(
    dataset: str,
    run_id: str,
    *,
    table_name: str,
    client: DynamoDBClient,
    updates: dict[str, Any] | None = None,
) -> bool:
    """Release the lock if `run_id` holds it (and set `updates`); False when another run holds it."""
    fields = updates or {}
    assignments = "".join(f", #u{i} = :u{i}" for i in range(len(fields)))
    try:
        client.update_item(
            TableName=table_name,
            Key=serialize({names.DATASETS_PK: dataset}),
            UpdateExpression=f"REMOVE #lock, locked_at{' SET ' + assignments[2:] if fields else ''}",
            ConditionExpression="#lock = :run",
            ExpressionAttributeNames={
                "#lock": names.LOCK_ATTRIBUTE,
                **{f"#u{i}": name for i, name in enumerate(fields)},
            },
            ExpressionAttributeValues=serialize(
                {":run": run_id, **{f":u{i}": value for i, value in enumerate(fields.values())}}
            ),
        )
    except client.exceptions.ConditionalCheckFailedException:
        return False
    return True
