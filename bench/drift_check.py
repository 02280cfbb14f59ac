"""TrainWhen=drift measured as rates: runs it saves when the new uploads hold nothing to learn, and runs
it wrongly skips when they do.

A champion is trained by the real container (train.py as SageMaker runs it, bench/transfer.py's `train`)
on the first half of scikit-learn's digits. The other half, which it never saw, is split in two by key:
a validation pool (the champion's own yardstick, as the job's validation images are) and an arrivals
pool. Arrivals are drawn from the pool as it is (nothing to learn: the same world) or with a share of
them rotated (a new camera angle: the champion does worse there, so a run has something to learn). Each
image's correctness comes from evaluate.py's own loading and prediction; per seed, a run's new uploads
are a random draw of n of them, and controller/arrivals.py's `decide` (the code the flow runs, on the
figures evaluate.py's `metrics` computes) says train or not needed.

    .venv/bin/python -m bench.drift_check [--seeds 500] [--sizes 20 100 400] [--append BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from bench import results
from bench.label_suspects import SETTINGS, champion, halves, probabilities
from controller import arrivals
from retrain_training import evaluate, label_check

SHIFTS = (0.0, 0.1, 0.25, 0.4, 0.5, 0.75, 1.0)  # share of the new uploads rotated
ANGLE = 35  # degrees: a camera held askew


def split_pool(new: Path, work: Path) -> tuple[Path, Path]:
    """The never-seen half split by a hash of each key: a third validation, the rest arrivals."""
    validation, pool = work / "validation", work / "pool"
    for path in sorted(new.rglob("*.jpg")):
        key = path.relative_to(new).as_posix()
        third = hashlib.blake2b(key.encode(), digest_size=2).digest()[0] % 3 == 0
        target = (validation if third else pool) / key
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return validation, pool


def rotated(pool: Path, into: Path) -> Path:
    """Every image of `pool` turned by ANGLE degrees (the background filled as the digits' is: black)."""
    for path in sorted(pool.rglob("*.jpg")):
        target = into / path.relative_to(pool)
        target.parent.mkdir(parents=True, exist_ok=True)
        with Image.open(path) as image:
            image.convert("RGB").rotate(ANGLE, resample=Image.Resampling.BILINEAR).save(target, quality=95)
    return into


def correct(model: torch.nn.Module, artifact: evaluate.Artifact, folder: Path) -> np.ndarray:
    given, probs, _ = probabilities(model, artifact, folder)
    return np.asarray(probs.argmax(axis=1) == given)


def figures(hits: np.ndarray, reference: np.ndarray) -> dict[str, object]:
    """What arrivals.summarize hands `decide`, from per-image correctness."""
    return {
        "top1": float(hits.mean()),
        "top1_interval": list(label_check.wilson_interval(int(hits.sum()), len(hits))),
        "checked": len(hits),
        "validation_top1": float(reference.mean()),
        "validation_images": len(reference),
        "labels_the_model_lacks": [],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 100, 400])
    parser.add_argument("--append", type=Path)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        champion_data, new = halves(work)
        validation, pool = split_pool(new, work)
        model, artifact, _, trained = champion(champion_data, work)
        reference = correct(model, artifact, validation)
        same = correct(model, artifact, pool)
        turned = correct(model, artifact, rotated(pool, work / "rotated"))
    load_after = os.getloadavg()[0]
    rows = []
    for shift in SHIFTS:
        expected = (1 - shift) * same.mean() + shift * turned.mean()
        cells = []
        for n in args.sizes:
            skipped = 0
            for seed in range(args.seeds):
                rng = random.Random(seed)
                picks = [
                    bool(turned[i]) if rng.random() < shift else bool(same[i])
                    for i in rng.sample(range(len(same)), min(n, len(same)))
                ]
                decision, _ = arrivals.decide(figures(np.array(picks), reference), "drift")
                skipped += decision == arrivals.NOT_NEEDED
            cells.append(f"{skipped / args.seeds:.1%}")
        learn = expected < reference.mean() - arrivals.DRIFT_TOLERANCE
        kind = "something to learn: skipped wrongly" if learn else "nothing to learn: saved"
        rows.append(f"| {shift:.0%} rotated | {expected:.3f} | {kind} | {' | '.join(cells)} |")
    lines = [
        f"## TrainWhen=drift: runs saved and runs wrongly skipped (bench/drift_check.py, {results.when()})",
        "",
        results.machine_line(load_before, load_after),
        "",
        f"A resnet18 champion trained by train.py ({SETTINGS.epochs} epochs, {SETTINGS.image_size} px, "
        f"{trained:.0f} s) on the first half of scikit-learn's digits; of the other half, {len(reference)} "
        f"images are its validation yardstick (top-1 {reference.mean():.3f}) and {len(same)} the arrivals "
        f"pool (top-1 {same.mean():.3f} as they are, {turned.mean():.3f} rotated {ANGLE} degrees). Per "
        f"size and share rotated, {args.seeds} runs whose new uploads are a random draw; the share that "
        "`arrivals.decide` ends NOT_NEEDED. Where the champion's expected top-1 on them is within "
        f"DRIFT_TOLERANCE ({arrivals.DRIFT_TOLERANCE}) of its validation top-1 there is nothing to learn and "
        "that share is the runs saved (the rest train needlessly, never harmfully); below it, there is "
        "something to learn and that share is the runs wrongly skipped.",
        "",
        f"| new uploads | champion's expected top-1 on them | NOT_NEEDED is | "
        f"{' | '.join(f'n = {n}' for n in args.sizes)} |",
        f"| --- | ---: | --- | {' | '.join('---:' for _ in args.sizes)} |",
        *rows,
        "",
    ]
    results.publish("\n".join(lines), args.append)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
