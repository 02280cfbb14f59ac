"""The run's phases from Step Functions' history: every state that takes time has a phase."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from retrain.report import timing

ASL = Path(__file__).resolve().parents[3] / "statemachine" / "training.asl.json"


def test_every_top_level_state_that_takes_time_has_a_phase() -> None:
    states = json.loads(ASL.read_text())["States"]
    timed = {name for name, state in states.items() if state["Type"] in ("Task", "Wait", "Parallel")}
    assert timed == set(timing.STATE_PHASES)


def _event(kind: str, name: str, at: float) -> dict[str, object]:
    key = "stateEnteredEventDetails" if kind.endswith("Entered") else "stateExitedEventDetails"
    return {
        "type": kind,
        "timestamp": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=at),
        key: {"name": name},
    }


def test_phases_add_up_their_states_in_the_order_they_began() -> None:
    events = [
        _event("TaskStateEntered", "Prepare the run", 0),
        _event("TaskStateExited", "Prepare the run", 2),
        _event("TaskStateEntered", "Import new images", 2),
        _event("TaskStateExited", "Import new images", 3),
        _event("WaitStateEntered", "Wait for the import", 3),
        _event("WaitStateExited", "Wait for the import", 8),
        _event("ChoiceStateEntered", "Tune or train?", 8),
        _event("TaskStateEntered", "Tune hyperparameters", 8),
        _event("TaskStateExited", "Tune hyperparameters", 108),
        _event("ParallelStateEntered", "Evaluate the challenger and the champion", 108),
        _event("TaskStateEntered", "Evaluate the challenger", 108),  # inside the Parallel: not counted again
        _event("TaskStateExited", "Evaluate the challenger", 120),
        _event("ParallelStateExited", "Evaluate the challenger and the champion", 121),
    ]
    phases = timing.execution_phases(events)
    assert [(p.name, p.seconds) for p in phases] == [
        (timing.PREPARE, 2.0),
        (timing.IMPORT, 6.0),
        (timing.TUNING, 100.0),
        (timing.EVALUATION, 13.0),
    ]
    table = timing.markdown(phases)
    assert table[2] == "| prepare | 2 | 2% |"
    assert table[-1] == "| **total** | **121** | |"


def test_the_demo_table_lists_its_steps_with_each_runs_phases_under_that_run() -> None:
    from rich.console import Console

    from retrain.demo import flow as demo

    table = demo.timing_table(
        [
            timing.Phase("upload", 10.0),
            timing.Phase(demo.RUN_PHASE + "d-00001", 100.0),
            timing.Phase(demo.RUN_PHASE + "d-00002", 50.0),
        ],
        {
            "d-00001": [timing.Phase(timing.TUNING, 80.0), timing.Phase(timing.EVALUATION, 20.0)],
            "d-00002": [timing.Phase(timing.PREPARE, 7.0)],
        },
    )
    console = Console(width=100, record=True)
    console.print(table)
    text = console.export_text()
    assert text.index("upload") < text.index("d-00001") < text.index("  tuning") < text.index("d-00002")
    assert text.index("d-00002") < text.index("  prepare") < text.index("total")
    assert "160" in text


def test_a_run_whose_execution_is_gone_has_no_phases_and_the_report_still_builds() -> None:
    import boto3
    from moto import mock_aws

    from retrain.report.collect import execution_phases

    class _Deployment:
        def client(self, service: str) -> object:
            return boto3.client(service, region_name="us-east-1")

    with mock_aws():
        gone = "arn:aws:states:us-east-1:123456789012:execution:retrain-training:run-1"
        assert execution_phases(_Deployment(), gone) == []  # type: ignore[arg-type]
