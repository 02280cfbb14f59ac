"""Runs: `retrain start` (and with --wait follow it to its report), `retrain status`, `retrain runs`, over
`retrain.run`."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from controller import runs
from retrain.commands._shared import (
    STATE_DIR,
    DatasetOption,
    JsonOption,
    StackOption,
    StateDirOption,
    console_for,
    deployment_for,
)
from retrain.commands.report import finish
from retrain.data.upload import check_dataset_name
from retrain.demo.flow import DEMO_TIMEOUT_MINUTES
from retrain.errors import RetrainError
from retrain.report.collect import find_run, runs_table
from retrain.run.follow import follow, plain_line, render, snapshot, wait_for_run
from retrain.run.start import Overrides, parse_assignments, start_run
from retrain_contract import container


# Typer reads the parameters as the command's options, one each.
def start(  # noqa: PLR0913
    *,
    dataset: Annotated[str, typer.Option("--dataset", help="Data set name.")],
    max_jobs: Annotated[int | None, typer.Option("--max-jobs", min=1, help="Tuning trials.")] = None,
    parallel_jobs: Annotated[int | None, typer.Option("--parallel-jobs", min=1)] = None,
    instance_type: Annotated[str | None, typer.Option("--instance-type", help="e.g. ml.g5.xlarge")] = None,
    epochs: Annotated[int | None, typer.Option("--epochs", min=1)] = None,
    image_size: Annotated[int | None, typer.Option("--image-size", min=16)] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", min=1)] = None,
    model: Annotated[str | None, typer.Option("--model", help=" | ".join(container.MODELS))] = None,
    spot: Annotated[bool | None, typer.Option("--spot/--no-spot", help="Managed spot training.")] = None,
    pretrained: Annotated[
        str | None,
        typer.Option(
            "--pretrained", help="Start from these weights: s3://bucket/key (.pth, .pt, model.tar.gz)."
        ),
    ] = None,
    start_from: Annotated[
        str | None,
        typer.Option(
            "--start-from",
            help="champion | pretrained | imagenet | scratch (default: the champion, else the stack's "
            "weights, else ImageNet where the image has the architecture's weights).",
        ),
    ] = None,
    hyperparameter: Annotated[
        list[str] | None,
        typer.Option("--hyperparameter", "-H", help="Fixed NAME=VALUE (repeatable); skips tuning of it."),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it ends, then report.")] = False,
    timeout: Annotated[int, typer.Option("--timeout", min=1, help="Minutes to wait.")] = DEMO_TIMEOUT_MINUTES,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = STATE_DIR,
) -> None:
    """Start a run now, with optional overrides of the stack's training settings."""
    overrides = Overrides(
        max_jobs=max_jobs,
        parallel_jobs=parallel_jobs,
        instance_type=instance_type,
        epochs=epochs,
        image_size=image_size,
        batch_size=batch_size,
        model=model,
        spot=spot,
        pretrained_model_uri=pretrained,
        start_from=start_from,
        hyperparameters=parse_assignments(hyperparameter or [], "--hyperparameter"),
    )
    check_dataset_name(dataset)
    console = console_for(json_output)
    with deployment_for(stack, state_dir, read_only=False) as deployment:
        arn, run_id = start_run(deployment, dataset, overrides)
        if not wait:
            typer.echo(
                json.dumps({"run_id": run_id, "execution_arn": arn})
                if json_output
                else f"started run {run_id} ({arn}); follow it with `retrain status {run_id}`"
            )
            return
        record = wait_for_run(
            deployment, dataset, run_id=run_id, execution_arn=arn, timeout_seconds=timeout * 60
        )
        record = follow(
            deployment, record, console=console, live=console.is_terminal, timeout_seconds=timeout * 60
        )
        finish(deployment, record, json_output=json_output, console=console)


def status(
    run_id: Annotated[
        str | None, typer.Argument(metavar="[RUN]", help="Run id (default: the newest run).")
    ] = None,
    dataset: DatasetOption = None,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = STATE_DIR,
) -> None:
    """Where a run is: its state, the states it went through, its jobs."""
    console = console_for(False)
    with deployment_for(stack, state_dir, read_only=True) as deployment:
        if run_id is None:
            found = runs.list_runs(
                table_name=runs_table(deployment), dataset=dataset, client=deployment.client("dynamodb")
            )
            if not found:
                raise RetrainError(
                    "no runs yet: upload images (`retrain upload`) or start one (`retrain start`)"
                )
            record = found[0]
        else:
            record = find_run(deployment, run_id, dataset)
        shot = snapshot(deployment, record)
    if json_output:
        typer.echo(json.dumps(asdict(shot)))
    elif console.is_terminal:
        console.print(render(shot))
    else:
        typer.echo(plain_line(shot))


def list_runs_command(
    dataset: DatasetOption = None,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = STATE_DIR,
) -> None:
    """The runs, newest first."""
    if dataset is not None:
        check_dataset_name(dataset)
    with deployment_for(stack, state_dir, read_only=True) as deployment:
        found = runs.list_runs(
            table_name=runs_table(deployment), dataset=dataset, client=deployment.client("dynamodb")
        )
    rows = [
        {
            "run_id": r["run_id"],
            "dataset": r["dataset"],
            "status": r["status"],
            "created_at": r.get("created_at", ""),
            "gate": r.get("gate", {}).get("decision", ""),
            "objective": r.get("best_objective"),
            "model_package": r.get("model_package_arn", ""),
        }
        for r in found
    ]
    if json_output:
        typer.echo(json.dumps(rows))
        return
    if not rows:
        typer.echo("no runs yet: upload images (`retrain upload`) or start one (`retrain start`)")
        return
    table = Table("run", "dataset", "status", "created", "gate", "objective", box=None, header_style="bold")
    for row in rows:
        objective = "-" if row["objective"] is None else f"{row['objective']:.4f}"
        created = str(row["created_at"]).replace("T", " ")[:19]
        cells = [str(row[k] or "-") for k in ("run_id", "dataset", "status")] + [
            created,
            str(row["gate"] or "-"),
        ]
        table.add_row(*cells, objective)
    Console(highlight=False).print(table)
