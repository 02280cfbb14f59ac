"""The execution input of a run, as a JSON Schema: what the dispatcher sends and a person may send to
StartExecution (docs/runs.md, "Starting a run by hand"). Prepare, the state machine's first step, checks
every input against it with Powertools' validation utility (fastjsonschema).

    {"dataset": "flowers",                      # required: data/<dataset>/ in the data bucket
     "overrides": {                              # all optional; unset ones keep the stack's parameters
        "max_jobs": 4, "parallel_jobs": 2,       # tuning budget
        "instance_type": "ml.g5.2xlarge", "instance_count": 1,
        "evaluation_instance_type": "ml.m5.xlarge",
        "epochs": 5, "image_size": 224, "batch_size": 32, "model": "resnet18",
        "spot": false, "max_runtime_seconds": 3600, "max_wait_seconds": 7200,
        "tuning_strategy": "Bayesian", "optimizers": ["sgd"],
        "final_training": true, "data_source": "s3",
        "class_balance": "oversample", "class_balance_ratio": 0.5,   # or "cap" with "class_balance_cap"
        "min_images_per_label": 5, "small_labels": "exclude",
        "start_from": "champion",                # "pretrained", "imagenet", "scratch" (docs/runs.md)
        "train_when": "drift", "suspect_labels": "hold",   # the champion on the new uploads decides
        "pretrained_model_uri": "s3://bucket/efficientnet-lite0.pth",  # implies start_from pretrained
        "hyperparameters": {"lr": 0.01, "optimizer": "sgd"}}}   # fixed: skip tuning, train once
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from aws_lambda_powertools.utilities.validation import SchemaValidationError, validate

from controller import names
from controller.errors import InvalidRunInputError
from retrain_contract import balance, container
from retrain_contract.run import STARTS, SUSPECT_LABELS, TRAIN_WHEN

TRIGGERS: Final = ("schedule", "upload", "manual")
MODELS: Final = container.MODELS
TUNING_STRATEGIES: Final = ("Bayesian", "Random")
DATA_SOURCES: Final = ("fsx", "s3")
MAX_SECONDS: Final = 28 * 86400  # SageMaker's MaxRuntimeInSeconds ceiling


def _integer(minimum: int, maximum: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


_INSTANCE_TYPE: Final = {"type": "string", "pattern": r"^ml\.[a-z0-9]+\.[a-z0-9]+$"}

OVERRIDES_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "max_jobs": _integer(1, 500),
        "parallel_jobs": _integer(1, 100),
        "instance_type": _INSTANCE_TYPE,
        "instance_count": _integer(1, 64),
        "evaluation_instance_type": _INSTANCE_TYPE,
        "epochs": _integer(1, 10_000),
        "image_size": _integer(16, 1024),
        "batch_size": _integer(1, 4096),
        "model": {"enum": list(MODELS)},
        "spot": {"type": "boolean"},
        "max_runtime_seconds": _integer(60, MAX_SECONDS),
        "max_wait_seconds": _integer(60, MAX_SECONDS),
        "tuning_strategy": {"enum": list(TUNING_STRATEGIES)},
        "optimizers": {
            "type": "array",
            "items": {"enum": list(container.OPTIMIZERS)},
            "minItems": 1,
            "uniqueItems": True,
        },
        "final_training": {"type": "boolean"},
        "data_source": {"enum": list(DATA_SOURCES)},
        "class_balance": {"enum": list(balance.MODES)},
        "class_balance_ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "class_balance_cap": _integer(1, 10_000_000),
        "min_images_per_label": _integer(1, 1_000_000),
        "small_labels": {"enum": list(balance.SMALL_LABELS)},
        "start_from": {"enum": list(STARTS)},
        "train_when": {"enum": list(TRAIN_WHEN)},
        "suspect_labels": {"enum": list(SUSPECT_LABELS)},
        "pretrained_model_uri": {"type": "string", "pattern": names.PRETRAINED_URI_PATTERN},
        "hyperparameters": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                name: {"type": ["string", "number", "boolean"]} for name in container.HYPERPARAMETER_NAMES
            },
        },
    },
}

RUN_REQUEST_SCHEMA: Final[dict[str, Any]] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "retrain run request (Step Functions execution input)",
    "type": "object",
    "additionalProperties": False,
    "required": ["dataset"],
    "properties": {
        "dataset": {
            "type": "string",
            "minLength": 1,
            "maxLength": names.MAX_DATASET_LENGTH,
            "pattern": names.DATASET_RE.pattern,
        },
        "run_id": {"type": ["string", "null"]},
        "trigger": {"enum": list(TRIGGERS)},
        "overrides": OVERRIDES_SCHEMA,
    },
}


@dataclass(frozen=True)
class RunRequest:
    dataset: str
    run_id: str | None = None
    trigger: str = "manual"
    overrides: dict[str, Any] = field(default_factory=dict)


def parse_request(raw: Any) -> RunRequest:
    """The execution input as a RunRequest, or InvalidRunInputError naming every field that breaks the
    schema and the rule it breaks."""
    try:
        validate(event=raw, schema=RUN_REQUEST_SCHEMA)
    except SchemaValidationError:
        problems = problems_of(raw, RUN_REQUEST_SCHEMA, "input")
        raise InvalidRunInputError(
            f"the execution input is not a valid run request: {'; '.join(problems)}. Expected "
            '{"dataset": "<name>", "overrides": {...}}; the schema is controller/run_request.py.'
        ) from None
    return RunRequest(
        dataset=raw["dataset"],
        run_id=raw.get("run_id"),
        trigger=raw.get("trigger", "manual"),
        overrides=dict(raw.get("overrides") or {}),
    )


def problems_of(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Every violation, a field at a time (fastjsonschema stops at the first): objects are walked
    through their properties, every other value is checked against its own subschema."""
    properties = schema.get("properties")
    if properties is None or not isinstance(value, dict):
        try:
            validate(event=value, schema=schema)
        except SchemaValidationError as error:
            return [str(error.validation_message or error).replace("data", path, 1)]
        return []
    problems = [f"{path} must contain {name!r}" for name in schema.get("required", []) if name not in value]
    for name, item in value.items():
        if name in properties:
            problems += problems_of(item, properties[name], f"{path}.{name}")
        elif schema.get("additionalProperties") is False:
            problems.append(f"{path}.{name} is not a known field (known: {', '.join(properties)})")
    return problems
