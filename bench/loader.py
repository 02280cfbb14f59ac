"""Loader throughput and resnet18 step rate: the PyTorch DataLoader against DALI, and the ceiling.

Generates JPEGs of ImageNet-like sizes (500x375 to 640x480) in a temporary directory, then measures,
side by side in one run and for each augment-load: images per second of each loader (batches moved
to the device, as training needs them), and resnet18 training steps per second fed by each loader
and by one synthetic batch already on the device (the ceiling: no loading at all). Each measurement
starts after the batches a loader can hold ready are drained (2 per DataLoader worker, DALI's queue of 2),
times at least twice as many, and runs across epoch boundaries if it needs more batches than one
epoch has, so each loader's own per-epoch start cost (DataLoader workers, DALI pipeline reset) counts;
the measurements of all loaders and the ceiling are interleaved in rounds and each figure is the median.
DALI decodes on `mixed` and augments on the GPU when one is present, on the CPU otherwise.

    .venv/bin/python bench/loader.py [--images 256 --image-size 224 --batch-size 32 --steps 20]
    quick CPU run: --images 96 --image-size 96 --batch-size 16 --workers 2 --steps 8
    add --append BENCHMARKS.md to record the result
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import repeat
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from retrain_training import (
    batching,
    data,
    loaders,
    models,
)

ROOT = Path(__file__).resolve().parent.parent

ARCH = "resnet18"
NUM_LABELS = 10
SIZES = ((500, 375), (640, 480), (480, 640), (375, 500), (500, 333), (640, 427))
TARGET_SPEEDUP = 3.6  # DALI / DataLoader step rate at augment-load 12 on one GPU (the DALI study)
TARGET_CEILING_SHARE = 0.9  # DALI within 10% of the synthetic-data step rate
TARGET_AUGMENT_LOAD = 12
SECTION = "## Data loaders: DataLoader vs DALI (bench/loader.py)"


def write_jpegs(root: Path, count: int, *, seed: int = 0) -> list[data.Sample]:
    """Photo-like JPEGs: smooth colour fields plus fine noise, so they compress like photographs."""
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(count):
        width, height = SIZES[i % len(SIZES)]
        coarse = rng.integers(0, 256, size=(height // 32 + 1, width // 32 + 1, 3), dtype=np.uint8)
        field = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC))
        noise = rng.integers(-12, 13, size=field.shape)
        pixels = np.clip(field.astype(np.int16) + noise, 0, 255).astype(np.uint8)
        key = f"class{i % NUM_LABELS}/{i:05d}.jpg"
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(root / key, quality=90)
        samples.append(data.Sample(root / key, i % NUM_LABELS, key))
    return samples


def batches(loader: batching.Loader) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless training batches, epoch after epoch."""
    epoch = 0
    while True:
        yield from loader.epoch(epoch)
        epoch += 1


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ready_batches(workers: int) -> int:
    """The most batches a loader can hold prepared before anyone asks: the DataLoader's workers keep
    prefetch_factor (2) each, DALI its prefetch queue (2). A measurement that times no more batches than
    this times a queue, not a loader (16 workers, 12 timed steps: 65,103 img/s)."""
    return max(2 * workers, 2)


def timed(
    source: Iterator[tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    device: torch.device,
    work: Callable[[torch.Tensor, torch.Tensor], None],
    warmup: int = 1,
) -> tuple[float, int]:
    """(seconds, images) for `steps` batches after `warmup` batches, each moved and given to `work`."""
    for number in range(steps + warmup):
        if number == warmup:
            synchronize(device)
            started, images = time.perf_counter(), 0
        batch, labels = next(source)
        batch = batch.to(device, non_blocking=True)
        work(batch, labels.to(device, non_blocking=True))
        if number >= warmup:
            images += batch.shape[0]
    synchronize(device)
    return time.perf_counter() - started, images


class Trainer:
    """resnet18 SGD steps as train.py takes them (AMP on CUDA)."""

    def __init__(self, device: torch.device) -> None:
        torch.manual_seed(0)
        self.device = device
        self.model = models.build_model(ARCH, NUM_LABELS).to(device).train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.use_amp = device.type == "cuda"
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.use_amp)

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast(device_type=self.device.type, dtype=torch.float16, enabled=self.use_amp):
            loss = self.loss_fn(self.model(images), labels)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()


@dataclass
class Row:
    augment_load: int
    loader_ips: dict[str, float]  # images/s per loader kind
    step_rate: dict[str, float]  # steps/s per loader kind and "synthetic"


def measure(
    samples: Sequence[data.Sample], args: argparse.Namespace, device: torch.device, kinds: Sequence[str]
) -> list[Row]:
    """Per augment-load, `args.rounds` interleaved rounds of every figure; each figure is the median,
    so load that comes and goes on shared cores hits every loader alike."""
    generator = torch.Generator().manual_seed(0)
    synthetic = (
        torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=generator).to(device),
        torch.randint(0, NUM_LABELS, (args.batch_size,), generator=generator).to(device),
    )
    rows = []
    for augment_load in args.augment_loads:
        built = {
            kind: loaders.build_loader(
                kind,
                samples,
                train=True,
                batch_size=args.batch_size,
                image_size=args.image_size,
                augment_load=augment_load,
                seed=0,
                num_workers=args.workers,
                device=device,
            )
            for kind in kinds
        }
        trainers = {kind: Trainer(device) for kind in (*kinds, "synthetic")}
        ips: dict[str, list[float]] = {kind: [] for kind in kinds}
        rates: dict[str, list[float]] = {kind: [] for kind in trainers}
        for _ in range(args.rounds):
            for kind, loader in built.items():
                # the loader's prepared queue drained first: its steady rate, not its buffer
                drained = ready_batches(args.workers) + 1
                seconds, images = timed(batches(loader), args.steps, device, lambda _i, _l: None, drained)
                ips[kind].append(images / seconds)
                seconds, _ = timed(batches(loader), args.steps, device, trainers[kind].step, drained)
                rates[kind].append(args.steps / seconds)
            seconds, _ = timed(repeat(synthetic), args.steps, device, trainers["synthetic"].step)
            rates["synthetic"].append(args.steps / seconds)
        row = Row(
            augment_load,
            {kind: statistics.median(values) for kind, values in ips.items()},
            {kind: statistics.median(values) for kind, values in rates.items()},
        )
        print(
            f"augment-load {augment_load:>2}: images/s "
            + ", ".join(f"{kind} {value:.1f}" for kind, value in row.loader_ips.items())
            + f"; {ARCH} steps/s "
            + ", ".join(f"{kind} {value:.2f}" for kind, value in row.step_rate.items()),
            flush=True,
        )
        rows.append(row)
    return rows


def machine(device: torch.device) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none"
    try:
        import nvidia.dali

        dali = str(nvidia.dali.__version__)
    except ImportError:
        dali = "not installed"
    return (
        f"CPU {cpu}, {os.cpu_count()} cores; GPU {gpu}; torch {torch.__version__}, DALI {dali}, "
        f"Python {platform.python_version()}"
    )


def ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or not denominator:
        return "n/a"
    return f"{numerator / denominator:.2f}x"


def table(rows: Sequence[Row], kinds: Sequence[str]) -> str:
    has_dali = "dali" in kinds
    lines = [
        "| augment-load | DataLoader images/s | DALI images/s | DALI/DataLoader | "
        f"{ARCH} steps/s DataLoader | DALI | synthetic | DALI/DataLoader | DALI/synthetic | "
        "DataLoader/synthetic |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        dali_ips = row.loader_ips.get("dali")
        dali_rate = row.step_rate.get("dali")
        lines.append(
            f"| {row.augment_load} | {row.loader_ips['torch']:.1f} | "
            f"{f'{dali_ips:.1f}' if has_dali and dali_ips else 'n/a'} | "
            f"{ratio(dali_ips, row.loader_ips['torch'])} | {row.step_rate['torch']:.2f} | "
            f"{f'{dali_rate:.2f}' if dali_rate else 'n/a'} | {row.step_rate['synthetic']:.2f} | "
            f"{ratio(dali_rate, row.step_rate['torch'])} | {ratio(dali_rate, row.step_rate['synthetic'])} | "
            f"{ratio(row.step_rate['torch'], row.step_rate['synthetic'])} |"
        )
    return "\n".join(lines)


def verdict(rows: Sequence[Row], device: torch.device) -> str:
    """The GPU targets, judged only where they apply (one GPU, DALI present, augment-load 12 measured)."""
    target = next((r for r in rows if r.augment_load == TARGET_AUGMENT_LOAD), None)
    if device.type != "cuda":
        return (
            f"Targets (DALI >= {TARGET_SPEEDUP}x the DataLoader step rate at augment-load "
            f"{TARGET_AUGMENT_LOAD}, within {1 - TARGET_CEILING_SHARE:.0%} of the synthetic ceiling) apply "
            "to one GPU; this run had none, so they were not evaluated."
        )
    if target is None or "dali" not in target.step_rate:
        return f"Targets not evaluated: augment-load {TARGET_AUGMENT_LOAD} with DALI was not measured."
    speedup = target.step_rate["dali"] / target.step_rate["torch"]
    share = target.step_rate["dali"] / target.step_rate["synthetic"]
    return (
        f"Targets at augment-load {TARGET_AUGMENT_LOAD}: DALI/DataLoader {speedup:.2f}x "
        f"({'met' if speedup >= TARGET_SPEEDUP else 'NOT met'}, target {TARGET_SPEEDUP}x); "
        f"DALI/synthetic {share:.0%} ({'met' if share >= TARGET_CEILING_SHARE else 'NOT met'}, "
        f"target {TARGET_CEILING_SHARE:.0%})."
    )


def report(
    rows: Sequence[Row],
    args: argparse.Namespace,
    device: torch.device,
    kinds: Sequence[str],
    load: tuple[float, float],
) -> str:
    command = shlex.join([".venv/bin/python", "bench/loader.py", *sys.argv[1:]])
    return "\n".join(
        [
            f"### Loader and {ARCH} step rate ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, device {device.type})",
            "",
            f"Machine: {machine(device)}; 1-minute load average {load[0]:.1f} at the start and "
            f"{load[1]:.1f} at the end (other processes share these cores: absolute rates vary, the ratios "
            "within one run are the figures to compare).",
            f"Command: `{command}`.",
            f"{args.images} generated JPEGs of 500x375 to 640x480, {NUM_LABELS} labels, image-size "
            f"{args.image_size}, batch {args.batch_size}, {args.workers} DataLoader workers / DALI threads. "
            f"Each figure: median of {args.rounds} interleaved rounds of {args.steps} timed batches after "
            f"{ready_batches(args.workers) + 1} warm-up batches (the loaders' prepared queue drained).",
            "",
            table(rows, kinds),
            "",
            verdict(rows, device),
            "",
        ]
    )


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256, help="JPEGs to generate")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="timed batches per measurement (default: 20, or twice the ready ones)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved measurements per figure (median)")
    parser.add_argument(
        "--augment-loads",
        type=lambda text: [int(v) for v in text.split(",")],
        default=[1, 4, 8, 12],
        help="comma-separated augment-load values",
    )
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", default="auto", help="auto (cuda when present), cpu or cuda")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the JPEGs (a temp dir)")
    parser.add_argument("--append", type=Path, default=None, help="append the result to this markdown file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = get_args_parser().parse_args(argv)
    if args.images < 2 * args.batch_size:
        raise SystemExit(f"--images {args.images} must be at least twice --batch-size {args.batch_size}")
    if args.steps is None:
        args.steps = max(20, 2 * ready_batches(args.workers))
    if args.steps < 2 * ready_batches(args.workers):
        raise SystemExit(
            f"--steps {args.steps} must be at least {2 * ready_batches(args.workers)}, twice the batches "
            f"{args.workers} workers hold ready, or the figure times their queue, not the loader"
        )
    name = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device
    device = torch.device("cpu" if name == "auto" else name)
    try:
        import nvidia.dali  # noqa: F401

        kinds: tuple[str, ...] = ("torch", "dali")
    except ImportError:
        print("DALI is not installed: measuring the DataLoader only", file=sys.stderr)
        kinds = ("torch",)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        samples = write_jpegs(Path(tmp), args.images)
        load_before = os.getloadavg()[0]
        rows = measure(samples, args, device, kinds)
    text = report(rows, args, device, kinds, (load_before, os.getloadavg()[0]))
    print(text)
    if args.append is not None:
        existing = args.append.read_text(encoding="utf-8") if args.append.exists() else ""
        with args.append.open("a", encoding="utf-8") as out:
            out.write(("" if SECTION in existing else f"\n{SECTION}\n") + "\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
