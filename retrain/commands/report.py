"""`retrain report`, and how every command that waited for a run ends: its report, then its outcome
(`finish`, `conclude`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from controller import runs
from retrain.commands._shared import (
    STATE_DIR,
    DatasetOption,
    JsonOption,
    StackOption,
    StateDirOption,
    deployment_for,
)
from retrain.deployment import Deployment
from retrain.errors import RunFailedError
from retrain.report import publish
from retrain.report.collect import collect, find_run
from retrain.report.facts import RunFacts
from retrain.report.summary import summary
from retrain.run.follow import ENDED_WELL


def report(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="Run id (see `retrain runs`).")],
    dataset: DatasetOption = None,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = STATE_DIR,
) -> None:
    """Write a run's report (runs/<run-id>/report.md with charts; also under the run's S3 prefix on AWS)."""
    with deployment_for(stack, state_dir, read_only=True) as deployment:
        record = find_run(deployment, run_id, dataset)
        out_dir = publish.report_dir(record["run_id"])
        facts = collect(deployment, record, out_dir=out_dir)
        path = publish.write_and_track(deployment, facts, out_dir)
        facts.report = publish.publish_report(deployment, record, out_dir)
    where = facts.report if facts.report == str(path) else f"{facts.report} (and {path})"
    typer.echo(json.dumps(summary(facts)) if json_output else f"report: {where}")


def finish(
    deployment: Deployment,
    record: runs.RunRecord,
    *,
    json_output: bool,
    console: Console,
    upload_keys: set[str] | None = None,
) -> None:
    """Report on a run that ended; print the JSON; fail (non-zero, reason on stderr) if the run failed."""
    conclude(
        publish.report(deployment, record, upload_keys=upload_keys), json_output=json_output, console=console
    )


def conclude(facts: RunFacts, *, json_output: bool, console: Console, quiet: bool = False) -> None:
    """Print a reported run's outcome (or its JSON summary; `quiet`: neither); fail if the run failed."""
    if json_output:
        typer.echo(json.dumps(summary(facts), default=str))
    elif not quiet:
        gate = {True: "passed", False: "rejected", None: "not reached"}[facts.gate_passed]
        if facts.status == "NOT_NEEDED":  # TrainWhen=drift: the champion does as well on the new uploads
            gate = "not reached, no retraining needed (the champion stays)"
        console.print(f"run {facts.run_id} {facts.status}; gate {gate}: {facts.gate_reason or '-'}")
        console.print(f"report: {facts.report}")
    if facts.status not in ENDED_WELL:
        reason = facts.failure or f"the run ended {facts.status}"
        raise RunFailedError(f"run {facts.run_id} failed: {reason} (report: {facts.report})")
