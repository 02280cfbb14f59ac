"""DynamoDB's 400 KB item limit in the embedded stack, counted as DynamoDB counts item sizes
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from retrain.embedded.dynamodb.item_size import installed, item_bytes, value_bytes
from retrain.embedded.limits import DYNAMODB_ITEM_BYTES

TABLE = "runs"
PUT_REFUSED = "Item size has exceeded the maximum allowed size"
UPDATE_REFUSED = "Item size to update has exceeded the maximum allowed size"


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws(), installed():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


KEY = {"pk": {"S": "digits"}, "sk": {"S": "run#1"}}
KEY_BYTES = item_bytes(KEY)  # "pk" + "digits" + "sk" + "run#1"


def _item_of(size: int) -> dict[str, Any]:
    """The key plus one string attribute ``d``, ``size`` bytes in all."""
    return {**KEY, "d": {"S": "x" * (size - KEY_BYTES - 1)}}


def _refusal(error: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    return error.value.response["Error"]["Code"], error.value.response["Error"]["Message"]


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ({"S": "héllo"}, 6),
        ({"N": "123.4500"}, 4),  # 4 significant digits: 2 bytes, plus 1
        ({"N": "-0.001"}, 2),
        ({"B": "AAEC"}, 3),  # three raw bytes, base64 on the wire
        ({"BOOL": True}, 1),
        ({"NULL": True}, 1),
        ({"L": []}, 3),
        ({"L": [{"S": "ab"}, {"N": "7"}]}, 3 + (2 + 1) + (2 + 1)),
        ({"M": {"k": {"S": "v"}}}, 3 + 1 + 1 + 1),
        ({"SS": ["a", "bc"]}, 3),
    ],
)
def test_an_attribute_value_is_sized_as_dynamodb_sizes_it(value: dict[str, Any], size: int) -> None:
    assert value_bytes(value) == size


def test_an_item_of_exactly_400_kb_is_stored(dynamodb: Any) -> None:
    # moto's own estimate refused anything over 405,000 bytes
    dynamodb.put_item(TableName=TABLE, Item=_item_of(DYNAMODB_ITEM_BYTES))

    assert item_bytes(dynamodb.get_item(TableName=TABLE, Key=KEY)["Item"]) == DYNAMODB_ITEM_BYTES


def test_a_put_one_byte_over_is_refused_with_the_size_and_the_limit(dynamodb: Any) -> None:
    with pytest.raises(ClientError) as refused:
        dynamodb.put_item(TableName=TABLE, Item=_item_of(DYNAMODB_ITEM_BYTES + 1))

    code, message = _refusal(refused)
    assert code == "ValidationException"
    assert message.startswith(PUT_REFUSED)
    assert f"is {DYNAMODB_ITEM_BYTES + 1} bytes, over {DYNAMODB_ITEM_BYTES}" in message
    assert "Item" not in dynamodb.get_item(TableName=TABLE, Key=KEY)


def test_a_put_over_the_limit_by_list_overhead_is_refused(dynamodb: Any) -> None:
    # GIVEN a list whose strings alone fit, but whose 3 + 1-per-element overhead does not
    strings = DYNAMODB_ITEM_BYTES - KEY_BYTES - len("curve") - 3
    item = {**KEY, "curve": {"L": [{"S": "x" * (strings // 100)}] * 100}}
    assert item_bytes(item) > DYNAMODB_ITEM_BYTES

    with pytest.raises(ClientError) as refused:
        dynamodb.put_item(TableName=TABLE, Item=item)

    assert _refusal(refused)[1].startswith(PUT_REFUSED)


def test_an_update_that_grows_a_nested_map_over_the_limit_is_refused_and_undone(dynamodb: Any) -> None:
    # GIVEN an item with a map, as checkpoint_counts is (moto checked top-level SETs only)
    dynamodb.put_item(TableName=TABLE, Item={**KEY, "counts": {"M": {}}})

    with pytest.raises(ClientError) as refused:
        dynamodb.update_item(
            TableName=TABLE,
            Key=KEY,
            UpdateExpression="SET #counts.#job = :big",
            ExpressionAttributeNames={"#counts": "counts", "#job": "job-1"},
            ExpressionAttributeValues={":big": {"S": "x" * DYNAMODB_ITEM_BYTES}},
        )

    code, message = _refusal(refused)
    assert (code, message.split(" (", 1)[0]) == ("ValidationException", UPDATE_REFUSED)
    assert dynamodb.get_item(TableName=TABLE, Key=KEY)["Item"] == {**KEY, "counts": {"M": {}}}


def test_a_list_append_past_the_limit_is_refused_and_the_list_kept(dynamodb: Any) -> None:
    # GIVEN a run whose curve grows by list_append, as runs.py appends checkpoint evaluations
    point = {"M": {"loss": {"S": "x" * 100_000}}}
    update = {
        "TableName": TABLE,
        "Key": KEY,
        "UpdateExpression": "SET #curve = list_append(if_not_exists(#curve, :empty), :point)",
        "ExpressionAttributeNames": {"#curve": "curve"},
        "ExpressionAttributeValues": {":empty": {"L": []}, ":point": {"L": [point]}},
    }
    for _ in range(4):
        dynamodb.update_item(**update)

    with pytest.raises(ClientError) as refused:
        dynamodb.update_item(**update)

    assert _refusal(refused)[1].startswith(UPDATE_REFUSED)
    assert len(dynamodb.get_item(TableName=TABLE, Key=KEY)["Item"]["curve"]["L"]) == 4


def test_an_update_that_would_create_an_item_over_the_limit_creates_none(dynamodb: Any) -> None:
    with pytest.raises(ClientError) as refused:
        dynamodb.update_item(
            TableName=TABLE,
            Key=KEY,
            UpdateExpression="SET d = :big",
            ExpressionAttributeValues={":big": {"S": "x" * DYNAMODB_ITEM_BYTES}},
        )

    assert _refusal(refused)[1].startswith(UPDATE_REFUSED)
    assert "Item" not in dynamodb.get_item(TableName=TABLE, Key=KEY)


def test_batch_and_transaction_writes_over_the_limit_are_refused(dynamodb: Any) -> None:
    big = _item_of(DYNAMODB_ITEM_BYTES + 1)
    with pytest.raises(ClientError) as batch:
        dynamodb.batch_write_item(RequestItems={TABLE: [{"PutRequest": {"Item": big}}]})
    with pytest.raises(ClientError) as transaction:
        dynamodb.transact_write_items(TransactItems=[{"Put": {"TableName": TABLE, "Item": big}}])

    assert _refusal(batch)[1].startswith(PUT_REFUSED)
    assert _refusal(transaction)[1].startswith(PUT_REFUSED)
    assert "Item" not in dynamodb.get_item(TableName=TABLE, Key=KEY)


def test_moto_still_has_the_symbols_the_patch_replaces_with_the_shapes_relied_on() -> None:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    assert list(inspect.signature(Table.put_item).parameters)[:2] == ["self", "item_attrs"]
    assert list(inspect.signature(DynamoDBBackend.update_item).parameters)[:3] == [
        "self",
        "table_name",
        "key",
    ]


def test_moto_is_restored_on_exit() -> None:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import LimitedSizeDict
    from moto.dynamodb.models.table import Table

    before = (LimitedSizeDict.__setitem__, Table.put_item, DynamoDBBackend.update_item)
    with installed():
        assert Table.put_item is not before[1]
    assert (LimitedSizeDict.__setitem__, Table.put_item, DynamoDBBackend.update_item) == before
