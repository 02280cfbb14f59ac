"""What a trained model serves: `retrain predict` (its endpoint's answers) and `retrain ui` (MLflow, where
every run, trial and model is tracked), over `retrain.serve`."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from retrain.commands._shared import STATE_DIR, JsonOption, StackOption, StateDirOption, deployment_for
from retrain.data.upload import check_dataset_name
from retrain.deployment import connect
from retrain.serve import mlflow_ui
from retrain.serve.predict import Answer
from retrain.serve.predict import predict as predict_images
from retrain_contract import serving


def predict_command(
    images: Annotated[list[Path], typer.Argument(metavar="IMAGE...", help="JPEG or PNG files to classify.")],
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="The data set whose champion answers.")
    ] = None,
    model_package: Annotated[
        str | None, typer.Option("--model-package", help="A model package ARN (default: the champion's).")
    ] = None,
    top_k: Annotated[
        int, typer.Option("--top-k", min=1, max=serving.TOP_K, help="Labels shown per image.")
    ] = 3,
    approve: Annotated[
        bool,
        typer.Option("--approve", help="Embedded stack: approve the package (as its reviewer) to deploy it."),
    ] = False,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = STATE_DIR,
) -> None:
    """Classify images with a data set's champion (or a model package) through its SageMaker endpoint."""
    if dataset is not None:
        check_dataset_name(dataset)
    with deployment_for(stack, state_dir, read_only=False, from_state=True) as deployment:
        arn, endpoint, answers = predict_images(
            deployment, images, dataset=dataset, package_arn=model_package, approve_package=approve
        )
    if json_output:
        typer.echo(
            json.dumps(
                {
                    "model_package_arn": arn,
                    "endpoint": endpoint,
                    "images": [
                        {"image": str(a.image), "predictions": a.predictions[:top_k]} for a in answers
                    ],
                }
            )
        )
        return
    Console(highlight=False).print(predictions_table(arn, endpoint, answers, top_k))


def predictions_table(arn: str, endpoint: str, answers: list[Answer], top_k: int) -> Table:
    table = Table(title=f"{arn} (endpoint {endpoint})", title_justify="left", header_style="bold", box=None)
    table.add_column("image")
    for rank in range(1, top_k + 1):
        table.add_column(f"#{rank}")
    for answer in answers:
        cells = [f"{p['label']} {p['probability']:.3f}" for p in answer.predictions[:top_k]]
        table.add_row(str(answer.image), *cells)
    return table


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def ui(
    port: Annotated[int, typer.Option("--port", help="Embedded stack: the local port to serve on.")] = 5000,
    stack: StackOption = None,
    state_dir: StateDirOption = STATE_DIR,
) -> None:
    """Open MLflow, where every run, trial and model is tracked (one experiment per data set)."""
    if stack:
        deployment = connect(stack)
        url = mlflow_ui.presigned_url(deployment.client("sagemaker"), mlflow_ui.tracking_arn(deployment))
        typer.echo(
            f"MLflow (SageMaker): {url}\n(the link works once, within 5 minutes: run `retrain ui` again)"
        )
        return
    # SIGTERM ends the server as Ctrl-C does (the read-only stack and MLflow's process stop with it).
    signal.signal(signal.SIGTERM, _interrupt)
    with (
        deployment_for(None, state_dir, read_only=True) as deployment,
        mlflow_ui.local_ui(deployment, state_dir, port) as url,
    ):
        typer.echo(f"MLflow UI: {url} (experiments retrain/<dataset>; Ctrl-C stops it)")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
