"""Where a run's time goes: the execution's states grouped into phases, from Step Functions' history.

`STATE_PHASES` names the phase of every top-level Task, Wait and Parallel state of the state machine (a
test fails when the ASL gains one without a phase); Choice and Pass states take no time. The demo adds
its own phases before the execution (the stack starting, uploads, ingest and the debounce wait).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

PREPARE, ARRIVALS, IMPORT, TUNING, FINAL, RULES, EVALUATION, GATE, FINISH = (
    "prepare",
    "champion on the new uploads",
    "FSx import",
    "tuning",
    "final training",
    "rule check",
    "evaluation",
    "gate and registry",
    "finish and notify",
)
STATE_PHASES: Final[Mapping[str, str]] = {
    "Prepare the run": PREPARE,
    "Freeze the manifest": PREPARE,
    "Back off before the freeze": PREPARE,
    "Read the frozen manifest": PREPARE,
    # started beside tuning (a moment), or awaited under TrainWhen=drift / SuspectLabels=hold
    "Start the champion on the new uploads": ARRIVALS,
    "Evaluate the champion on the new uploads": ARRIVALS,
    "Weigh the champion on the new uploads": ARRIVALS,
    "Import new images": IMPORT,
    "Wait for the import": IMPORT,
    "Check the import": IMPORT,
    "Read the import report": IMPORT,
    "Tune hyperparameters": TUNING,
    "Back off before the tuning": TUNING,
    "Tune hyperparameters from the last tuning job": TUNING,
    "Back off before the warm-started tuning": TUNING,
    "Pick the best candidate": TUNING,
    "Train the final model": FINAL,
    "Back off before the final training": FINAL,
    "Train the final model with managed Debugger": FINAL,
    "Back off before the final training with managed Debugger": FINAL,
    "Check the training rules": RULES,
    "Back off before the rule check": RULES,
    "Evaluate the challenger and the champion": EVALUATION,
    "Apply the quality gate": GATE,
    "Register the model": GATE,
    "Finalize the run": FINISH,
    "Notify the outcome": FINISH,
    "Record the failure": FINISH,
    "Notify the failure": FINISH,
}
_ENTERED = ("TaskStateEntered", "WaitStateEntered", "ParallelStateEntered")
_EXITED = ("TaskStateExited", "WaitStateExited", "ParallelStateExited")


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float


def _history(sfn: Any, execution_arn: str) -> Iterable[dict[str, Any]]:
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn):
        yield from page["events"]


def execution_phases(events: Iterable[Mapping[str, Any]]) -> list[Phase]:
    """Seconds per phase, in the order the phases began, from an execution's history events."""
    entered: dict[str, datetime] = {}
    totals: dict[str, float] = {}
    for event in events:
        kind, stamp = str(event["type"]), event["timestamp"]
        if kind in _ENTERED:
            name = str(event["stateEnteredEventDetails"]["name"])
            if name in STATE_PHASES:
                entered[name] = stamp
        elif kind in _EXITED:
            name = str(event["stateExitedEventDetails"]["name"])
            if name in entered:
                phase = STATE_PHASES[name]
                totals[phase] = totals.get(phase, 0.0) + (stamp - entered.pop(name)).total_seconds()
    return [Phase(name, seconds) for name, seconds in totals.items()]


def run_phases(sfn: Any, execution_arn: str) -> list[Phase]:
    return execution_phases(_history(sfn, execution_arn))


def markdown(phases: list[Phase]) -> list[str]:
    """The phases as a Markdown table with each one's share of the total."""
    total = sum(p.seconds for p in phases) or 1.0
    lines = ["| phase | seconds | share |", "| --- | ---: | ---: |"]
    lines += [f"| {p.name} | {p.seconds:.0f} | {p.seconds / total:.0%} |" for p in phases]
    lines.append(f"| **total** | **{sum(p.seconds for p in phases):.0f}** | |")
    return lines
