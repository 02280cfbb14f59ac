"""What every command shares: the error boundary (`Group`), the common options, the console progress goes
to, and the stack a command talks to.

Every command talks to one stack through boto3: a deployed stack named with --stack (ordinary AWS
credentials), or the embedded emulation on this machine. Errors the user can fix are one line on stderr
and an exit code, turned so at one boundary (`Group.invoke`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import botocore.exceptions
import typer
from rich.console import Console
from typer.core import TyperGroup

from retrain import local
from retrain.deployment import Deployment, connect
from retrain.errors import EmbeddedRuntimeError, NoCredentialsError, RetrainError


class Group(TyperGroup):
    """Turns the CLI's errors (and the AWS errors people cause) into one line and an exit code."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except RetrainError as error:
            fail(str(error), error.exit_code)
        except (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError):
            fail(
                str(NoCredentialsError("no AWS credentials found: run `aws configure` or set AWS_PROFILE")), 3
            )
        except KeyboardInterrupt:
            fail("interrupted (the embedded stack saved its state in .retrain/)", 130)
        except botocore.exceptions.EndpointConnectionError as error:
            fail(
                f"cannot reach {error.kwargs.get('endpoint_url', 'the AWS endpoint')}: if it is the embedded "
                "stack, start it again with `retrain local up`",
                EmbeddedRuntimeError.exit_code,
            )


def fail(message: str, code: int) -> None:
    typer.echo(f"retrain: {message}", err=True)
    raise SystemExit(code)


StackOption = Annotated[
    str | None,
    typer.Option(
        "--stack", envvar="RETRAIN_STACK", help="A deployed stack's name (default: the embedded stack)."
    ),
]
StateDirOption = Annotated[Path, typer.Option("--state-dir", hidden=True)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object at the end.")]
DatasetOption = Annotated[str | None, typer.Option("--dataset", help="The data set the run belongs to.")]
STATE_DIR = local.DEFAULT_STATE_DIR  # --state-dir's default


def console_for(json_output: bool) -> Console:
    """Progress goes to stderr when stdout carries the JSON."""
    return Console(stderr=json_output, highlight=False)


@contextlib.contextmanager
def deployment_for(
    stack: str | None, state_dir: Path, *, read_only: bool, from_state: bool = False
) -> Iterator[Deployment]:
    """The stack a command talks to: --stack on AWS, else the background embedded stack, else (to read a
    finished demo's runs, or with `from_state` to act on them) an embedded stack started for this command
    from the saved state."""
    if stack:
        yield connect(stack)
        return
    running = local.background(state_dir)
    if running is not None:
        yield running
        return
    if (read_only or from_state) and local.has_state(state_dir):
        with local.foreground(state_dir, read_only=read_only) as deployment:
            yield deployment
        return
    raise EmbeddedRuntimeError(
        "no stack to talk to: start the embedded one with `retrain local up` (or run `retrain demo`), "
        "or pass --stack NAME for a stack deployed on AWS"
    )
