from __future__ import annotations

import json

import boto3
from moto import mock_aws
from rich.console import Console

from controller import runs
from retrain.run.follow import JobRow, Snapshot, execution_history, follow, plain_line, render, snapshot
from tests.unit.cli import recorded_run
from tests.unit.cli.conftest import make_stack, recorded_deployment


class _History:
    """Step Functions' GetExecutionHistory answer for a run that is tuning now (boto3's shape, 2 pages)."""

    def __init__(self) -> None:
        tuning = {"HyperParameterTuningJobName": "rt-1-digits", "HyperParameterTuningJobConfig": {}}
        self.pages = [
            {"events": [
                {"type": "ExecutionStarted"},
                {"type": "TaskStateEntered", "stateEnteredEventDetails": {"name": "Prepare the run"}},
                {"type": "TaskStateExited", "stateExitedEventDetails": {"name": "Prepare the run"}},
            ], "nextToken": "2"},
            {"events": [
                {"type": "TaskStateEntered", "stateEnteredEventDetails": {"name": "Tune hyperparameters"}},
                {"type": "TaskScheduled", "taskScheduledEventDetails": {"parameters": json.dumps(tuning)}},
            ]},
        ]  # fmt: skip

    def get_execution_history(self, **request):
        return self.pages[1] if request.get("nextToken") == "2" else self.pages[0]


def test_history_gives_states_in_order_the_current_one_and_the_jobs_named():
    # WHEN a running execution's history is read (over two pages)
    history, current, jobs, error = execution_history(_History(), "arn:exec")
    # THEN the states come in order, the one without an exit is current, the tuning job is found
    assert history == ["Prepare the run", "Tune hyperparameters"]
    assert current == "Tune hyperparameters"
    assert jobs == {"rt-1-digits": "tuning"}
    assert error == ""


def test_plain_line_counts_finished_trials_and_interruptions():
    shot = Snapshot(run_id="r1", dataset="digits", status="RUNNING", current_state="Tune hyperparameters",
                    elapsed_seconds=75, jobs=[JobRow("t1", "trial", "Completed", interruptions=1),
                                              JobRow("t2", "trial", "InProgress")])  # fmt: skip
    assert plain_line(shot) == (
        "run r1 RUNNING state=Tune hyperparameters trials=1/2 interruptions=1 elapsed=1m15s"
    )


def test_render_shows_each_job_with_its_objective_and_resumes():
    shot = Snapshot(run_id="r1", dataset="digits", status="RUNNING",
                    jobs=[JobRow("t1", "trial", "InProgress", "Training", 0.9, 1, 1)])  # fmt: skip
    console = Console(record=True, width=120)
    console.print(render(shot))
    text = console.export_text()
    assert "t1" in text and "InProgress (Training)" in text and "0.9000" in text


def test_follow_of_a_finished_run_prints_one_plain_line_and_returns():
    with mock_aws():
        stack = make_stack()
        run = recorded_run.record()
        runs.put_run(run, table_name=stack.output("runs_table"), client=boto3.client("dynamodb"))
        deployment = recorded_deployment(stack)
        console = Console(record=True, width=200)
        # WHEN a finished run is followed without a terminal
        ended = follow(deployment, run, console=console, live=False, timeout_seconds=5, sleep=lambda _: None)
    # THEN it returns the final record after one plain progress line
    assert ended["status"] == "SUCCEEDED"
    lines = console.export_text().splitlines()
    # (with its start, what it set aside and could not read; no ledger rows here, so no refused uploads)
    assert lines == [
        "run r1 SUCCEEDED state=- trials=3/3 interruptions=2 elapsed=5m30s start=champion unreadable=1 "
        "labels_set_aside=lynx"
    ]


def test_a_run_whose_execution_is_gone_still_has_a_status():
    # GIVEN a finished run whose execution Step Functions no longer keeps (90 days; the embedded stack
    # until it stops)
    with mock_aws():
        stack = make_stack()
        run = {
            **recorded_run.record(),
            "execution_arn": "arn:aws:states:us-east-1:123456789012:execution:m:gone",
        }
        runs.put_run(run, table_name=stack.output("runs_table"), client=boto3.client("dynamodb"))
        deployment = recorded_deployment(stack)
        # WHEN its status is read THEN it comes from the run record, with the execution said to be gone
        shot = snapshot(deployment, run)
    assert shot.status == "SUCCEEDED" and shot.execution_status == "EXPIRED"
    assert shot.history == []
