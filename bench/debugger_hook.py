"""Cost of the Debugger hook (and the system profiler) per training step, measured side by side.

Trains the project's ResNet-18 on synthetic batches with: nothing attached; the hook at the default
debug-interval; the same hook registered the way smdebug's register_module does (a forward hook on
every layer); the hook saving every step (worst case); the system profiler alone. The variants
take turns in short blocks so that machine noise hits them alike; each one's mean step time is
compared with the baseline's. Step time is this process's CPU time (all its threads, the hook's
and the profiler's included), which other work on a shared machine disturbs far less than wall
time; with one torch thread it equals the step's compute.

    .venv/bin/python bench/debugger_hook.py [--steps 300 --block 10 --image-size 32 --batch-size 16]
    add --append BENCHMARKS.md to record the result
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from retrain_contract import container as contract
from retrain_training import (
    debugger,
    models,
    profiler,
)

ROOT = Path(__file__).resolve().parent.parent

VARIANTS = ("baseline", "hook-default-interval", "hook-smdebug-registration", "hook-every-step", "profiler")


class Runner:
    """One variant: its own model, optimizer and attachment, stepped a block at a time."""

    def __init__(self, variant: str, image_size: int, batch_size: int, workdir: Path) -> None:
        torch.manual_seed(0)
        self.variant = variant
        self.model = models.build_model("resnet18", num_classes=4)
        self.loss_fn = nn.CrossEntropyLoss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.images = torch.randn(batch_size, 3, image_size, image_size)
        self.labels = torch.randint(0, 4, (batch_size,))
        self.step_number = 0
        self.seconds: list[float] = []
        paths = contract.resolve_paths({contract.BASE_DIR_ENV: str(workdir)})
        self.hook = None
        self.profiler: profiler.SystemProfiler | None = None
        if variant == "hook-smdebug-registration":  # smdebug's register_module: hooks on every layer
            self.hook = debugger.build_hook(paths.tensors_dir, debugger.DEFAULT_INTERVAL)
            self.hook.register_module(self.model)
            self.hook.register_loss(self.loss_fn)
        elif variant.startswith("hook"):
            interval = debugger.DEFAULT_INTERVAL if variant == "hook-default-interval" else 1
            args = argparse.Namespace(debug_hook=True, debug_interval=interval)
            self.hook = debugger.attach(self.model, self.loss_fn, args, paths)
        elif variant == "profiler":
            self.profiler = profiler.SystemProfiler(paths.profile_dir).__enter__()

    def block(self, steps: int, *, record: bool = True) -> None:
        for _ in range(steps):
            start = time.process_time()
            loss = self.loss_fn(self.model(self.images), self.labels)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            elapsed = time.process_time() - start
            if self.profiler is not None:
                self.profiler.step(self.step_number, 0.0, elapsed)
            if record:
                self.seconds.append(time.process_time() - start)
            self.step_number += 1

    def close(self) -> None:
        debugger.close(self.hook)
        if self.profiler is not None:
            self.profiler.__exit__(None, None, None)


def measure(steps: int, block: int, image_size: int, batch_size: int) -> dict[str, float]:
    """Mean seconds per step of each variant; blocks of `block` steps alternate between variants so
    that load from elsewhere on the machine falls on all of them alike. The mean (not the median)
    keeps the hook's save steps, one in debug-interval, in the figure."""
    with tempfile.TemporaryDirectory(prefix="bench-debugger-") as scratch:
        runners = [Runner(v, image_size, batch_size, Path(scratch) / v) for v in VARIANTS]
        for runner in runners:
            runner.block(3, record=False)  # warm-up; the hook's step 0 save happens here
        order = random.Random(0)
        for number in range(steps // block):
            for runner in order.sample(runners, len(runners)):  # no variant always runs first
                runner.block(block)
            if number % 5 == 4:
                done = (number + 1) * block
                print(
                    f"{done} steps: "
                    + ", ".join(f"{r.variant} {1000 * statistics.fmean(r.seconds):.1f} ms" for r in runners),
                    file=sys.stderr,
                )
        for runner in runners:
            runner.close()
        return {r.variant: statistics.fmean(r.seconds) for r in runners}


def render(result: dict[str, float], args: argparse.Namespace) -> str:
    base = result["baseline"]
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, no GPU"
    lines = [
        "",
        f"## Debugger hook cost ({time.strftime('%Y-%m-%d')})",
        "",
        f"Machine: {machine}. Command: `.venv/bin/python bench/debugger_hook.py --steps {args.steps} "
        f"--block {args.block} --image-size {args.image_size} --batch-size {args.batch_size} "
        f"--threads {args.threads}` (ResNet-18 training steps on synthetic batches; the variants take "
        f"turns in blocks of {args.block} steps, in a shuffled order; mean step time over {args.steps} "
        "steps each).",
        "",
        "| variant | CPU ms/step | vs baseline |",
        "| --- | --- | --- |",
        *[f"| {v} | {result[v] * 1000:.1f} | {100 * (result[v] / base - 1):+.1f}% |" for v in VARIANTS],
        "",
        f"Target: the hook at the default interval ({debugger.DEFAULT_INTERVAL} steps) costs at most 3% "
        "of step time.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300, help="measured steps per variant")
    parser.add_argument("--block", type=int, default=10, help="steps per variant before switching")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)"
    )
    parser.add_argument("--append", type=Path, default=None, help="append the markdown table to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = measure(args.steps, args.block, args.image_size, args.batch_size)
    print(json.dumps({v: round(t * 1000, 2) for v, t in result.items()}))
    text = render(result, args)
    print(text)
    if args.append is not None:
        with args.append.open("a", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
