"""The manifest a run trains on: each image's frozen split, small labels set aside, rare classes boosted.

Every accepted image keeps the split its key hashes into (the container's own rule, so a key never
changes side between runs); validation lines are written once. Training lines are balanced by the
stack's ClassBalance: `oversample` repeats the images of a class until it has at least ClassBalanceRatio
of the largest class's training lines; `cap` keeps at most ClassBalanceCap training images of a class
(a stable choice, by the key's hash). A label with fewer than MinImagesPerLabel images, or without a
single training image, is excluded (SmallLabels=exclude) or kept (allow), and the run record says which.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from retrain_contract import container

MODES: Final = ("none", "oversample", "cap")
SMALL_LABELS: Final = ("exclude", "allow")


@dataclass(frozen=True)
class Policy:
    """ClassBalance, ClassBalanceRatio, ClassBalanceCap, MinImagesPerLabel and SmallLabels of a run."""

    mode: str = "none"
    ratio: float = 0.5
    cap: int = 1000
    min_images: int = 1
    small_labels: str = "exclude"
    val_fraction: float = container.VAL_FRACTION_DEFAULT

    def record(self) -> dict[str, Any]:
        """What the run record says of the policy."""
        return {
            "mode": self.mode,
            **({"ratio": self.ratio} if self.mode == "oversample" else {}),
            **({"cap": self.cap} if self.mode == "cap" else {}),
            "min_images_per_label": self.min_images,
            "small_labels": self.small_labels,
        }


@dataclass
class ClassCount:
    images: int = 0  # accepted images of the label
    validation: int = 0
    train: int = 0  # distinct training images
    train_lines: int = 0  # training lines after balancing (repeats included)

    def as_record(self) -> dict[str, int]:
        return {
            "images": self.images,
            "validation": self.validation,
            "train": self.train,
            "train_lines": self.train_lines,
        }


@dataclass
class Plan:
    lines: list[tuple[str, str, str]] = field(default_factory=list)  # (path, label, split)
    counts: dict[str, ClassCount] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)  # label -> why

    def record(self) -> dict[str, Any]:
        return {
            "class_counts": {label: count.as_record() for label, count in sorted(self.counts.items())},
            "excluded_labels": dict(sorted(self.excluded.items())),
        }


def _stable_order(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def plan(entries: Iterable[tuple[str, str]], policy: Policy) -> Plan:
    """The manifest lines of (path relative to the data set, label) entries under `policy`."""
    by_label: dict[str, list[str]] = {}
    for path, label in entries:
        by_label.setdefault(label, []).append(path)
    result = Plan()
    kept: dict[str, tuple[list[str], list[str]]] = {}
    for label, paths in sorted(by_label.items()):
        unique = sorted(set(paths))
        validation: list[str] = []
        train: list[str] = []
        for p in unique:  # one pass: linear in the label's images
            (validation if container.in_validation(p, policy.val_fraction) else train).append(p)
        too_few = len(unique) < policy.min_images
        if not train or (too_few and policy.small_labels == "exclude"):
            result.excluded[label] = (
                f"{len(unique)} image(s), below MinImagesPerLabel {policy.min_images}"
                if too_few
                else f"all {len(unique)} image(s) fall in the validation split, none is left to train on"
            ) + "; upload more images of it"
            continue
        kept[label] = (train, validation)
    largest = max((len(train) for train, _ in kept.values()), default=0)
    target = math.ceil(policy.ratio * largest) if policy.mode == "oversample" else 0
    for label, (train, validation) in kept.items():
        lines = _balanced(train, policy, target)
        result.lines += [(p, label, container.SPLIT_VALIDATION) for p in validation]
        result.lines += [(p, label, container.SPLIT_TRAIN) for p in lines]
        images = len(train) + len(validation)
        result.counts[label] = ClassCount(images, len(validation), len(train), len(lines))
    return result


def _balanced(train: list[str], policy: Policy, target: int) -> list[str]:
    if policy.mode == "cap" and len(train) > policy.cap:
        return sorted(sorted(train, key=_stable_order)[: policy.cap])
    if policy.mode == "oversample" and len(train) < target:
        repeats, extra = divmod(target, len(train))
        return [p for i, p in enumerate(train) for _ in range(repeats + (1 if i < extra else 0))]
    return list(train)
