"""Follow a run until it ends: the state machine's current state and history, each SageMaker job of the
run (trial, status, objective, spot interruptions and resumes) and the elapsed time.

`snapshot` makes the AWS calls; `render` (rich) and `plain_line` are pure views of a `Snapshot`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import botocore.exceptions
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from controller import names, notes, runs
from retrain.deployment import Deployment
from retrain.errors import RetrainError, RunFailedError
from retrain.report.collect import INTERRUPTED_STATUS, ledger_rows, uploads

POLL_SECONDS = 2.0
_JOB_NAME_KEYS = {
    "HyperParameterTuningJobName": "tuning",
    "TrainingJobName": "training",
    "ProcessingJobName": "processing",
}
_TERMINAL_EXECUTION = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")
# A run's final statuses that are no failure: a model registered, one the gate rejected, or none needed
# (TrainWhen=drift: the champion does as well on the new uploads; it stays).
ENDED_WELL: tuple[runs.RunStatus, ...] = ("SUCCEEDED", "REJECTED", "NOT_NEEDED")


@dataclass(frozen=True)
class JobRow:
    name: str
    kind: str  # trial | training | processing
    status: str
    secondary: str = ""
    objective: float | None = None
    interruptions: int = 0
    resumes: int = 0


@dataclass
class Snapshot:
    run_id: str
    dataset: str
    status: str
    execution_status: str = ""
    current_state: str = ""
    history: list[str] = field(default_factory=list)
    jobs: list[JobRow] = field(default_factory=list)
    elapsed_seconds: float = 0.0
    error: str = ""
    # The data set's refused uploads ({"key", "problem", "reason"}; they stay in the bucket until fixed),
    # the labels this run set aside and the files its training could not decode.
    rejected: list[dict[str, str]] = field(default_factory=list)
    excluded_labels: dict[str, str] = field(default_factory=dict)
    unreadable: list[dict[str, str]] = field(default_factory=list)
    started_from: dict[str, str] = field(default_factory=dict)  # the run's lineage (Prepare records it)
    # the champion on the run's new uploads (its decision under TrainWhen, and the notification's lines)
    arrivals_decision: str = ""
    arrivals: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.status in runs.FINAL_STATUSES or self.execution_status in _TERMINAL_EXECUTION[1:]


def _parse_time(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def execution_history(sfn: Any, execution_arn: str) -> tuple[list[str], str, dict[str, str], str]:
    """States entered in order, the one running now, the SageMaker jobs the run's Tasks named, and the
    execution's error (when it failed)."""
    events: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"executionArn": execution_arn, "maxResults": 1000}
    while True:
        page = sfn.get_execution_history(**kwargs)
        events.extend(page.get("events", []))
        if not page.get("nextToken"):
            break
        kwargs["nextToken"] = page["nextToken"]
    history: list[str] = []
    open_states: list[str] = []
    jobs: dict[str, str] = {}
    error = ""
    for event in events:
        kind = str(event.get("type", ""))
        if kind.endswith("StateEntered"):
            name = str(event.get("stateEnteredEventDetails", {}).get("name", ""))
            history.append(name)
            open_states.append(name)
        elif kind.endswith("StateExited"):
            name = str(event.get("stateExitedEventDetails", {}).get("name", ""))
            if name in open_states:
                open_states.remove(name)
        elif kind == "TaskScheduled":
            try:
                parameters = json.loads(event.get("taskScheduledEventDetails", {}).get("parameters", "{}"))
            except json.JSONDecodeError:
                parameters = {}
            if isinstance(parameters, dict):
                for key, job_kind in _JOB_NAME_KEYS.items():
                    if isinstance(parameters.get(key), str):
                        jobs[parameters[key]] = job_kind
        elif kind == "ExecutionFailed":
            details = event.get("executionFailedEventDetails", {})
            error = f"{details.get('error', '')}: {details.get('cause', '')}".strip(": ")
    return history, (open_states[-1] if open_states else ""), jobs, error


def _job_row(sagemaker: Any, name: str, kind: str, objective: float | None = None) -> JobRow:
    try:
        job = sagemaker.describe_training_job(TrainingJobName=name)
    except botocore.exceptions.ClientError:
        return JobRow(name=name, kind=kind, status="Pending", objective=objective)
    transitions = [str(t.get("Status", "")) for t in job.get("SecondaryStatusTransitions", [])]
    interrupted = [i for i, status in enumerate(transitions) if status == INTERRUPTED_STATUS]
    resumes = sum(1 for i in interrupted if "Training" in transitions[i + 1 :])
    return JobRow(
        name=name,
        kind=kind,
        status=str(job.get("TrainingJobStatus", "")),
        secondary=str(job.get("SecondaryStatus", "")),
        objective=objective,
        interruptions=len(interrupted),
        resumes=resumes,
    )


def _tuning_rows(sagemaker: Any, tuning_job: str) -> list[JobRow]:
    rows: list[JobRow] = []
    kwargs: dict[str, Any] = {"HyperParameterTuningJobName": tuning_job}
    try:
        while True:
            page = sagemaker.list_training_jobs_for_hyper_parameter_tuning_job(**kwargs)
            for summary in page.get("TrainingJobSummaries", []):
                metric = summary.get("FinalHyperParameterTuningJobObjectiveMetric") or {}
                value = metric.get("Value")
                objective = float(value) if value is not None else None
                rows.append(_job_row(sagemaker, summary["TrainingJobName"], "trial", objective))
            if not page.get("NextToken"):
                break
            kwargs["NextToken"] = page["NextToken"]
    except botocore.exceptions.ClientError:
        return rows
    return sorted(rows, key=lambda r: r.name)


def _processing_row(sagemaker: Any, name: str) -> JobRow:
    try:
        job = sagemaker.describe_processing_job(ProcessingJobName=name)
    except botocore.exceptions.ClientError:
        return JobRow(name=name, kind="processing", status="Pending")
    return JobRow(name=name, kind="processing", status=str(job.get("ProcessingJobStatus", "")))


def snapshot(deployment: Deployment, record: runs.RunRecord, *, now: datetime | None = None) -> Snapshot:
    shot = Snapshot(run_id=record["run_id"], dataset=record["dataset"], status=record["status"])
    started = _parse_time(record.get("created_at", ""))
    ended = _parse_time(record.get("finished_at", "")) if record["status"] in runs.FINAL_STATUSES else None
    if started is not None:
        shot.elapsed_seconds = max(0.0, ((ended or now or datetime.now(UTC)) - started).total_seconds())
    _, refused = uploads(ledger_rows(deployment, shot.dataset, state=names.STATE_REJECTED))
    shot.rejected = [{"key": r.key, "problem": r.problem, "reason": r.reason} for r in refused]
    shot.excluded_labels = dict(record.get("excluded_labels", {}))
    shot.unreadable = [dict(item) for item in record.get("unreadable_images", [])]
    shot.started_from = {k: str(v) for k, v in record.get("started_from", {}).items()}
    section = record.get("arrivals") or {}
    shot.arrivals_decision = str(section.get("decision") or "")
    shot.arrivals = notes.arrival_lines(record)
    sagemaker = deployment.client("sagemaker")
    jobs: dict[str, str] = {}
    arn = record.get("execution_arn")
    if arn:
        sfn = deployment.client("stepfunctions")
        try:
            shot.execution_status = str(sfn.describe_execution(executionArn=arn).get("status", ""))
            shot.history, shot.current_state, jobs, shot.error = execution_history(sfn, arn)
        except sfn.exceptions.ExecutionDoesNotExist:
            # Step Functions keeps a finished execution for 90 days; the embedded stack, until it stops.
            # The run record still says how the run ended and which jobs it ran.
            shot.execution_status = "EXPIRED"
    tuning = record.get("tuning_job") or next((n for n, k in jobs.items() if k == "tuning"), "")
    if tuning:
        shot.jobs.extend(_tuning_rows(sagemaker, tuning))
    seen = {row.name for row in shot.jobs}
    for name, kind in jobs.items():
        if name in seen:
            continue
        if kind == "training":
            shot.jobs.append(_job_row(sagemaker, name, "training"))
        elif kind == "processing":
            shot.jobs.append(_processing_row(sagemaker, name))
    return shot


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def render(shot: Snapshot) -> Group:
    title = Text.assemble(
        ("run ", "bold"), (shot.run_id, "bold cyan"), f"  {shot.dataset}  ",
        (shot.status, "bold green" if shot.status in ("SUCCEEDED", "NOT_NEEDED") else "bold"),
        f"  {_elapsed(shot.elapsed_seconds)}",
    )  # fmt: skip
    state = Text.assemble(("now: ", "bold"), shot.current_state or "—")
    history = Text.assemble(("states: ", "bold"), " → ".join(shot.history) or "—", style="dim")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("job", "kind", "status", "objective", "interrupted", "resumed"):
        table.add_column(column)
    for row in shot.jobs:
        status = (
            f"{row.status} ({row.secondary})" if row.secondary and row.secondary != row.status else row.status
        )
        objective = "—" if row.objective is None else f"{row.objective:.4f}"
        table.add_row(row.name, row.kind, status, objective, str(row.interruptions), str(row.resumes))
    parts: list[Any] = [title, state, history, table, *_data_parts(shot)]
    if shot.error:
        parts.append(Text(shot.error, style="bold red"))
    return Group(*parts)


SHOWN_PROBLEMS = 20


def _data_parts(shot: Snapshot) -> list[Any]:
    """Refused uploads (the first SHOWN_PROBLEMS, with reasons), labels set aside, unreadable files."""
    parts: list[Any] = []
    if shot.started_from:
        parts.append(Text.assemble(("started from: ", "bold"), notes.lineage(shot.started_from)))
    files = [(r["key"], r["problem"], r["reason"]) for r in shot.rejected]
    files += [(u["key"], "unreadable", u["reason"]) for u in shot.unreadable]
    if files:
        table = Table(box=None, pad_edge=False, header_style="bold", title_justify="left")
        for column in ("refused or unreadable file", "problem", "reason"):
            table.add_column(column, overflow="fold")
        for key, problem, reason in files[:SHOWN_PROBLEMS]:
            table.add_row(key, problem, reason)
        parts.append(table)
        if len(files) > SHOWN_PROBLEMS:
            more = len(files) - SHOWN_PROBLEMS
            parts.append(Text(f"... and {more} more: `retrain status --json` or the report lists all"))
    for label, why in sorted(shot.excluded_labels.items()):
        parts.append(Text.assemble(("label set aside: ", "bold"), f"{label}: {why}"))
    parts += [Text(line) for line in shot.arrivals]
    return parts


def plain_line(shot: Snapshot) -> str:
    trials = [r for r in shot.jobs if r.kind == "trial"]
    done = sum(1 for r in trials if r.status in ("Completed", "Failed", "Stopped"))
    interruptions = sum(r.interruptions for r in shot.jobs)
    return (
        f"run {shot.run_id} {shot.status} state={shot.current_state or '-'} "
        f"trials={done}/{len(trials)} interruptions={interruptions} elapsed={_elapsed(shot.elapsed_seconds)}"
        + (f" start={shot.started_from.get('kind', '')}" if shot.started_from else "")
        + (f" rejected={len(shot.rejected)}" if shot.rejected else "")
        + (f" unreadable={len(shot.unreadable)}" if shot.unreadable else "")
        + (f" labels_set_aside={','.join(sorted(shot.excluded_labels))}" if shot.excluded_labels else "")
        + (f" arrivals={shot.arrivals_decision}" if shot.arrivals_decision else "")
    )


def wait_for_run(
    deployment: Deployment,
    dataset: str,
    *,
    since: str = "",
    run_id: str | None = None,
    execution_arn: str | None = None,
    timeout_seconds: float,
    poll_seconds: float = POLL_SECONDS,
    on_wait: Callable[[], None] | None = None,
) -> runs.RunRecord:
    """The run with `run_id`, or else the first run of `dataset` created at or after `since`, once it
    exists. An execution that ends before its first state recorded the run fails with its own cause."""
    table = deployment.output(names.STACK_OUTPUTS["runs_table"])
    deadline = time.monotonic() + timeout_seconds
    while True:
        found = runs.list_runs(table_name=table, dataset=dataset, client=deployment.client("dynamodb"))
        for record in found[::-1]:
            if record["run_id"] == run_id or (run_id is None and record.get("created_at", "") >= since):
                return record
        if execution_arn is not None:
            execution = deployment.client("stepfunctions").describe_execution(executionArn=execution_arn)
            if execution.get("status") in _TERMINAL_EXECUTION:
                cause = f"{execution.get('error', '')}: {execution.get('cause', '')}".strip(": ")
                raise RunFailedError(
                    f"execution {execution_arn} ended {execution['status']} before it recorded a run: "
                    f"{cause or 'no cause given'}"
                )
        if on_wait is not None:
            on_wait()
        if time.monotonic() >= deadline:
            raise RetrainError(
                f"no run of data set {dataset!r} started within {int(timeout_seconds)} s: check "
                "`retrain runs` and the ingest queue's dead-letter queue, or start one with `retrain start`"
            )
        time.sleep(poll_seconds)


def follow(
    deployment: Deployment,
    record: runs.RunRecord,
    *,
    console: Console,
    live: bool,
    timeout_seconds: float,
    poll_seconds: float = POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> runs.RunRecord:
    """Poll the run until it reaches a final status; show progress live on a TTY, plain lines otherwise."""
    table = deployment.output(names.STACK_OUTPUTS["runs_table"])
    dynamodb = deployment.client("dynamodb")
    deadline = time.monotonic() + timeout_seconds
    last_line = ""

    def refresh() -> Snapshot:
        nonlocal record
        record = (
            runs.get_run(record["dataset"], record["run_id"], table_name=table, client=dynamodb) or record
        )
        return snapshot(deployment, record)

    def timed_out() -> RetrainError:
        return RetrainError(
            f"run {record['run_id']} still {record['status']} after {int(timeout_seconds)} s: it goes on; "
            f"follow it with `retrain status {record['run_id']}`"
        )

    if live:
        with Live(render(refresh()), console=console, refresh_per_second=4, transient=False) as view:
            while True:
                shot = refresh()
                view.update(render(shot))
                if shot.finished:
                    return record
                if time.monotonic() >= deadline:
                    raise timed_out()
                sleep(poll_seconds)
    while True:
        shot = refresh()
        line = plain_line(shot)
        if line.split(" elapsed=")[0] != last_line.split(" elapsed=", maxsplit=1)[0]:
            console.print(line, highlight=False, soft_wrap=True)
            last_line = line
        if shot.finished:
            return record
        if time.monotonic() >= deadline:
            raise timed_out()
        sleep(poll_seconds)
