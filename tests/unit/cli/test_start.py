from __future__ import annotations

import json
import time

import boto3
import pytest
from moto import mock_aws

from controller import runs
from controller.run_request import parse_request
from retrain.deployment import connect
from retrain.errors import RunFailedError
from retrain.report.collect import collect
from retrain.run.follow import wait_for_run
from retrain.run.start import Overrides, parse_assignments, start_input
from tests.unit.cli.conftest import make_stack


def test_the_manual_input_is_what_the_control_plane_accepts():
    # GIVEN every override the CLI offers
    overrides = Overrides(
        max_jobs=4, parallel_jobs=2, instance_type="ml.g5.2xlarge", epochs=3, image_size=64, batch_size=16,
        model="resnet34", spot=False, hyperparameters=parse_assignments(["lr=0.01", "optimizer=sgd"], "-H"),
    )  # fmt: skip
    # WHEN the CLI's StartExecution input is parsed by the state machine's first state
    request = parse_request(json.loads(json.dumps(start_input("flowers", overrides))))
    # THEN it is valid and carries each override
    assert request.dataset == "flowers" and request.trigger == "manual"
    assert request.overrides["max_jobs"] == 4 and request.overrides["model"] == "resnet34"
    assert request.overrides["spot"] is False
    assert request.overrides["hyperparameters"] == {"lr": "0.01", "optimizer": "sgd"}


def test_no_overrides_sends_only_the_dataset():
    assert start_input("flowers", Overrides()) == {"dataset": "flowers", "trigger": "manual"}


def _failing_execution(machine: str, name: str, *, error: str, cause: str) -> str:
    """Start execution `name` of a new state machine `machine` whose first state fails with `error` and
    `cause`; its ARN."""
    sfn = boto3.client("stepfunctions")
    role = boto3.client("iam").get_role(RoleName="retrain-sfn")["Role"]["Arn"]
    fail = {"Type": "Fail", "Error": error, "Cause": cause}
    definition = json.dumps({"StartAt": "Prepare", "States": {"Prepare": fail}})
    created = sfn.create_state_machine(name=machine, definition=definition, roleArn=role)
    return str(sfn.start_execution(stateMachineArn=created["stateMachineArn"], name=name)["executionArn"])


def test_an_execution_that_fails_before_recording_a_run_fails_with_its_cause():
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        stack = make_stack()
        # GIVEN an execution that failed in its first state (e.g. the data set's lock was held)
        arn = _failing_execution("failing", "manual-x", error="DatasetBusy", cause="run r1 is active")
        # WHEN the CLI waits for its run
        with pytest.raises(RunFailedError) as raised:
            deployment = connect(stack.name)
            wait_for_run(
                deployment, "pets", run_id="manual-x", execution_arn=arn, timeout_seconds=30, poll_seconds=0.1
            )
    # THEN it stops with the execution's error and cause
    assert "ended FAILED before it recorded a run: DatasetBusy: run r1 is active" in str(raised.value)


def test_a_run_whose_execution_failed_without_updating_its_record_reports_failed():
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        stack = make_stack()
        # GIVEN a run record still STARTING whose execution already failed (its failure handler failed too)
        arn = _failing_execution("broken", "digits-00001", error="PrepareFailed", cause="no such path $.run")
        record = {"dataset": "digits", "run_id": "digits-00001", "status": "STARTING", "execution_arn": arn}
        runs.put_run(record, table_name=stack.output("runs_table"), client=boto3.client("dynamodb"))
        sfn = boto3.client("stepfunctions")
        for _ in range(100):
            if sfn.describe_execution(executionArn=arn)["status"] != "RUNNING":
                break
            time.sleep(0.05)
        # WHEN its facts are collected
        facts = collect(connect(stack.name), record)
    # THEN the execution's status and cause are the run's
    assert facts.status == "FAILED"
    assert facts.failure == "execution FAILED: PrepareFailed: no such path $.run"
