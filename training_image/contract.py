"""The SageMaker container contract: every name that crosses the container boundary, defined once.

Tuning (MetricDefinitions, hyperparameter ranges), the state machine, the embedded runtime and the
CLI all depend on these names; tests compare their copies (JSON, YAML) against this module.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Base directory: /opt/ml on SageMaker, overridable for a plain process (as the training toolkit does).
BASE_DIR_ENV = "SAGEMAKER_BASE_DIR"
DEFAULT_BASE_DIR = "/opt/ml"
PROGRAM_ENV = "SAGEMAKER_PROGRAM"
PROGRAM = "train.py"
EVALUATE_PROGRAM = "evaluate.py"
RULE_CHECK_PROGRAM = "rule_check.py"

MODEL_DIR_ENV = "SM_MODEL_DIR"
OUTPUT_DATA_DIR_ENV = "SM_OUTPUT_DATA_DIR"
HOSTS_ENV = "SM_HOSTS"
CURRENT_HOST_ENV = "SM_CURRENT_HOST"
JOB_NAME_ENV = "TRAINING_JOB_NAME"
CHANNEL_ENV_PREFIX = "SM_CHANNEL_"

CHANNEL_TRAIN = "train"
CHANNEL_VALIDATION = "validation"
CHANNEL_PRETRAINED = "pretrained"
CHANNEL_MANIFEST = "manifest"
CHANNELS = (CHANNEL_TRAIN, CHANNEL_VALIDATION, CHANNEL_PRETRAINED, CHANNEL_MANIFEST)

DEFAULT_HOST = "algo-1"
DEFAULT_JOB_NAME = "local-training"

# Files the container writes.
MODEL_FILE = "model.pt"
LABELS_FILE = "labels.json"
CONFIG_FILE = "config.json"
FAILURE_FILE = "failure"  # under <base>/output; SageMaker shows its first 1,024 characters
FAILURE_REASON_LIMIT = 1024
EVALUATION_FILE = "evaluation.json"
# evaluation.json: the files the evaluated model's training could not decode ([{"path", "reason"}], from
# its config.json), so the control plane records them in the run.
TRAINING_SKIPPED_KEY = "training_skipped"
CONFUSION_MATRIX_FILE = "confusion_matrix.png"
RULE_RESULTS_FILE = "rule_results.json"
TENSORS_DIRNAME = "tensors"  # Debugger tensors, under SM_OUTPUT_DATA_DIR (shipped in output.tar.gz)
PROFILE_DIRNAME = "profile"  # system profile JSON lines, beside the tensors

# Manifest channel: JSON lines, one object per sample; a path may repeat to boost a class.
MANIFEST_FILE = "manifest.jsonl"
MANIFEST_PATH_KEY = "path"  # relative to the train channel root: <label>/<file>
MANIFEST_LABEL_KEY = "label"
# Optional: the sample's split, as the control plane froze it; without it, the path's hash decides. A
# validation line is used once however often it repeats (boosting repeats training lines only).
MANIFEST_SPLIT_KEY = "split"
SPLIT_TRAIN = "train"
SPLIT_VALIDATION = "validation"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")

# Checkpoints: <checkpoint dir>/<training job>/<host>/ckpt-<global step>.pt, so that the trials of
# one tuning job, which share a CheckpointConfig, never read each other's.
CHECKPOINT_PREFIX = "ckpt-"
CHECKPOINT_SUFFIX = ".pt"
CHECKPOINT_REGEX = r"(?P<job>[^/]+)/(?P<host>[^/]+)/ckpt-(?P<step>\d{9})\.pt$"


def checkpoint_name(step: int) -> str:
    return f"{CHECKPOINT_PREFIX}{step:09d}{CHECKPOINT_SUFFIX}"


# Exit status of a run that SIGTERM interrupted after writing its checkpoint (128 + SIGTERM, as a
# shell reports it); the spot-market emulation reads it as "interrupted", not "failed".
INTERRUPTED_EXIT_CODE = 143


# Metrics: one per stdout line, "epoch=<e> step=<s> <name>: <value>".
METRIC_TRAIN_LOSS = "train-loss"
METRIC_VAL_LOSS = "val-loss"
METRIC_VAL_ACCURACY = "val-accuracy"
METRIC_VAL_TOP3 = "val-top3-accuracy"
METRIC_IMAGES_PER_SECOND = "images-per-second"
METRICS = (
    METRIC_TRAIN_LOSS,
    METRIC_VAL_LOSS,
    METRIC_VAL_ACCURACY,
    METRIC_VAL_TOP3,
    METRIC_IMAGES_PER_SECOND,
)
_NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"


def metric_regex(name: str) -> str:
    """The regex tuning's MetricDefinitions use; `name: ` cannot match inside another metric's name."""
    return rf"(?:^|\s){name}: {_NUMBER}"


METRIC_DEFINITIONS = tuple({"Name": name, "Regex": metric_regex(name)} for name in METRICS)
OBJECTIVE_METRIC = METRIC_VAL_ACCURACY
OBJECTIVE_TYPE = "Maximize"


def format_metric(name: str, value: float, *, epoch: int, step: int) -> str:
    return f"epoch={epoch} step={step} {name}: {value:.6f}"


@dataclass(frozen=True)
class Hyperparameter:
    name: str  # the command-line flag without "--", as SageMaker passes it in script mode
    type: type
    default: object
    help: str
    choices: tuple[str, ...] | None = None


MODELS = ("resnet18", "resnet34", "resnet50")
OPTIMIZERS = ("sgd", "adamw")
LOADERS = ("torch", "dali", "auto")

HYPERPARAMETERS: tuple[Hyperparameter, ...] = (
    Hyperparameter("model", str, "resnet18", "architecture", MODELS),
    Hyperparameter("pretrained", str, "", "weights file in the pretrained channel; empty: random init"),
    Hyperparameter("epochs", int, 3, "training epochs"),
    Hyperparameter("batch-size", int, 32, "global batch size (split across data-parallel ranks)"),
    Hyperparameter("lr", float, 0.01, "learning rate"),
    Hyperparameter("momentum", float, 0.9, "SGD momentum"),
    Hyperparameter("weight-decay", float, 1e-4, "weight decay"),
    Hyperparameter("optimizer", str, "sgd", "optimizer", OPTIMIZERS),
    Hyperparameter("image-size", int, 224, "square input size after the random resized crop"),
    Hyperparameter("augment-load", int, 1, "times the flip/rotate augmentations are repeated"),
    Hyperparameter("crop-scale-min", float, 0.08, "smallest share of the image a random resized crop keeps"),
    Hyperparameter("loader", str, "auto", "data loader; auto picks dali when a GPU is present", LOADERS),
    Hyperparameter("checkpoint-every-steps", int, 50, "steps between checkpoints (0: epoch ends only)"),
    Hyperparameter("keep-checkpoints", int, 3, "newest checkpoints kept"),
    Hyperparameter("seed", int, 0, "seed for weights, sample order and augmentations"),
    Hyperparameter("num-workers", int, 2, "loader worker processes (torch) or threads (dali)"),
    Hyperparameter("freeze-backbone-epochs", int, 0, "epochs that train only the classifier head"),
    Hyperparameter("amp", bool, True, "mixed precision (GPU only)"),
    Hyperparameter("val-fraction", float, 0.2, "share of images hashed into validation"),
    Hyperparameter("debug-hook", bool, True, "save Debugger tensors"),
    Hyperparameter("debug-interval", int, 50, "steps between saved Debugger tensors"),
    Hyperparameter("profile-interval-ms", int, 500, "system profiler sampling interval"),
    Hyperparameter("inject-loader-delay-ms", int, 0, "fault injection: sleep per batch in the loader"),
)
HYPERPARAMETER_NAMES = tuple(h.name for h in HYPERPARAMETERS)


def parse_bool(value: str | bool) -> bool:
    """SageMaker passes every hyperparameter as a string; accept the spellings people write."""
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


@dataclass(frozen=True)
class Paths:
    """Where the container reads and writes, resolved from the SM_* environment."""

    base: Path
    model_dir: Path
    output_dir: Path
    output_data_dir: Path
    checkpoint_dir: Path
    processing_dir: Path
    channels: dict[str, Path] = field(default_factory=dict)
    hosts: tuple[str, ...] = (DEFAULT_HOST,)
    current_host: str = DEFAULT_HOST
    job_name: str = DEFAULT_JOB_NAME

    @property
    def failure_file(self) -> Path:
        return self.output_dir / FAILURE_FILE

    @property
    def tensors_dir(self) -> Path:
        return self.output_data_dir / TENSORS_DIRNAME

    @property
    def profile_dir(self) -> Path:
        return self.output_data_dir / PROFILE_DIRNAME

    @property
    def job_checkpoint_dir(self) -> Path:
        return self.checkpoint_dir / self.job_name / self.current_host

    def channel(self, name: str) -> Path | None:
        """A channel's directory, or None when the job was given no such channel."""
        path = self.channels.get(name)
        return path if path is not None and path.is_dir() else None


def resolve_paths(environ: Mapping[str, str] | None = None) -> Paths:
    env = os.environ if environ is None else environ
    base = Path(env.get(BASE_DIR_ENV, DEFAULT_BASE_DIR))
    channels = {
        name: Path(env.get(CHANNEL_ENV_PREFIX + name.upper(), str(base / "input" / "data" / name)))
        for name in CHANNELS
    }
    return Paths(
        base=base,
        model_dir=Path(env.get(MODEL_DIR_ENV, str(base / "model"))),
        output_dir=base / "output",
        output_data_dir=Path(env.get(OUTPUT_DATA_DIR_ENV, str(base / "output" / "data"))),
        checkpoint_dir=base / "checkpoints",
        processing_dir=base / "processing",
        channels=channels,
        hosts=tuple(json.loads(env.get(HOSTS_ENV, json.dumps([DEFAULT_HOST])))),
        current_host=env.get(CURRENT_HOST_ENV, DEFAULT_HOST),
        job_name=env.get(JOB_NAME_ENV, DEFAULT_JOB_NAME),
    )


def write_failure(paths: Paths, reason: str) -> None:
    """Record why the job failed where SageMaker reads FailureReason; one line, truncated."""
    paths.output_dir.mkdir(parents=True, exist_ok=True)
    line = " ".join(reason.split())[:FAILURE_REASON_LIMIT]
    paths.failure_file.write_text(line + "\n", encoding="utf-8")


def run_reporting_failure(
    paths: Paths, body: Callable[[], int], *, invalid: str, argv: Sequence[str] | None = None
) -> int:
    """An entry point's body, its every failure turned into the failure file and a non-zero exit:
    argparse's exit (bad arguments) as "<invalid>: <the arguments>", any error as its type and message."""
    try:
        return body()
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            write_failure(paths, f"{invalid}: {' '.join(argv or sys.argv[1:])}")
        raise
    except Exception as error:
        logging.getLogger(__name__).exception("the job failed")
        write_failure(paths, f"{type(error).__name__}: {error}")
        return 1
