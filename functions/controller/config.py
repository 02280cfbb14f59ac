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
    min_improvement: float = 0.0
    min_accuracy: float = 0.0
    block_on_rule_issues: bool = True
    approval_status: str = "PendingManualApproval"
    model_package_group_prefix: str = names.MODEL_PACKAGE_GROUP_PREFIX_DEFAULT
    stuck_run_seconds: int = 43200
    failure_backoff_seconds: int = 900
    min_image_side: int = 32
    max_image_pixels: int = 89_478_485  # Pillow's decompression-bomb budget


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


def _float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "")
    if raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not a number; fix the stack parameter") from None


def _bool(environ: Mapping[str, str], name: str, default: bool) -> bool:
    raw = environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in ("true", "1", "yes"):
        return True
    if raw in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"{name}={raw!r} is not true or false; fix the stack parameter")


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
        checkpoint_eval_every=_int(environ, names.ENV_CHECKPOINT_EVAL_EVERY, 1),
        min_improvement=_float(environ, names.ENV_MIN_IMPROVEMENT, 0.0),
        min_accuracy=_float(environ, names.ENV_MIN_ACCURACY, 0.0),
        block_on_rule_issues=_bool(environ, names.ENV_BLOCK_ON_RULE_ISSUES, True),
        approval_status=environ.get(names.ENV_MODEL_APPROVAL_STATUS, "") or "PendingManualApproval",
        model_package_group_prefix=environ.get(names.ENV_MODEL_PACKAGE_GROUP_PREFIX, "")
        or names.MODEL_PACKAGE_GROUP_PREFIX_DEFAULT,
        stuck_run_seconds=_int(environ, names.ENV_STUCK_RUN_SECONDS, 43200),
        min_image_side=_int(environ, names.ENV_MIN_IMAGE_SIDE, 32),
        max_image_pixels=_int(environ, names.ENV_MAX_IMAGE_PIXELS, 89_478_485),
        failure_backoff_seconds=_int(environ, names.ENV_FAILURE_BACKOFF_SECONDS, 900),
    )


@cache
def get_config() -> Config:
    """The function's configuration, read from the environment on first use."""
    return from_environ(os.environ)
