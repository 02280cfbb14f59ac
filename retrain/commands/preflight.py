"""`retrain preflight`: what will bind in an account and region, over `retrain.preflight`."""

from __future__ import annotations

from typing import Annotated

import typer

from retrain import preflight
from retrain.commands._shared import STATE_DIR, JsonOption, StackOption, StateDirOption
from retrain.run.start import parse_assignments


def preflight_command(
    *,
    region: Annotated[
        str | None, typer.Option("--region", help="The region to check (default: your AWS configuration's).")
    ] = None,
    parameter: Annotated[
        list[str] | None,
        typer.Option("--parameter", "-p", help="A template parameter NAME=VALUE to check with (repeatable)."),
    ] = None,
    instance_type: Annotated[
        str | None,
        typer.Option("--instance-type", help="Training instance type (default: TrainingInstanceType's)."),
    ] = None,
    stack_rate: Annotated[
        float | None,
        typer.Option(
            "--stack-rate", min=1.0, help="Uploads/s the stack records (default: from BENCHMARKS.md)."
        ),
    ] = None,
    local_stack: Annotated[
        bool, typer.Option("--local", help="The embedded stack `retrain local up` started, and its account.")
    ] = False,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = STATE_DIR,
) -> None:
    """What will bind in an account and region (Lambda concurrency, EventBridge, SageMaker and FSx quotas,
    CloudFormation's resource types), and what to ask for; exit code 8 when something binds."""
    preflight.command(
        preflight.Options(
            region=region,
            stack=stack,
            local=local_stack,
            overrides=parse_assignments(parameter or [], "--parameter"),
            instance_type=instance_type,
            stack_rate=stack_rate,
            json_output=json_output,
            state_dir=state_dir,
        )
    )
