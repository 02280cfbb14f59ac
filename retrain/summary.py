"""The one JSON object `--json` prints at the end of a run (the issue's keys, exactly)."""

from __future__ import annotations

from typing import Any

from retrain.pricing import spot_savings_pct
from retrain.report.facts import RunFacts

SUMMARY_KEYS = (
    "run_id",
    "status",
    "accepted",
    "rejected",
    "tuning",
    "training",
    "rules",
    "evaluation",
    "gate",
    "model_package",
    "report",
)


def summary(facts: RunFacts) -> dict[str, Any]:
    return {
        "run_id": facts.run_id,
        "status": facts.status,
        "accepted": facts.accepted,
        "rejected": [{"key": r.key, "problem": r.problem, "reason": r.reason} for r in facts.rejected],
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
        "rules": [{"rule": r.rule, "status": r.status} for r in facts.rules],
        "evaluation": {
            "top1": facts.evaluation.top1,
            "top3": facts.evaluation.top3,
            "per_class": facts.evaluation.per_class,
        },
        "gate": {"passed": facts.gate_passed, "reason": facts.gate_reason},
        "model_package": facts.model_package or None,
        "report": facts.report or None,
    }
