"""Everything known about one run, gathered from the run record, the ledger, SageMaker and the logs.

The report and the `--json` summary are both views of a `RunFacts`; collecting (AWS calls) and
rendering (pure) stay apart so the report can be built from a recorded run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrain.report.job_logs import MetricPoint
from retrain.report.timing import Phase


@dataclass(frozen=True)
class Rejected:
    key: str
    reason: str
    problem: str = "layout"  # controller.names.PROBLEM_*: layout, content, duplicate, conflict; or unreadable


@dataclass(frozen=True)
class Trial:
    job_name: str
    status: str
    objective: float | None
    hyperparameters: dict[str, str]
    training_seconds: int = 0
    billable_seconds: int = 0
    interruptions: int = 0
    instance_type: str = ""
    instance_count: int = 1


@dataclass(frozen=True)
class RuleResult:
    rule: str
    status: str
    step: int | None = None
    detail: str = ""
    action: str = ""  # block | warn (the gate's), empty for a run from before the gate recorded it


@dataclass(frozen=True)
class CheckpointEvaluation:
    step: int
    top1: float
    top3: float | None = None
    training_job: str = ""


@dataclass
class Evaluation:
    top1: float | None = None
    top3: float | None = None
    per_class: dict[str, Any] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)
    confusion_matrix: list[list[int]] = field(default_factory=list)
    # beyond the labels a matrix is written for: [true, predicted, count], most frequent first
    confusions: list[tuple[str, str, int]] = field(default_factory=list)
    baseline_top1: float | None = None


REPORT_SUSPECTS = 50  # suspected label errors the report lists (suspects.json ranks up to 1,000)


@dataclass(frozen=True)
class Suspect:
    """One suspected label error among the run's new uploads (suspects.json's, ranked)."""

    key: str  # relative to the data set's prefix: <label>/<file>
    given: str
    suggested: str
    confidence: float
    thumbnail: bytes = b""  # a small JPEG of the image, when the report is written; empty when unreadable


@dataclass
class RunFacts:
    run_id: str
    dataset: str
    status: str
    started: str = ""
    stopped: str = ""
    failure: str = ""
    execution_arn: str = ""
    # What this run took in (its cut): the same whenever the report is written. `rejected` lists the
    # refusals recorded before the cut that are still refused; `refused` counts them as frozen.
    cut: str = ""
    accepted: int = 0
    new_uploads: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    refused: int = 0
    # the data set's uploads as the ledger holds them when the report is written (later waves included)
    dataset_accepted: int = 0
    dataset_rejected: int = 0
    class_balance: dict[str, Any] = field(default_factory=dict)  # the manifest's policy
    class_counts: dict[str, dict[str, int]] = field(default_factory=dict)  # per label, before/after
    excluded_labels: dict[str, str] = field(default_factory=dict)  # label -> why it was set aside
    # the run's lineage (kind, uri, package, reason) and where the execution's time went
    started_from: dict[str, str] = field(default_factory=dict)
    phases: list[Phase] = field(default_factory=list)
    unreadable: list[Rejected] = field(default_factory=list)  # accepted, yet training could not decode
    tuning_job: str = ""
    trials: list[Trial] = field(default_factory=list)
    best_job: str = ""
    best_hyperparameters: dict[str, str] = field(default_factory=dict)
    objective: float | None = None
    objective_metric: str = ""
    training_jobs: list[Trial] = field(default_factory=list)
    resumed_at_steps: list[int] = field(default_factory=list)
    rules: list[RuleResult] = field(default_factory=list)
    evaluation: Evaluation = field(default_factory=Evaluation)
    checkpoint_evaluations: list[CheckpointEvaluation] = field(default_factory=list)
    gate_passed: bool | None = None
    gate_reason: str = ""
    gate_decision: str = ""  # the record's word: accepted, rejected or not_needed (TrainWhen=drift)
    # the champion on the run's new uploads: the run record's `arrivals` section as is, the first
    # suspected label errors of its suspects.json (ranked), and why that list could not be read
    arrivals: dict[str, Any] = field(default_factory=dict)
    suspects: list[Suspect] = field(default_factory=list)
    suspects_problem: str = ""
    model_package: str = ""
    # experiment tracking: the run's parent run in MLflow (experiment retrain/<dataset>), what failed
    mlflow_run_id: str = ""
    tracking_warnings: list[str] = field(default_factory=list)
    curves: dict[str, dict[str, list[MetricPoint]]] = field(default_factory=dict)
    profile_dir: Path | None = None
    report: str = ""

    @property
    def all_jobs(self) -> list[Trial]:
        """Tuning trials and any final training job: everything that was billed."""
        seen = {t.job_name for t in self.trials}
        return self.trials + [t for t in self.training_jobs if t.job_name not in seen]

    @property
    def interruptions(self) -> int:
        return sum(t.interruptions for t in self.all_jobs)

    @property
    def training_seconds(self) -> int:
        return sum(t.training_seconds * max(t.instance_count, 1) for t in self.all_jobs)

    @property
    def billable_seconds(self) -> int:
        return sum(t.billable_seconds * max(t.instance_count, 1) for t in self.all_jobs)
