"""The Lambdas' environment, read once into one typed value (template.yaml sets every variable)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from controller import names
from controller.errors import ConfigurationError


@dataclass(frozen=True)
class DispatchPolicy:
    """When pending uploads become a run (the template's MinNewImages, QuietPeriodSeconds, MaxWaitSeconds)."""

    min_new_images: int = 1
    quiet_period_seconds: int = 300
    max_wait_seconds: int = 3600


@dataclass(frozen=True)
class Config:
    data_bucket: str
    artifact_bucket: str
    ledger_table: str
    runs_table: str
    datasets_table: str
    state_machine_arn: str = ""
    topic_arn: str = ""
    sagemaker_role_arn: str = ""
    policy: DispatchPolicy = field(default_factory=DispatchPolicy)
    settings: Mapping[str, Any] = field(default_factory=dict)  # the template's run defaults, see prepare
    checkpoint_eval_every: int = 1


def _int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not an integer; fix the stack parameter") from None
    if value < 0:
        raise ConfigurationError(f"{name}={value} is negative; fix the stack parameter")
    return value


def _required(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "")
    if not value:
        raise ConfigurationError(f"environment variable {name} is not set; deploy with template.yaml")
    return value


def from_environ(environ: Mapping[str, str]) -> Config:
    raw_settings = environ.get(names.ENV_SETTINGS, "") or "{}"
    try:
        settings = json.loads(raw_settings)
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"{names.ENV_SETTINGS} is not JSON ({error}); fix template.yaml") from None
    if not isinstance(settings, dict):
        raise ConfigurationError(f"{names.ENV_SETTINGS} must be a JSON object")
    return Config(
        data_bucket=_required(environ, names.ENV_DATA_BUCKET),
        artifact_bucket=_required(environ, names.ENV_ARTIFACT_BUCKET),
        ledger_table=_required(environ, names.ENV_LEDGER_TABLE),
        runs_table=_required(environ, names.ENV_RUNS_TABLE),
        datasets_table=_required(environ, names.ENV_DATASETS_TABLE),
        state_machine_arn=environ.get(names.ENV_STATE_MACHINE_ARN, ""),
        topic_arn=environ.get(names.ENV_TOPIC_ARN, ""),
        sagemaker_role_arn=environ.get(names.ENV_SAGEMAKER_ROLE_ARN, ""),
        policy=DispatchPolicy(
            min_new_images=max(1, _int(environ, names.ENV_MIN_NEW_IMAGES, 1)),
            quiet_period_seconds=_int(environ, names.ENV_QUIET_PERIOD_SECONDS, 300),
            max_wait_seconds=_int(environ, names.ENV_MAX_WAIT_SECONDS, 3600),
        ),
        settings=settings,
        checkpoint_eval_every=max(1, _int(environ, names.ENV_CHECKPOINT_EVAL_EVERY, 1)),
    )


@cache
def get_config() -> Config:
    """The function's configuration, read from the environment on first use."""
    return from_environ(os.environ)
