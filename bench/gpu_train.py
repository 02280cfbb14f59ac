"""train.py's throughput on a GPU against the GPU's own ceiling, in one go on the GPU machine.

For each model and augment-load: train.py end to end (a subprocess as SageMaker runs it, 2 epochs, debug
hook off) with the DataLoader and with DALI, with today's recipe (`baseline`: float16 AMP with a loss
scaler, NCHW, the loader in the step's thread) and with the recipe behind the new hyperparameters
(`new`: bfloat16, channels-last + cuDNN autotuning, 2 batches prepared by a loader thread, DALI fed by 2
worker processes; `--set NAME=VALUE` adds any hyperparameter to every job, e.g. dali-decode=cpu), on all the
machine's CPUs and on the default instance's 4 (`taskset`); next to the synthetic ceiling of the same
model, batch and recipe (steps on one batch already on the GPU: no loading at all). Throughput is the
second epoch's images per second from train.py's own metric line (its first epoch carries start-up and
cuDNN's autotuning; each epoch's loader queue starts empty, so nothing prepared during the first epoch
is counted); wall is the process's start to end, and fixed is what train.py's phase line counts besides
its training steps (start-up, data, model, loaders, the first step, validation, checkpoints, model
write). The synthetic ceiling times 40 steps after 15 warm-up steps. The default matrix is 30 jobs
(about 15 s each on an H100/H200: expect 8-9 minutes); --models narrows it.

Photo-like JPEGs of ImageNet sizes (500x375 to 640x480) are written first (bench.loader.write_jpegs).

On the GPU machine (no project venv: the repository's folders on PYTHONPATH, DALI from
../shared/gpu/dali_on_device.sh, and EfficientNet-Lite's architecture, a pure-Python package, copied from
the venv into an ignored folder the call carries, e.g. .device/site/efficientnet_lite_pytorch):
    PYTHONPATH=training_image:contract:.:.device/site:$PYTHONPATH python3 -m bench.gpu_train \
        --out $OUT/gpu_train.md
Quick check anywhere (CPU, DALI's CPU pipeline): python -m bench.gpu_train --quick
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.loader import write_jpegs
from retrain_contract import container as contract
from retrain_training import models

ROOT = Path(__file__).resolve().parent.parent
RECIPES = {
    "baseline": {contract.HP_AMP_DTYPE: "float16", contract.HP_CHANNELS_LAST: "false"},
    "new": {
        contract.HP_AMP_DTYPE: "bfloat16",
        contract.HP_CHANNELS_LAST: "true",
        contract.HP_PREFETCH_BATCHES: "2",
        contract.HP_DALI_FEED_PROCESSES: "2",
    },
}
FIXED_COST = re.compile(r"job phases \(s\): .*; fixed cost ([\d.]+) of ([\d.]+)")
IMAGES_PER_SECOND = re.compile(r"epoch=(\d+) .*" + contract.metric_regex(contract.METRIC_IMAGES_PER_SECOND))
DEFAULT_INSTANCE_CPUS = 4  # ml.g5.xlarge, the stack's default training instance
CEILING_WARMUP, CEILING_STEPS = 15, 40


@dataclass(frozen=True)
class Case:
    model: str
    augment_load: int
    loader: str
    recipe: str
    cpus: int


@dataclass
class Result:
    case: Case
    images_per_second: float
    wall_s: float
    fixed_s: float  # train.py's phases besides its training steps


def pythonpath() -> str:
    """The repository's code for the subprocesses, whatever installs the machine has."""
    ours = [str(ROOT / "training_image"), str(ROOT / "contract"), str(ROOT)]
    return os.pathsep.join([*ours, *filter(None, [os.environ.get("PYTHONPATH")])])


def train(case: Case, data: Path, work: Path, args: argparse.Namespace) -> Result:
    base = Path(tempfile.mkdtemp(prefix="job-", dir=work))
    hyperparameters = {
        contract.HP_MODEL: case.model,
        contract.HP_EPOCHS: "2",
        contract.HP_BATCH_SIZE: str(args.batch_size),
        contract.HP_IMAGE_SIZE: str(args.image_size),
        contract.HP_AUGMENT_LOAD: str(case.augment_load),
        contract.HP_LOADER: case.loader,
        contract.HP_NUM_WORKERS: str(case.cpus),
        contract.HP_CHECKPOINT_EVERY: "0",
        contract.HP_DEBUG_HOOK: "false",
        contract.HP_VAL_FRACTION: "0.05",
        **RECIPES[case.recipe],
        **dict(setting.split("=", 1) for setting in args.set),
    }
    flags = [part for name, value in hyperparameters.items() for part in (f"--{name}", value)]
    command = [sys.executable, str(ROOT / "training_image" / contract.PROGRAM), *flags]
    if case.cpus < (os.cpu_count() or 1):
        command = ["taskset", "-c", f"0-{case.cpus - 1}", *command]
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath(),
        contract.BASE_DIR_ENV: str(base),
        contract.JOB_NAME_ENV: "bench-gpu-train",
        contract.CHANNEL_ENV_PREFIX + contract.CHANNEL_TRAIN.upper(): str(data),
    }
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{case}: train.py exited {done.returncode}:\n{done.stderr[-3000:]}")
    rates = {
        int(m.group(1)): float(m.group(2))
        for m in map(IMAGES_PER_SECOND.search, done.stdout.splitlines())
        if m
    }
    fixed = [float(m.group(1)) for m in map(FIXED_COST.search, done.stderr.splitlines()) if m]
    result = Result(case, rates[max(rates)], wall, fixed[-1])
    print(
        f"{case}: {result.images_per_second:.0f} img/s, {wall:.0f} s, fixed {result.fixed_s:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return result


def ceiling(model_name: str, recipe: str, args: argparse.Namespace, device: torch.device) -> float:
    """Images per second of the model's training steps on one batch already on the device, with the
    recipe's precision and memory format and train.py's optimizer: the rate no loader can beat."""
    torch.manual_seed(0)
    channels_last = RECIPES[recipe].get(contract.HP_CHANNELS_LAST) == "true"
    dtype = getattr(torch, RECIPES[recipe][contract.HP_AMP_DTYPE])
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    torch.backends.cudnn.benchmark = channels_last and device.type == "cuda"
    model = models.build_model(model_name, 10).to(device).train()
    model = model.to(memory_format=memory_format)  # type: ignore[call-overload]
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    images = images.to(memory_format=memory_format)
    labels = torch.randint(0, 10, (args.batch_size,), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    use_amp = device.type == "cuda"
    scaler = torch.amp.GradScaler(device.type, enabled=use_amp and dtype == torch.float16)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        with torch.autocast(device_type=device.type, dtype=dtype, enabled=use_amp):
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    rate = args.steps * args.batch_size / (time.perf_counter() - started)
    print(f"{model_name} {recipe} ceiling: {rate:.0f} img/s", file=sys.stderr, flush=True)
    return rate


def cases(args: argparse.Namespace) -> list[Case]:
    """Every model and augment-load with both loaders and both recipes on all CPUs, and the new recipe
    at the highest augment-load on the default instance's CPUs (the DALI study's comparison)."""
    everything = os.cpu_count() or 1
    found = [
        Case(model, load, loader, recipe, everything)
        for model in args.models
        for load in args.augment_loads
        for loader in args.loaders
        for recipe in args.recipes
    ]
    if everything > DEFAULT_INSTANCE_CPUS:
        found += [
            Case(model, max(args.augment_loads), loader, "new", DEFAULT_INSTANCE_CPUS)
            for model in args.models
            for loader in args.loaders
        ]
    return found


def table(results: list[Result], ceilings: dict[tuple[str, str], float]) -> list[str]:
    lines = [
        "| model | augment-load | recipe | CPUs | DataLoader img/s (wall s, fixed s) "
        "| DALI img/s (wall s, fixed s) | synthetic img/s | DALI / DataLoader | DALI / synthetic |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    keys = sorted({(r.case.model, r.case.augment_load, r.case.recipe, r.case.cpus) for r in results})
    for model, load, recipe, cpus in keys:
        found = {
            r.case.loader: r
            for r in results
            if (r.case.model, r.case.augment_load, r.case.recipe, r.case.cpus) == (model, load, recipe, cpus)
        }
        torch_r, dali_r = found.get("torch"), found.get("dali")
        ceiling_rate = ceilings[(model, recipe)]

        def cell(r: Result | None) -> str:
            return f"{r.images_per_second:,.0f} ({r.wall_s:.0f}, {r.fixed_s:.0f})" if r else "—"

        ratio = f"{dali_r.images_per_second / torch_r.images_per_second:.2f}x" if dali_r and torch_r else "—"
        share = f"{dali_r.images_per_second / ceiling_rate:.0%}" if dali_r else "—"
        lines.append(
            f"| {model} | {load} | {recipe} | {cpus} | {cell(torch_r)} | {cell(dali_r)} | "
            f"{ceiling_rate:,.0f} | {ratio} | {share} |"
        )
    return lines


def median_share(results: list[Result], ceilings: dict[tuple[str, str], float]) -> str:
    shares = [
        r.images_per_second / ceilings[(r.case.model, r.case.recipe)]
        for r in results
        if r.case.loader == "dali"
    ]
    return f"Median DALI / synthetic over the rows: {statistics.median(shares):.0%}." if shares else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models", nargs="+", default=["resnet18", "resnet50", contract.MODEL_EFFICIENTNET_LITE0]
    )
    parser.add_argument("--augment-loads", nargs="+", type=int, default=[1, 12])
    parser.add_argument("--loaders", nargs="+", default=["torch", "dali"])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--images", type=int, default=2048, help="JPEGs written (an epoch's images)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=CEILING_WARMUP)
    parser.add_argument("--steps", type=int, default=CEILING_STEPS)
    parser.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="more hyperparameters")
    parser.add_argument("--quick", action="store_true", help="a minute on a CPU: the tool's own check")
    parser.add_argument("--out", type=Path, help="write the section here (and print it)")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.augment_loads, args.images = ["resnet18"], [1], 48
        args.image_size, args.batch_size, args.warmup, args.steps = 32, 8, 1, 2
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-gpu-train-") as scratch:
        work = Path(scratch)
        write_jpegs(work / "data", args.images)
        ceilings = {(m, r): ceiling(m, r, args, device) for m in args.models for r in RECIPES}
        results = [train(case, work / "data", work, args) for case in cases(args)]
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "no GPU (CPU)"
    section = "\n".join(
        [
            f"## train.py on a GPU against its ceiling (bench/gpu_train.py, {time.strftime('%Y-%m-%d')})",
            "",
            f"Machine: {gpu}, {os.cpu_count()} CPUs, torch {torch.__version__}; {args.images} JPEGs of "
            f"500x375-640x480, {args.image_size} px, batch {args.batch_size}, 2 epochs, second epoch's "
            f"images/s; {time.perf_counter() - started:.0f} s in all. Command: `python3 -m bench.gpu_train "
            + " ".join(argv if argv is not None else sys.argv[1:])
            + "`.",
            "",
            *table(results, ceilings),
            "",
            median_share(results, ceilings),
        ]
    )
    print(section)
    if args.out:
        args.out.write_text(section + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
