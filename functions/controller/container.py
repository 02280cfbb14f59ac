"""The container contract names the control plane uses, copied from training_image/contract.py.

The Lambda package cannot import the training image's code; tests/unit/functions/test_contract_copies.py
compares every name here (and the state machine's literal copies) with contract.py.
"""

from __future__ import annotations

import hashlib
from typing import Final

PROGRAM: Final = "train.py"
EVALUATE_PROGRAM: Final = "evaluate.py"
RULE_CHECK_PROGRAM: Final = "rule_check.py"
CHANNEL_TRAIN: Final = "train"
CHANNEL_MANIFEST: Final = "manifest"
MANIFEST_FILE: Final = "manifest.jsonl"
MANIFEST_PATH_KEY: Final = "path"
MANIFEST_LABEL_KEY: Final = "label"
MANIFEST_SPLIT_KEY: Final = "split"
SPLIT_TRAIN: Final = "train"
SPLIT_VALIDATION: Final = "validation"
VAL_FRACTION_DEFAULT: Final = 0.2  # contract's val-fraction default
IMAGE_EXTENSIONS: Final = (".jpg", ".jpeg", ".png")
EVALUATION_FILE: Final = "evaluation.json"
TRAINING_SKIPPED_KEY: Final = (
    "training_skipped"  # evaluation.json: [{"path", "reason"}] training could not decode
)
RULE_RESULTS_FILE: Final = "rule_results.json"
MODEL_FILE: Final = "model.pt"
CHECKPOINT_PREFIX: Final = "ckpt-"
CHECKPOINT_SUFFIX: Final = ".pt"
OBJECTIVE_METRIC: Final = "val-accuracy"
OBJECTIVE_TYPE: Final = "Maximize"
MODELS: Final = ("resnet18", "resnet34", "resnet50")
OPTIMIZERS: Final = ("sgd", "adamw")
# Hyperparameters the control plane sets (static) or tunes; every name is one of contract.HYPERPARAMETERS.
HP_MODEL: Final = "model"
HP_EPOCHS: Final = "epochs"
HP_IMAGE_SIZE: Final = "image-size"
HP_BATCH_SIZE: Final = "batch-size"
HP_CHECKPOINT_EVERY: Final = "checkpoint-every-steps"
HP_CROP_SCALE_MIN: Final = "crop-scale-min"
HP_LR: Final = "lr"
HP_WEIGHT_DECAY: Final = "weight-decay"
HP_OPTIMIZER: Final = "optimizer"
TUNED_HYPERPARAMETERS: Final = (HP_LR, HP_WEIGHT_DECAY, HP_OPTIMIZER)
HYPERPARAMETER_NAMES: Final = (
    "model", "pretrained", "epochs", "batch-size", "lr", "momentum", "weight-decay", "optimizer",
    "image-size", "augment-load", "crop-scale-min", "loader", "checkpoint-every-steps", "keep-checkpoints",
    "seed", "num-workers", "freeze-backbone-epochs", "amp", "val-fraction", "debug-hook", "debug-interval",
    "profile-interval-ms", "inject-loader-delay-ms",
)  # fmt: skip


def in_validation(key: str, fraction: float) -> bool:
    """The container's split rule (training_image/data.py, compared in tests): the first 8 bytes of
    sha256(relative path) as a fraction of 2**64."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction
