"""The embedded stack from a SAM template: provisioning, wiring, and data that outlives the process."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from retrain.embedded.provisioning import wiring
from retrain.embedded.stack import EmbeddedStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXTURE = Path(__file__).resolve().parent / "stack_fixture" / "template.yaml"
STACK = "fixture"


def _wait_for(probe: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"nothing after {timeout} s")


def _outputs(stack: EmbeddedStack) -> dict[str, str]:
    described = stack.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    embedded = EmbeddedStack(
        tmp_path_factory.mktemp("state"),
        template=FIXTURE,
        stack_name=STACK,
        parameter_overrides={"Stage": "demo", "IngestConcurrency": "4"},
    )
    embedded.start()
    yield embedded
    embedded.stop()


def test_describe_stacks_returns_the_template_outputs(stack: EmbeddedStack) -> None:
    outputs = _outputs(stack)

    assert set(outputs) == {
        "DataBucketName",
        "StateMachineArn",
        "ItemsTableName",
        "FileSystemId",
        "MountName",
        "ModelGroupArn",
    }
    file_system = stack.client("fsx").describe_file_systems(FileSystemIds=[outputs["FileSystemId"]])[
        "FileSystems"
    ][0]
    assert file_system["LustreConfiguration"]["MountName"] == outputs["MountName"]
    assert file_system["LustreConfiguration"]["DataRepositoryConfiguration"]["ImportPath"] == (
        f"s3://{outputs['DataBucketName']}/data"
    )


def test_every_function_queue_table_rule_mapping_and_state_machine_is_wired(stack: EmbeddedStack) -> None:
    assert stack.wiring is not None

    assert wiring.unwired(stack.translated, stack.wiring) == []
    assert sorted(spec.logical_id for spec in stack.wiring.functions.values()) == [
        "IngestFunction",
        "MarkFunction",
        "SweepFunction",
    ]
    (mapping,) = stack.wiring.sqs_mappings
    assert (mapping.batch_size, mapping.batching_window_seconds, mapping.report_batch_item_failures) == (
        5,
        2,
        True,
    )
    assert mapping.maximum_concurrency == 4  # the ScalingConfig's Ref, as the stack's parameter gives it


def test_functions_get_the_environment_the_template_gives_them(stack: EmbeddedStack) -> None:
    assert stack.wiring is not None
    by_id = {spec.logical_id: spec for spec in stack.wiring.functions.values()}

    assert by_id["IngestFunction"].environment["STAGE"] == "demo"
    assert by_id["IngestFunction"].environment["QUIET_SECONDS"] == "300"
    assert by_id["IngestFunction"].environment["STATE_MACHINE_ARN"] == _outputs(stack)["StateMachineArn"]
    assert "STATE_MACHINE_ARN" not in by_id["MarkFunction"].environment


def test_an_upload_flows_through_eventbridge_sqs_lambda_step_functions_and_fsx(stack: EmbeddedStack) -> None:
    outputs = _outputs(stack)
    key = "data/digits/7/seven.png"

    stack.client("s3").put_object(Bucket=outputs["DataBucketName"], Key=key, Body=b"pixels")

    dynamodb = stack.client("dynamodb")
    item = _wait_for(
        lambda: (
            dynamodb.get_item(TableName=outputs["ItemsTableName"], Key={"key": {"S": key}}).get("Item", {})
            if dynamodb.get_item(TableName=outputs["ItemsTableName"], Key={"key": {"S": key}})
            .get("Item", {})
            .get("state", {})
            .get("S")
            == "marked"
            else None
        )
    )
    assert item["stage"]["S"] == "demo"
    task_id = item["import_task"]["S"]
    assert stack.fsx is not None
    stack.fsx.wait()
    mount = stack.fsx.mount_path(outputs["FileSystemId"], f"/{outputs['MountName']}/digits")
    assert (mount / "7" / "seven.png").read_bytes() == b"pixels"
    task = stack.client("fsx").describe_data_repository_tasks(TaskIds=[task_id])["DataRepositoryTasks"][0]
    assert task["Lifecycle"] == "SUCCEEDED"


def test_a_scheduled_rule_runs_its_function(stack: EmbeddedStack) -> None:
    table = _outputs(stack)["ItemsTableName"]
    dynamodb = stack.client("dynamodb")

    item = _wait_for(lambda: dynamodb.get_item(TableName=table, Key={"key": {"S": "sweep"}}).get("Item"))

    assert item["state"]["S"] == "Scheduled Event"


def test_the_emulated_account_answers_its_quotas_and_its_regions_resource_types(stack: EmbeddedStack) -> None:
    stack.quotas.apply("us-east-1", "lambda", "Concurrent executions", 50)
    try:
        limit = stack.client("lambda").get_account_settings()["AccountLimit"]
        quota = stack.client("service-quotas").get_service_quota(ServiceCode="events", QuotaCode="L-5540C5E3")
    finally:
        stack.quotas.apply("us-east-1", "lambda", "Concurrent executions", 1000)
    described = stack.client("cloudformation").describe_type(Type="RESOURCE", TypeName="AWS::FSx::FileSystem")

    assert limit["ConcurrentExecutions"] == 50
    assert quota["Quota"]["Value"] == 18_750
    assert described["TypeName"] == "AWS::FSx::FileSystem"
