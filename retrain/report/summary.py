"""The one JSON object `--json` prints at the end of a run (the issue's keys, exactly), and the demo's,
which adds what each of its runs started from."""

from __future__ import annotations

from typing import Any

from retrain.report.facts import RunFacts
from retrain.report.pricing import spot_savings_pct

SUMMARY_KEYS = (
    "run_id",
    "status",
    "started_from",
    "accepted",
    "new",
    "rejected",
    "dataset_uploads",
    "tuning",
    "training",
    "rules",
    "evaluation",
    "gate",
    "arrivals",
    "model_package",
    "mlflow",
    "report",
)


def summary(facts: RunFacts) -> dict[str, Any]:
    return {
        "run_id": facts.run_id,
        "status": facts.status,
        "started_from": lineage(facts),
        # the run's own intake (its cut); the data set's totals when the summary is made, apart
        "accepted": facts.accepted,
        "new": facts.new_uploads,
        "rejected": [{"key": r.key, "problem": r.problem, "reason": r.reason} for r in facts.rejected],
        "dataset_uploads": {"accepted": facts.dataset_accepted, "rejected": facts.dataset_rejected},
        "tuning": {
            "jobs": len(facts.trials),
            "best_job": facts.best_job or None,
            "best_hyperparameters": dict(facts.best_hyperparameters),
            "objective": facts.objective,
        },
        "training": {
            "interruptions": facts.interruptions,
            "resumed_at_steps": list(facts.resumed_at_steps),
            "training_seconds": facts.training_seconds,
            "billable_seconds": facts.billable_seconds,
            "spot_savings_pct": spot_savings_pct(facts.training_seconds, facts.billable_seconds),
        },
        "rules": [
            {"rule": r.rule, "status": r.status, "action": r.action or None, "detail": r.detail}
            for r in facts.rules
        ],
        "evaluation": {
            "top1": facts.evaluation.top1,
            "top3": facts.evaluation.top3,
            "per_class": facts.evaluation.per_class,
        },
        "gate": {"passed": facts.gate_passed, "reason": facts.gate_reason},
        # the champion on the run's new uploads: the run record's section as is (its suspects_uri names
        # the list of suspected label errors; the list itself stays out of the summary); None without one
        "arrivals": dict(facts.arrivals) or None,
        "model_package": facts.model_package or None,
        "mlflow": {"run_id": facts.mlflow_run_id or None, "warnings": facts.tracking_warnings},
        "report": facts.report or None,
    }


def lineage(facts: RunFacts) -> dict[str, str]:
    """What the run started from: kind (champion, pretrained, imagenet, scratch), the weights' URI, the
    champion's model package ARN, and why."""
    start = facts.started_from
    return {key: start.get(key, "") for key in ("kind", "uri", "model_package_arn", "reason")}


def demo_summary(reported: list[RunFacts]) -> dict[str, Any]:
    """The last run's summary, and each run of the demo with its lineage, in order."""
    runs = [{"run_id": f.run_id, "status": f.status, "started_from": lineage(f)} for f in reported]
    return {**summary(reported[-1]), "runs": runs}
