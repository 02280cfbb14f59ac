"""`retrain local up` and `retrain local down`: the embedded stack in the background, over
`retrain.local`."""

from __future__ import annotations

from typing import Annotated

import typer

from retrain import local
from retrain.commands._shared import STATE_DIR, StateDirOption
from retrain.demo.flow import PHOTO_PARAMETERS
from retrain.run.start import parse_assignments


def local_up(
    parameter: Annotated[
        list[str] | None,
        typer.Option(
            "--parameter",
            "-p",
            help="Template parameter NAME=VALUE (repeatable; default: those of `retrain demo --images`).",
        ),
    ] = None,
    state_dir: StateDirOption = STATE_DIR,
) -> None:
    """Start the embedded stack in the background (state kept in .retrain/)."""
    overrides = {**PHOTO_PARAMETERS, **parse_assignments(parameter or [], "--parameter")}
    endpoint = local.up(state_dir, parameter_overrides=overrides)
    typer.echo(f"embedded stack running at {endpoint}; stop it with `retrain local down`")


def local_down(state_dir: StateDirOption = STATE_DIR) -> None:
    """Stop the background embedded stack (its state stays in .retrain/)."""
    stopped = local.down(state_dir)
    typer.echo("embedded stack stopped" if stopped else "no embedded stack was running")
