"""The report's PNGs (matplotlib, Agg backend: no display needed). Each writer returns the file it wrote,
or None when the run has no data for that chart."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from retrain.report.facts import CheckpointEvaluation, Trial
from retrain.report.job_logs import MetricPoint

DPI = 100


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def tuned_hyperparameters(trials: list[Trial]) -> list[str]:
    """Hyperparameters whose value differs between trials: the ones tuning searched."""
    names = sorted({name for t in trials for name in t.hyperparameters if not name.startswith("_")})
    return [n for n in names if len({t.hyperparameters.get(n) for t in trials}) > 1]


def tuning_trials(trials: list[Trial], objective_metric: str, out: Path) -> Path | None:
    scored = [t for t in trials if t.objective is not None]
    names = tuned_hyperparameters(scored)
    if not scored or not names:
        return None
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.5), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        raw = [t.hyperparameters.get(name, "") for t in scored]
        numbers = [_number(v) for v in raw]
        objectives = [t.objective for t in scored]
        if all(n is not None for n in numbers):
            ax.scatter(numbers, objectives)
            positive = [n for n in numbers if n is not None and n > 0]
            if len(positive) == len(numbers) and max(positive) / min(positive) >= 100:
                ax.set_xscale("log")
        else:
            categories = sorted(set(raw))
            ax.scatter([categories.index(v) for v in raw], objectives)
            ax.set_xticks(range(len(categories)), categories)
        ax.set_xlabel(name)
        ax.set_ylabel(objective_metric or "objective")
        ax.grid(alpha=0.3)
    fig.suptitle("Tuning trials: objective against each hyperparameter")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out


def loss_curves(
    curves: dict[str, dict[str, list[MetricPoint]]], metrics: tuple[str, str], out: Path, *, best: str = ""
) -> Path | None:
    if not any(curves.get(job, {}).get(m) for job in curves for m in metrics):
        return None
    fig, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for job in sorted(curves):
            points = curves[job].get(metric, [])
            if points:
                ax.plot(
                    [p.step for p in points],
                    [p.value for p in points],
                    marker="." if len(points) < 30 else None,
                    linewidth=2.5 if job == best else 1.0,
                    label=job + (" (best)" if job == best else ""),
                )
        ax.set_title(metric)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out


def checkpoint_curve(points: list[CheckpointEvaluation], out: Path, *, best: str = "") -> Path | None:
    """Validation accuracy of each training job's checkpoints against step, one line per job."""
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    jobs = sorted({p.training_job for p in points})
    for job in jobs:
        ordered = sorted((p for p in points if p.training_job == job), key=lambda p: p.step)
        label = job or "checkpoints"
        width = 2.5 if job and job == best else 1.0
        line = ax.plot([p.step for p in ordered], [p.top1 for p in ordered], marker="o", linewidth=width,
                       label=f"{label} top-1" + (" (best)" if job and job == best else ""))  # fmt: skip
        top3 = [(p.step, p.top3) for p in ordered if p.top3 is not None]
        if top3:
            ax.plot([s for s, _ in top3], [v for _, v in top3], marker="s", linestyle="--", linewidth=width,
                    color=line[0].get_color(), alpha=0.6, label=f"{label} top-3")  # fmt: skip
    ax.set_xlabel("checkpoint step")
    ax.set_ylabel("validation accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title("Checkpoints evaluated while training ran")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out


def confusion_matrix(matrix: list[list[int]], labels: list[str], out: Path) -> Path | None:
    if not matrix or len(matrix) != len(labels):
        return None
    size = max(4.0, 0.5 * len(labels) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    image = ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    peak = max((max(row) for row in matrix), default=0)
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            if count:
                colour = "white" if count > peak / 2 else "black"
                ax.text(j, i, str(count), ha="center", va="center", fontsize=7, color=colour)
    fig.colorbar(image, ax=ax, fraction=0.046)
    ax.set_title("Confusion matrix (validation)")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out
