"""The data set table: one row per data set holding the run lock and the run counter.

The lock is a conditional write: `active_run` is set only where it is absent, so two dispatchers (or
a dispatcher and a manual start) can never both start a run of one data set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from controller import names, uploads
from controller.runs import deserialize, serialize
from retrain_contract import ledger

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

ACCEPTED_UPLOADS = "accepted_uploads"  # touch's counter: set on every data set with an accepted upload


def get(dataset: str, *, table_name: str, client: DynamoDBClient) -> dict[str, Any]:
    item = client.get_item(
        TableName=table_name, Key=serialize({names.DATASETS_PK: dataset}), ConsistentRead=True
    ).get("Item")
    return deserialize(item) if item else {names.DATASETS_PK: dataset}


def partitions_in(dataset: str, row: Mapping[str, Any] | None) -> ledger.Partitions:
    """The data set's partitions by its row (None: no row yet). A row with uploads counted but no shard
    count was recorded before sharding: its rows are in one partition, named by the data set."""
    if dataset == uploads.REJECTED_DATASET:
        return ledger.Partitions(dataset)  # unusable keys' rejections: not a data set, no row of its own
    if row is not None and ledger.SHARDS_ATTRIBUTE in row:
        return ledger.partitions_of(dataset, row)
    legacy = row is not None and ACCEPTED_UPLOADS in row
    return ledger.Partitions(dataset, 1 if legacy else ledger.LEDGER_SHARDS)


def partitions(dataset: str, *, table_name: str, client: DynamoDBClient) -> ledger.Partitions:
    """Where the ledger keeps `dataset`'s rows (for readers: nothing is written)."""
    return partitions_in(dataset, get(dataset, table_name=table_name, client=client))


def settle_partitions(dataset: str, *, table_name: str, client: DynamoDBClient) -> ledger.Partitions:
    """`partitions`, written on the data set's row the first time, before any of its ledger rows is
    written: a conditional write, so concurrent first uploads agree on one count."""
    if dataset == uploads.REJECTED_DATASET:
        return partitions_in(dataset, None)
    row = get(dataset, table_name=table_name, client=client)
    found = partitions_in(dataset, row)
    if ledger.SHARDS_ATTRIBUTE in row:
        return found
    try:
        client.update_item(
            TableName=table_name,
            Key=serialize({names.DATASETS_PK: dataset}),
            UpdateExpression="SET #shards = :shards",
            ConditionExpression="attribute_not_exists(#shards)",
            ExpressionAttributeNames={"#shards": ledger.SHARDS_ATTRIBUTE},
            ExpressionAttributeValues=serialize({":shards": found.shards}),
        )
    except client.exceptions.ConditionalCheckFailedException:
        return partitions(dataset, table_name=table_name, client=client)
    return found


def touch(dataset: str, uploads: int, at: str, *, table_name: str, client: DynamoDBClient) -> None:
    """Note that `dataset` received uploads (the dispatcher visits the data sets listed here)."""
    client.update_item(
        TableName=table_name,
        Key=serialize({names.DATASETS_PK: dataset}),
        UpdateExpression=f"SET last_upload_recorded_at = :at ADD {ACCEPTED_UPLOADS} :n",
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
