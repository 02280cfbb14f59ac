"""What the champion's check on the new uploads costs at its bound: 20,000 new and 5,000 validation images
(retrain_contract.container.ARRIVALS_NEW_MAX, ARRIVALS_VALIDATION_MAX).

Two parts, each timed in steady state on this machine: the champion's forward pass through evaluate.py's
own loading and prediction (the default model at the default image size, on JPEGs of the photographs
scikit-image ships), and cleanlab's find_label_issues (label_check.find_suspects) on probabilities of the
bound's size for 10, 100 and 1,000 labels.

    .venv/bin/python -m bench.arrivals_bound [--images 256] [--append BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench import results
from retrain.demo import data as demo_data
from retrain_contract import container
from retrain_training import data, evaluate, label_check, models

MODEL, IMAGE_SIZE = container.MODEL_EFFICIENTNET_LITE0, 224  # template.yaml's defaults


def forward_rate(images: int) -> float:
    """Images per second through evaluate.predict, after a warm-up batch."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        demo_data.write_photos(folder, per_class=-(-images // len(demo_data.PHOTOS)))
        entries = evaluate.collect(folder, None, split="all", val_fraction=0.2)
        labels = sorted({label for _, _, label in entries})
        index = {label: i for i, label in enumerate(labels)}
        samples = [data.Sample(path, index[label], key) for path, key, label in entries]
        model = models.build_model(MODEL, len(labels)).eval()
        cpu = torch.device("cpu")
        evaluate.predict(model, samples[:64], image_size=IMAGE_SIZE, batch_size=64, num_workers=0, device=cpu)
        started = time.perf_counter()
        evaluate.predict(model, samples, image_size=IMAGE_SIZE, batch_size=64, num_workers=0, device=cpu)
        return len(samples) / (time.perf_counter() - started)


def cleanlab_seconds(images: int, labels: int, seed: int = 0) -> float:
    """Seconds of label_check.find_suspects on `images` probabilities over `labels` labels, a tenth of
    them mislabelled."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, labels, images)
    logits = rng.normal(0, 1, (images, labels))
    logits[np.arange(images), truth] += 4.0
    probabilities = (np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)).astype(np.float32)
    given = truth.copy()
    flipped = rng.random(images) < 0.1
    given[flipped] = rng.integers(0, labels, int(flipped.sum()))
    names = [f"l{i}" for i in range(labels)]
    keys = [f"k{i}" for i in range(images)]
    started = time.perf_counter()
    label_check.find_suspects(given, probabilities, names, keys)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--append", type=Path)
    args = parser.parse_args()
    bound = container.ARRIVALS_NEW_MAX + container.ARRIVALS_VALIDATION_MAX
    load_before = os.getloadavg()[0]
    torch.set_num_threads(os.cpu_count() or 1)
    rate = forward_rate(args.images)
    cleanlab_seconds(1000, 10)  # warm-up: cleanlab's import
    cleanlab = {labels: cleanlab_seconds(bound, labels) for labels in (10, 100, 1000)}
    load_after = os.getloadavg()[0]
    lines = [
        "## The champion's check on the new uploads at its bound "
        f"(bench/arrivals_bound.py, {results.when()})",
        "",
        results.machine_line(load_before, load_after),
        "",
        f"The bound: {container.ARRIVALS_NEW_MAX:,} new and {container.ARRIVALS_VALIDATION_MAX:,} validation "
        f"images ({bound:,}). The forward pass of {MODEL} at {IMAGE_SIZE} px through evaluate.py's "
        f"loading and prediction, {args.images} photographs after a warm-up batch: {rate:.1f} images/s on "
        f"this machine's {os.cpu_count()} CPUs, so {bound / rate / 60:.0f} min for the bound here (the "
        "job's instance, EvaluationInstanceType, scales it by its CPUs). cleanlab's find_label_issues on "
        f"{bound:,} probabilities: "
        + ", ".join(f"{s:.1f} s for {n:,} labels" for n, s in cleanlab.items())
        + ". Memory: the probabilities are images x labels float32 (100 MB at 1,000 labels).",
        "",
    ]
    results.publish("\n".join(lines), args.append)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
