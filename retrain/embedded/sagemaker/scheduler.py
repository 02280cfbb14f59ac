"""JobScheduler: the jobs behind the SageMaker API, from admission to their runs on threads.

It holds the job records (persisted by the JobStore), admits new jobs (unique names, the concurrent
training job limit), starts a TrainingRun, ProcessingRun or TuningRun on a thread of its own, gives
each run the callbacks that update its record, and stops runs. Records are plain JSON dicts with
epoch-second times; `responses.py` shapes them for boto3.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrain.embedded.sagemaker import debugger
from retrain.embedded.sagemaker.errors import (
    RESOURCE_LIMIT_EXCEEDED,
    client_error,
    injected_error,
    validation,
)
from retrain.embedded.sagemaker.processing import ProcessingRun
from retrain.embedded.sagemaker.store import JobStore
from retrain.embedded.sagemaker.training import JobContext, JobControl, TrainingRun
from retrain.embedded.sagemaker.tuning import (
    TUNING_OPERATION,
    TuningRun,
    check_tuning_request,
    objective_value,
)

# SageMaker adds this hyperparameter to every training job a tuning job launches.
TUNING_OBJECTIVE_HYPERPARAMETER = "_tuning_objective_metric"
ACTIVE = ("InProgress", "Stopping")
TRAINING_TERMINAL_SECONDARY = ("Completed", "Failed", "Stopped", "MaxRuntimeExceeded", "MaxWaitTimeExceeded")
KINDS = ("training", "processing", "tuning")
STATUS_KEYS = {
    "training": "TrainingJobStatus",
    "processing": "ProcessingJobStatus",
    "tuning": "HyperParameterTuningJobStatus",
}
# What a job that a stopped runtime left running becomes, per kind: (kind, end-time key, more).
_ORPHAN_FIELDS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("training", "TrainingEndTime", {"SecondaryStatus": "Failed"}),
    ("processing", "ProcessingEndTime", {}),
    ("tuning", "HyperParameterTuningEndTime", {}),
)
# Keys of a tuning job's TrainingJobDefinition that are not part of its trials' CreateTrainingJob.
_DEFINITION_ONLY = (
    "StaticHyperParameters",
    "DefinitionName",
    "TuningObjective",
    "HyperParameterRanges",
    "HyperParameterTuningResourceConfig",
)


@dataclass(frozen=True)
class SchedulerSettings:
    """How many training jobs may run at once, and how tuning jobs sample and stop trials early."""

    max_concurrent_training_jobs: int = 8
    tuning_seed: int | None = None
    early_stopping_startup_trials: int = 2


class JobScheduler:
    """Job records and the threads that run them; every record change goes through `lock`."""

    def __init__(
        self, workdir: Path, context: JobContext, settings: SchedulerSettings, arn_prefix: str
    ) -> None:
        self.workdir = workdir
        self.context = context
        self.settings = settings
        self.arn_prefix = arn_prefix
        self.store = JobStore(workdir / "records")
        self.lock = threading.RLock()
        self.records: dict[str, dict[str, dict[str, Any]]] = {
            kind: self.store.load_all(kind) for kind in KINDS
        }
        self._threads: list[threading.Thread] = []
        self._controls: dict[tuple[str, str], JobControl] = {}
        self._tuning_stops: dict[str, threading.Event] = {}
        self._fail_orphans()

    def arn(self, kind: str, name: str) -> str:
        return f"{self.arn_prefix}:{kind}/{name.lower()}"

    # -- records -------------------------------------------------------------------------------------

    def _fail_orphans(self) -> None:
        """Jobs a previous runtime left running cannot be resumed; they end Failed, as on lost hardware."""
        reason = "InternalServerError: the embedded runtime stopped while this job ran; start the job again"
        now = time.time()
        for kind, ended_key, extra in _ORPHAN_FIELDS:
            status_key = STATUS_KEYS[kind]
            for name, record in self.records[kind].items():
                if record[status_key] in ACTIVE:
                    record.update(
                        {status_key: "Failed", ended_key: now, **extra},
                        FailureReason=reason,
                        LastModifiedTime=now,
                    )
                    self.store.save(kind, record, name)

    def snapshot(self, kind: str, name: str) -> dict[str, Any] | None:
        """A copy of the job's record, or None when there is no such job."""
        with self.lock:
            return copy.deepcopy(self.records[kind].get(name))

    def snapshots(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            return copy.deepcopy(list(self.records[kind].items()))

    def tuning_snapshot(self, name: str) -> tuple[dict[str, Any], dict[str, dict[str, Any] | None]]:
        """A copy of a tuning job's record and of its trials' training records, taken together."""
        with self.lock:
            record = copy.deepcopy(self.records["tuning"][name])
            trainings = {
                t["TrainingJobName"]: copy.deepcopy(self.records["training"].get(t["TrainingJobName"]))
                for t in record["Trials"]
            }
        return record, trainings

    def _create_record(self, kind: str, name: str, record: dict[str, Any]) -> None:
        now = time.time()
        record.update(CreationTime=now, LastModifiedTime=now)
        self.records[kind][name] = record
        self.store.save(kind, record, name)

    def updater(self, kind: str, name: str) -> Callable[[dict[str, Any]], None]:
        def update(changes: dict[str, Any]) -> None:
            with self.lock:
                record = self.records[kind][name]
                record.update(copy.deepcopy(changes))
                record["LastModifiedTime"] = time.time()
                self.store.save(kind, record, name)

        return update

    def _transitioner(self, name: str) -> Callable[[str, str], None]:
        def transition(status: str, message: str) -> None:
            with self.lock:
                record = self.records["training"][name]
                now = time.time()
                transitions = record["SecondaryStatusTransitions"]
                if transitions and "EndTime" not in transitions[-1]:
                    transitions[-1]["EndTime"] = now
                entry: dict[str, Any] = {"Status": status, "StartTime": now, "StatusMessage": message}
                if status in TRAINING_TERMINAL_SECONDARY:
                    entry["EndTime"] = now
                transitions.append(entry)
                record["SecondaryStatus"] = status
                record["LastModifiedTime"] = now
                self.store.save("training", record, name)

        return transition

    # -- threads -------------------------------------------------------------------------------------

    def _start_thread(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        with self.lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every job thread ended; False when the timeout passed first."""
        deadline = None if timeout is None else time.time() + timeout
        while True:
            with self.lock:
                alive = [t for t in self._threads if t.is_alive()]
            if not alive:
                return True
            remaining = None if deadline is None else deadline - time.time()
            if remaining is not None and remaining <= 0:
                return False
            alive[0].join(timeout=remaining)

    def close(self, timeout: float) -> None:
        """Stop every running job and wait for them."""
        with self.lock:
            for event in self._tuning_stops.values():
                event.set()
            for control in self._controls.values():
                control.stop_requested.set()
        self.wait(timeout)

    def request_stop(self, kind: str, name: str, check: Callable[[dict[str, Any] | None], None]) -> None:
        """`check` sees the job's record (None when there is none) under the lock and raises the API's
        error when the job cannot be stopped; otherwise the job reads Stopping and its run is told."""
        with self.lock:
            check(self.records[kind].get(name))
            if kind == "tuning":
                signal = self._tuning_stops[name].set
            else:
                control = self._controls[(kind, name)]
                control.stop_reason = "Stopped"
                signal = control.stop_requested.set
        self.updater(kind, name)({STATUS_KEYS[kind]: "Stopping"})
        signal()

    # -- training jobs -------------------------------------------------------------------------------

    def launch_training(self, request: dict[str, Any], tuning_arn: str | None, control: JobControl) -> str:
        """Admits a training job (unique name, concurrency limit), records it and starts its run."""
        name = request["TrainingJobName"]
        arn = self.arn("training-job", name)
        with self.lock:
            self._admit_training(name, arn)
            record: dict[str, Any] = {
                "request": request,
                "TrainingJobArn": arn,
                "TrainingJobStatus": "InProgress",
                "SecondaryStatus": "Starting",
                "SecondaryStatusTransitions": [],
                "Interruptions": [],
            }
            if tuning_arn is not None:
                record["TuningJobArn"] = tuning_arn
            rule_statuses = debugger.initial_statuses(request, self.arn_prefix, name)
            record.update(rule_statuses)
            self._create_record("training", name, record)
            self._controls[("training", name)] = control
        run = TrainingRun(
            request,
            job_dir=self.workdir / "training" / name,
            context=self.context,
            control=control,
            update=self.updater("training", name),
            transition=self._transitioner(name),
            rule_statuses=rule_statuses,
            arn=arn,
        )
        self._start_thread(run.run, f"training-{name}")
        return arn

    def _admit_training(self, name: str, arn: str) -> None:
        operation = "CreateTrainingJob"
        training = self.records["training"]
        if name in training:
            raise validation(
                f"Training job names must be unique within an AWS account and region, and a training job "
                f"with this name already exists ({arn})",
                operation,
            )
        active = sum(r["TrainingJobStatus"] in ACTIVE for r in training.values())
        limit = self.settings.max_concurrent_training_jobs
        if active >= limit:
            raise client_error(
                RESOURCE_LIMIT_EXCEEDED,
                f"The account-level service limit 'Number of concurrent training jobs' is "
                f"{limit} jobs, with current utilization of {active} jobs "
                "and a request delta of 1 jobs. Wait for a job to end or raise "
                "max_concurrent_training_jobs.",
                operation,
            )

    # -- processing jobs -----------------------------------------------------------------------------

    def launch_processing(self, request: dict[str, Any]) -> str:
        name = request["ProcessingJobName"]
        arn = self.arn("processing-job", name)
        control = JobControl()
        with self.lock:
            if name in self.records["processing"]:
                raise validation(
                    f"Job name must be unique within an AWS account and region, and a job with this name "
                    f"already exists ({arn})",
                    "CreateProcessingJob",
                )
            record = {"request": request, "ProcessingJobArn": arn, "ProcessingJobStatus": "InProgress"}
            self._create_record("processing", name, record)
            self._controls[("processing", name)] = control
        run = ProcessingRun(
            request,
            self.workdir / "processing" / name,
            self.context,
            control,
            self.updater("processing", name),
        )
        self._start_thread(run.run, f"processing-{name}")
        return arn

    # -- tuning jobs ---------------------------------------------------------------------------------

    def launch_tuning(self, request: dict[str, Any]) -> str:
        """Admits a tuning job (unique name, the request's tuning checks, warm start parents), records it
        and starts the run that launches its trials; a run that cannot start leaves the job Failed."""
        name = request["HyperParameterTuningJobName"]
        arn = self.arn("hyper-parameter-tuning-job", name)
        stop = threading.Event()
        with self.lock:
            if name in self.records["tuning"]:
                raise client_error(
                    "ResourceInUse", f"Tuning job with name {name} already exists ({arn})", TUNING_OPERATION
                )
            check_tuning_request(request, known_tuning_jobs=self.records["tuning"])
            parent_trials = self._parent_trials(request)
            record: dict[str, Any] = {
                "request": request,
                "HyperParameterTuningJobArn": arn,
                "HyperParameterTuningJobStatus": "InProgress",
                "Trials": [],
            }
            self._create_record("tuning", name, record)
            self._tuning_stops[name] = stop
        update = self.updater("tuning", name)
        try:
            run = TuningRun(
                record,
                launch=lambda trial, tuned, control: self._launch_trial(request, arn, trial, tuned, control),
                training_record=self._trial_record,
                parent_trials=parent_trials,
                update=update,
                stop_event=stop,
                seed=self.settings.tuning_seed,
                early_stopping_startup_trials=self.settings.early_stopping_startup_trials,
            )
        except Exception as exc:
            update(
                {
                    "HyperParameterTuningJobStatus": "Failed",
                    "FailureReason": f"{exc}",
                    "HyperParameterTuningEndTime": time.time(),
                }
            )
            raise
        self._start_thread(run.run, f"tuning-{name}")
        return arn

    def _trial_record(self, name: str) -> dict[str, Any]:
        record = self.snapshot("training", name)
        if record is None:
            raise validation(
                f"Requested resource not found: training job {name!r} does not exist", "DescribeTrainingJob"
            )
        return record

    def _launch_trial(
        self, request: dict[str, Any], tuning_arn: str, trial: str, tuned: dict[str, str], control: JobControl
    ) -> None:
        """One trial: the tuning job's training definition with the static and tuned hyperparameters.
        The tuning service creates it with CreateTrainingJob, so an error injected there (throttling, an
        account limit) reaches the tuner, which waits and asks again."""
        injected = self.context.faults.create_training_job_error(trial)
        if injected is not None:
            raise injected_error(injected, "CreateTrainingJob")
        definition = request["TrainingJobDefinition"]
        job = {k: copy.deepcopy(v) for k, v in definition.items() if k not in _DEFINITION_ONLY}
        job["TrainingJobName"] = trial
        objective = request["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]
        job["HyperParameters"] = {
            **(definition.get("StaticHyperParameters") or {}),
            **tuned,
            TUNING_OBJECTIVE_HYPERPARAMETER: objective["MetricName"],
        }
        self.launch_training(job, tuning_arn, control)

    def _parent_trials(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        """The warm start parents' trials with their objective values (called under the lock)."""
        warm = request.get("WarmStartConfig")
        if not warm:
            return []
        trials: list[dict[str, Any]] = []
        for parent in warm["ParentHyperParameterTuningJobs"]:
            record = self.records["tuning"][parent["HyperParameterTuningJobName"]]
            metric = record["request"]["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"][
                "MetricName"
            ]
            for trial in record.get("Trials") or []:
                training = self.records["training"].get(trial["TrainingJobName"], {})
                trials.append(
                    {
                        "TrainingJobName": trial["TrainingJobName"],
                        "TunedHyperParameters": trial["TunedHyperParameters"],
                        "ObjectiveValue": objective_value(training, metric),
                    }
                )
        return trials
