"""Which given labels a model finds unlikely: confident learning on its out-of-sample probabilities.

The method is cleanlab's `find_label_issues` (Northcutt, Jiang and Chuang, "Confident Learning:
Estimating Uncertainty in Dataset Labels", JAIR 2021): per label, a threshold is the model's mean
probability of that label over the images given it; an image whose probability of another label passes
that label's threshold is counted as that label's, and the confident joint of given and counted labels,
pruned by its estimated noise rates, names the images whose label is likely wrong. The probabilities must
be out of sample: the champion's on uploads it never trained on qualify, a model's on its own training
images do not. Suspects are ranked by the model's probability of the given label, lowest first.

A label needs images given it among those checked for its threshold: with none, cleanlab warns and cannot
point at it (checking the new uploads together with images of every label avoids that).
Nothing here changes or drops an image: the caller decides what a suspect means.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# cleanlab's ways of choosing the issues from the confident joint (its `filter_by`); the default is the
# one bench/label_suspects.py measured best on planted label swaps (BENCHMARKS.md).
FILTERS = ("prune_by_noise_rate", "prune_by_class", "both", "confident_learning", "predicted_neq_given")
DEFAULT_FILTER = "prune_by_class"
METHOD = "cleanlab.filter.find_label_issues (confident learning, filter_by {}), ranked by self-confidence"


@dataclass(frozen=True)
class Suspect:
    key: str
    given: str
    suggested: str  # the label the model finds most likely
    confidence: float  # its probability of `suggested`
    given_probability: float  # its probability of the given label


def find_suspects(
    given: np.ndarray,
    probabilities: np.ndarray,
    labels: list[str],
    keys: list[str],
    *,
    filter_by: str = DEFAULT_FILTER,
) -> list[Suspect]:
    """The images whose given label (an index into `labels`, one per row of `probabilities`) the model
    finds unlikely, most unlikely first."""
    if probabilities.ndim != 2 or probabilities.shape != (len(given), len(labels)) or len(keys) != len(given):
        raise ValueError(
            f"probabilities {probabilities.shape} must be (images, labels) = ({len(given)}, {len(labels)}), "
            f"with one key per image ({len(keys)} keys)"
        )
    if len(given) == 0:
        return []
    from cleanlab.filter import find_label_issues

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a label given to too few images: see the module
        ranked = find_label_issues(
            labels=given,
            pred_probs=probabilities,
            filter_by=filter_by,
            return_indices_ranked_by="self_confidence",
        )
    suggested = probabilities.argmax(axis=1)
    return [
        Suspect(
            key=keys[i],
            given=labels[int(given[i])],
            suggested=labels[int(suggested[i])],
            confidence=float(probabilities[i, suggested[i]]),
            given_probability=float(probabilities[i, given[i]]),
        )
        for i in (int(j) for j in ranked)
    ]


def per_label(suspects: list[Suspect], given: np.ndarray, labels: list[str]) -> dict[str, dict[str, Any]]:
    """Per given label: images checked, suspects among them and their share."""
    images = np.bincount(given, minlength=len(labels))
    flagged: dict[str, int] = {}
    for suspect in suspects:
        flagged[suspect.given] = flagged.get(suspect.given, 0) + 1
    return {
        label: {
            "images": int(images[i]),
            "suspects": flagged.get(label, 0),
            "rate": flagged.get(label, 0) / int(images[i]),
        }
        for i, label in enumerate(labels)
        if images[i]
    }


def wilson_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default): an accuracy measured on n images."""
    if n <= 0:
        raise ValueError(f"an interval needs at least one image, not {n}")
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def report(suspects: list[Suspect], given: np.ndarray, labels: list[str], *, limit: int) -> dict[str, Any]:
    """suspects.json: the method, the count, the first `limit` suspects and the per-label rates."""
    return {
        "method": METHOD.format(DEFAULT_FILTER),
        "images_checked": len(given),
        "suspect_count": len(suspects),
        "suspects": [asdict(s) for s in suspects[:limit]],
        "per_label": per_label(suspects, given, labels),
    }
