"""The embedded stack keeps its data on disk: a new stack from the same state directory has it back."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain.embedded.stack import EmbeddedStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXTURE = Path(__file__).resolve().parent / "stack_fixture" / "template.yaml"
STACK = "fixture"


def _outputs(stack: EmbeddedStack) -> dict[str, str]:
    described = stack.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}


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
