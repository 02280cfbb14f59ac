"""The Debugger rules and the gate by rates: false alarms over many real training runs, detection over many
seeds of each planted fault, with today's rules (before) and this tree's (after), each verdict from a
revision's rule_check.py over a real train.py job, as the stack's Processing job runs it.

Real runs, each one of what users train (template.yaml's recipe for photos: ImageNet EfficientNet-Lite0,
the backbone at a tenth of the rate, its BatchNorm statistics frozen, AdamW; at 64 px and batch 16, to
fit a CPU):
  first photos      a new user's first upload: 2 labels x 30 crops of two photographs, lr 3e-4 and 2e-3,
                    and 1,000 steps at 2e-3 (long after it fits them: its gradients shrink with its loss);
  photo benchmark   10 labels x 30 crops (retrain.demo.data.write_photos), seeds 0 and 1;
  photo demo        3 labels x 12 crops: a validation split of ~7 images;
  hard              18 labels x 20 crops, pairs hard to tell apart (the same motorcycle from left and right,
                    two retinas, a page and text), 15% filed under a wrong label; 30 to 300 steps;
  hard, scratch     24 labels, 25% wrong, ResNet-18 from random weights, 32 px, 100 to 1,000 steps;
  second run        a champion trained on 12 labels x 16 crops, fine-tuned on those and 48 new crops of
                    which 8 are filed under a wrong label (the common case: a data set's later run); also
                    with no wrong label;
  digits            the demo's first run (ResNet-18 from scratch) and its second, from the first's model;
  float16           mixed precision with its loss scaler (amp-on-cpu, as on a GPU): hard, second runs,
                    photos, at 32 px, batch 8, ~30 steps (float16 on a CPU is ~7x slower).
Planted faults, each over SEEDS seeds that cycle through four bases (photos from ImageNet, hard data in
~36 steps, digits from scratch, float16 photos at 32 px) and the seed of the job:
  dead gradients    inject-fault=vanishing-gradient: the images reach the model as zeros (VanishingGradient);
  lr 0              nothing moves (LossNotDecreasing);
  NaN loss          SGD at lr 1e30 (ExplodingTensor);
  exploding loss    SGD at lr 1e4: the loss jumps from 2.5 to ~1e8 and stays finite (LossNotDecreasing);
  random labels     every image in a random label: nothing to learn (the gate's floor: better than guessing).

The gate's decision per job is the rules and the floor only, without a champion to beat: before, today's
(MinAccuracy 0.5, today's rules); after, this tree's (better than guessing the validation split's most
common label, p < 0.05, and the verdicts that can block). Managed Debugger's VanishingGradient and
LossNotDecreasing, as AWS's rule list describes them, are judged over the same saved tensors.

    .venv/bin/python -m bench.rules [--before REV] [--work DIR] [--parallel 2] [--append BENCHMARKS.md]
                                    [--fixtures tests/unit/debugger/fixtures]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import results, training_job
from controller import gate
from retrain.demo import data as demo_data
from retrain_contract import container as contract
from retrain_contract import rules as rule_names

ROOT = Path(__file__).resolve().parent.parent
SEEDS = 20
TENSOR_RULES = rule_names.TENSOR_RULES
BLOCKING = ("VanishingGradient", "ExplodingTensor", "LossNotDecreasing")  # BlockingRules' default, both trees
OLD_MIN_ACCURACY = 0.5  # MinAccuracy's default before this tree
MANAGED_THRESHOLD = 1e-7  # managed VanishingGradient's default threshold
MANAGED_NUM_STEPS = 10  # managed LossNotDecreasing's default num_steps (diff_percent 0)

PHOTO_RECIPE = {
    contract.HP_MODEL: contract.MODEL_EFFICIENTNET_LITE0,
    contract.HP_PRETRAINED: contract.PRETRAINED_IMAGENET,
    contract.HP_EPOCHS: "5",
    contract.HP_BATCH_SIZE: "16",
    contract.HP_IMAGE_SIZE: "64",
    contract.HP_LR: "0.001",
    contract.HP_OPTIMIZER: "adamw",
    contract.HP_MIN_STEPS: "100",
    contract.HP_BACKBONE_LR_FACTOR: "0.1",
    contract.HP_BATCHNORM: contract.BATCHNORM_FROZEN,
}
SCRATCH_RECIPE = {  # the digits demo's first run (retrain.demo.flow.DEMO_PARAMETERS)
    contract.HP_MODEL: "resnet18",
    contract.HP_EPOCHS: "5",
    contract.HP_BATCH_SIZE: "32",
    contract.HP_IMAGE_SIZE: "32",
    contract.HP_LR: "0.001",
    contract.HP_OPTIMIZER: "adamw",
    contract.HP_CROP_SCALE_MIN: "0.5",
}
# float16 on a CPU runs ~7x slower than float32 (no half-precision convolutions): small images and batches,
# one epoch of about 30 steps.
FLOAT16 = {
    contract.HP_AMP_ON_CPU: "true",
    contract.HP_AMP_DTYPE: "float16",  # with its loss scaler, as on a GPU without bfloat16
    contract.HP_IMAGE_SIZE: "32",
    contract.HP_BATCH_SIZE: "8",
    contract.HP_EPOCHS: "1",
    contract.HP_MIN_STEPS: "30",
}


def steps(budget: int, epochs: int = 3) -> dict[str, str]:
    return {contract.HP_EPOCHS: str(epochs), contract.HP_MIN_STEPS: str(budget)}


@dataclass(frozen=True)
class Job:
    name: str
    kind: str  # what the row counts as: a real run's kind, or the planted fault
    data: str  # a key of DATA
    hyperparameters: dict[str, str]
    planted: str = ""  # the fault; empty: a real run
    start: str = ""  # the name of the job whose model this one starts from

    @property
    def slug(self) -> str:
        return "".join(c if c.isalnum() else "-" for c in self.name).strip("-")


def real_jobs() -> list[Job]:
    jobs = [
        Job(
            "first photos, lr 3e-4",
            "first photos",
            "first-photos",
            {**PHOTO_RECIPE, contract.HP_LR: "0.0003"},
        ),
        Job(
            "first photos, lr 2e-3", "first photos", "first-photos", {**PHOTO_RECIPE, contract.HP_LR: "0.002"}
        ),
        # trained on long after it fits its images: its gradients shrink with its loss
        Job(
            "first photos, lr 2e-3, 1000 steps",
            "first photos, trained on",
            "first-photos",
            {**PHOTO_RECIPE, **steps(1000), contract.HP_LR: "0.002"},
        ),
        *(
            Job(
                f"photo benchmark, seed {s}",
                "photo benchmark",
                "photos",
                {**PHOTO_RECIPE, contract.HP_SEED: str(s)},
            )
            for s in (0, 1)
        ),
        Job("photo demo", "photo demo", "demo-photos", {**PHOTO_RECIPE, contract.HP_LR: "0.00177"}),
        Job("digits, first run", "digits", "digits-part", SCRATCH_RECIPE),
        Job(
            "digits, second run",
            "digits",
            "digits",
            {**SCRATCH_RECIPE, contract.HP_BACKBONE_LR_FACTOR: "0.1"},
            start="digits, first run",
        ),
        Job("champion (12 labels x 16)", "champion", "wave-1", PHOTO_RECIPE),
    ]
    for seed, budget in enumerate((30, 60, 100, 300, 30, 60, 100, 30)):
        jobs.append(
            Job(
                f"hard, {budget} steps, seed {seed}",
                "hard (18 labels, 15% wrong)",
                "hard-18",
                {**PHOTO_RECIPE, **steps(budget), contract.HP_SEED: str(seed)},
            )
        )
    for seed, budget in enumerate((100, 300, 1000)):
        jobs.append(
            Job(
                f"hard, scratch, {budget} steps",
                "hard from scratch (24 labels, 25% wrong)",
                "hard-24",
                {**SCRATCH_RECIPE, **steps(budget), contract.HP_SEED: str(seed)},
            )
        )
    second = {**PHOTO_RECIPE, contract.HP_SEED: "0"}
    for seed, budget in enumerate((30, 60, 100, 30, 60, 100, 30, 60)):
        jobs.append(
            Job(
                f"second run, {budget} steps, seed {seed}",
                "second run (8 of 48 new wrong)",
                "wave-2",
                {**second, **steps(budget), contract.HP_SEED: str(seed)},
                start="champion (12 labels x 16)",
            )
        )
    for seed in (0, 1):
        jobs.append(
            Job(
                f"second run, clean, seed {seed}",
                "second run (clean)",
                "wave-2-clean",
                {**second, **steps(60), contract.HP_SEED: str(seed)},
                start="champion (12 labels x 16)",
            )
        )
    jobs += [
        *(
            Job(
                f"float16 hard, seed {s}",
                "float16",
                "hard-18",
                {**PHOTO_RECIPE, **FLOAT16, contract.HP_SEED: str(s)},
            )
            for s in (0, 1)
        ),
        *(
            Job(
                f"float16 second run, seed {s}",
                "float16",
                "wave-2",
                {**PHOTO_RECIPE, **FLOAT16, contract.HP_SEED: str(s)},
                start="champion (12 labels x 16)",
            )
            for s in (0, 1)
        ),
        Job("float16 first photos", "float16", "first-photos", {**PHOTO_RECIPE, **FLOAT16}),
        Job("float16 photos", "float16", "photos", {**PHOTO_RECIPE, **FLOAT16}),
    ]
    return jobs


# Each planted fault's seeds cycle through these bases: (data, hyperparameters).
FAULT_BASES = (
    ("photos", {**PHOTO_RECIPE, **steps(60)}),
    ("hard-18", {**PHOTO_RECIPE, **steps(36)}),
    ("digits-part", {**SCRATCH_RECIPE, **steps(100)}),
    ("photos", {**PHOTO_RECIPE, **FLOAT16}),
)
SGD = {contract.HP_OPTIMIZER: "sgd"}
FAULTS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {  # name -> (the rules meant for it, what breaks)
    "dead gradients": (("VanishingGradient",), {contract.HP_INJECT_FAULT: contract.FAULT_VANISHING_GRADIENT}),
    "lr 0": (("LossNotDecreasing",), {contract.HP_LR: "0"}),
    "NaN loss": (("ExplodingTensor",), {**SGD, contract.HP_LR: "1e30"}),
    # finite, LossNotDecreasing's; in some seeds it overflows to NaN, ExplodingTensor's
    "exploding loss": (("LossNotDecreasing", "ExplodingTensor"), {**SGD, contract.HP_LR: "10000"}),
    "random labels": ((), {}),
}


def fault_jobs(seeds: int) -> list[Job]:
    jobs = []
    for fault, (_, broken) in FAULTS.items():
        for seed in range(seeds):
            data, base = FAULT_BASES[seed % len(FAULT_BASES)]
            if fault == "random labels":
                data = "random-digits" if data == "digits-part" else "random-labels"
            hyperparameters = {**base, **broken, contract.HP_SEED: str(seed)}
            jobs.append(Job(f"{fault}, seed {seed}", fault, data, hyperparameters, planted=fault))
    return jobs


def write_random_labels(source: Path, root: Path, seed: int = 0) -> None:
    """Every image of `source` in a label drawn at random: nothing to learn, everything to memorise."""
    labels = sorted(p.name for p in source.iterdir() if p.is_dir())
    draw = np.random.default_rng(seed)
    for number, image in enumerate(sorted(source.glob("*/*.jpg"))):
        target = root / labels[int(draw.integers(len(labels)))] / f"{number:04d}.jpg"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(image, target)


HARD_18 = (
    *demo_data.PHOTOS,
    "motorcycle-right",
    "microaneurysms",
    "page",
    "text",
    "coins",
    "moon",
    "horse",
    "cells",
)
HARD_24 = (*HARD_18, "cameraman", "galaxies", "clock", "colours", "logo", "phantom")
WAVE_LABELS = HARD_18[:12]


def write_data(work: Path) -> dict[str, Path]:
    """Every data set the jobs train on, under `work` (written once; the same seeds write the same files)."""
    data = {
        name: work / name
        for name in (
            "first-photos",
            "photos",
            "demo-photos",
            "hard-18",
            "hard-24",
            "wave-1",
            "wave-2",
            "wave-2-clean",
            "random-labels",
            "digits",
            "digits-part",
            "random-digits",
        )
    }
    if (work / "written").is_file():
        return data
    shutil.rmtree(work, ignore_errors=True)
    demo_data.write_photos(
        data["first-photos"], per_class=30, size=64, classes=("galaxies", "cameraman"), seed=1
    )
    demo_data.write_photos(data["photos"], per_class=30, size=64)
    demo_data.write_photos(data["demo-photos"], per_class=12, size=64, classes=("cat", "coffee", "rocket"))
    demo_data.write_photos(data["hard-18"], per_class=20, size=64, classes=HARD_18, seed=2)
    demo_data.mislabel(data["hard-18"], 0.15, seed=2)
    demo_data.write_photos(data["hard-24"], per_class=20, size=64, classes=HARD_24, seed=3)
    demo_data.mislabel(data["hard-24"], 0.25, seed=3)
    demo_data.write_photos(data["wave-1"], per_class=16, size=64, classes=WAVE_LABELS, seed=4)
    for name, wrong in (("wave-2", 8 / 48), ("wave-2-clean", 0.0)):
        new = work / f"{name}-new"
        demo_data.write_photos(new, per_class=4, size=64, classes=WAVE_LABELS, seed=5)
        demo_data.mislabel(new, wrong, seed=5)
        shutil.copytree(data["wave-1"], data[name])
        for image in new.glob("*/*.jpg"):
            image.rename(data[name] / image.parent.name / f"new-{image.name}")
        shutil.rmtree(new)
    write_random_labels(data["photos"], data["random-labels"])
    demo_data.write_digits(data["digits"])
    demo_data.write_digits(data["digits-part"])
    shutil.rmtree(data["digits-part"] / demo_data.LABELS[-1])
    write_random_labels(data["digits-part"], data["random-digits"])
    (work / "written").touch()
    return data


# What a job's tensors do not depend on: the rules are run again over kept jobs every time.
NOT_TRAINING = ("training_image/retrain_training/rules/", "training_image/retrain_training/rule_check.py")


def code_revision() -> str:
    """A digest of the code that trains a job (training_image/ and contract/ but the rules): a job kept
    with --work is reused only when this is the same."""
    digest = hashlib.sha256()
    for folder in ("training_image", "contract"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if not name.startswith(NOT_TRAINING):
                digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass
class Outcome:
    job: Job
    output: Path  # SM_OUTPUT_DATA_DIR: tensors/ and profile/
    model: Path
    top1: float
    steps: int
    seconds: float
    reused: bool
    split: gate.Split | None
    verdicts: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # tree -> rule -> result
    managed: dict[str, bool] = field(default_factory=dict)  # managed rule -> fires
    final_loss: float = math.nan


def validation_split(data: Path) -> gate.Split:
    """The validation split train.py hashes out of `data` (val-fraction's default): its size and its most
    common label's count."""
    from retrain_training.data import load_dataset

    dataset = load_dataset(data, val_fraction=contract.VAL_FRACTION_DEFAULT)
    counts = Counter(sample.label for sample in dataset.validation)
    return gate.Split(len(dataset.validation), max(counts.values()) if counts else 0)


def train(job: Job, data: Path, work: Path, models: dict[str, Path], revision: str) -> Outcome:
    channels = {contract.CHANNEL_TRAIN: data}
    hyperparameters = {
        **job.hyperparameters,
        contract.HP_NUM_WORKERS: "0",
        contract.HP_CHECKPOINT_EVERY: "0",
    }
    if job.start:
        channels[contract.CHANNEL_PRETRAINED] = work / "start" / job.slug
        archive = training_job.pack(models[job.start], channels[contract.CHANNEL_PRETRAINED])
        hyperparameters[contract.HP_PRETRAINED] = archive.name
    sagemaker = training_job.TrainingJob(
        work / "jobs" / job.slug,
        dict(sorted(hyperparameters.items())),
        channels,
        name="bench-rules",
        threads=1,
    )
    base, paths = sagemaker.base, sagemaker.paths
    stamp = base / "revision.json"
    wanted = {"revision": revision, "flags": sagemaker.flags(), "start": job.start}
    log = base / "stdout.txt"
    reused = stamp.is_file() and json.loads(stamp.read_text(encoding="utf-8")) == wanted
    started = time.perf_counter()
    if not reused:
        shutil.rmtree(base, ignore_errors=True)
        done = training_job.run(sagemaker).check(job.name)
        log.write_text(done.stdout, encoding="utf-8")
        stamp.write_text(json.dumps(wanted), encoding="utf-8")
    seconds = time.perf_counter() - started
    metrics = contract.parse_metric_lines(log.read_text(encoding="utf-8").splitlines())
    top1 = metrics[contract.METRIC_VAL_ACCURACY][-1].value
    config = json.loads((paths.model_dir / contract.CONFIG_FILE).read_text(encoding="utf-8"))
    print(
        f"{job.name}: top-1 {top1:.3f}, {config['steps']} steps, {seconds:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return Outcome(
        job,
        paths.output_data_dir,
        paths.model_dir,
        top1,
        int(config["steps"]),
        seconds,
        reused,
        validation_split(data),
    )


def checkout(revision: str, into: Path) -> Path:
    """training_image/ and contract/ of `revision`, as files under `into`."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "training_image", "contract"],
        capture_output=True,
        check=True,
    ).stdout
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def rule_check(tree: Path, outcome: Outcome, out: Path) -> dict[str, dict[str, Any]]:
    """`tree`'s rule_check.py over the job's output at the stack's patience, as the Processing job runs it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree / "training_image"), str(tree / "contract")]),
        "OMP_NUM_THREADS": "1",
    }
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(
        [
            sys.executable,
            str(tree / "training_image" / contract.RULE_CHECK_PROGRAM),
            "--input-dir",
            str(outcome.output),
            "--output-dir",
            str(out),
            "--no-report",
            "--rules",
            ",".join(TENSOR_RULES),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    found = json.loads((out / contract.RULE_RESULTS_FILE).read_text(encoding="utf-8"))
    return {r["rule"]: r for r in found}


def trace(output: Path) -> dict[str, Any]:
    """What the hook saved of a job, as plain numbers: per saved step its mode, mode step, training or
    validation loss, loss scale, gradients' mean |g| and weights' L2 norms (the rules' inputs; tests
    replay real jobs from it)."""
    from smdebug import modes
    from smdebug.trials import create_trial

    os.environ.setdefault("SMDEBUG_TRAINING_END_DELAY_REFRESH", "0")
    trial = create_trial(str(output / contract.TENSORS_DIRNAME))

    def names(collection: str) -> list[str]:
        try:
            return list(trial.tensor_names(collection=collection))
        except Exception:  # a collection the job never saved
            return []

    losses, gradients, weights, scales = (
        names("losses"),
        names("gradients"),
        names("weights"),
        names("loss_scale"),
    )
    saves = []
    for step in sorted(trial.steps()):
        mode = "T" if trial.mode(step) == modes.TRAIN else "E"
        save: dict[str, Any] = {"step": int(step), "mode": mode, "mode_step": int(trial.mode_step(step))}
        values = [
            float(np.mean(trial.tensor(n).value(step))) for n in losses if step in trial.tensor(n).steps()
        ]
        if values:
            save["loss"] = float(np.mean(values))
        for name in scales:
            if step in trial.tensor(name).steps():
                save["loss_scale"] = float(np.ravel(trial.tensor(name).value(step))[0])
        for key, collection, reduction, absolute in (
            ("gradients", gradients, "mean", True),
            ("weights", weights, "l2", False),
        ):
            found = {
                n: float(trial.tensor(n).reduction_value(step, reduction, abs=absolute))
                for n in collection
                if step in trial.tensor(n).steps()
            }
            if found:
                save[key] = found
        saves.append(save)
    facts_file = output / contract.TRAINING_FACTS_FILE
    facts = json.loads(facts_file.read_text(encoding="utf-8")) if facts_file.is_file() else {}
    return {"facts": facts, "saves": saves}


def managed_verdicts(saved: dict[str, Any]) -> dict[str, bool]:
    """Whether managed Debugger's VanishingGradient and LossNotDecreasing, as AWS's rule list describes
    them at their defaults, would fire on the job: |g| (as saved: of the scaled loss in float16 training)
    below 1e-7 at any saved step; and a training loss not below the one saved at least num_steps (10)
    steps before it, at any saved step."""
    gradients = [g for s in saved["saves"] for g in s.get("gradients", {}).values()]
    vanishing = any(g < MANAGED_THRESHOLD for g in gradients if math.isfinite(g))
    losses = [(s["mode_step"], s["loss"]) for s in saved["saves"] if s["mode"] == "T" and "loss" in s]
    not_decreasing = False
    for at, loss in losses:
        earlier = [value for when, value in losses if when <= at - MANAGED_NUM_STEPS]
        if earlier and math.isfinite(loss) and not loss < earlier[-1]:
            not_decreasing = True
            break
    return {"VanishingGradient": vanishing, "LossNotDecreasing": not_decreasing}


def decision(outcome: Outcome, tree: str) -> str:
    """The gate's decision from the rules and the floor (no champion): 'registered' or 'rejected (why)'.
    Before: MinAccuracy 0.5, today's rules' verdicts; after: better than guessing, this tree's."""
    verdicts: list[Any] = list(outcome.verdicts[tree].values())
    before = tree == "before"
    thresholds = gate.Thresholds(OLD_MIN_ACCURACY if before else None, 0.0, BLOCKING)
    said = gate.decide(outcome.top1, None, verdicts, thresholds, None if before else outcome.split)
    if said["decision"] == "accepted":
        return "registered"
    blocked = [
        r["rule"]
        for r in gate.with_actions(verdicts, BLOCKING)
        if r["status"] in (rule_names.ISSUES, *rule_names.NO_VERDICT) and r["action"] == rule_names.BLOCK
    ]
    floor = "accuracy" if before else "not better than guessing"
    return f"rejected ({', '.join(blocked) or floor})"


def short(status: str) -> str:
    return {
        rule_names.NO_ISSUES: "-",
        rule_names.ISSUES: "**found**",
        rule_names.SUSPECTED: "suspected",
        rule_names.INSUFFICIENT_DATA: "too few",
        rule_names.ERROR: "error",
    }.get(status, status)


def rate(hits: int, total: int) -> str:
    return f"{hits} of {total}" if total else "-"


def rates_table(outcomes: list[Outcome]) -> list[str]:
    real = [o for o in outcomes if not o.job.planted]
    lines = [
        f"False alarms over the {len(real)} real runs (IssuesFound, which blocks a model when the rule is in "
        "BlockingRules; after, also the verdicts that only warn):",
        "",
        "| rule | found, before | found, after | suspected (warns), after | too few data points, after "
        "| managed rule (as AWS describes it) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in TENSOR_RULES:

        def count(tree: str, status: str, name: str = name) -> int:
            return sum(o.verdicts[tree][name]["status"] == status for o in real)

        managed = (
            rate(sum(o.managed[name] for o in real), len(real))
            if name in ("VanishingGradient", "LossNotDecreasing")
            else "-"
        )
        lines.append(
            f"| {name} | {rate(count('before', rule_names.ISSUES), len(real))} "
            f"| {rate(count('after', rule_names.ISSUES), len(real))} "
            f"| {rate(count('after', rule_names.SUSPECTED), len(real))} "
            f"| {rate(count('after', rule_names.INSUFFICIENT_DATA), len(real))} | {managed} |"
        )
    registered = [sum(decision(o, tree) == "registered" for o in real) for tree in ("before", "after")]
    lines.append(
        f"| **gate: registered** | {rate(registered[0], len(real))} "
        f"| {rate(registered[1], len(real))} | | | |"
    )
    lines += [
        "",
        "Detection over the planted faults (seeds cycling through four bases, see the docstring):",
        "",
        "| planted fault | the rules meant for it | caught by them, before | caught by them, after "
        "| any blocking rule, after | gate rejects, before | gate rejects, after |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for fault, (meant, _) in FAULTS.items():
        jobs = [o for o in outcomes if o.job.planted == fault]
        if not jobs:
            continue

        def caught(tree: str, jobs: list[Outcome] = jobs, meant: tuple[str, ...] = meant) -> str:
            if not meant:
                return "-"
            found = [any(o.verdicts[tree][r]["status"] == rule_names.ISSUES for r in meant) for o in jobs]
            return rate(sum(found), len(jobs))

        blocking = sum(
            any(o.verdicts["after"][r]["status"] == rule_names.ISSUES for r in BLOCKING) for o in jobs
        )
        rejected = [sum(decision(o, tree) != "registered" for o in jobs) for tree in ("before", "after")]
        lines.append(
            f"| {fault} | {' or '.join(meant) or 'the floor'} | {caught('before')} | {caught('after')} "
            f"| {rate(blocking, len(jobs))} "
            f"| {rate(rejected[0], len(jobs))} | {rate(rejected[1], len(jobs))} |"
        )
    return lines


def kinds_table(outcomes: list[Outcome]) -> list[str]:
    lines = [
        "| kind | runs | steps | top-1 | guessing | last training loss | gate before | gate after |",
        "| --- | ---: | --- | --- | --- | --- | --- | --- |",
    ]
    kinds: dict[str, list[Outcome]] = {}
    for o in outcomes:
        kinds.setdefault(o.job.kind, []).append(o)

    def span(values: Iterable[float], spec: str) -> str:
        found = [v for v in values if math.isfinite(v)]
        if not found:
            return "-"
        low, high = min(found), max(found)
        return f"{low:{spec}}" if low == high else f"{low:{spec}}-{high:{spec}}"

    for kind, group in kinds.items():
        gates = []
        for tree in ("before", "after"):
            counted = Counter(decision(o, tree) for o in group)
            gates.append(", ".join(f"{n} {what}" for what, n in counted.most_common()))
        lines.append(
            f"| {kind} | {len(group)} | {span((o.steps for o in group), 'g')} "
            f"| {span((o.top1 for o in group), '.3f')} "
            f"| {span((o.split.guess if o.split else math.nan for o in group), '.3f')} "
            f"| {span((o.final_loss for o in group), '.3g')} | {gates[0]} | {gates[1]} |"
        )
    return lines


def jobs_table(outcomes: list[Outcome]) -> list[str]:
    lines = [
        "| job | steps | top-1 | "
        + " | ".join(TENSOR_RULES)
        + " | managed VG, LND | gate before | gate after |",
        "| --- | ---: | ---: | " + " | ".join("---" for _ in TENSOR_RULES) + " | --- | --- | --- |",
    ]
    for o in outcomes:
        cells = [
            f"{short(o.verdicts['before'][n]['status'])} → {short(o.verdicts['after'][n]['status'])}"
            for n in TENSOR_RULES
        ]
        managed = ", ".join(
            "fires" if o.managed[n] else "-" for n in ("VanishingGradient", "LossNotDecreasing")
        )
        lines.append(
            f"| {o.job.name} | {o.steps} | {o.top1:.3f} | "
            + " | ".join(cells)
            + f" | {managed} | {decision(o, 'before')} | {decision(o, 'after')} |"
        )
    return lines


def listed(names: list[str]) -> str:
    return ": " + "; ".join(names) if names else ""


def reading(outcomes: list[Outcome]) -> list[str]:
    """The paragraph that reads the tables, every figure taken from them."""
    real = [o for o in outcomes if not o.job.planted]

    def blocked(o: Outcome, tree: str) -> bool:
        return any(o.verdicts[tree][n]["status"] == rule_names.ISSUES for n in BLOCKING)

    found_after = [o.job.name for o in real if blocked(o, "after")]
    found_before = [o.job.name for o in real if blocked(o, "before")]
    suspected = [
        o.job.name
        for o in real
        if any(o.verdicts["after"][n]["status"] == rule_names.SUSPECTED for n in BLOCKING)
    ]
    refused = [o.job.name for o in real if decision(o, "after") != "registered"]
    faults = [o for o in outcomes if o.job.planted]
    rejected = sum(decision(o, "after") != "registered" for o in faults)
    managed_vg = sum(o.managed["VanishingGradient"] for o in real)
    managed_lnd = sum(o.managed["LossNotDecreasing"] for o in real)
    return [
        f"Reading: of {len(real)} real runs, the blocking rules of this tree found issues in "
        f"{len(found_after)}{listed(found_after)} (today's in {len(found_before)}{listed(found_before)}). "
        f"{len(suspected)} real runs got a suspected issue, a warning that does not block"
        f"{listed(suspected)}. The gate of this tree refused {len(refused)} of the "
        f"real runs{listed(refused)}, and {rejected} of the {len(faults)} planted "
        f"faults. Managed Debugger's rules, as AWS describes them, would have fired on {managed_vg} "
        f"(VanishingGradient) and {managed_lnd} (LossNotDecreasing) of the {len(real)} real runs: under "
        "DebuggerMode=managed those two warn (retrain_contract.rules.MANAGED_WARN_ONLY)."
    ]


FIXTURES = {  # a fixture file -> the job whose saved tensors it holds (tests/unit/debugger/fixtures)
    "second-run-wrong-labels.json": "second run, 30 steps, seed 0",
    "hard-first-run.json": "hard, 100 steps, seed 2",
    "exploding-loss.json": "exploding loss, seed 0",
    "lr-0.json": "lr 0, seed 1",
    "float16-dead-gradients.json": "dead gradients, seed 3",
    "float16-overflow.json": "float16 photos",
}


def write_fixtures(outcomes: list[Outcome], into: Path) -> None:
    by_name = {o.job.name: o for o in outcomes}
    into.mkdir(parents=True, exist_ok=True)
    for file, name in FIXTURES.items():
        if name not in by_name:
            continue
        saved = trace(by_name[name].output)
        saved["job"] = name
        saved["hyperparameters"] = by_name[name].job.hyperparameters
        text = json.dumps(saved, separators=(",", ":"), default=lambda v: round(v, 6))
        (into / file).write_text(_rounded(text) + "\n", encoding="utf-8")


def _rounded(text: str) -> str:
    """Floats to 6 significant digits: the fixtures stay small and replay the same verdicts."""
    return json.dumps(json.loads(text, parse_float=lambda s: float(f"{float(s):.6g}")), separators=(",", ":"))


def run_all(jobs: list[Job], data: dict[str, Path], work: Path, before: Path, parallel: int) -> list[Outcome]:
    revision = code_revision()
    models: dict[str, Path] = {}
    outcomes: dict[str, Outcome] = {}

    def one(job: Job) -> Outcome:
        outcome = train(job, data[job.data], work, models, revision)
        checks = work / "checks" / job.slug
        outcome.verdicts = {
            "before": rule_check(before, outcome, checks / "before"),
            "after": rule_check(ROOT, outcome, checks / "after"),
        }
        saved = trace(outcome.output)
        outcome.managed = managed_verdicts(saved)
        losses = [s["loss"] for s in saved["saves"] if s["mode"] == "T" and "loss" in s]
        outcome.final_loss = float(np.mean(losses[-3:])) if losses else math.nan
        return outcome

    starts = {j.start for j in jobs if j.start}
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for outcome in pool.map(one, [j for j in jobs if j.name in starts]):
            models[outcome.job.name] = outcome.model
            outcomes[outcome.job.name] = outcome
        for outcome in pool.map(one, [j for j in jobs if j.name not in starts]):
            outcomes[outcome.job.name] = outcome
    return [outcomes[j.name] for j in jobs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", default="bc4b246", help="the revision whose rules are 'before'")
    parser.add_argument("--seeds", type=int, default=SEEDS, help="seeds of each planted fault")
    parser.add_argument("--parallel", type=int, default=2, help="jobs at once, one thread each")
    parser.add_argument(
        "--jobs", nargs="*", help="only these jobs (names as in the table), and what they start from"
    )
    parser.add_argument("--work", type=Path, help="keep the jobs here, and reuse those the same code trained")
    parser.add_argument(
        "--fixtures", type=Path, help="write the tests' fixtures (saved tensors of real jobs) here"
    )
    parser.add_argument("--append", type=Path, help="append the section to this file (BENCHMARKS.md)")
    args = parser.parse_args(argv)
    jobs = [*real_jobs(), *fault_jobs(args.seeds)]
    if args.jobs:
        wanted = set(args.jobs)
        wanted |= {j.start for j in jobs if j.name in wanted and j.start}
        jobs = [j for j in jobs if j.name in wanted]
    load_before = os.getloadavg()[0]
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-rules-") as scratch:
        work = args.work or Path(scratch)
        data = write_data(work / "data")
        before = checkout(args.before, work / "before")
        outcomes = run_all(jobs, data, work, before, args.parallel)
        if args.fixtures:
            write_fixtures(outcomes, args.fixtures)
    load_after = os.getloadavg()[0]
    trained = [o for o in outcomes if not o.reused]
    section = "\n".join(
        [
            f"## The rules by rates: real runs and planted faults ({results.when()})",
            "",
            results.machine_line(load_before, load_after),
            f"{len(outcomes)} jobs ({len(trained)} trained by this run, the rest kept by --work from the "
            f"same code, {code_revision()}), {time.perf_counter() - began:.0f} s in all, {args.parallel} at "
            "a time.",
            "",
            f"Before: the rules at {args.before} with MinAccuracy 0.5; after: this tree's, the gate's floor "
            "better than guessing. Verdicts: `-` no issue, **found** IssuesFound (blocks, for a rule in "
            "BlockingRules), suspected IssuesSuspected (a warning), too few InsufficientData (a warning), "
            "error.",
            "",
            *rates_table(outcomes),
            "",
            *kinds_table(outcomes),
            "",
            *reading(outcomes),
            "",
            "<details><summary>Every job</summary>",
            "",
            *jobs_table(outcomes),
            "",
            "</details>",
            "",
        ]
    )
    results.publish(section, args.append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
