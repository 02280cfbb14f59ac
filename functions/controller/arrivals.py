"""The champion on the run's new uploads: how the model in use does on what just arrived, which new labels
look wrong, and whether the run is worth training (TrainWhen=drift).

A processing job (evaluate.py --split arrivals, the champion's evaluation code and image) reads the run's
new uploads, a bounded stratified sample that the freezing job chose, beside images of the validation
split that are not new. The new uploads are out of sample for the champion: its top-1 there is the most
honest estimate of how it does on today's images, and the drop from its validation top-1 is the drift.
Confident learning (cleanlab) on its probabilities names the suspected label errors.

Under TrainWhen=always and SuspectLabels=keep the job starts as soon as the manifest is frozen and runs
beside tuning; the flow reads its result before the gate. Under TrainWhen=drift or SuspectLabels=hold its
result decides, so the flow waits for it before tuning. This step reads the job's arrivals.json (bounded:
its size grows with the labels, not the images), records a summary on the run, and decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, cast

from controller import clients, names, runs
from controller.config import Config, get_config
from controller.errors import JobOutputMissingError
from controller.observability import logger, metrics, tracer
from controller.s3io import read_json
from retrain_contract import container
from retrain_contract.run import (
    SUSPECTS_HOLD,
    TRAIN_ON_DRIFT,
    Arrivals,
    Run,
    RunSettings,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

TRAIN: Final = "train"
NOT_NEEDED: Final = "not_needed"
RECORD_LABELS_MAX: Final = 20  # labels the run record lists (arrivals.json has them all)
# TrainWhen=drift: how far below its validation top-1 the champion's top-1 on the new uploads may be shown
# to lie (the lower end of its 95% interval) for a run to be not needed.
DRIFT_TOLERANCE: Final = 0.02


def plan(
    settings: RunSettings, *, bucket: str, dataset: str, run_id: str, frozen_s3_uri: str, manifest_s3_uri: str
) -> Arrivals:
    """`$.run.arrivals` as Prepare builds it; the freezing job's summary says whether it runs."""
    hold = settings["suspect_labels"] == SUSPECTS_HOLD
    return {
        "check": False,
        "before_training": hold or settings["train_when"] == TRAIN_ON_DRIFT,
        "train_when": settings["train_when"],
        "suspect_labels": settings["suspect_labels"],
        "arguments": container.arrivals_arguments(hold=hold),
        "s3_uri": f"s3://{bucket}/{names.evaluation_prefix(dataset, run_id, 'arrivals')}",
        "manifest_uri": frozen_s3_uri + container.ARRIVALS_MANIFEST_FILE,
        "lines_uri": f"{frozen_s3_uri}{container.ARRIVALS_LINES_DIR}/",
        "run_manifest_uri": manifest_s3_uri,
        "held_s3_uri": f"s3://{bucket}/{names.run_prefix(dataset, run_id)}held-manifest/",
        "images": 0,
        "volume_gb": container.EVALUATION_VOLUME_BASE_GB,
    }


def after_freeze(run: Run, summary: dict[str, Any]) -> Arrivals:
    """The plan with the freezing job's figures: it runs where there is a champion and new images of
    trained labels."""
    images = int(summary.get("arrivals_new", 0))
    return {
        **run["arrivals"],
        "check": bool(run["has_champion"]) and images > 0,
        "images": images,
        "volume_gb": container.evaluation_volume_gb(int(summary.get("arrivals_bytes", 0))),
    }


def _interval(figures: dict[str, Any]) -> list[float]:
    return [float(x) for x in figures.get("top1_interval") or []]


def per_label(new: dict[str, Any], suspects: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The labels most in need of a look: most suspects first, then lowest top-1 (at most
    RECORD_LABELS_MAX)."""
    flagged = suspects.get("per_label") or {}
    rows = {
        label: {
            "images": int(figures.get("support", 0)),
            "top1": float(figures.get("recall", 0.0)),
            "suspects": int((flagged.get(label) or {}).get("suspects", 0)),
        }
        for label, figures in (new.get("per_class") or {}).items()
        if figures.get("support")
    }
    order = sorted(rows, key=lambda label: (-rows[label]["suspects"], rows[label]["top1"], label))
    return {label: rows[label] for label in order[:RECORD_LABELS_MAX]}


def summarize(document: dict[str, Any], run: Run) -> dict[str, Any]:
    """The run record's `arrivals`: bounded whatever the images or labels."""
    new = document["new"]
    validation = document.get("validation") or {}
    suspects = document.get("suspects") or {}
    checked = int(new["samples"])
    count = int(suspects.get("suspect_count", 0))
    return {
        "new_images": int(run["new_images"]),
        "checked": checked,
        "sampled": checked < int(run["new_images"]),
        "top1": float(new["top1"]),
        "top1_interval": _interval(new),
        "top3": float(new["top3"]),
        "validation_top1": float(validation["top1"]) if validation else None,
        "validation_interval": _interval(validation) if validation else None,
        "validation_images": int(validation.get("samples", 0)),
        "drift": document.get("drift"),
        "labels_the_model_lacks": list(document.get("labels_the_model_lacks") or [])[:RECORD_LABELS_MAX],
        "suspect_count": count,
        "suspect_rate": count / checked if checked else 0.0,
        "per_label": per_label(new, suspects),
        "held": int(document.get("held", 0)),
        "report_uri": run["arrivals"]["s3_uri"] + container.ARRIVALS_FILE,
        "suspects_uri": run["arrivals"]["s3_uri"] + container.SUSPECTS_FILE,
    }


def decide(figures: dict[str, Any] | None, train_when: str) -> tuple[str, str]:
    """Whether the run trains, and why. Under TrainWhen=drift a run is not needed only on evidence that the
    champion is not worse on the new uploads: it knows every label there, and the lower end of its top-1's
    95% Wilson interval on them is within DRIFT_TOLERANCE of its validation top-1. Anything short of that
    evidence trains (a handful of uploads always does): a needless run costs spot hours, a skipped one
    leaves a stale model in use. bench/drift_check.py measures both rates."""
    if train_when != TRAIN_ON_DRIFT:
        return TRAIN, "TrainWhen is always"
    if figures is None:
        return TRAIN, "the champion's check on the new uploads gave no figures"
    if figures["labels_the_model_lacks"]:
        lacks = ", ".join(figures["labels_the_model_lacks"])
        return TRAIN, f"the new uploads hold labels the champion lacks: {lacks}"
    if figures["validation_top1"] is None:
        return TRAIN, "the champion has no validation images beside the new uploads to compare with"
    top1, (low, high), reference = figures["top1"], figures["top1_interval"], figures["validation_top1"]
    said = (
        f"the champion's top-1 on {figures['checked']} new uploads is {top1:.4f} "
        f"(95% CI {low:.4f}-{high:.4f}) against {reference:.4f} on "
        f"{figures['validation_images']} validation images"
    )
    if low >= reference - DRIFT_TOLERANCE:
        return NOT_NEEDED, f"no retraining needed: {said}"
    return TRAIN, f"drift: {said}, not shown within {DRIFT_TOLERANCE} of it"


def with_held_manifest(run: Run, held: int) -> Run:
    """The run whose training jobs read the manifest without the suspects (SuspectLabels=hold)."""
    if held <= 0:
        return run
    channels = [
        {**channel, "DataSource": {"S3DataSource": {**channel["DataSource"]["S3DataSource"],
                                                     "S3Uri": run["arrivals"]["held_s3_uri"]}}}
        if channel["ChannelName"] == container.CHANNEL_MANIFEST
        else channel
        for channel in run["input_data_config"]
    ]  # fmt: skip
    return cast("Run", {**run, "input_data_config": channels})


def read_arrivals(
    event: dict[str, Any], *, config: Config, dynamodb: DynamoDBClient, s3: S3Client
) -> dict[str, Any]:
    """Record the champion's figures on the new uploads and decide. `event["job"]` is the job's end
    ({job, status}) or the error Step Functions caught ({Error, Cause}: a refused start, a failed .sync
    job, a failed describe); none of them fails the run."""
    run = cast("Run", event["run"])
    plan_ = run["arrivals"]
    job = dict(event.get("job") or {})
    status = str(job.get("status") or "NotStarted")
    figures: dict[str, Any] | None = None
    problem = ""
    if "Error" in job:
        problem = f"{job['Error']}: {str(job.get('Cause', ''))[:500]}"
        status = "Failed"
    elif status == "Completed":
        try:
            figures = summarize(
                read_json(
                    plan_["s3_uri"] + container.ARRIVALS_FILE,
                    s3=s3,
                    what=(f"the champion's figures on the new uploads (job {run['jobs']['arrivals']})"),
                ),
                run,
            )
        except JobOutputMissingError as error:  # fmt: skip
            problem, status = str(error), "Failed"
    else:
        problem = f"the job ended {status}"
    decision, reason = decide(figures, plan_["train_when"])
    section: dict[str, Any] = {
        **(figures or {}),
        "job": run["jobs"]["arrivals"],
        "status": status,
        "train_when": plan_["train_when"],
        "suspect_labels": plan_["suspect_labels"],
        "decision": decision,
        "reason": reason,
    }
    if problem:
        section["problem"] = problem
        logger.warning("no figures on the new uploads", extra={"run_id": run["run_id"], "problem": problem})
    runs.update_run(
        run["dataset"], run["run_id"], {"arrivals": section}, table_name=config.runs_table, client=dynamodb
    )
    if figures is not None:
        metrics.add_metric(name=names.METRIC_CHAMPION_NEW_TOP1, unit="None", value=figures["top1"])
        metrics.add_metric(name=names.METRIC_SUSPECTED_LABELS, unit="Count", value=figures["suspect_count"])
        if figures["drift"] is not None:
            metrics.add_metric(name=names.METRIC_CHAMPION_DRIFT, unit="None", value=float(figures["drift"]))
    if plan_["suspect_labels"] == SUSPECTS_HOLD and figures is not None:
        run = with_held_manifest(run, int(figures["held"]))
    logger.info("champion on the new uploads", extra={"run_id": run["run_id"], "decision": decision})
    return {
        "run": run,
        "import": dict(event.get("import") or {}),
        "api_retry": dict(event.get("api_retry") or {"count": 0}),
        "arrivals": {"decision": decision, "reason": reason, "top1": figures["top1"] if figures else None},
    }


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return read_arrivals(event, config=get_config(), dynamodb=clients.dynamodb(), s3=clients.s3())
