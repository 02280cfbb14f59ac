"""`retrain local up|down`: the embedded stack as a background process with its state on disk."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from retrain.embedded import background

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXTURE = Path(__file__).resolve().parent / "stack_fixture" / "template.yaml"


def test_up_serves_the_stack_until_down_saves_its_data_and_stops_it(tmp_path: Path) -> None:
    endpoint = background.up(tmp_path, template=FIXTURE, stack_name="fixture")
    try:
        assert background.running(tmp_path) == (endpoint, "fixture")
        cfn = boto3.client(
            "cloudformation",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="k",
            aws_secret_access_key="k",
        )
        status = cfn.describe_stacks(StackName="fixture")["Stacks"][0]["StackStatus"]
        assert background.up(tmp_path) == endpoint  # a second up finds the running one
    finally:
        stopped = background.down(tmp_path)

    assert status == "CREATE_COMPLETE"
    assert stopped is True
    assert background.running(tmp_path) is None
    assert (tmp_path / "snapshot" / "dynamodb.json").exists()
    assert background.down(tmp_path) is False
