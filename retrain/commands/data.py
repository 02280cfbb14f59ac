"""Putting data into the stack: `retrain upload` (labelled images) and `retrain pretrained upload`
(weights runs start from), over `retrain.data`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from controller import names
from retrain.commands._shared import STATE_DIR, StackOption, StateDirOption, deployment_for
from retrain.data import pretrained
from retrain.data.upload import check_dataset_name, find_files, upload_files


def upload(
    folder: Annotated[Path, typer.Argument(help="A folder laid out as DIR/<label>/<image>.")],
    dataset: Annotated[str, typer.Option("--dataset", help="Data set name.")],
    stack: StackOption = None,
    state_dir: StateDirOption = STATE_DIR,
) -> None:
    """Upload a folder of labelled images; the stack validates and records each one."""
    check_dataset_name(dataset)
    files = find_files(folder)
    with deployment_for(stack, state_dir, read_only=False) as deployment:
        bucket = deployment.output(names.STACK_OUTPUTS["data_bucket"])
        keys = upload_files(deployment.client("s3"), bucket, dataset, files)
    typer.echo(
        f"uploaded {len(keys)} files to s3://{bucket}/{names.dataset_prefix(dataset)}; each is validated "
        "and recorded in the ledger, rejected ones with a reason (`retrain report RUN` lists them)"
    )


def pretrained_upload(
    weights: Annotated[
        Path | None,
        typer.Argument(
            help="A weights file (.pth/.pt state_dict or model.tar.gz); default: ImageNet EfficientNet-Lite0."
        ),
    ] = None,
    stack: StackOption = None,
    state_dir: StateDirOption = STATE_DIR,
) -> None:
    """Put weights in the stack's artifact bucket, where its training jobs can read them."""
    path = weights or pretrained.imagenet_efficientnet_lite0()
    with deployment_for(stack, state_dir, read_only=False) as deployment:
        uri = pretrained.upload(deployment, path)
    typer.echo(
        f"uploaded {path.name} to {uri}. Start a run from it: retrain start --dataset NAME --pretrained {uri}"
        f" (model {pretrained.architecture_of(path)}); or make it every new data set's start: deploy with "
        f"PretrainedModelUri={uri}"
    )
