"""The upload ledger: one DynamoDB row per object, written idempotently and in per-key order.

A data set's rows lie in its partitions (retrain_contract.ledger.Partitions: the row's key hashed over
the data set's shards), so every function here takes the data set's Partitions, and readers read all of
them: one data set's first load spreads over as many DynamoDB partitions as it has shards.

A row is written only when its notice is newer than the row (by the S3 sequencer), so a duplicate or
late delivery changes nothing. Accepted rows carry the sparse index key that lists a data set's accepted
uploads by the time they were recorded; those from the data set's watermark on (the cut of its last
completed run, retrain_contract.ledger) are pending, which is what the dispatcher debounces on. A run
never rewrites rows: its end moves the watermark.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from controller import names
from controller.runs import deserialize, serialize
from controller.s3events import ObjectCreated
from controller.uploads import Verdict
from retrain_contract.ledger import Partitions

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def iso(moment: datetime) -> str:
    """The ledger's time format: UTC, microseconds, "Z" (strings that sort as times)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_iso() -> str:
    return iso(datetime.now(UTC))


def record(
    notice: ObjectCreated,
    verdict: Verdict,
    parts: Partitions,
    *,
    table_name: str,
    client: DynamoDBClient,
    recorded_at: str,
) -> bool:
    """Write the ledger row for one notice; False when the row already holds this or a newer event."""
    partition = parts.of(notice.key)
    row: dict[str, Any] = {
        names.LEDGER_PK: partition,
        names.LEDGER_SK: notice.key,
        "bucket": notice.bucket,
        "label": verdict.label,
        "size": notice.size,
        "etag": notice.etag,
        "version_id": notice.version_id,
        "sequencer": notice.sequencer,
        names.LEDGER_PENDING_SK: recorded_at,
        "recorded_at": recorded_at,
        "event_time": notice.event_time,
    }
    if verdict.accepted:
        row["state"] = names.STATE_ACCEPTED
        row[names.LEDGER_PENDING_PK] = parts.index_of(notice.key)
    else:
        row["state"] = names.STATE_REJECTED
        row["reason"] = verdict.reason
        row["problem"] = verdict.problem
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
    count: int  # pending uploads, counted up to the limit asked for
    oldest: str | None  # when the oldest pending upload was recorded
    newest: str | None
    at_least: bool = False  # the count reached the limit: there may be more


def pending_stats(
    parts: Partitions, trained_through: str, *, limit: int, table_name: str, client: DynamoDBClient
) -> PendingStats:
    """How many uploads of a data set wait for a run (recorded from the watermark on), counted up to
    `limit`, and the first and last recording times. Per index partition two queries: forward, the keys
    still to count (the first is the partition's oldest), and backward, its newest; at most `limit` index
    keys plus two per partition are read however many uploads wait."""
    # a key condition takes no empty string: without a watermark yet, every accepted row waits
    since = " AND #at >= :through" if trained_through else ""
    count, at_least = 0, False
    oldest: list[str] = []
    newest: list[str] = []
    for partition in parts.index_all():
        base: dict[str, Any] = {
            "TableName": table_name,
            "IndexName": names.LEDGER_PENDING_INDEX,
            "KeyConditionExpression": "#pk = :partition" + since,
            "ExpressionAttributeNames": {
                "#pk": names.LEDGER_PENDING_PK,
                **({"#at": names.LEDGER_PENDING_SK} if trained_through else {}),
            },
            "ExpressionAttributeValues": serialize(
                {":partition": partition, **({":through": trained_through} if trained_through else {})}
            ),
        }
        page: dict[str, Any] = {}
        more = True
        while more:  # a page ends at 1 MB read, or at the keys still to count
            start = {"ExclusiveStartKey": page["LastEvaluatedKey"]} if "LastEvaluatedKey" in page else {}
            page = dict(client.query(**base, **start, Limit=max(1, limit - count)))
            if not start and page["Items"]:
                oldest.append(str(deserialize(page["Items"][0])[names.LEDGER_PENDING_SK]))
            counted = min(len(page["Items"]), limit - count)
            count += counted
            more = "LastEvaluatedKey" in page and count < limit
            uncounted = "LastEvaluatedKey" in page or len(page["Items"]) > counted
            at_least = at_least or (count >= limit and uncounted)
        if len(oldest) > len(newest):  # the partition has pending keys: its newest
            items = client.query(**base, ScanIndexForward=False, Limit=1)["Items"]
            newest.append(str(deserialize(items[0])[names.LEDGER_PENDING_SK]))
    if count == 0:
        return PendingStats(0, None, None)
    return PendingStats(count, min(oldest), max(newest), at_least=at_least)


def rows(
    parts: Partitions, *, table_name: str, client: DynamoDBClient, state: str | None = None
) -> Iterator[dict[str, Any]]:
    """Every ledger row of one data set in key order (its partitions' pages merged), or only those in
    `state` (filtered by DynamoDB, so a reader that wants the few rejected rows does not receive the
    thousands of others)."""

    def partition_rows(partition: str) -> Iterator[dict[str, Any]]:
        query: dict[str, Any] = {
            "TableName": table_name,
            "KeyConditionExpression": "#pk = :partition",
            "ExpressionAttributeNames": {"#pk": names.LEDGER_PK},
            "ExpressionAttributeValues": {":partition": partition},
            "ConsistentRead": True,
        }
        if state is not None:
            query["FilterExpression"] = "#state = :state"
            query["ExpressionAttributeNames"]["#state"] = "state"
            query["ExpressionAttributeValues"][":state"] = state
        query["ExpressionAttributeValues"] = serialize(query["ExpressionAttributeValues"])
        for page in client.get_paginator("query").paginate(**query):
            for item in page["Items"]:
                row = deserialize(item)
                if not str(row[names.LEDGER_SK]).startswith(names.LEDGER_CONTENT_PREFIX):
                    yield row

    yield from heapq.merge(
        *(partition_rows(p) for p in parts.all()), key=lambda row: str(row[names.LEDGER_SK])
    )


def get_row(parts: Partitions, key: str, *, table_name: str, client: DynamoDBClient) -> dict[str, Any] | None:
    item = client.get_item(
        TableName=table_name,
        Key=serialize({names.LEDGER_PK: parts.of(key), names.LEDGER_SK: key}),
        ConsistentRead=True,
    ).get("Item")
    return deserialize(item) if item else None


def claim_content(
    parts: Partitions, claim: str, key: str, label: str, *, table_name: str, client: DynamoDBClient
) -> dict[str, Any] | None:
    """Claim a content (names.content_claim_key) for `key`: None when it is this key's now (new, or
    already its own); else the holder's claim ({"first_key", "label"}). A conditional write, so two
    uploads of the same bytes cannot both claim them."""
    try:
        client.put_item(
            TableName=table_name,
            Item=serialize(
                {names.LEDGER_PK: parts.of(claim), names.LEDGER_SK: claim, "first_key": key, "label": label}
            ),
            ConditionExpression="attribute_not_exists(#sk) OR first_key = :key",
            ExpressionAttributeNames={"#sk": names.LEDGER_SK},
            ExpressionAttributeValues=serialize({":key": key}),
        )
    except client.exceptions.ConditionalCheckFailedException:
        holder = get_row(parts, claim, table_name=table_name, client=client)
        return holder if holder is not None and holder.get("first_key") != key else None
    return None


def take_over_claim(
    parts: Partitions,
    claim: str,
    key: str,
    label: str,
    *,
    previous: str,
    table_name: str,
    client: DynamoDBClient,
) -> bool:
    """Move a claim whose holder no longer has those bytes to `key`; False when someone else moved it."""
    try:
        client.update_item(
            TableName=table_name,
            Key=serialize({names.LEDGER_PK: parts.of(claim), names.LEDGER_SK: claim}),
            UpdateExpression="SET first_key = :key, #label = :label",
            ConditionExpression="first_key = :previous",
            ExpressionAttributeNames={"#label": "label"},
            ExpressionAttributeValues=serialize({":key": key, ":label": label, ":previous": previous}),
        )
    except client.exceptions.ConditionalCheckFailedException:
        return False
    return True


def release_claim(
    parts: Partitions, claim: str, key: str, *, table_name: str, client: DynamoDBClient
) -> None:
    """Drop `key`'s claim on a content (its object was deleted): the next upload of those bytes is new."""
    try:
        client.delete_item(
            TableName=table_name,
            Key=serialize({names.LEDGER_PK: parts.of(claim), names.LEDGER_SK: claim}),
            ConditionExpression="first_key = :key",
            ExpressionAttributeValues=serialize({":key": key}),
        )
    except client.exceptions.ConditionalCheckFailedException:
        return


def mark_removed(
    parts: Partitions, key: str, sequencer: str, *, table_name: str, client: DynamoDBClient
) -> dict[str, Any] | None:
    """The row of a deleted object becomes `removed` (not trained on again), unless a newer upload of the
    key arrived; the row as it was, or None when there was none or it is newer."""
    try:
        response = client.update_item(
            TableName=table_name,
            Key=serialize({names.LEDGER_PK: parts.of(key), names.LEDGER_SK: key}),
            UpdateExpression="SET #state = :removed, sequencer = :seq REMOVE #pending",
            ConditionExpression="attribute_exists(#sk) AND sequencer < :seq",
            ExpressionAttributeNames={
                "#state": "state",
                "#pending": names.LEDGER_PENDING_PK,
                "#sk": names.LEDGER_SK,
            },
            ExpressionAttributeValues=serialize({":removed": names.STATE_REMOVED, ":seq": sequencer}),
            ReturnValues="ALL_OLD",
        )
    except client.exceptions.ConditionalCheckFailedException:
        return None
    return deserialize(response["Attributes"])
