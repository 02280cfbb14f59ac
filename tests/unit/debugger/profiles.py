"""Profiles for the system-rule tests: real SystemProfiler runs, and sample lines in its format for
GPU machines (this machine has none)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from retrain_training import profiler


def profiled_loop(
    out_dir: Path, *, steps: int, compute_s: float, data_wait_s: float, stall_every: int = 0
) -> Path:
    """A real SystemProfiler around `steps` steps whose 'loader' waits data_wait_s (stall_every: only
    every n-th step). The loop sleeps for real, but records the planted durations: on a shared
    machine measured ones would carry other processes' noise, and measuring is train.py's part."""
    with profiler.SystemProfiler(out_dir, interval_s=0.05) as prof:
        for step in range(steps):
            wait = data_wait_s if data_wait_s and (not stall_every or (step + 1) % stall_every == 0) else 0.0
            time.sleep(wait + compute_s)
            prof.step(step, wait, compute_s)
    return out_dir


def write_gpu_profile(out_dir: Path, *, samples: int, cpu: float, gpu: float, iowait: float = 0.0) -> Path:
    """Samples as SystemProfiler writes them on a one-GPU machine, plus one step per sample."""
    out_dir.mkdir(parents=True, exist_ok=True)
    start = 1_700_000_000.0
    with (
        (out_dir / profiler.SYSTEM_FILE).open("w") as system,
        (out_dir / profiler.STEPS_FILE).open("w") as steps,
    ):
        for i in range(samples):
            at = start + 0.5 * i
            sample = {
                "timestamp": at,
                "cpu_percent": [cpu, cpu],
                "iowait_percent": iowait,
                "memory_percent": 40.0,
                "memory_used_mb": 4000.0,
                "gpus": [
                    {
                        "index": 0,
                        "utilization_percent": gpu,
                        "memory_used_mb": 8000.0,
                        "memory_total_mb": 80000.0,
                    }
                ],
            }
            system.write(json.dumps(sample) + "\n")
            steps.write(
                json.dumps({"timestamp": at + 0.01, "step": i, "data_wait_s": 0.01, "compute_s": 0.2}) + "\n"
            )
    return out_dir
