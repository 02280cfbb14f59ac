"""`retrain demo`: the whole flow on the embedded stack (`retrain.demo.flow`), then each run's report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from controller import names
from retrain.commands._shared import STATE_DIR, JsonOption, StateDirOption, console_for
from retrain.commands.report import conclude
from retrain.demo.flow import (
    DEMO_BATCHES,
    DEMO_DATASET,
    DEMO_TIMEOUT_MINUTES,
    Clock,
    DemoOptions,
    held_out_table,
    lineage_table,
    run_demo,
    timing_table,
)
from retrain.report import publish, timing
from retrain.report.summary import demo_summary
from retrain.run.start import parse_assignments


# Typer reads the parameters as the command's options, one each.
def demo(  # noqa: PLR0913
    *,
    images: Annotated[
        Path | None, typer.Option("--images", help="Upload DIR/<label>/<image> instead of the digits.")
    ] = None,
    dataset: Annotated[str, typer.Option("--dataset", help="Data set name.")] = DEMO_DATASET,
    interrupt: Annotated[
        int, typer.Option("--interrupt", min=0, help="Spot interruptions of every training job.")
    ] = 1,
    fault: Annotated[
        list[str] | None, typer.Option("--fault", help="Inject a fault (repeatable), e.g. throttle:2.")
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=10, help="Upload only the first N digits (default: all 1,797)."),
    ] = None,
    batches: Annotated[int, typer.Option("--batches", min=1, help="Upload batches.")] = DEMO_BATCHES,
    timeout: Annotated[int, typer.Option("--timeout", min=1, help="Minutes to wait.")] = DEMO_TIMEOUT_MINUTES,
    parameter: Annotated[
        list[str] | None,
        typer.Option("--parameter", "-p", help="A stack parameter NAME=VALUE over the demo's (repeatable)."),
    ] = None,
    json_output: JsonOption = False,
    state_dir: StateDirOption = STATE_DIR,
) -> None:
    """Run the whole flow on the embedded stack: upload, ingest, tune on spot, evaluate, gate, register
    (the digits in two waves: a second run fine-tunes the first one's champion for a new label)."""
    options = DemoOptions(
        images=images,
        dataset=dataset,
        interrupt=interrupt,
        faults=tuple(fault or ()),
        limit=limit,
        batches=batches,
        timeout_minutes=timeout,
        state_dir=state_dir,
        parameters=tuple(parse_assignments(parameter or [], "--parameter").items()),
    )
    console = console_for(json_output)
    timed: tuple[Clock, dict[str, list[timing.Phase]], bool] | None = None
    try:
        with run_demo(options, console=console, quiet=json_output) as ran:
            try:
                reported = [
                    publish.report(ran.deployment, r, upload_keys=ran.upload_keys) for r in ran.records
                ]
                ran.clock.lap("reports")
                if len(reported) > 1 and not json_output:
                    console.print(lineage_table(reported))
                if ran.held_out and not json_output:
                    console.print(held_out_table(ran, dataset))
                    ran.clock.lap("the champion's endpoint classifies the held-out digits")
                if json_output:
                    typer.echo(json.dumps(demo_summary(reported), default=str))
                conclude(reported[-1], json_output=False, console=console, quiet=json_output)
            finally:
                if not json_output:
                    sfn = ran.deployment.client("stepfunctions")
                    phases = {
                        r["run_id"]: timing.run_phases(sfn, r["execution_arn"])
                        for r in ran.records
                        if r.get("execution_arn")
                    }
                    timed = ran.clock, phases, bool(ran.deployment.outputs.get(names.STACK_OUTPUTS["mlflow"]))
    finally:
        if timed is not None:
            clock, phases, mlflow = timed
            clock.lap("stop the stack, save its state")
            console.print(timing_table(clock.phases, phases))
            if mlflow:
                console.print(
                    f"Every run, trial and model is in MLflow (experiment retrain/{dataset}): "
                    "open it with `retrain ui`."
                )
