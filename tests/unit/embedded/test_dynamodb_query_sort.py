"""The embedded stack's query sorts page as moto's own do, reading each key value once."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.dynamodb.models.dynamo_type import DynamoType

from retrain.embedded.dynamodb import query_sort

TABLE, INDEX = "ledger", "pending"


@contextlib.contextmanager
def _table(items: int) -> Iterator[Any]:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        dynamodb.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": name, "AttributeType": kind}
                for name, kind in (("dataset", "S"), ("key", "S"), ("pending", "S"), ("at", "N"))
            ],
            KeySchema=[
                {"AttributeName": "dataset", "KeyType": "HASH"},
                {"AttributeName": "key", "KeyType": "RANGE"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": INDEX,
                    "KeySchema": [
                        {"AttributeName": "pending", "KeyType": "HASH"},
                        {"AttributeName": "at", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        )
        rng = random.Random(7)
        for n in rng.sample(range(items), items):
            # numbers that sort differently as text (9 < 10), ties on the index's sort key, a sparse index
            item = {"dataset": {"S": f"d{n % 2}"}, "key": {"S": f"k{n:04d}"}, "at": {"N": str(n // 3)}}
            if n % 5:
                item["pending"] = {"S": f"d{n % 2}"}
            dynamodb.put_item(TableName=TABLE, Item=item)
        yield dynamodb


def _pages(dynamodb: Any, forward: bool, limit: int) -> list[list[dict[str, Any]]]:
    query = {
        "TableName": TABLE,
        "IndexName": INDEX,
        "KeyConditionExpression": "pending = :p AND #at >= :from",
        "ExpressionAttributeNames": {"#at": "at"},
        "ExpressionAttributeValues": {":p": {"S": "d1"}, ":from": {"N": "5"}},
        "ScanIndexForward": forward,
        "Limit": limit,
    }
    pages: list[list[dict[str, Any]]] = []
    start: dict[str, Any] = {}
    while True:
        page = dynamodb.query(**query, **start)
        pages.append(page["Items"])
        if "LastEvaluatedKey" not in page:
            return pages
        start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}


@pytest.mark.parametrize("forward", [True, False])
def test_index_pages_are_moto_s_own(forward: bool) -> None:
    with _table(60) as dynamodb:
        expected = _pages(dynamodb, forward, 7)
        with query_sort.installed():
            assert _pages(dynamodb, forward, 7) == expected
        assert len(expected) > 2 and [int(i["at"]["N"]) for p in expected for i in p] == sorted(
            (int(i["at"]["N"]) for p in expected for i in p), reverse=not forward
        )


def test_each_key_value_is_read_once_per_query(monkeypatch: pytest.MonkeyPatch) -> None:
    with _table(400) as dynamodb:
        reads: list[int] = []
        cast = DynamoType.cast_value

        def counted(self: DynamoType) -> Any:
            reads.append(1)
            return cast.fget(self)  # type: ignore[attr-defined]

        query = {
            "TableName": TABLE,
            "IndexName": INDEX,
            "KeyConditionExpression": "pending = :p",
            "ExpressionAttributeValues": {":p": {"S": "d0"}},
            "Limit": 1,
        }
        monkeypatch.setattr(DynamoType, "cast_value", property(counted))
        dynamodb.query(**query)
        unpatched, reads[:] = len(reads), []
        with query_sort.installed():
            dynamodb.query(**query)
        # 400 items: a few reads of each (its table keys to sort them all, its index key to match, the
        # candidates' four keys to sort them); moto's own sorts read keys again for every comparison
        assert len(reads) <= 6 * 400 < unpatched / 2
