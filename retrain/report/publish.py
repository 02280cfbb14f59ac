"""A run's report where people read it: `runs/<run-id>/` here, the artifacts of the run's MLflow run, and
on AWS the run's S3 prefix too."""

from __future__ import annotations

from pathlib import Path

from controller import names, runs
from retrain.deployment import Deployment
from retrain.report.build import write_report
from retrain.report.collect import collect
from retrain.report.facts import RunFacts
from retrain.serve import mlflow_ui

RUNS_DIR = Path("runs")


def report_dir(run_id: str) -> Path:
    return RUNS_DIR / run_id


def publish_report(deployment: Deployment, record: runs.RunRecord, out_dir: Path) -> str:
    """Locally the report stays in runs/<run-id>/; on AWS it is also copied under the run's S3 prefix."""
    if deployment.local:
        return str(out_dir / "report.md")
    bucket = deployment.output(names.STACK_OUTPUTS["artifact_bucket"])
    prefix = names.run_prefix(record["dataset"], record["run_id"]) + names.REPORT_DIR
    s3 = deployment.client("s3")
    for path in sorted(p for p in out_dir.rglob("*") if p.is_file()):
        s3.upload_file(str(path), bucket, prefix + path.relative_to(out_dir).as_posix())
    return names.report_uri(bucket, record["dataset"], record["run_id"])


def report(deployment: Deployment, record: runs.RunRecord, *, upload_keys: set[str] | None) -> RunFacts:
    """The facts of a run that ended, with its report written (and on AWS published)."""
    out_dir = report_dir(record["run_id"])
    facts = collect(deployment, record, out_dir=out_dir, upload_keys=upload_keys)
    write_and_track(deployment, facts, out_dir)
    facts.report = publish_report(deployment, record, out_dir)
    return facts


def write_and_track(deployment: Deployment, facts: RunFacts, out_dir: Path) -> Path:
    """The report, also as artifacts of the run's MLflow run (what fails is a warning in the report)."""
    path = write_report(facts, out_dir)
    warning = mlflow_ui.log_report(deployment, facts.mlflow_run_id, out_dir)
    if warning:
        facts.tracking_warnings.append(warning)
        path = write_report(facts, out_dir)
    return path
