"""The bottleneck report of one training job, from its system profile: a CPU/GPU utilisation heatmap
over time, the step-time distribution with its data-wait share, p50/p95/p99 of CPU and GPU, and
recommendations with the numbers behind them. Markdown plus PNGs; `write_report` is what the CLI
report and rule_check.py call.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from retrain_training.profiler import Profile, read_profile

REPORT_FILE = "bottleneck.md"
HEATMAP_FILE = "utilization_heatmap.png"
STEPS_FILE = "step_times.png"
PERCENTILES = (50, 95, 99)

# Thresholds behind the recommendations; CPU/GPU ones are the managed rules' (CPUBottleneck
# cpu_threshold 90, LowGPUUtilization threshold_p95 70) or the (GPU p95 <= 50).
CPU_BUSY_P95 = 90.0
GPU_STARVED_P95 = 50.0
GPU_LOW_P95 = 70.0
DATA_WAIT_HIGH = 30.0
IOWAIT_HIGH_P95 = 20.0
GPU_MEMORY_LOW = 50.0
STEP_OUTLIER_STDDEV = 3.0


def _percentiles(values: Sequence[float]) -> dict[int, float] | None:
    return {p: float(np.percentile(values, p)) for p in PERCENTILES} if len(values) else None


@dataclass
class Summary:
    samples: int
    steps: int
    duration_s: float
    cores: int
    gpus: int
    cpu: dict[int, float] | None
    gpu: dict[int, float] | None
    iowait: dict[int, float] | None
    gpu_memory_peak_percent: float | None
    step_time: dict[int, float] | None
    data_wait_share: float | None  # percent of all step time spent waiting for data
    step_outliers: int
    recommendations: list[str] = field(default_factory=list)


def summarize(profile: Profile) -> Summary:
    system, steps = profile.system, profile.steps
    cpu = [float(np.mean(s["cpu_percent"])) for s in system if s.get("cpu_percent")]
    gpu = [float(np.mean([g["utilization_percent"] for g in s["gpus"]])) for s in system if s.get("gpus")]
    memory = [
        100 * g["memory_used_mb"] / g["memory_total_mb"]
        for s in system
        for g in s.get("gpus") or []
        if g.get("memory_total_mb")
    ]
    durations = np.array([float(s["data_wait_s"]) + float(s["compute_s"]) for s in steps])
    waits = np.array([float(s["data_wait_s"]) for s in steps])
    limit = durations.mean() + STEP_OUTLIER_STDDEV * durations.std() if len(durations) > 1 else np.inf
    times = [float(s["timestamp"]) for s in system]
    summary = Summary(
        samples=len(system),
        steps=len(steps),
        duration_s=(max(times) - min(times)) if times else 0.0,
        cores=max((len(s.get("cpu_percent") or []) for s in system), default=0),
        gpus=max((len(s.get("gpus") or []) for s in system), default=0),
        cpu=_percentiles(cpu),
        gpu=_percentiles(gpu),
        iowait=_percentiles([float(s.get("iowait_percent", 0.0)) for s in system]),
        gpu_memory_peak_percent=max(memory) if memory else None,
        step_time=_percentiles(list(durations)),
        data_wait_share=float(100 * waits.sum() / durations.sum()) if durations.sum() > 0 else None,
        step_outliers=int((durations > limit).sum()),
    )
    summary.recommendations = recommend(summary)
    return summary


def recommend(s: Summary) -> list[str]:
    """Concrete advice, each line with the measurement that triggered it."""
    out = []
    if s.cpu and s.gpu and s.cpu[95] >= CPU_BUSY_P95 and s.gpu[95] <= GPU_STARVED_P95:
        out.append(
            f"CPU-bound input pipeline: CPU p95 {s.cpu[95]:.0f}% >= {CPU_BUSY_P95:.0f}% while GPU p95 "
            f"{s.gpu[95]:.0f}% <= {GPU_STARVED_P95:.0f}%. Decode and augment on the GPU (loader=dali), "
            "raise num-workers, or pick an instance with more vCPUs per GPU."
        )
    if s.data_wait_share is not None and s.data_wait_share >= DATA_WAIT_HIGH:
        busy = s.cpu is not None and s.cpu[95] >= CPU_BUSY_P95
        cause = (
            "the CPU is saturated: loader=dali or more vCPUs per GPU"
            if busy
            else f"the CPU is not saturated (p95 {s.cpu[95]:.0f}%): raise num-workers, check the storage "
            "(FSx throughput, I/O wait) and anything sleeping in the loader"
            if s.cpu
            else "raise num-workers or use loader=dali"
        )
        out.append(
            f"Input-bound: steps wait for data {s.data_wait_share:.0f}% of their time "
            f"(>= {DATA_WAIT_HIGH:.0f}%); {cause}."
        )
    if s.iowait and s.iowait[95] >= IOWAIT_HIGH_P95:
        out.append(
            f"I/O wait p95 {s.iowait[95]:.0f}% >= {IOWAIT_HIGH_P95:.0f}%: the data source is slow; read from "
            "FSx for Lustre (or raise its throughput), or cache the data set on local NVMe."
        )
    if s.gpu and s.gpu[95] < GPU_LOW_P95 and not out:
        out.append(
            f"GPU under-used: p95 {s.gpu[95]:.0f}% < {GPU_LOW_P95:.0f}% with no input bottleneck: raise "
            "batch-size, enable amp, or choose a smaller GPU instance."
        )
    if s.gpu_memory_peak_percent is not None and s.gpu_memory_peak_percent < GPU_MEMORY_LOW:
        out.append(
            f"GPU memory peaks at {s.gpu_memory_peak_percent:.0f}% (< {GPU_MEMORY_LOW:.0f}%): a larger "
            "batch-size fits (scale lr with it)."
        )
    if s.step_outliers:
        out.append(
            f"{s.step_outliers} step(s) took longer than mean + {STEP_OUTLIER_STDDEV:g} std: look for "
            "checkpoint writes, validation or stalls at those steps."
        )
    if not out:
        if s.gpus == 0 and s.data_wait_share is not None:
            out.append(
                f"No GPU in this job: it is compute-bound on {s.cores} CPU cores (data wait "
                f"{s.data_wait_share:.0f}% of step time). A GPU instance with loader=dali is the next "
                "step up."
            )
        else:
            out.append("No bottleneck found in this profile.")
    return out


def _plot_heatmap(profile: Profile, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    system = profile.system
    start = float(system[0]["timestamp"])
    cores = max(len(s.get("cpu_percent") or []) for s in system)
    gpus = max(len(s.get("gpus") or []) for s in system)
    rows = [f"CPU {i}" for i in range(cores)] + [f"GPU {i}" for i in range(gpus)]
    grid = np.full((len(rows), len(system)), np.nan)
    for col, sample in enumerate(system):
        for i, value in enumerate(sample.get("cpu_percent") or []):
            grid[i, col] = value
        for gpu in sample.get("gpus") or []:
            grid[cores + int(gpu["index"]), col] = gpu["utilization_percent"]
    end = float(system[-1]["timestamp"]) - start
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.25 * len(rows)))
    image = ax.imshow(
        grid,
        aspect="auto",
        cmap="viridis",
        vmin=0,
        vmax=100,
        interpolation="nearest",
        extent=(0, max(end, 1e-3), len(rows), 0),
    )
    ax.set_yticks(np.arange(len(rows)) + 0.5, rows)
    ax.set_xlabel("seconds since the first sample")
    ax.set_title("Utilisation over time (%)")
    fig.colorbar(image, ax=ax, label="%")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_steps(profile: Profile, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = profile.steps
    waits = np.array([float(s["data_wait_s"]) for s in steps])
    computes = np.array([float(s["compute_s"]) for s in steps])
    fig, (hist, share) = plt.subplots(1, 2, figsize=(11, 3.5))
    hist.hist(waits + computes, bins=min(40, max(5, len(steps) // 3)), color="tab:blue")
    hist.set_xlabel("step time (s)")
    hist.set_ylabel("steps")
    hist.set_title("Step-time distribution")
    numbers = [int(s["step"]) for s in steps]
    share.bar(numbers, waits, color="tab:orange", label="data wait", width=1.0)
    share.bar(numbers, computes, bottom=waits, color="tab:blue", label="compute", width=1.0)
    share.set_xlabel("step")
    share.set_ylabel("seconds")
    share.set_title("Data wait vs compute per step")
    share.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _row(name: str, values: dict[int, float] | None, unit: str = "%") -> str:
    if values is None:
        return f"| {name} | n/a | n/a | n/a |"
    return "| " + name + " | " + " | ".join(f"{values[p]:.1f}{unit}" for p in PERCENTILES) + " |"


def render(summary: Summary, images: Sequence[str]) -> str:
    lines = [
        "# Bottleneck report",
        "",
        f"{summary.steps} steps, {summary.samples} system samples over {summary.duration_s:.1f} s; "
        f"{summary.cores} CPU cores, {summary.gpus} GPU(s).",
        "",
        "## Recommendations",
        "",
        *[f"- {r}" for r in summary.recommendations],
        "",
        "## Utilisation",
        "",
        "| metric | p50 | p95 | p99 |",
        "| --- | --- | --- | --- |",
        _row("CPU (mean of cores)", summary.cpu),
        _row("GPU", summary.gpu),
        _row("I/O wait", summary.iowait),
        _row("step time", summary.step_time, " s"),
        "",
        f"Data wait: {summary.data_wait_share:.1f}% of step time."
        if summary.data_wait_share is not None
        else "No step timings recorded.",
        "",
        *[f"![{Path(image).stem}]({image})" for image in images],
        "",
    ]
    return "\n".join(lines)


def write_report(profile_dir: Path, out_dir: Path) -> Path:
    """Write bottleneck.md and its PNGs for the profile in profile_dir; returns the markdown's path."""
    profile = read_profile(Path(profile_dir))
    if not profile.system and not profile.steps:
        raise FileNotFoundError(
            f"no profile in {profile_dir}: expected system.jsonl / steps.jsonl written by the training "
            "job's SystemProfiler (under SM_OUTPUT_DATA_DIR/profile, shipped in output.tar.gz)"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    images = []
    if profile.system:
        _plot_heatmap(profile, out / HEATMAP_FILE)
        images.append(HEATMAP_FILE)
    if profile.steps:
        _plot_steps(profile, out / STEPS_FILE)
        images.append(STEPS_FILE)
    report = out / REPORT_FILE
    report.write_text(render(summarize(profile), images), encoding="utf-8")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("profile_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    try:
        print(write_report(args.profile_dir, args.out_dir))
    except FileNotFoundError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
