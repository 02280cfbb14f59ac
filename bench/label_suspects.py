"""Suspected label errors among new uploads: precision and recall on planted swaps, false alarms on clean.

A champion is trained by the real container (train.py as SageMaker runs it, bench/transfer.py's `train`)
on the first half of scikit-learn's digits; the second half is the new uploads, which it never saw. Per
seed and rate, that folder is copied with a share of its images moved to another label's folder (a
planted mistake: the image's label swapped), the champion's probabilities are computed with evaluate.py's
own loading and prediction, and each of cleanlab's filters (label_check.FILTERS) names its suspects. A
suspect that was planted is a true positive; on the clean folder (rate 0) every suspect is a false alarm
against the data set's own labels (scikit-learn's digits may hold a few real mistakes).

    .venv/bin/python -m bench.label_suspects [--seeds 20] [--rates 0 0.05 0.15] [--append BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from bench import results
from bench.training_job import pack
from bench.transfer import Curve, Settings, Start, train
from retrain.demo import data as demo_data
from retrain_training import data, evaluate, label_check

SETTINGS = Settings(
    epochs=8,
    image_size=32,
    batch_size=32,
    lr=0.003,
    optimizer="adamw",
    crop_scale_min=0.6,
    seed=0,
    threads=max(1, (os.cpu_count() or 1)),
    fine_tune_factor=0.0,
)


def halves(work: Path) -> tuple[Path, Path]:
    """The champion's half of the digits, and the other half (the new uploads)."""
    full = work / "digits"
    count = len(demo_data.write_digits(full).files)
    champion = work / "champion-data"
    demo_data.write_digits(champion, limit=count // 2)
    new = work / "new"
    for path in sorted(full.rglob("*.jpg")):
        if not (champion / path.relative_to(full)).exists():
            target = new / path.relative_to(full)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    return champion, new


def plant(new: Path, into: Path, rate: float, seed: int) -> set[str]:
    """`new` copied to `into` with round(rate x images) moved to another label; their new keys."""
    shutil.copytree(new, into)
    files = sorted(into.rglob("*.jpg"))
    labels = sorted(p.name for p in into.iterdir())
    chosen = random.Random(seed).sample(files, round(rate * len(files)))
    planted = set()
    rng = random.Random(seed + 1)
    for path in chosen:
        other = rng.choice([label for label in labels if label != path.parent.name])
        moved = into / other / path.name
        path.rename(moved)
        planted.add(f"{other}/{path.name}")
    return planted


def probabilities(
    model: torch.nn.Module, artifact: evaluate.Artifact, folder: Path
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(given label indices, probabilities, keys) of every image in `folder`, as evaluate.py computes them."""
    entries = evaluate.collect(folder, None, split="all", val_fraction=0.2)
    index = {label: i for i, label in enumerate(artifact.labels)}
    samples = [data.Sample(path, index[label], key) for path, key, label in entries]
    logits = evaluate.predict(model, samples, image_size=artifact.image_size, batch_size=64, num_workers=0,
                              device=torch.device("cpu"))  # fmt: skip
    given = np.array([s.label for s in samples], dtype=np.int64)
    return given, torch.softmax(logits, dim=1).numpy(), [s.key for s in samples]


def champion(folder: Path, work: Path) -> tuple[torch.nn.Module, evaluate.Artifact, Curve, float]:
    """A resnet18 trained by train.py on `folder`, loaded as evaluate.py loads a champion: the model, its
    artifact, its curve and the seconds its training took."""
    started = time.perf_counter()
    curve = train(Start("champion", "resnet18"), folder, work / "job", SETTINGS)
    trained = time.perf_counter() - started
    archive = pack(work / "job" / "model", work / "champion")
    (work / "extract").mkdir()
    artifact = evaluate.load_artifact(archive, work / "extract")
    return evaluate.build(artifact, torch.device("cpu")), artifact, curve, trained


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--rates", type=float, nargs="+", default=[0.0, 0.05, 0.15])
    parser.add_argument("--append", type=Path)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        champion_data, new = halves(work)
        model, artifact, curve, trained = champion(champion_data, work)
        images = len(list(new.rglob("*.jpg")))
        # (rate, filter) -> per seed (true positives, suspects, planted)
        counts: dict[tuple[float, str], list[tuple[int, int, int]]] = defaultdict(list)
        top1: list[float] = []
        for rate in args.rates:
            for seed in range(args.seeds):
                folder = work / f"planted-{rate}-{seed}"
                planted = plant(new, folder, rate, seed)
                given, probs, keys = probabilities(model, artifact, folder)
                if rate == 0:
                    top1.append(float((probs.argmax(axis=1) == given).mean()))
                for name in label_check.FILTERS:
                    found = {s.key for s in label_check.find_suspects(given, probs, artifact.labels, keys,
                                                                       filter_by=name)}  # fmt: skip
                    counts[(rate, name)].append((len(found & planted), len(found), len(planted)))
                shutil.rmtree(folder)
                print(f"rate {rate} seed {seed} done", file=sys.stderr, flush=True)
    load_after = os.getloadavg()[0]
    rows = []
    for (rate, name), per_seed in counts.items():
        tp, flagged, planted_total = (sum(c[i] for c in per_seed) for i in range(3))
        if rate == 0:
            rows.append(f"| {rate:.0%} | {name} | - | - | {flagged / len(per_seed):.1f} of {images} "
                        f"({flagged / len(per_seed) / images:.1%}) |")  # fmt: skip
        else:
            precision = tp / flagged if flagged else 1.0
            recall = tp / planted_total
            worst = min(c[0] / c[2] for c in per_seed)
            rows.append(f"| {rate:.0%} | {name} | {precision:.3f} | {recall:.3f} (worst seed {worst:.2f}) | "
                        f"{(flagged - tp) / len(per_seed):.1f} |")  # fmt: skip
    lines = [
        f"## Suspected label errors on planted swaps (bench/label_suspects.py, {results.when()})",
        "",
        results.machine_line(load_before, load_after),
        "",
        f"A resnet18 champion trained by train.py ({SETTINGS.epochs} epochs, {SETTINGS.image_size} px, "
        f"{trained:.0f} s; validation top-1 {curve.top1[max(curve.top1)]:.3f}) on the first half of "
        f"scikit-learn's digits; the other half ({images} images it never saw, top-1 "
        f"{np.mean(top1):.3f} on them) is the new uploads. Per rate, {args.seeds} seeds of planted swaps "
        "(images moved to another label's folder); each of cleanlab's filters on the champion's "
        "probabilities. Precision and recall pooled over the seeds; the last column, false suspects per "
        "seed (on the clean folder: every suspect).",
        "",
        "| planted | filter_by | precision | recall | false suspects per seed |",
        "| ---: | --- | ---: | ---: | ---: |",
        *rows,
        "",
    ]
    results.publish("\n".join(lines), args.append)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
