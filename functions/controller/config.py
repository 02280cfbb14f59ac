"""The Lambdas' environment, read once into one typed value (template.yaml sets every variable)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from controller import names
from controller.errors import ConfigurationError
from retrain_contract import rules
from retrain_contract.run import RunSettings, SettingsError, parse_settings


@dataclass(frozen=True)
class DispatchPolicy:
    """When pending uploads become a run (the template's MinNewImages, QuietPeriodSeconds, MaxWaitSeconds)."""

    min_new_images: int
    quiet_period_seconds: int
    max_wait_seconds: int


@dataclass(frozen=True)
class Config:
    """Every function's environment: the stack's resources and parameters (template.yaml's Globals).
    No value has a default here; a variable the template does not set is a ConfigurationError."""

    data_bucket: str
    artifact_bucket: str
    ledger_table: str
    runs_table: str
    datasets_table: str
    topic_arn: str
    policy: DispatchPolicy
    settings: RunSettings  # the template's run parameters (RUN_SETTINGS), see prepare
    checkpoint_eval_every: int
    checkpoint_eval_max_per_run: int  # processing jobs one run may start for checkpoints (0: none)
    min_improvement: float
    min_accuracy: float | None  # MinAccuracy; None (empty): better than guessing, the gate's test
    blocking_rules: tuple[str, ...]  # BlockingRules: the rules whose findings reject a model
    approval_status: str
    model_package_group_prefix: str
    stuck_run_seconds: int
    failure_backoff_seconds: int
    min_image_side: int
    max_image_pixels: int  # Pillow's decompression-bomb budget by default
    # Set only for the functions that start executions or pass the SageMaker role, and for register.
    state_machine_arn: str = ""
    sagemaker_role_arn: str = ""
    inference_image_uri: str = ""
    ingest_queue_url: str = ""  # ingest only: where a notice a throttle held back goes again


def _required(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "")
    if not value:
        raise ConfigurationError(f"environment variable {name} is not set; deploy with template.yaml")
    return value


def _int(environ: Mapping[str, str], name: str) -> int:
    raw = _required(environ, name)
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not an integer; fix the stack parameter") from None
    if value < 0:
        raise ConfigurationError(f"{name}={value} is negative; fix the stack parameter")
    return value


def _float(environ: Mapping[str, str], name: str) -> float:
    raw = _required(environ, name)
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not a number; fix the stack parameter") from None


def _optional_fraction(environ: Mapping[str, str], name: str) -> float | None:
    """A share from 0 to 1, or None when the variable is set and empty."""
    if name not in environ:
        raise ConfigurationError(f"environment variable {name} is not set; deploy with template.yaml")
    if not environ[name].strip():
        return None
    value = _float(environ, name)
    if not 0.0 <= value <= 1.0:
        raise ConfigurationError(f"{name}={value} is not a share from 0 to 1; fix the stack parameter")
    return value


def _rule_list(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated list of rule names; the variable must be set, and may be empty (no rule)."""
    if name not in environ:
        raise ConfigurationError(f"environment variable {name} is not set; deploy with template.yaml")
    try:
        return rules.parse_rule_list(
            environ[name], source=f"{name} (stack parameter {rules.BLOCKING_RULES_PARAMETER})"
        )
    except rules.RuleNameError as error:
        raise ConfigurationError(str(error)) from None


def _settings(environ: Mapping[str, str]) -> RunSettings:
    try:
        return parse_settings(_required(environ, names.ENV_SETTINGS), source=names.ENV_SETTINGS)
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"{names.ENV_SETTINGS} is not JSON ({error}); fix template.yaml") from None
    except SettingsError as error:
        raise ConfigurationError(str(error)) from None


def from_environ(environ: Mapping[str, str]) -> Config:
    return Config(
        data_bucket=_required(environ, names.ENV_DATA_BUCKET),
        artifact_bucket=_required(environ, names.ENV_ARTIFACT_BUCKET),
        ledger_table=_required(environ, names.ENV_LEDGER_TABLE),
        runs_table=_required(environ, names.ENV_RUNS_TABLE),
        datasets_table=_required(environ, names.ENV_DATASETS_TABLE),
        topic_arn=_required(environ, names.ENV_TOPIC_ARN),
        policy=DispatchPolicy(
            min_new_images=max(1, _int(environ, names.ENV_MIN_NEW_IMAGES)),
            quiet_period_seconds=_int(environ, names.ENV_QUIET_PERIOD_SECONDS),
            max_wait_seconds=_int(environ, names.ENV_MAX_WAIT_SECONDS),
        ),
        settings=_settings(environ),
        checkpoint_eval_every=_int(environ, names.ENV_CHECKPOINT_EVAL_EVERY),
        checkpoint_eval_max_per_run=_int(environ, names.ENV_CHECKPOINT_EVAL_MAX),
        min_improvement=_float(environ, names.ENV_MIN_IMPROVEMENT),
        min_accuracy=_optional_fraction(environ, names.ENV_MIN_ACCURACY),
        blocking_rules=_rule_list(environ, names.ENV_BLOCKING_RULES),
        approval_status=_required(environ, names.ENV_MODEL_APPROVAL_STATUS),
        model_package_group_prefix=_required(environ, names.ENV_MODEL_PACKAGE_GROUP_PREFIX),
        stuck_run_seconds=_int(environ, names.ENV_STUCK_RUN_SECONDS),
        min_image_side=_int(environ, names.ENV_MIN_IMAGE_SIDE),
        max_image_pixels=_int(environ, names.ENV_MAX_IMAGE_PIXELS),
        failure_backoff_seconds=_int(environ, names.ENV_FAILURE_BACKOFF_SECONDS),
        state_machine_arn=environ.get(names.ENV_STATE_MACHINE_ARN, ""),
        sagemaker_role_arn=environ.get(names.ENV_SAGEMAKER_ROLE_ARN, ""),
        inference_image_uri=environ.get(names.ENV_INFERENCE_IMAGE_URI, ""),
        ingest_queue_url=environ.get(names.ENV_INGEST_QUEUE_URL, ""),
    )


@cache
def get_config() -> Config:
    """The function's configuration, read from the environment on first use."""
    return from_environ(os.environ)
