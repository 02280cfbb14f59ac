"""Checkpoint cost: write and load time per model, the share of training time spent checkpointing at
the default interval, and the time from a restart to the first resumed step.

Each model's checkpoint is the real one train.py writes (weights, SGD momentum, scheduler, scaler,
RNG and loader state) through checkpoints.CheckpointStore (temporary file, fsync, rename, fsync of
the directory, sha256 trailer), synchronously and in the background (what train.py does: the step
waits only for the snapshot). The share is blocked / (interval x step + blocked) with the step time
of that model measured here, side by side, at the given image and batch size. The restart time is
train.py's wall time from process start to its first optimizer step, fresh and resumed.

    .venv/bin/python bench/checkpoint.py [--image-size 112 --batch-size 16 --repeats 3 --dir /tmp]
    add --append BENCHMARKS.md to record the result
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from bench import training_job
from retrain_contract import container as contract
from retrain_training import (
    checkpoints,
    engine,
    loaders,
    models,
    train,
)

DEFAULT_INTERVAL = int(str(contract.HYPERPARAMETER_DEFAULTS[contract.HP_CHECKPOINT_EVERY]))
NUM_CLASSES = 10


def measure_model(
    arch: str, *, image_size: int, batch_size: int, repeats: int, directory: Path
) -> dict[str, float]:
    args = train.get_args_parser().parse_args(["--model", arch, "--image-size", str(image_size)])
    model = models.build_model(arch, NUM_CLASSES)
    optimizer = train.build_optimizer(args, model)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=1000)
    optimization = engine.Optimization(optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False))
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(batch_size, 3, image_size, image_size)
    labels = torch.randint(0, NUM_CLASSES, (batch_size,))
    step_seconds = []
    model.train()
    for i in range(repeats + 1):
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimizer.step()
        scheduler.step()
        if i:  # the first step warms up allocators and creates the momentum buffers
            step_seconds.append(time.perf_counter() - started)
    loader = loaders.TorchLoader(
        [],
        train=True,
        batch_size=batch_size,
        image_size=image_size,
        augment_load=1,
        seed=0,
        num_workers=0,
        device=torch.device("cpu"),
    )
    state = train.checkpoint_state(
        args=args,
        model=model,
        optimization=optimization,
        loader=loader,
        progress=engine.Progress(0, 1, 1),
        labels=[str(i) for i in range(NUM_CLASSES)],
        order=list(range(50_000)),
    )
    store = checkpoints.CheckpointStore(directory / arch, keep=2)
    writes, blocking, loads = [], [], []
    for repeat in range(repeats):
        started = time.perf_counter()
        size = store.save(2 * repeat + 1, state).stat().st_size
        writes.append(time.perf_counter() - started)
        started = time.perf_counter()
        store.save_async(2 * repeat + 2, state)
        blocking.append(time.perf_counter() - started)
        store.wait()
        started = time.perf_counter()
        loaded = store.load_latest()
        assert loaded is not None
        model.load_state_dict(loaded[1]["model"])
        optimizer.load_state_dict(loaded[1]["optimizer"])
        loads.append(time.perf_counter() - started)
    store.close()
    shutil.rmtree(directory / arch)
    write, block, step_time = (
        statistics.median(writes),
        statistics.median(blocking),
        statistics.median(step_seconds),
    )
    return {
        "megabytes": size / 2**20,
        "write_s": write,
        "block_s": block,
        "load_s": statistics.median(loads),
        "step_s": step_time,
        "share_sync": write / (DEFAULT_INTERVAL * step_time + write),
        "share": block / (DEFAULT_INTERVAL * step_time + block),
    }


def write_images(root: Path, per_label: int = 24) -> None:
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for i in range(per_label):
            Image.fromarray(rng.integers(0, 256, (72, 96, 3), dtype=np.uint8)).save(root / label / f"{i}.jpg")


def seconds_to_first_step(base: Path, data: Path, epochs: int) -> float:
    """Wall time from starting train.py to the checkpoint after its first step (every step checkpoints)."""
    job = training_job.TrainingJob(
        base,
        {
            contract.HP_MODEL: "resnet18",
            contract.HP_EPOCHS: str(epochs),
            contract.HP_BATCH_SIZE: "8",
            contract.HP_IMAGE_SIZE: "64",
            contract.HP_CHECKPOINT_EVERY: "1",
            contract.HP_NUM_WORKERS: "0",
            contract.HP_DEBUG_HOOK: "false",
        },
        {contract.CHANNEL_TRAIN: data},
        name="bench-restart",
    )
    started = time.perf_counter()
    process = subprocess.Popen(
        job.command(), env=job.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    elapsed: float | None = None
    for line in process.stderr:
        if elapsed is None and re.search(r"writing checkpoint", line):
            elapsed = time.perf_counter() - started
            process.send_signal(signal.SIGTERM)
    process.wait(timeout=600)
    if elapsed is None:
        raise RuntimeError(f"train.py exited {process.returncode} before its first step")
    return elapsed


def measure_restart(directory: Path) -> dict[str, float]:
    data = directory / "data"
    write_images(data)
    base = directory / "job"
    fresh = seconds_to_first_step(base, data, epochs=1)  # SIGTERM after step 1 leaves its checkpoint
    resumed = seconds_to_first_step(base, data, epochs=1)  # resumes at step 1, checkpoints step 2
    return {"fresh_s": fresh, "resumed_s": resumed}


def render(results: dict[str, dict[str, float]], restart: dict[str, float], args: argparse.Namespace) -> str:
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, no GPU"
    load = os.getloadavg()[0]
    command = (
        f".venv/bin/python bench/checkpoint.py --models {' '.join(args.models)} --threads {args.threads} "
        f"--image-size {args.image_size} --batch-size "
        f"{args.batch_size} --repeats {args.repeats} --dir {args.dir}"
    )
    rows = [
        f"| {arch} | {r['megabytes']:.0f} | {r['write_s']:.2f} | {r['block_s']:.3f} | {r['load_s']:.2f} | "
        f"{r['step_s']:.2f} | {100 * r['share_sync']:.2f}% | {100 * r['share']:.2f}% | "
        f"{r['write_s'] / r['block_s']:.2f} |"
        for arch, r in results.items()
    ]
    return "\n".join(
        [
            "",
            f"## Checkpoint cost ({time.strftime('%Y-%m-%d')})",
            "",
            f"Machine: {machine}. Command: `{command}`. Checkpoint directory on {args.dir}; medians of "
            f"{args.repeats} writes/loads and training steps (SGD, batch {args.batch_size}, "
            f"{args.image_size} px, {NUM_CLASSES} classes, {args.threads} torch thread(s)). Load average "
            f"during the run: {load:.1f} (the machine is shared; all times are wall times).",
            "",
            f"| model | MiB | write s (sync) | step blocked s (background write) | load s | step s | "
            f"share at {DEFAULT_INTERVAL} steps, sync | share, background | sync / background |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
            "Restart to first step (train.py, resnet18, 64 px, batch 8, wall time from process start): fresh "
            f"{restart['fresh_s']:.1f} s, resumed from a checkpoint {restart['resumed_s']:.1f} s "
            f"(ratio {restart['resumed_s'] / restart['fresh_s']:.2f}).",
            "",
            "Target: share <= 1%. train.py writes in the background (the step waits for the CPU snapshot "
            "only); the write itself then shares the CPU with training, which this table does not "
            "charge. The share scales with step time: a GPU step is far shorter than a CPU one, so a "
            "synchronous write would cost a larger share there (not measured here: no GPU).",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=list(contract.MODELS), choices=contract.MODELS)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads")
    parser.add_argument(
        "--dir", type=Path, default=Path(tempfile.gettempdir()), help="where checkpoints are written"
    )
    parser.add_argument("--append", type=Path, default=None, help="append the markdown section to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-checkpoint-") as scratch:
        work = Path(scratch)
        results = {
            arch: measure_model(
                arch,
                image_size=args.image_size,
                batch_size=args.batch_size,
                repeats=args.repeats,
                directory=work,
            )
            for arch in args.models
        }
        restart = measure_restart(work)
    print(json.dumps({"models": results, "restart": restart}, indent=2))
    text = render(results, restart, args)
    print(text)
    if args.append is not None:
        with args.append.open("a", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
