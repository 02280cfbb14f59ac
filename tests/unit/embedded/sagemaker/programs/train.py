"""A stand-in training program under the container contract, fast enough for unit tests.

It "trains" by counting steps: resumes from its newest checkpoint, writes checkpoints atomically
every --checkpoint-every-steps (keeping the newest --keep-checkpoints, when given), prints contract
metric lines (val-accuracy peaks at lr=0.05), on SIGTERM checkpoints and exits with
INTERRUPTED_EXIT_CODE, and with --fail writes the failure file.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from retrain_contract import container as contract

STOP = {"requested": False}


def request_stop(signum: int, frame: object) -> None:
    STOP["requested"] = True


def ignore_stop(signum: int, frame: object) -> None:
    print("SIGTERM received: ignored", flush=True)


def save(directory: Path, step: int, keep: int = 0) -> None:
    """Write the checkpoint of `step`; with `keep`, delete all but the newest `keep` (as train.py prunes)."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".tmp-{step}"
    tmp.write_text(json.dumps({"step": step}) + "x" * 2000, encoding="utf-8")
    os.replace(tmp, directory / contract.checkpoint_name(step))
    if keep:
        for old in sorted(directory.glob(f"{contract.CHECKPOINT_PREFIX}*{contract.CHECKPOINT_SUFFIX}"))[
            :-keep
        ]:
            old.unlink()


def newest(directory: Path) -> int:
    steps = []
    for path in directory.glob(f"{contract.CHECKPOINT_PREFIX}*{contract.CHECKPOINT_SUFFIX}"):
        try:
            steps.append(json.loads(path.read_text(encoding="utf-8")[:-2000])["step"])
        except (ValueError, KeyError):
            print(f"skipping torn checkpoint {path.name}", flush=True)
    return max(steps, default=0)


def main() -> int:
    signal.signal(signal.SIGTERM, request_stop)
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps-per-epoch", type=int, default=4)
    parser.add_argument("--checkpoint-every-steps", type=int, default=2)
    parser.add_argument("--keep-checkpoints", type=int, default=0)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--fail", default="")
    parser.add_argument("--ignore-sigterm", default="false")
    args, unknown = parser.parse_known_args()
    paths = contract.resolve_paths()
    if args.ignore_sigterm.lower() == "true":  # says so, and trains on until SIGKILL
        signal.signal(signal.SIGTERM, ignore_stop)
    if args.fail:
        contract.write_failure(paths, f"ValueError: {args.fail}")
        print("training failed", flush=True)
        return 1
    store = paths.job_checkpoint_dir
    step = newest(store)
    print(f"starting at step {step} args={sys.argv[1:]} unknown={unknown}", flush=True)
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')}", flush=True)
    hook_config = paths.base / "input" / "config" / "debughookconfig.json"
    if hook_config.is_file():  # managed Debugger: the hook writes where the config says
        events = Path(json.loads(hook_config.read_text(encoding="utf-8"))["LocalPath"]) / "events"
        events.mkdir(parents=True, exist_ok=True)
        (events / "000000000000.tfevents").write_bytes(b"tensors")
    paths.tensors_dir.mkdir(parents=True, exist_ok=True)
    (paths.tensors_dir / "seen.json").write_text(
        json.dumps({"argv": sys.argv[1:], "channels": sorted(os.listdir(paths.base / "input" / "data"))}),
        encoding="utf-8",
    )
    total = args.epochs * args.steps_per_epoch
    while step < total:
        time.sleep(args.step_seconds)
        step += 1
        epoch = (step - 1) // args.steps_per_epoch
        print(
            contract.format_metric(contract.METRIC_TRAIN_LOSS, 1.0 / step, epoch=epoch, step=step), flush=True
        )
        if step % args.steps_per_epoch == 0:
            accuracy = max(0.0, 1.0 - abs(args.lr - 0.05) * 5) * (epoch + 1) / args.epochs
            print(
                contract.format_metric(contract.METRIC_VAL_ACCURACY, accuracy, epoch=epoch, step=step),
                flush=True,
            )
        if args.checkpoint_every_steps and step % args.checkpoint_every_steps == 0:
            save(store, step, args.keep_checkpoints)
        if STOP["requested"]:
            save(store, step, args.keep_checkpoints)
            print(f"interrupted at step {step}", flush=True)
            return contract.INTERRUPTED_EXIT_CODE
    paths.model_dir.mkdir(parents=True, exist_ok=True)
    (paths.model_dir / contract.MODEL_FILE).write_text(json.dumps({"steps": step}), encoding="utf-8")
    print(f"finished at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
