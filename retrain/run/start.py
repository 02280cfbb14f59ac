"""Start a run by hand: StartExecution of the stack's state machine with the control plane's documented
manual-start input (its schema: `controller/run_request.py`; the state machine's first state validates
it). The execution name becomes the run id."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from controller import names
from retrain.data.upload import check_dataset_name
from retrain.deployment import Deployment
from retrain.errors import UsageError


@dataclass(frozen=True)
class Overrides:
    max_jobs: int | None = None
    parallel_jobs: int | None = None
    instance_type: str | None = None
    epochs: int | None = None
    image_size: int | None = None
    batch_size: int | None = None
    model: str | None = None
    spot: bool | None = None
    pretrained_model_uri: str | None = None  # start from these weights (s3://bucket/key)
    start_from: str | None = None  # champion | pretrained | scratch
    hyperparameters: dict[str, str] = field(default_factory=dict)


def parse_assignments(values: list[str], option: str) -> dict[str, str]:
    """`name=value` pairs of a repeated option."""
    pairs: dict[str, str] = {}
    for value in values:
        name, sep, setting = value.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"{option} {value!r} is not NAME=VALUE: write e.g. {option} lr=0.01")
        pairs[name.strip()] = setting.strip()
    return pairs


def start_input(dataset: str, overrides: Overrides) -> dict[str, Any]:
    document: dict[str, Any] = {"dataset": check_dataset_name(dataset), "trigger": "manual"}
    chosen = {
        "max_jobs": overrides.max_jobs,
        "parallel_jobs": overrides.parallel_jobs,
        "instance_type": overrides.instance_type,
        "epochs": overrides.epochs,
        "image_size": overrides.image_size,
        "batch_size": overrides.batch_size,
        "model": overrides.model,
        "spot": overrides.spot,
        "pretrained_model_uri": overrides.pretrained_model_uri,
        "start_from": overrides.start_from,
    }
    settings: dict[str, Any] = {k: v for k, v in chosen.items() if v is not None}
    if overrides.hyperparameters:
        settings["hyperparameters"] = dict(overrides.hyperparameters)
    if settings:
        document["overrides"] = settings
    return document


def execution_name(dataset: str, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S")
    return f"manual-{dataset}-{stamp}"[:80]


def start_run(deployment: Deployment, dataset: str, overrides: Overrides) -> tuple[str, str]:
    """The new execution's ARN and the run id (its name)."""
    sfn = deployment.client("stepfunctions")
    name = execution_name(dataset)
    response = sfn.start_execution(
        stateMachineArn=deployment.output(names.STACK_OUTPUTS["state_machine"]),
        name=name,
        input=json.dumps(start_input(dataset, overrides)),
    )
    return str(response["executionArn"]), name
