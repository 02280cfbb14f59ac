"""The upload ledger: one DynamoDB row per object, written idempotently and in per-key order.

A row is written only when its notice is newer than the row (by the S3 sequencer), so a duplicate or
late delivery changes nothing. Pending rows carry the sparse index key that lists a data set's
pending uploads by upload time, which is what the dispatcher debounces on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from controller import names
from controller.runs import deserialize, serialize
from controller.s3events import ObjectCreated
from controller.uploads import Verdict

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record(
    notice: ObjectCreated, verdict: Verdict, *, table_name: str, client: DynamoDBClient, recorded_at: str
) -> bool:
    """Write the ledger row for one notice; False when the row already holds this or a newer event."""
    row: dict[str, Any] = {
        names.LEDGER_PK: verdict.dataset,
        names.LEDGER_SK: notice.key,
        "bucket": notice.bucket,
        "label": verdict.label,
        "size": notice.size,
        "etag": notice.etag,
        "version_id": notice.version_id,
        "sequencer": notice.sequencer,
        names.LEDGER_PENDING_SK: notice.event_time or recorded_at,
        "recorded_at": recorded_at,
    }
    if verdict.accepted:
        row["state"] = names.STATE_PENDING
        row[names.LEDGER_PENDING_PK] = verdict.dataset
    else:
        row["state"] = names.STATE_REJECTED
        row["reason"] = verdict.reason
    try:
        client.put_item(
            TableName=table_name,
            Item=serialize(row),
            ConditionExpression="attribute_not_exists(#sk) OR #seq < :seq",
            ExpressionAttributeNames={"#sk": names.LEDGER_SK, "#seq": "sequencer"},
            ExpressionAttributeValues=serialize({":seq": notice.sequencer}),
        )
    except client.exceptions.ConditionalCheckFailedException:
        return False
    return True


@dataclass(frozen=True)
class PendingStats:
    count: int
    oldest: str | None  # upload time of the oldest pending row
    newest: str | None


def pending_stats(dataset: str, *, table_name: str, client: DynamoDBClient) -> PendingStats:
    """How many uploads of `dataset` wait for a run, and the first and last upload times."""
    base: dict[str, Any] = {
        "TableName": table_name,
        "IndexName": names.LEDGER_PENDING_INDEX,
        "KeyConditionExpression": "#pk = :dataset",
        "ExpressionAttributeNames": {"#pk": names.LEDGER_PENDING_PK},
        "ExpressionAttributeValues": serialize({":dataset": dataset}),
    }
    count = 0
    for page in client.get_paginator("query").paginate(**base, Select="COUNT"):
        count += page["Count"]
    if count == 0:
        return PendingStats(0, None, None)

    def edge(forward: bool) -> str:
        items = client.query(**base, ScanIndexForward=forward, Limit=1)["Items"]
        return str(deserialize(items[0])[names.LEDGER_PENDING_SK])

    return PendingStats(count, edge(True), edge(False))


def rows(dataset: str, *, table_name: str, client: DynamoDBClient) -> Iterator[dict[str, Any]]:
    """Every ledger row of one data set, in key order."""
    pages = client.get_paginator("query").paginate(
        TableName=table_name,
        KeyConditionExpression="#pk = :dataset",
        ExpressionAttributeNames={"#pk": names.LEDGER_PK},
        ExpressionAttributeValues=serialize({":dataset": dataset}),
        ConsistentRead=True,
    )
    for page in pages:
        for item in page["Items"]:
            yield deserialize(item)


def mark_trained(
    dataset: str, key: str, sequencer: str, run_id: str, *, table_name: str, client: DynamoDBClient
) -> bool:
    """Mark a row trained by `run_id`, unless a newer upload of the key arrived since the manifest froze."""
    try:
        client.update_item(
            TableName=table_name,
            Key=serialize({names.LEDGER_PK: dataset, names.LEDGER_SK: key}),
            UpdateExpression="SET #state = :trained, trained_by = :run REMOVE #pending",
            ConditionExpression="#seq = :seq",
            ExpressionAttributeNames={
                "#state": "state",
                "#seq": "sequencer",
                "#pending": names.LEDGER_PENDING_PK,
            },
            ExpressionAttributeValues=serialize(
                {":trained": names.STATE_TRAINED, ":run": run_id, ":seq": sequencer}
            ),
        )
    except client.exceptions.ConditionalCheckFailedException:
        return False
    return True
