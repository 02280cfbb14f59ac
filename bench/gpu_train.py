"""train.py's throughput on a GPU against the GPU's own ceiling, made for one call on a lent GPU.

Each job is train.py end to end (a subprocess as SageMaker runs it: bench.training_job; debug hook off,
one epoch of --job-steps steps over the written JPEGs, repeated), and its rate is its steady state: the
images per second between its step --warmup-steps and its last, from the timestamps its profiler writes
after every step (profile/steps.jsonl), so neither start-up, cuDNN's autotuning, compilation nor a loader
queue that starts empty counts. Beside each model's jobs, the synthetic ceiling: the same model, batch,
precision, layout and compile on one batch already on the GPU (no loading at all). Recipes:
  baseline      float16 with its loss scaler, NCHW, the loader in the step's thread;
  best          amp-dtype auto (bfloat16 on sm80+), channels-last + cuDNN autotuning, 2 batches prepared by
                a loader thread, DALI fed by --feed-processes worker processes;
  best+compile  best, the model compiled (torch.compile; its compile time is the job's, not the rate's).
Each row is appended to --out as soon as its job ends (a time-out leaves the rows before it); a job over
--job-timeout seconds, or one that fails, is a row that says so and the matrix goes on. Rows on the
default instance's 4 CPUs run under `taskset` and say which CPUs the job's threads were seen on (`ps -L
-o psr`, sampled while it runs: DALI pins its threads).

--quick (the lent GPU's first call, under 4 minutes on an H100/H200): ResNet-50 and EfficientNet-Lite0,
augment-load 1, both loaders, the three recipes, batch 256. The default matrix adds ResNet-18,
augment-load 12 and the 4-CPU rows. --smoke: a minute on a CPU, the tool's own check.

On the GPU machine (no project venv: the repository's folders on PYTHONPATH, DALI from
../shared/gpu/dali_on_device.sh, EfficientNet-Lite's architecture copied from the venv into an ignored
folder the call carries, e.g. .device/site/efficientnet_lite_pytorch):
    PYTHONPATH=training_image:contract:.:.device/site:$PYTHONPATH python3 -m bench.gpu_train --quick \
        --out $OUT/gpu_train.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench import training_job
from bench.loader import write_jpegs
from retrain_contract import container as contract
from retrain_training import models, profiler

BEST = {
    contract.HP_AMP_DTYPE: contract.AMP_DTYPE_AUTO,
    contract.HP_CHANNELS_LAST: "true",
    contract.HP_PREFETCH_BATCHES: "2",
}
RECIPES: dict[str, dict[str, str]] = {
    "baseline": {contract.HP_AMP_DTYPE: "float16", contract.HP_CHANNELS_LAST: "false"},
    "best": BEST,
    "best+compile": {**BEST, contract.HP_COMPILE: "true"},
}
FIXED_COST = re.compile(r"job phases \(s\): .*; fixed cost ([\d.]+) of ([\d.]+)")
DEFAULT_INSTANCE_CPUS = 4  # ml.g5.xlarge, the stack's default training instance


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
    images_per_second: float = float("nan")
    wall_s: float = float("nan")
    fixed_s: float = float("nan")  # train.py's phases besides its training steps
    cpus_seen: str = ""  # the CPUs the job's threads ran on (4-CPU rows)
    failure: str = ""  # why the job gave no rate

    @property
    def row(self) -> str:
        c = self.case
        rate = f"{self.images_per_second:,.0f}" if not self.failure else f"failed: {self.failure}"
        return (
            f"| {c.model} | {c.augment_load} | {c.loader} | {c.recipe} | {c.cpus}"
            f"{f' (seen on {self.cpus_seen})' if self.cpus_seen else ''} | {rate} | {self.wall_s:.0f} "
            f"| {self.fixed_s:.1f} |"
        )


@dataclass
class Table:
    """The section, written to `out` as each row arrives."""

    out: Path | None
    lines: list[str] = field(default_factory=list)

    def add(self, *lines: str) -> None:
        self.lines += lines
        for line in lines:
            print(line, flush=True)
        if self.out:
            self.out.write_text("\n".join(self.lines) + "\n", encoding="utf-8")


def steady_rate(profile_dir: Path, batch_size: int, warmup: int) -> float:
    """Images per second between step `warmup` and the job's last, from the profiler's step timestamps."""
    steps = [
        json.loads(line) for line in (profile_dir / profiler.STEPS_FILE).read_text().splitlines() if line
    ]
    timed = [s["timestamp"] for s in steps if s["step"] >= warmup]
    if len(timed) < 2 or timed[-1] <= timed[0]:
        raise RuntimeError(f"{len(steps)} steps timed, fewer than 2 after warm-up step {warmup}")
    return (len(timed) - 1) * batch_size / (timed[-1] - timed[0])


def watch_cpus(seen: set[int]) -> training_job.Watch:
    """What records the processors `ps -L -o psr` shows the job's threads on, every 0.5 s while it runs."""

    def watch(process: subprocess.Popen[str]) -> None:
        while process.poll() is None:
            time.sleep(0.5)
            listed = subprocess.run(
                ["ps", "-L", "-o", "psr=", "--pid", str(process.pid), "--ppid", str(process.pid)],
                capture_output=True,
                text=True,
                check=False,
            )
            seen.update(int(word) for word in listed.stdout.split() if word.isdigit())

    return watch


def train(case: Case, data: Path, work: Path, args: argparse.Namespace) -> Result:
    hyperparameters = {
        contract.HP_MODEL: case.model,
        contract.HP_EPOCHS: "1",
        contract.HP_MIN_STEPS: str(args.job_steps),
        contract.HP_BATCH_SIZE: str(args.batch_size),
        contract.HP_IMAGE_SIZE: str(args.image_size),
        contract.HP_AUGMENT_LOAD: str(case.augment_load),
        contract.HP_LOADER: case.loader,
        contract.HP_NUM_WORKERS: str(contract.NUM_WORKERS_AUTO),
        contract.HP_DALI_FEED_PROCESSES: str(args.feed_processes if case.recipe != "baseline" else 0),
        contract.HP_CHECKPOINT_EVERY: "0",
        contract.HP_DEBUG_HOOK: "false",
        contract.HP_VAL_FRACTION: "0.05",
        **RECIPES[case.recipe],
        **dict(setting.split("=", 1) for setting in args.set),
    }
    job = training_job.TrainingJob(
        Path(tempfile.mkdtemp(prefix="job-", dir=work)),
        hyperparameters,
        {contract.CHANNEL_TRAIN: data},
        name="bench-gpu-train",
        cpus=case.cpus,
        max_runtime_s=args.job_timeout,
    )
    seen: set[int] = set()
    done = training_job.run(job, watch_cpus(seen))
    result = Result(case, wall_s=done.seconds)
    result.cpus_seen = ",".join(str(c) for c in sorted(seen)) if job.pinned else ""
    if done.timed_out:
        result.failure = f"over --job-timeout {args.job_timeout} s"
    elif done.returncode != 0:
        last = [line for line in done.stderr.splitlines() if line.strip()][-1:] or ["no output"]
        result.failure = f"exit {done.returncode}: {last[0][:200]}"
    else:
        try:
            result.images_per_second = steady_rate(job.paths.profile_dir, args.batch_size, args.warmup_steps)
        except (OSError, RuntimeError) as error:
            result.failure = str(error)
    fixed = [float(m.group(1)) for m in map(FIXED_COST.search, done.stderr.splitlines()) if m]
    result.fixed_s = fixed[-1] if fixed else float("nan")
    return result


def ceiling(model_name: str, recipe: str, args: argparse.Namespace, device: torch.device) -> float:
    """Images per second of the model's training steps on one batch already on the device, with the
    recipe's precision, memory format and compile and train.py's optimizer: the rate no loader can beat."""
    from retrain_training import train as trainer

    torch.manual_seed(0)
    settings = RECIPES[recipe]
    channels_last = settings.get(contract.HP_CHANNELS_LAST) == "true"
    dtype = trainer.resolve_amp_dtype(settings[contract.HP_AMP_DTYPE], device)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    torch.backends.cudnn.benchmark = channels_last and device.type == "cuda"
    model = models.build_model(model_name, 10).to(device).train()
    model = model.to(memory_format=memory_format)  # type: ignore[call-overload]
    if settings.get(contract.HP_COMPILE) == "true":
        model.compile()
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

    for _ in range(args.warmup_steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(args.ceiling_steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return args.ceiling_steps * args.batch_size / (time.perf_counter() - started)


def cases(args: argparse.Namespace) -> list[Case]:
    """Every model and augment-load with both loaders and every recipe on all CPUs, and (unless --quick)
    the best recipe at the highest augment-load on the default instance's 4 CPUs."""
    everything = os.cpu_count() or 1
    found = [
        Case(model, load, loader, recipe, everything)
        for model in args.models
        for load in args.augment_loads
        for recipe in args.recipes
        for loader in args.loaders
    ]
    if not args.quick and everything > DEFAULT_INSTANCE_CPUS:
        found += [
            Case(model, max(args.augment_loads), loader, "best", DEFAULT_INSTANCE_CPUS)
            for model in args.models
            for loader in args.loaders
        ]
    if args.smoke and everything > 1:  # the pinning and its check, on one CPU
        found += [Case(args.models[0], 1, loader, "best", 1) for loader in args.loaders]
    return found


def summary(results: list[Result], ceilings: dict[tuple[str, str], float]) -> list[str]:
    """Each job's rate as a share of its model's ceiling, and DALI against the DataLoader."""
    lines = []
    for r in results:
        if not r.failure:
            share = r.images_per_second / ceilings[(r.case.model, r.case.recipe)]
            lines.append(f"{r.case.model} {r.case.loader} {r.case.recipe}: {share:.0%} of its ceiling")
    pairs: dict[tuple[str, int, str, int], dict[str, Result]] = {}
    for r in results:
        if not r.failure:
            pairs.setdefault((r.case.model, r.case.augment_load, r.case.recipe, r.case.cpus), {})[
                r.case.loader
            ] = r
    ratios = [
        found["dali"].images_per_second / found["torch"].images_per_second
        for found in pairs.values()
        if {"dali", "torch"} <= set(found)
    ]
    if ratios:
        lines.append(f"DALI / DataLoader, median over the pairs: {statistics.median(ratios):.2f}x")
    return lines


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
    parser.add_argument("--images", type=int, default=2048, help="JPEGs written (the jobs repeat them)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--job-steps", type=int, default=120, help="training steps of each job")
    parser.add_argument("--warmup-steps", type=int, default=40, help="steps left out of a rate")
    parser.add_argument("--ceiling-steps", type=int, default=40)
    parser.add_argument("--feed-processes", type=int, default=4, help="DALI's feed processes (best)")
    parser.add_argument("--job-timeout", type=float, default=90.0, help="seconds a job may take")
    parser.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="more hyperparameters")
    parser.add_argument("--quick", action="store_true", help="the lent GPU's first call: under 4 minutes")
    parser.add_argument("--smoke", action="store_true", help="a minute on a CPU: the tool's own check")
    parser.add_argument("--out", type=Path, help="write the section here, row by row (and print it)")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.augment_loads = ["resnet50", contract.MODEL_EFFICIENTNET_LITE0], [1]
    if args.smoke:
        args.models, args.augment_loads, args.images, args.recipes = (
            ["resnet18"],
            [1],
            48,
            ["baseline", "best"],
        )
        args.image_size, args.batch_size, args.job_steps, args.warmup_steps = 32, 8, 12, 4
        args.ceiling_steps, args.feed_processes = 4, 1
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "no GPU (CPU)"
    table = Table(args.out)
    table.add(
        "## train.py on a GPU against its ceiling (bench/gpu_train.py, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"Machine: {gpu}, {os.cpu_count()} CPUs, torch {torch.__version__}; {args.images} JPEGs of "
        f"500x375-640x480, {args.image_size} px, batch {args.batch_size}, {args.job_steps} steps a job, the "
        f"rate after step {args.warmup_steps}. Command: `python3 -m bench.gpu_train "
        + " ".join(argv if argv is not None else sys.argv[1:])
        + "`.",
        "",
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-gpu-train-") as scratch:
        work = Path(scratch)
        write_jpegs(work / "data", args.images)
        table.add("| model | recipe | synthetic ceiling img/s |", "| --- | --- | ---: |")
        ceilings = {}
        for model in args.models:
            for recipe in args.recipes:
                try:
                    ceilings[(model, recipe)] = ceiling(model, recipe, args, device)
                    table.add(f"| {model} | {recipe} | {ceilings[(model, recipe)]:,.0f} |")
                except Exception as error:  # a row that says so; the matrix goes on
                    ceilings[(model, recipe)] = float("nan")
                    table.add(f"| {model} | {recipe} | failed: {type(error).__name__}: {str(error)[:160]} |")
        table.add(
            "",
            "| model | augment-load | loader | recipe | CPUs | img/s (steady) | wall s | fixed s |",
            "| --- | ---: | --- | --- | --- | ---: | ---: | ---: |",
        )
        results = []
        for case in cases(args):
            result = train(case, work / "data", work, args)
            results.append(result)
            table.add(result.row)
    table.add("", *summary(results, ceilings), f"{time.perf_counter() - started:.0f} s in all.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
