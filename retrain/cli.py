"""The `retrain` command line: demo, upload, start, status, runs, report, predict, preflight, local up|down.

This module assembles the Typer app from the command families in `retrain.commands` (each command a thin
function over its family's package) and is the console script's entry point (`main`). Every command talks
to one stack through boto3: a deployed stack named with --stack, or the embedded emulation on this
machine; errors the user can fix become one line on stderr and an exit code at one boundary
(`retrain.commands._shared.Group`).
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from retrain.commands import data, demo, local, preflight, report, run, serve
from retrain.commands._shared import Group

app = typer.Typer(
    cls=Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Event-driven retraining of image classifiers on AWS, or on the embedded emulation here.",
)
local_app = typer.Typer(cls=Group, no_args_is_help=True, help="The embedded stack in the background.")
app.add_typer(local_app, name="local")
pretrained_app = typer.Typer(cls=Group, no_args_is_help=True, help="Weights runs start from.")
app.add_typer(pretrained_app, name="pretrained")
# The emulated Step Functions interpreter logs every failed state; the CLI shows a run's failure itself.
QUIET_LOGGERS = ("moto.stepfunctions.parser", "werkzeug")


@app.callback()
def _options(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show the embedded runtime's logs.")
    ] = False,
) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not verbose:
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)


# The commands, in the order `retrain --help` lists them.
app.command("demo")(demo.demo)
app.command("upload")(data.upload)
pretrained_app.command("upload")(data.pretrained_upload)
app.command("start")(run.start)
app.command("status")(run.status)
app.command("runs")(run.list_runs_command)
app.command("report")(report.report)
app.command("predict")(serve.predict_command)
app.command("ui")(serve.ui)
app.command("preflight")(preflight.preflight_command)
local_app.command("up")(local.local_up)
local_app.command("down")(local.local_down)


def main() -> None:
    app(prog_name="retrain")


if __name__ == "__main__":
    main()
