"""The embedded stack keeps its data on disk: a new stack from the same state directory has it back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from retrain.embedded.stack import EmbeddedStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXTURE = Path(__file__).resolve().parent / "stack_fixture" / "template.yaml"
STACK = "fixture"


def _outputs(stack: EmbeddedStack) -> dict[str, str]:
    described = stack.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}


def _state(dynamodb: Any, table: str, key: str) -> str | None:
    item = dynamodb.get_item(TableName=table, Key={"key": {"S": key}}, ConsistentRead=True).get("Item")
    return None if item is None else str(item["state"]["S"])


def test_data_survives_a_restart_under_the_same_names(tmp_path: Path) -> None:
    with EmbeddedStack(tmp_path, template=FIXTURE, stack_name=STACK) as first:
        before = _outputs(first)
        first.client("s3").put_object(Bucket=before["DataBucketName"], Key="notes/kept.txt", Body=b"kept")
        first.client("dynamodb").put_item(TableName=before["ItemsTableName"], Item={"key": {"S": "kept"}})

    with EmbeddedStack(tmp_path, template=FIXTURE, stack_name=STACK) as second:
        after = _outputs(second)
        body = (
            second.client("s3")
            .get_object(Bucket=after["DataBucketName"], Key="notes/kept.txt")["Body"]
            .read()
        )
        item = second.client("dynamodb").get_item(
            TableName=after["ItemsTableName"], Key={"key": {"S": "kept"}}
        )

    assert after == before
    assert body == b"kept"
    assert "Item" in item


def _upload_and_wait_until_marked(stack: EmbeddedStack, outputs: dict[str, str], key: str) -> None:
    """Ingest writes the item and starts the flow, whose last state marks it: wait for both to end."""
    dynamodb = stack.client("dynamodb")
    stack.client("s3").put_object(Bucket=outputs["DataBucketName"], Key=key, Body=b"3")
    deadline = time.monotonic() + 120
    while _state(dynamodb, outputs["ItemsTableName"], key) != "marked":
        assert time.monotonic() < deadline, "the upload was never ingested and marked"
        time.sleep(0.3)


def test_restored_objects_do_not_replay_their_upload_events(tmp_path: Path) -> None:
    key = "data/digits/3/three.png"
    with EmbeddedStack(tmp_path, template=FIXTURE, stack_name=STACK) as first:
        outputs = _outputs(first)
        _upload_and_wait_until_marked(first, outputs, key)
        first.client("dynamodb").delete_item(TableName=outputs["ItemsTableName"], Key={"key": {"S": key}})

    with EmbeddedStack(tmp_path, template=FIXTURE, stack_name=STACK) as second:
        time.sleep(3)  # an event replayed at restore would be ingested well within this
        item = second.client("dynamodb").get_item(
            TableName=outputs["ItemsTableName"], Key={"key": {"S": key}}
        )
        queue = second.client("sqs").get_queue_attributes(
            QueueUrl=second.wiring.queues["IngestQueue"] if second.wiring else "",
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]

    assert "Item" not in item
    assert queue == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def test_a_lazy_restore_gives_the_tables_at_once_and_the_objects_on_the_first_s3_request(
    tmp_path: Path,
) -> None:
    key = "data/digits/3/three.png"
    with EmbeddedStack(tmp_path, template=FIXTURE, stack_name=STACK) as first:
        outputs = _outputs(first)
        _upload_and_wait_until_marked(first, outputs, key)

    # GIVEN a stack started for a read-only command
    second = EmbeddedStack(tmp_path, template=FIXTURE, stack_name=STACK)
    second.start(read_only=True)
    try:
        # WHEN it reads the tables THEN their items are there, and no object was put back yet
        assert _state(second.client("dynamodb"), outputs["ItemsTableName"], key) == "marked"
        pending_after_tables = second._objects_pending
        # AND the first S3 request gets the objects (put back without replaying their upload events)
        body = second.client("s3").get_object(Bucket=outputs["DataBucketName"], Key=key)["Body"].read()
        time.sleep(3)
        queue = second.client("sqs").get_queue_attributes(
            QueueUrl=second.wiring.queues["IngestQueue"] if second.wiring else "",
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
    finally:
        second.stop(save=False)

    assert pending_after_tables
    assert not second._pollers  # nothing that acts was started
    assert body == b"3"
    assert queue == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def test_a_stack_saves_the_objects_a_lazy_restore_had_not_put_back_yet(tmp_path: Path) -> None:
    with EmbeddedStack(tmp_path, template=FIXTURE, stack_name=STACK) as first:
        outputs = _outputs(first)
        first.client("s3").put_object(Bucket=outputs["DataBucketName"], Key="notes/kept.txt", Body=b"kept")
    second = EmbeddedStack(tmp_path, template=FIXTURE, stack_name=STACK)
    second.start(read_only=True)
    second.stop()  # saves, with no S3 request in between
    with EmbeddedStack(tmp_path, template=FIXTURE, stack_name=STACK) as third:
        body = third.client("s3").get_object(Bucket=outputs["DataBucketName"], Key="notes/kept.txt")["Body"]
        assert body.read() == b"kept"
