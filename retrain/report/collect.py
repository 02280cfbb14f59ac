"""Gather a `RunFacts` from a deployment: the run record (controller.runs), the upload ledger, SageMaker's
descriptions of the run's jobs, their logs, and the evaluation output in S3.

Only reads; the same calls work against AWS and the embedded stack.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import botocore.exceptions

from controller import datasets, ledger, names, runs
from retrain.deployment import Deployment
from retrain.errors import RunNotFoundError
from retrain.report import job_logs, timing
from retrain.report.facts import (
    REPORT_SUSPECTS,
    CheckpointEvaluation,
    Evaluation,
    Rejected,
    RuleResult,
    RunFacts,
    Suspect,
    Trial,
)
from retrain_contract import container as contract
from retrain_contract import ledger as ledger_contract
from retrain_contract.ledger import Partitions

LEDGER_STATE = "state"
LEDGER_REASON = "reason"
EXECUTION_FAILED = ("FAILED", "TIMED_OUT", "ABORTED")
GATE_DECISIONS = ("accepted", "rejected")  # a run that reached the gate; not_needed (TrainWhen=drift) did not
THUMBNAIL_PIXELS = 96  # the longer side of a suspected label error's thumbnail in the report
CHALLENGER = "challenger"  # the run's evaluation of its new model (controller.prepare's output name)
INTERRUPTED_STATUS = "Interrupted"  # SageMaker's secondary status when spot capacity is reclaimed
# A resumed job names the step it continued from (the container's log line or a status message).
_RESUMED = re.compile(r"\bresum\w*\b[^\n]*?\bstep[=: ]+(\d+)", re.IGNORECASE)


def runs_table(deployment: Deployment) -> str:
    return deployment.output(names.STACK_OUTPUTS["runs_table"])


def find_run(deployment: Deployment, run_id: str, dataset: str | None = None) -> runs.RunRecord:
    """The run with this id; its data set is looked up when not given."""
    table = runs_table(deployment)
    dynamodb = deployment.client("dynamodb")
    if dataset is not None:
        record = runs.get_run(dataset, run_id, table_name=table, client=dynamodb)
        matches = [record] if record is not None else []
    else:
        matches = [r for r in runs.list_runs(table_name=table, client=dynamodb) if r["run_id"] == run_id]
    if not matches:
        where = f" of data set {dataset!r}" if dataset else ""
        raise RunNotFoundError(f"no run {run_id!r}{where}: list the runs with `retrain runs`")
    if len(matches) > 1:
        found = ", ".join(sorted(r["dataset"] for r in matches))
        raise RunNotFoundError(f"run id {run_id!r} exists in data sets {found}: add --dataset NAME")
    return matches[0]


def ledger_partitions(deployment: Deployment, dataset: str) -> Partitions:
    return datasets.partitions(
        dataset,
        table_name=deployment.output(names.STACK_OUTPUTS["datasets_table"]),
        client=deployment.client("dynamodb"),
    )


def ledger_rows(deployment: Deployment, dataset: str, state: str | None = None) -> list[dict[str, Any]]:
    table = deployment.output(names.STACK_OUTPUTS["ledger_table"])
    parts = ledger_partitions(deployment, dataset)
    return list(ledger.rows(parts, table_name=table, client=deployment.client("dynamodb"), state=state))


def uploads(
    rows: Iterable[dict[str, Any]], keys: set[str] | None = None, *, before: str = ""
) -> tuple[int, list[Rejected]]:
    """Accepted count and rejected keys with reasons, of the given keys (or of every row), of the rows
    recorded before `before` when it is given (a run's cut)."""
    accepted = 0
    rejected: list[Rejected] = []
    for row in rows:
        key = str(row.get(names.LEDGER_SK, ""))
        if keys is not None and key not in keys:
            continue
        if before and str(row.get(ledger_contract.RECORDED_AT, "")) >= before:
            continue
        state = row.get(LEDGER_STATE)
        if state == names.STATE_REJECTED:
            reason = str(row.get(LEDGER_REASON, "no reason recorded"))
            rejected.append(Rejected(key, reason, str(row.get("problem", names.PROBLEM_LAYOUT))))
        elif state != names.STATE_REMOVED:
            accepted += 1
    return accepted, sorted(rejected, key=lambda r: r.key)


def intake(
    facts: RunFacts, record: runs.RunRecord, rows: list[dict[str, Any]], keys: set[str] | None
) -> None:
    """What the run took in, from its frozen figures and the ledger rows recorded before its cut, and the
    data set's uploads now, labelled apart: a run's report does not change as later uploads arrive."""
    facts.dataset_accepted, dataset_rejected = uploads(rows, keys)
    facts.dataset_rejected = len(dataset_rejected)
    facts.cut = str(record.get("cut", ""))
    if not facts.cut:  # no manifest was frozen: the run took nothing in
        return
    counted, facts.rejected = uploads(rows, keys, before=facts.cut)
    frozen = record.get("accepted_uploads")
    facts.accepted = int(frozen) if frozen is not None and keys is None else counted
    facts.new_uploads = int(record.get("new_images", 0))
    refused = record.get("rejected_uploads")
    facts.refused = sum(int(n) for n in refused.values()) if refused and keys is None else len(facts.rejected)


def _objective(summary: dict[str, Any]) -> float | None:
    metric = summary.get("FinalHyperParameterTuningJobObjectiveMetric") or {}
    value = metric.get("Value")
    return float(value) if value is not None else None


def resumed_steps(lines: Iterable[str]) -> list[int]:
    return [int(m.group(1)) for line in lines for m in _RESUMED.finditer(line)]


def describe_trial(
    sagemaker: Any, job_name: str, *, objective: float | None = None, tuned: dict[str, str] | None = None
) -> Trial:
    job = sagemaker.describe_training_job(TrainingJobName=job_name)
    transitions = job.get("SecondaryStatusTransitions", [])
    resources = job.get("ResourceConfig", {})
    hyperparameters = tuned if tuned is not None else dict(job.get("HyperParameters", {}))
    return Trial(
        job_name=job_name,
        status=str(job.get("TrainingJobStatus", "")),
        objective=objective,
        hyperparameters={k: str(v).strip('"') for k, v in hyperparameters.items()},
        training_seconds=int(job.get("TrainingTimeInSeconds") or 0),
        billable_seconds=int(job.get("BillableTimeInSeconds") or 0),
        interruptions=sum(1 for t in transitions if t.get("Status") == INTERRUPTED_STATUS),
        instance_type=str(resources.get("InstanceType", "")),
        instance_count=int(resources.get("InstanceCount") or 1),
    )


def tuning_trials(sagemaker: Any, tuning_job: str) -> list[Trial]:
    trials: list[Trial] = []
    kwargs: dict[str, Any] = {"HyperParameterTuningJobName": tuning_job}
    while True:
        page = sagemaker.list_training_jobs_for_hyper_parameter_tuning_job(**kwargs)
        for summary in page.get("TrainingJobSummaries", []):
            trials.append(
                describe_trial(
                    sagemaker,
                    summary["TrainingJobName"],
                    objective=_objective(summary),
                    tuned={k: str(v) for k, v in summary.get("TunedHyperParameters", {}).items()},
                )
            )
        if not page.get("NextToken"):
            break
        kwargs["NextToken"] = page["NextToken"]
    return sorted(trials, key=lambda t: t.job_name)


def split_s3_uri(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"not an s3:// URI: {uri!r}")
    return parsed.netloc, parsed.path.lstrip("/")


def read_json_object(s3: Any, uri: str, filename: str) -> Any | None:
    """A JSON file at `uri`, or at `uri/filename` when `uri` is a prefix; None when absent."""
    bucket, key = split_s3_uri(uri)
    candidates = [key] if key.endswith(".json") else [key.rstrip("/") + "/" + filename]
    for candidate in candidates:
        try:
            body = s3.get_object(Bucket=bucket, Key=candidate)["Body"].read()
        except botocore.exceptions.ClientError:
            continue
        return json.loads(body)
    return None


def evaluation_from(record: runs.RunRecord, s3: Any, artifact_bucket: str) -> Evaluation:
    """The challenger's evaluation.json (where the record points, else where the run writes it)."""
    challenger = record.get("challenger", {})
    champion = record.get("champion", {})
    evaluation = Evaluation(top1=challenger.get("top1"), top3=challenger.get("top3"))
    evaluation.baseline_top1 = champion.get("top1")
    default = names.evaluation_prefix(record["dataset"], record["run_id"], CHALLENGER)
    uri = challenger.get("report_uri") or f"s3://{artifact_bucket}/{default}"
    document = read_json_object(s3, uri, contract.EVALUATION_FILE) if uri else None
    if isinstance(document, dict):
        evaluation.top1 = document.get("top1", evaluation.top1)
        evaluation.top3 = document.get("top3", evaluation.top3)
        evaluation.per_class = dict(document.get("per_class") or {})
        evaluation.labels = [str(label) for label in document.get("labels") or []]
        evaluation.confusion_matrix = [
            [int(c) for c in row] for row in document.get("confusion_matrix") or []
        ]
        evaluation.confusions = [
            (str(true), str(predicted), int(count))
            for true, predicted, count in document.get("confusions") or []
        ]
        baseline = document.get("baseline")
        if isinstance(baseline, dict) and baseline.get("top1") is not None:
            evaluation.baseline_top1 = float(baseline["top1"])
    return evaluation


def rule_results_from(record: runs.RunRecord, s3: Any, artifact_bucket: str) -> list[RuleResult]:
    """The record's rule results, else the rule check's rule_results.json under the run's prefix."""
    found: Any = record.get("rule_results")
    if not found:
        prefix = names.rules_prefix(record["dataset"], record["run_id"])
        found = read_json_object(s3, f"s3://{artifact_bucket}/{prefix}", contract.RULE_RESULTS_FILE)
    if not isinstance(found, list):
        return []
    return [
        RuleResult(
            rule=str(r["rule"]),
            status=str(r["status"]),
            step=r.get("step"),
            detail=str(r.get("detail", "")),
            action=str(r.get("action", "")),
        )
        for r in found
        if isinstance(r, dict) and "rule" in r and "status" in r
    ]


def thumbnail(body: bytes) -> bytes:
    """A small JPEG of an image (the report's thumbnail), or b"" when the bytes are no image it can read."""
    if not body:
        return b""
    try:
        from PIL import Image  # Pillow comes with matplotlib, which the report's charts need
    except ImportError:
        return b""
    out = io.BytesIO()
    try:
        with Image.open(io.BytesIO(body)) as image:
            image.thumbnail((THUMBNAIL_PIXELS, THUMBNAIL_PIXELS))
            image.convert("RGB").save(out, format="JPEG", quality=80)
    except (OSError, ValueError, Image.DecompressionBombError):
        return b""
    return out.getvalue()


def _object(s3: Any, bucket: str, key: str) -> bytes:
    """The object's bytes; b"" when it is gone (relabelled or deleted since the run)."""
    try:
        return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except botocore.exceptions.ClientError:
        return b""


def arrivals_from(
    facts: RunFacts, record: runs.RunRecord, s3: Any, data_bucket: str, *, thumbnails: bool
) -> None:
    """The record's `arrivals` (the champion on the run's new uploads) as is, and the first
    REPORT_SUSPECTS suspected label errors of its suspects.json, each with a thumbnail of its image in the
    data bucket when `thumbnails` (the report is written)."""
    section = record.get("arrivals")
    if not isinstance(section, Mapping) or not section:
        return
    facts.arrivals = dict(section)
    uri = str(section.get("suspects_uri") or "")
    if not uri or not int(section.get("suspect_count") or 0):
        return
    try:
        document = read_json_object(s3, uri, contract.SUSPECTS_FILE)
    except ValueError as error:  # not an s3:// URI, or not JSON
        facts.suspects_problem = f"the suspects list at {uri} is unreadable: {error}"
        return
    if not isinstance(document, dict):
        facts.suspects_problem = f"no suspects list at {uri}"
        return
    prefix = names.dataset_prefix(facts.dataset)
    for entry in list(document.get("suspects") or [])[:REPORT_SUSPECTS]:
        if not isinstance(entry, dict) or not entry.get("key"):
            continue
        key = str(entry["key"])
        image = b""
        if thumbnails:
            image = thumbnail(_object(s3, data_bucket, key if key.startswith(prefix) else prefix + key))
        facts.suspects.append(
            Suspect(
                key=key,
                given=str(entry.get("given", "")),
                suggested=str(entry.get("suggested", "")),
                confidence=float(entry.get("confidence") or 0.0),
                thumbnail=image,
            )
        )


def extract_profile(sagemaker: Any, s3: Any, job_name: str, out_dir: Path) -> Path | None:
    """The system profile the job shipped in output.tar.gz, extracted under out_dir; None without one."""
    job = sagemaker.describe_training_job(TrainingJobName=job_name)
    output_path = job.get("OutputDataConfig", {}).get("S3OutputPath")
    if not output_path:
        return None
    bucket, prefix = split_s3_uri(output_path)
    key = f"{prefix.rstrip('/')}/{job_name}/output/output.tar.gz".lstrip("/")
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except botocore.exceptions.ClientError:
        return None
    target = out_dir / "jobs" / job_name
    profile = contract.PROFILE_DIRNAME
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        members = [m for m in archive.getmembers() if m.name.lstrip("./").startswith(profile + "/")]
        archive.extractall(target, members=members, filter="data")
    found = target / profile
    return found if found.is_dir() else None


def ended_without_record(deployment: Deployment, facts: RunFacts) -> None:
    """A run whose execution stopped before its record said so (its failure handler failed too): the
    execution's status and cause are the truth then."""
    execution = deployment.client("stepfunctions").describe_execution(executionArn=facts.execution_arn)
    status = str(execution.get("status", ""))
    if status in EXECUTION_FAILED:
        facts.status = "FAILED"
        cause = f"{execution.get('error', '')}: {execution.get('cause', '')}".strip(": ")
        facts.failure = facts.failure or f"execution {status}: {cause or 'no cause given'}"
        stopped = execution.get("stopDate")
        if isinstance(stopped, datetime):
            facts.stopped = facts.stopped or stopped.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def execution_phases(deployment: Deployment, execution_arn: str) -> list[timing.Phase]:
    """The run's phases, or none when Step Functions no longer holds its execution (the embedded stack
    keeps executions in memory only, so a restarted one has lost them; AWS keeps them 90 days)."""
    try:
        return timing.run_phases(deployment.client("stepfunctions"), execution_arn)
    except botocore.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
            raise
        return []


def collect(
    deployment: Deployment,
    record: runs.RunRecord,
    *,
    out_dir: Path | None = None,
    upload_keys: set[str] | None = None,
) -> RunFacts:
    sagemaker = deployment.client("sagemaker")
    s3 = deployment.client("s3")
    logs = deployment.client("logs")
    gate = record.get("gate")
    failure = record.get("failure")
    # per-label counts live in S3 (the record holds their URI), so that no record grows with the labels
    counts_uri = record.get("class_counts_uri")
    counts: dict[str, Any] = (read_json_object(s3, counts_uri, "") if counts_uri else None) or {}
    facts = RunFacts(
        run_id=record["run_id"],
        dataset=record["dataset"],
        status=record["status"],
        started=record.get("created_at", ""),
        stopped=record.get("finished_at", ""),
        failure=f"{failure['error']}: {failure['cause']}" if failure else "",
        execution_arn=record.get("execution_arn", ""),
        tuning_job=record.get("tuning_job", ""),
        best_job=record.get("best_training_job", ""),
        best_hyperparameters=dict(record.get("best_hyperparameters", {})),
        objective=record.get("best_objective"),
        objective_metric=contract.OBJECTIVE_METRIC,
        checkpoint_evaluations=[
            CheckpointEvaluation(
                step=int(p["step"]),
                top1=float(p["top1"]),
                top3=p.get("top3"),
                training_job=p.get("training_job", ""),
            )
            for p in record.get("checkpoint_evaluations", [])
            if p.get("top1") is not None and "step" in p
        ],
        gate_passed=(
            None
            if gate is None or str(gate["decision"]) not in GATE_DECISIONS
            else gate["decision"] == "accepted"
        ),
        gate_reason="" if gate is None else gate["reason"],
        gate_decision="" if gate is None else str(gate["decision"]),
        model_package=record.get("model_package_arn", ""),
        class_balance=dict(record.get("class_balance", {})),
        class_counts={label: dict(c) for label, c in counts.get("class_counts", {}).items()},
        excluded_labels=dict(counts.get("excluded_labels") or record.get("excluded_labels", {})),
        started_from={k: str(v) for k, v in record.get("started_from", {}).items()},
        mlflow_run_id=str(record.get("mlflow_run_id", "")),
        tracking_warnings=[str(w) for w in record.get("tracking_warnings", [])],
        unreadable=[
            Rejected(str(item["key"]), str(item["reason"]), "unreadable")
            for item in record.get("unreadable_images", [])
        ],
    )
    if facts.status not in runs.FINAL_STATUSES and facts.execution_arn:
        ended_without_record(deployment, facts)
    intake(facts, record, ledger_rows(deployment, facts.dataset), upload_keys)
    if facts.execution_arn:
        facts.phases = execution_phases(deployment, facts.execution_arn)
    if facts.tuning_job:
        facts.trials = tuning_trials(sagemaker, facts.tuning_job)
        tuning = sagemaker.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=facts.tuning_job)
        best = tuning.get("BestTrainingJob") or {}
        facts.best_job = facts.best_job or best.get("TrainingJobName", "")
        if facts.objective is None:
            facts.objective = _objective(best)
        if not facts.best_hyperparameters:
            facts.best_hyperparameters = {k: str(v) for k, v in best.get("TunedHyperParameters", {}).items()}
        objective = tuning.get("HyperParameterTuningJobConfig", {}).get(
            "HyperParameterTuningJobObjective", {}
        )
        facts.objective_metric = objective.get("MetricName", facts.objective_metric)
    final = record.get("final_training_job")
    if final:
        facts.training_jobs = [describe_trial(sagemaker, final)]
    for job in facts.all_jobs:
        lines = list(job_logs.log_lines(logs, job_logs.TRAINING_LOG_GROUP, job.job_name))
        facts.curves[job.job_name] = job_logs.parse_metric_lines(lines)
        facts.resumed_at_steps += resumed_steps(lines)
    artifact_bucket = deployment.output(names.STACK_OUTPUTS["artifact_bucket"])
    facts.rules = rule_results_from(record, s3, artifact_bucket)
    facts.evaluation = evaluation_from(record, s3, artifact_bucket)
    data_bucket = deployment.output(names.STACK_OUTPUTS["data_bucket"])
    arrivals_from(facts, record, s3, data_bucket, thumbnails=out_dir is not None)
    profiled = final or facts.best_job
    if out_dir is not None and profiled:
        facts.profile_dir = extract_profile(sagemaker, s3, profiled, out_dir)
    return facts
