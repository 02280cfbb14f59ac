"""Rules against real runs and planted faults: what each Debugger rule finds in healthy fine-tuning runs
(false alarms) and in trainings broken on purpose (caught), with the rules of another revision (before)
and of this tree (after), and what the gate decides with each revision's blocking policy.

Every job is training_image/train.py as SageMaker runs it (SAGEMAKER_BASE_DIR, SM_CHANNEL_TRAIN, the
hyperparameters as flags; the hook at its default debug-interval), and every verdict comes from a
revision's rule_check.py over that job's output, as the stack's Processing job runs it. The system rules
are judged twice: at the stack's SystemRulePatience (1,000 data points, which a job of ~100 steps never
reaches) and at a patience of 5 (what they say of these jobs once they judge at all).

Real runs, with the stack's recipe for each kind of data (template.yaml's defaults: from ImageNet
EfficientNet-Lite0, the backbone at a tenth of the rate, its BatchNorm statistics frozen, MinTrainingSteps
100; the demo's AdamW range 3e-4..2e-3):
  first photos     a new user's first upload: 2 labels x 30 crops of two photographs that no other
                   benchmark uses (hubble_deep_field, camera), 64 px, trained at 128 px, at both ends of
                   the learning-rate range (the two trials of a tuning job);
  photo benchmark  10 classes x 30 crops of scikit-image's photographs (retrain.demo_data.write_photos);
  photo demo       the photo demo test's upload (3 labels x 12 crops, 64 px: a validation split of ~10
                   images), at the learning rate its tuning chose;
  digits           the demo's first run (ResNet-18 from scratch, 32 px) on the digits without `nine`,
                   and its second: the first run's model fine-tuned on all the digits (the head grows).
Planted faults, each the photo benchmark's run with one thing broken:
  vanishing gradient   inject-fault=vanishing-gradient: the images reach the model as zeros;
  exploding loss       SGD at lr 10,000: the loss jumps from 2.5 to ~1e8 and the gradients die;
  NaN loss             SGD at lr 1e30: the weights overflow;
  loss not decreasing  lr 0;
  overfit              random labels (each crop moved to a random class): memorised, not learned;
  slow loader          inject-loader-delay-ms 300: the machine's fault, not the model's.

    .venv/bin/python -m bench.rules [--before 2b98ec8] [--append BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from bench import results
from controller import gate
from retrain import demo_data
from retrain.embedded.provisioning.sam import load_template
from retrain_contract import container as contract
from retrain_contract import rules as rule_names

ROOT = Path(__file__).resolve().parent.parent
NEW_PHOTOS = {"galaxies": "hubble_deep_field.jpg", "cameraman": "camera.png"}
HELD_OUT_LABEL = demo_data.LABELS[-1]
# template.yaml's recipe for a data set's first run of photos, at the photo demo's image size.
PHOTO_RECIPE = {
    contract.HP_MODEL: contract.MODEL_EFFICIENTNET_LITE0,
    contract.HP_PRETRAINED: contract.PRETRAINED_IMAGENET,
    contract.HP_EPOCHS: "5",
    contract.HP_BATCH_SIZE: "32",
    contract.HP_IMAGE_SIZE: "128",
    contract.HP_LR: "0.001",
    contract.HP_OPTIMIZER: "adamw",
    contract.HP_MIN_STEPS: "100",
    contract.HP_BACKBONE_LR_FACTOR: "0.1",
    contract.HP_BATCHNORM: contract.BATCHNORM_FROZEN,
}
# The digits demo's first run (retrain.demo.DEMO_PARAMETERS).
DIGITS_RECIPE = {
    contract.HP_MODEL: "resnet18",
    contract.HP_EPOCHS: "5",
    contract.HP_BATCH_SIZE: "32",
    contract.HP_IMAGE_SIZE: "32",
    contract.HP_LR: "0.001",
    contract.HP_OPTIMIZER: "adamw",
    contract.HP_CROP_SCALE_MIN: "0.5",
}
SHORT_PATIENCE = 5


@dataclass(frozen=True)
class Job:
    name: str
    data: str  # a key of DATA
    hyperparameters: dict[str, str]
    planted: str = ""  # what is broken; empty: a real run
    start: str = ""  # the name of the job whose model this one starts from


JOBS = (
    Job("first photos, lr 3e-4", "first-photos", {**PHOTO_RECIPE, contract.HP_LR: "0.0003"}),
    Job("first photos, lr 2e-3", "first-photos", {**PHOTO_RECIPE, contract.HP_LR: "0.002"}),
    Job("photo benchmark", "photos", PHOTO_RECIPE),
    # tests/integration/test_cli_demo.py's upload, with the learning rate its tuning chose
    Job(
        "photo demo (3 labels x 12, 64 px)",
        "demo-photos",
        {**PHOTO_RECIPE, contract.HP_IMAGE_SIZE: "64", contract.HP_LR: "0.00177"},
    ),
    Job("digits, first run (scratch)", "digits-part", DIGITS_RECIPE),
    Job(
        "digits, second run (from the champion)",
        "digits",
        {**DIGITS_RECIPE, contract.HP_BACKBONE_LR_FACTOR: "0.1"},
        start="digits, first run (scratch)",
    ),
    Job(
        "vanishing gradient",
        "photos",
        {**PHOTO_RECIPE, contract.HP_INJECT_FAULT: contract.FAULT_VANISHING_GRADIENT},
        planted="VanishingGradient",
    ),
    Job(
        "exploding loss (SGD lr 1e4)",
        "photos",
        {**PHOTO_RECIPE, contract.HP_OPTIMIZER: "sgd", contract.HP_LR: "10000"},
        planted="ExplodingTensor",
    ),
    Job(
        "NaN loss (SGD lr 1e30)",
        "photos",
        {**PHOTO_RECIPE, contract.HP_OPTIMIZER: "sgd", contract.HP_LR: "1e30"},
        planted="ExplodingTensor",
    ),
    Job("loss not decreasing (lr 0)", "photos", {**PHOTO_RECIPE, contract.HP_LR: "0"}, "LossNotDecreasing"),
    Job("overfit (random labels)", "random-labels", PHOTO_RECIPE, planted="Overfit"),
    # Fewer steps: the planted delay sleeps 4x the longest recent step, ~25 s a batch on 2 CPUs.
    Job(
        "slow loader (300 ms a batch)",
        "photos",
        {
            **PHOTO_RECIPE,
            contract.HP_INJECT_LOADER_DELAY_MS: "300",
            contract.HP_EPOCHS: "2",
            contract.HP_MIN_STEPS: "16",
        },
        planted="CPUBottleneck",
    ),
)


def write_new_photos(root: Path, per_class: int = 30, size: int = 64) -> None:
    """Crops of two photographs that no other benchmark or demo uses, as a new user's first upload."""
    import skimage.data

    folder = Path(skimage.data.__file__).parent
    rng = np.random.default_rng(1)
    for label, name in NEW_PHOTOS.items():
        photo = Image.open(folder / name).convert("RGB")
        width, height = photo.size
        for n in range(per_class):
            side = int(min(width, height) * rng.uniform(*demo_data.PHOTO_CROP_SHARE))
            left, top = int(rng.integers(0, width - side + 1)), int(rng.integers(0, height - side + 1))
            crop = photo.crop((left, top, left + side, top + side)).resize((size, size))
            (root / label).mkdir(parents=True, exist_ok=True)
            crop.save(root / label / f"crop-{n:03d}.jpg", format="JPEG", quality=90)


def write_random_labels(source: Path, root: Path) -> None:
    """Every image of `source` in a class drawn at random: nothing to learn, everything to memorise."""
    labels = sorted(p.name for p in source.iterdir() if p.is_dir())
    draw = random.Random(0)
    for number, image in enumerate(sorted(source.glob("*/*.jpg"))):
        target = root / draw.choice(labels) / f"{number:04d}.jpg"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(image, target)


def write_data(work: Path) -> dict[str, Path]:
    shutil.rmtree(work, ignore_errors=True)
    kinds = ("first-photos", "photos", "demo-photos", "random-labels", "digits", "digits-part")
    data = {name: work / name for name in kinds}
    write_new_photos(data["first-photos"])
    demo_data.write_photos(data["demo-photos"], per_class=12, size=64, classes=("cat", "coffee", "rocket"))
    demo_data.write_photos(data["photos"], per_class=30)
    write_random_labels(data["photos"], data["random-labels"])
    demo_data.write_digits(data["digits"])
    demo_data.write_digits(data["digits-part"])
    shutil.rmtree(data["digits-part"] / HELD_OUT_LABEL)
    return data


@dataclass
class Outcome:
    job: Job
    output: Path  # SM_OUTPUT_DATA_DIR: tensors/ and profile/
    model: Path
    top1: float
    seconds: float
    verdicts: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # policy -> rule -> result
    gradients: tuple[float, float] = (math.nan, math.nan)  # min |g|, min |g| / loss


def train(job: Job, data: Path, work: Path, threads: int, starts: dict[str, Path]) -> Outcome:
    base = work / "jobs" / job.name.replace(" ", "-").replace(",", "").replace("(", "").replace(")", "")
    env = {
        **os.environ,
        contract.BASE_DIR_ENV: str(base),
        contract.JOB_NAME_ENV: "bench-rules",
        contract.CHANNEL_ENV_PREFIX + contract.CHANNEL_TRAIN.upper(): str(data),
        "OMP_NUM_THREADS": str(threads),
    }
    hyperparameters = {
        **job.hyperparameters,
        contract.HP_NUM_WORKERS: "0",
        contract.HP_CHECKPOINT_EVERY: "0",
        contract.HP_SEED: "0",
    }
    if job.start:
        channel = work / "start" / job.name.replace(" ", "-")
        channel.mkdir(parents=True, exist_ok=True)
        with tarfile.open(channel / "model.tar.gz", "w:gz") as tar:
            for path in sorted(starts[job.start].iterdir()):
                tar.add(path, arcname=path.name)
        env[contract.CHANNEL_ENV_PREFIX + contract.CHANNEL_PRETRAINED.upper()] = str(channel)
        hyperparameters[contract.HP_PRETRAINED] = "model.tar.gz"
    flags = [part for name, value in hyperparameters.items() for part in (f"--{name}", value)]
    paths = contract.resolve_paths({contract.BASE_DIR_ENV: str(base)})
    started = time.perf_counter()
    log = base / "stdout.txt"
    if not (log.is_file() and (paths.model_dir / contract.MODEL_FILE).is_file()):  # --work keeps jobs
        done = subprocess.run(
            [sys.executable, str(ROOT / "training_image" / contract.PROGRAM), *flags],
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{job.name}: train.py exited {done.returncode}:\n{done.stderr[-3000:]}")
        log.write_text(done.stdout, encoding="utf-8")
    accuracy = [
        float(line.rsplit(":", 1)[1])
        for line in log.read_text(encoding="utf-8").splitlines()
        if f"{contract.METRIC_VAL_ACCURACY}:" in line
    ]
    seconds = time.perf_counter() - started
    print(f"{job.name}: top-1 {accuracy[-1]:.3f} in {seconds:.0f} s", file=sys.stderr, flush=True)
    return Outcome(job, paths.output_data_dir, paths.model_dir, accuracy[-1], seconds)


def checkout(revision: str, into: Path) -> Path:
    """training_image/ and contract/ of `revision`, as files under `into`."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "training_image", "contract"],
        capture_output=True,
        check=True,
    ).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def rule_check(tree: Path, outcome: Outcome, patience: int | None, out: Path) -> dict[str, dict[str, Any]]:
    """`tree`'s rule_check.py over the job's output, as the Processing job runs it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree / "training_image"), str(tree / "contract")]),
        "OMP_NUM_THREADS": "1",
    }
    extra = [] if patience is None else ["--system-rule-patience", str(patience)]
    subprocess.run(
        [
            sys.executable,
            str(tree / "training_image" / contract.RULE_CHECK_PROGRAM),
            "--input-dir",
            str(outcome.output),
            "--output-dir",
            str(out),
            "--no-report",
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    found = json.loads((out / contract.RULE_RESULTS_FILE).read_text(encoding="utf-8"))
    return {r["rule"]: r for r in found}


def gradient_measures(output: Path) -> tuple[float, float]:
    """Over every saved gradient of the job: the smallest mean |g|, and the smallest mean |g| per unit of
    error, 1 - exp(-loss) with the same step's training loss (what the managed VanishingGradient and this
    tree's compare with 1e-7)."""
    from smdebug import modes
    from smdebug.trials import create_trial

    os.environ.setdefault("SMDEBUG_TRAINING_END_DELAY_REFRESH", "0")
    trial = create_trial(str(output / contract.TENSORS_DIRNAME))
    losses = {
        step: float(np.mean(trial.tensor(name).value(step)))
        for name in trial.tensor_names(collection="losses")
        for step in trial.tensor(name).steps()
        if trial.mode(step) == modes.TRAIN
    }
    smallest, per_loss = math.inf, math.inf
    for name in trial.tensor_names(collection="gradients"):
        for step in trial.tensor(name).steps():
            value = float(trial.tensor(name).reduction_value(step, "mean", abs=True))
            smallest = min(smallest, value)
            loss = losses.get(step)
            if loss and not math.isnan(loss) and math.isfinite(value):
                per_loss = min(per_loss, value / -math.expm1(-loss))
    return smallest, per_loss


def default_blocking_rules() -> tuple[str, ...]:
    default = load_template(ROOT / "template.yaml")["Parameters"][rule_names.BLOCKING_RULES_PARAMETER][
        "Default"
    ]
    return rule_names.parse_rule_list(str(default))


def decision(outcome: Outcome, policy: str, blocking: tuple[str, ...]) -> str:
    """The gate's decision on the job's validation top-1 (MinAccuracy's default 0.5, no champion) and the
    verdicts at the stack's patience."""
    verdicts = list(outcome.verdicts[policy].values())
    said = gate.decide(outcome.top1, None, verdicts, gate.Thresholds(0.5, 0.0, blocking))  # type: ignore[arg-type]
    if said["decision"] == "accepted":
        return "registered"
    blocked = [r["rule"] for r in verdicts if r["status"] == rule_names.ISSUES and r["rule"] in blocking]
    return f"rejected ({', '.join(blocked)})" if blocked else "rejected (accuracy)"


def cell(before: dict[str, Any], after: dict[str, Any]) -> str:
    def word(result: dict[str, Any]) -> str:
        return {"NoIssuesFound": "-", "IssuesFound": "**found**", "Error": "error"}.get(result["status"], "?")

    return f"{word(before)} → {word(after)}"


def table(outcomes: list[Outcome], blocking: tuple[str, ...]) -> list[str]:
    names = rule_names.RULE_NAMES
    lines = [
        "| job | kind | top-1 | " + " | ".join(names) + " | gate before | gate after |",
        "| --- | --- | ---: | " + " | ".join("---" for _ in names) + " | --- | --- |",
    ]
    for o in outcomes:
        before, after = o.verdicts["before"], o.verdicts["after"]
        short_before, short_after = o.verdicts["before, patience 5"], o.verdicts["after, patience 5"]
        cells = []
        for name in names:
            text = cell(before[name], after[name])
            if name in rule_names.SYSTEM_RULES:
                text += f" ({cell(short_before[name], short_after[name])})"
            cells.append(text)
        kind = f"planted: {o.job.planted}" if o.job.planted else "real"
        everything = tuple(names)  # before: BlockOnRuleIssues=true blocked on every rule
        lines.append(
            f"| {o.job.name} | {kind} | {o.top1:.3f} | "
            + " | ".join(cells)
            + f" | {decision(o, 'before', everything)} | {decision(o, 'after', blocking)} |"
        )
    return lines


def gradient_table(outcomes: list[Outcome]) -> list[str]:
    lines = [
        "| job | smallest mean \\|g\\| (before: < 1e-7 fires) "
        "| smallest mean \\|g\\| / (1 - e^-loss) (after: < 1e-7 fires) |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {o.job.name} | {o.gradients[0]:.3g} | {o.gradients[1]:.3g} |" for o in outcomes]
    return lines


def summary(outcomes: list[Outcome]) -> list[str]:
    """False alarms over the real runs and planted faults caught, before and after."""
    real = [o for o in outcomes if not o.job.planted]
    planted = [o for o in outcomes if o.job.planted]
    lines = [
        "| rule | false alarms on real runs, before → after "
        "| planted faults it is meant for, caught before → after |",
        "| --- | --- | --- |",
    ]
    for name in rule_names.RULE_NAMES:
        counts = []
        for policy in ("before", "after"):
            counts.append(sum(o.verdicts[policy][name]["status"] == rule_names.ISSUES for o in real))
        meant = [o for o in planted if o.job.planted == name]
        caught = [
            sum(o.verdicts[p][name]["status"] == rule_names.ISSUES for o in meant)
            for p in ("before", "after")
        ]
        planted_text = f"{caught[0]} → {caught[1]} of {len(meant)}" if meant else "none planted"
        lines.append(f"| {name} | {counts[0]} → {counts[1]} of {len(real)} | {planted_text} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", default="2b98ec8", help="the revision whose rules are 'before'")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--jobs", nargs="*", help="only these jobs (names as in the table)")
    parser.add_argument(
        "--work",
        type=Path,
        help="keep the jobs here, and reuse those already trained (default: a temporary dir)",
    )
    parser.add_argument("--append", type=Path, help="append the section to this file (BENCHMARKS.md)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    blocking = default_blocking_rules()
    with tempfile.TemporaryDirectory(prefix="bench-rules-") as scratch:
        work = args.work or Path(scratch)
        data = write_data(work / "data")
        shutil.rmtree(work / "before", ignore_errors=True)
        shutil.rmtree(work / "checks", ignore_errors=True)
        before_tree = checkout(args.before, work / "before")
        outcomes: list[Outcome] = []
        models: dict[str, Path] = {}
        for job in JOBS:
            if (
                args.jobs
                and job.name not in args.jobs
                and job.name not in {j.start for j in JOBS if j.name in args.jobs}
            ):
                continue
            outcome = train(job, data[job.data], work, args.threads, models)
            models[job.name] = outcome.model
            for policy, tree in (("before", before_tree), ("after", ROOT)):
                for patience, suffix in ((None, ""), (SHORT_PATIENCE, f", patience {SHORT_PATIENCE}")):
                    out = (
                        work
                        / "checks"
                        / f"{len(outcomes)}-{policy}{suffix.replace(', ', '-').replace(' ', '')}"
                    )
                    outcome.verdicts[policy + suffix] = rule_check(tree, outcome, patience, out)
            outcome.gradients = gradient_measures(outcome.output)
            outcomes.append(outcome)
    load_after = os.getloadavg()[0]
    section = "\n".join(
        [
            f"## Rules against real runs and planted faults ({results.when()})",
            "",
            results.machine_line(load_before, load_after),
            "",
            f"Each cell: the rule's verdict with the rules at {args.before} → with this tree's "
            "(`-` no issue, **found** issues, error: no verdict); system rules at the stack's "
            "SystemRulePatience (1,000) "
            f"and, in brackets, at a patience of {SHORT_PATIENCE}. Gate: before, BlockOnRuleIssues=true "
            f"rejected on any finding or error; after, BlockingRules' default ({', '.join(blocking)}) blocks "
            "and the other rules warn. top-1: the job's last validation accuracy.",
            "",
            *table(outcomes, blocking),
            "",
            *summary(outcomes),
            "",
            "VanishingGradient's measure over every saved gradient of the job:",
            "",
            *gradient_table(outcomes),
            "",
        ]
    )
    results.publish(section, args.append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
