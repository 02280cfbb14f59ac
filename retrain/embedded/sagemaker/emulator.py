"""SageMakerEmulator: the SageMaker API of the embedded runtime, with boto3's request and response shapes.

Training and processing jobs run the `training_image/` code as child processes (any ImageUri maps to
that one image); tuning jobs drive trials with optuna; the model registry is moto's. Job records are
JSON files under the work directory so a restarted stack still describes old jobs and warm start
finds a parent tuning job's trials.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.sagemaker import debugger
from retrain.embedded.sagemaker.errors import (
    RESOURCE_LIMIT_EXCEEDED,
    RESOURCE_NOT_FOUND,
    VALIDATION,
    client_error,
    validation,
)
from retrain.embedded.sagemaker.logs import LogsClient
from retrain.embedded.sagemaker.processing import ProcessingRun
from retrain.embedded.sagemaker.registry import ModelRegistry, _page
from retrain.embedded.sagemaker.spot import NoFaults, SageMakerFaults, SpotSchedule
from retrain.embedded.sagemaker.store import JobStore
from retrain.embedded.sagemaker.training import JobContext, JobControl, RoleSession, TrainingRun
from retrain.embedded.sagemaker.tuning import (
    TERMINAL,
    TUNING_OPERATION,
    TuningRun,
    check_tuning_request,
    objective_value,
)
from retrain.embedded.sagemaker.validation import (
    TUNING_NAME_PATTERN,
    check_name,
    check_processing_request,
    check_training_definition,
    check_training_request,
    require,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# The image's code as the Dockerfile lays it out in /opt/ml/code (retrain_contract is installed with it).
DEFAULT_CODE_DIR = Path(__file__).resolve().parents[3] / "training_image"
TIME_FIELDS = frozenset(
    {
        "CreationTime",
        "LastModifiedTime",
        "TrainingStartTime",
        "TrainingEndTime",
        "ProcessingStartTime",
        "ProcessingEndTime",
        "HyperParameterTuningEndTime",
        "StartTime",
        "EndTime",
        "Timestamp",
        "Time",
    }
)
INTERRUPTIONS_FIELD = "retrain:interruptions"
# SageMaker adds this hyperparameter to every training job a tuning job launches.
TUNING_OBJECTIVE_HYPERPARAMETER = "_tuning_objective_metric"
ACTIVE = ("InProgress", "Stopping")
TRAINING_TERMINAL_SECONDARY = ("Completed", "Failed", "Stopped", "MaxRuntimeExceeded", "MaxWaitTimeExceeded")


def _aware(value: Any, key: str = "") -> Any:
    """Epoch seconds in a record -> the timezone-aware datetimes boto3 returns."""
    if key in TIME_FIELDS and isinstance(value, int | float):
        return datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, dict):
        return {k: _aware(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_aware(v, key) for v in value]
    return value


def _plain(request: dict[str, Any]) -> dict[str, Any]:
    """A deep, JSON-safe copy of a request (datetimes as epoch seconds, null members dropped as
    Step Functions may pass `"VpcConfig.$"` paths that resolve to null)."""

    def default(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.timestamp()
        raise TypeError(f"{type(value).__name__} is not JSON serialisable")

    def drop_nulls(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: drop_nulls(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [drop_nulls(v) for v in value]
        return value

    result: dict[str, Any] = drop_nulls(json.loads(json.dumps(request, default=default)))
    return result


# What a job that a stopped runtime left running becomes, per kind: (kind, status key, end-time key, more).
_ORPHAN_FIELDS: tuple[tuple[str, str, str, dict[str, str]], ...] = (
    ("training", "TrainingJobStatus", "TrainingEndTime", {"SecondaryStatus": "Failed"}),
    ("processing", "ProcessingJobStatus", "ProcessingEndTime", {}),
    ("tuning", "HyperParameterTuningJobStatus", "HyperParameterTuningEndTime", {}),
)


class SageMakerEmulator:
    """SageMaker for the embedded runtime. Methods take and return boto3's shapes, raise ClientError."""

    def __init__(
        self,
        workdir: Path,
        *,
        s3_client: S3Client,
        logs_client: LogsClient | None = None,
        fsx_root: Callable[[str, str], Path] | None = None,
        spot: SpotSchedule | None = None,
        faults: SageMakerFaults | None = None,
        code_dir: Path | None = None,
        region: str = REGION,
        account_id: str = ACCOUNT_ID,
        grace_seconds: float | None = None,
        max_concurrent_training_jobs: int = 8,
        tuning_seed: int | None = None,
        early_stopping_startup_trials: int = 2,
        role_session: RoleSession | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.region = region
        self.account_id = account_id
        self.spot = spot or SpotSchedule()
        self.faults: SageMakerFaults = faults or NoFaults()
        self.max_concurrent_training_jobs = max_concurrent_training_jobs
        self.tuning_seed = tuning_seed
        self.early_stopping_startup_trials = early_stopping_startup_trials
        self.context = JobContext(
            s3=s3_client,
            logs=logs_client,
            code_dir=Path(code_dir or DEFAULT_CODE_DIR).resolve(),
            fsx_root=fsx_root,
            spot=self.spot,
            faults=self.faults,
            grace_seconds=self.spot.grace_seconds if grace_seconds is None else grace_seconds,
            role_session=role_session,
        )
        self.store = JobStore(self.workdir / "records")
        self.registry = ModelRegistry(self.workdir / "records" / "model-registry.jsonl", account_id, region)
        self._lock = threading.RLock()
        self._threads: list[threading.Thread] = []
        self._controls: dict[tuple[str, str], JobControl] = {}
        self._tuning_stops: dict[str, threading.Event] = {}
        self._training = self.store.load_all("training")
        self._processing = self.store.load_all("processing")
        self._tuning = self.store.load_all("tuning")
        self._fail_orphans()

    # -- bookkeeping -----------------------------------------------------------------------------

    @property
    def _arn_prefix(self) -> str:
        return f"arn:aws:sagemaker:{self.region}:{self.account_id}"

    def _arn(self, kind: str, name: str) -> str:
        return f"{self._arn_prefix}:{kind}/{name.lower()}"

    def _fail_orphans(self) -> None:
        """Jobs a previous runtime left running cannot be resumed; they end Failed, as on lost hardware."""
        reason = "InternalServerError: the embedded runtime stopped while this job ran; start the job again"
        now = time.time()
        for kind, status_key, ended_key, extra in _ORPHAN_FIELDS:
            for name, record in self._records(kind).items():
                if record[status_key] in ACTIVE:
                    record.update(
                        {status_key: "Failed", ended_key: now, **extra},
                        FailureReason=reason,
                        LastModifiedTime=now,
                    )
                    self.store.save(kind, record, name)

    def _records(self, kind: str) -> dict[str, dict[str, Any]]:
        return {"training": self._training, "processing": self._processing, "tuning": self._tuning}[kind]

    def _updater(self, kind: str, name: str) -> Callable[[dict[str, Any]], None]:
        def update(changes: dict[str, Any]) -> None:
            with self._lock:
                record = self._records(kind)[name]
                record.update(copy.deepcopy(changes))
                record["LastModifiedTime"] = time.time()
                self.store.save(kind, record, name)

        return update

    def _transitioner(self, name: str) -> Callable[[str, str], None]:
        def transition(status: str, message: str) -> None:
            with self._lock:
                record = self._training[name]
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

    def _start_thread(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every job thread ended (tests, shutdown); False when the timeout passed first."""
        deadline = None if timeout is None else time.time() + timeout
        while True:
            with self._lock:
                alive = [t for t in self._threads if t.is_alive()]
            if not alive:
                return True
            remaining = None if deadline is None else deadline - time.time()
            if remaining is not None and remaining <= 0:
                return False
            alive[0].join(timeout=remaining)

    def close(self, timeout: float = 60.0) -> None:
        """Stop every running job (as StopTrainingJob would) and wait for them."""
        with self._lock:
            for event in self._tuning_stops.values():
                event.set()
            for control in self._controls.values():
                control.stop_requested.set()
        self.wait(timeout)

    # -- training jobs -----------------------------------------------------------------------------

    def create_training_job(self, **request: Any) -> dict[str, Any]:
        operation = "CreateTrainingJob"
        check_training_request(request, operation)
        name = request["TrainingJobName"]
        injected = self.faults.create_training_job_error(name)
        if injected is not None:
            messages = {
                "ThrottlingException": "Rate exceeded",
                RESOURCE_LIMIT_EXCEEDED: "The account-level service limit 'ml.g5.xlarge for spot training "
                "job usage' is 1 Instances, with current utilization of 1 Instances and a request delta of "
                "1 Instances.",
            }
            raise client_error(injected, messages.get(injected, f"injected fault {injected}"), operation)
        return {"TrainingJobArn": self._launch_training(_plain(request), None, JobControl())}

    def _launch_training(self, request: dict[str, Any], tuning_arn: str | None, control: JobControl) -> str:
        operation = "CreateTrainingJob"
        name = request["TrainingJobName"]
        arn = self._arn("training-job", name)
        with self._lock:
            if name in self._training:
                raise validation(
                    f"Training job names must be unique within an AWS account and region, and a training job "
                    f"with this name already exists ({arn})",
                    operation,
                )
            active = sum(r["TrainingJobStatus"] in ACTIVE for r in self._training.values())
            if active >= self.max_concurrent_training_jobs:
                raise client_error(
                    RESOURCE_LIMIT_EXCEEDED,
                    f"The account-level service limit 'Number of concurrent training jobs' is "
                    f"{self.max_concurrent_training_jobs} jobs, with current utilization of {active} jobs "
                    "and a request delta of 1 jobs. Wait for a job to end or raise "
                    "max_concurrent_training_jobs.",
                    operation,
                )
            now = time.time()
            record: dict[str, Any] = {
                "request": request,
                "TrainingJobArn": arn,
                "TrainingJobStatus": "InProgress",
                "SecondaryStatus": "Starting",
                "SecondaryStatusTransitions": [],
                "CreationTime": now,
                "LastModifiedTime": now,
                "Interruptions": [],
            }
            if tuning_arn is not None:
                record["TuningJobArn"] = tuning_arn
            rule_statuses = debugger.initial_statuses(request, self._arn_prefix, name)
            record.update(rule_statuses)
            self._training[name] = record
            self.store.save("training", record, name)
            self._controls[("training", name)] = control
        run = TrainingRun(
            request,
            job_dir=self.workdir / "training" / name,
            context=self.context,
            control=control,
            update=self._updater("training", name),
            transition=self._transitioner(name),
            rule_statuses=rule_statuses,
        )
        self._start_thread(run.run, f"training-{name}")
        return arn

    def _training_record(self, name: str, operation: str) -> dict[str, Any]:
        with self._lock:
            record = self._training.get(name)
            if record is None:
                raise validation(
                    f"Requested resource not found: training job {name!r} does not exist", operation
                )
            return copy.deepcopy(record)

    def describe_training_job(self, **request: Any) -> dict[str, Any]:
        name = require(request, "TrainingJobName", "DescribeTrainingJob")
        record = self._training_record(name, "DescribeTrainingJob")
        job = record["request"]
        response: dict[str, Any] = {
            "TrainingJobName": name,
            "TrainingJobArn": record["TrainingJobArn"],
            "TrainingJobStatus": record["TrainingJobStatus"],
            "SecondaryStatus": record["SecondaryStatus"],
            "HyperParameters": job.get("HyperParameters") or {},
            "AlgorithmSpecification": job["AlgorithmSpecification"],
            "RoleArn": job["RoleArn"],
            "InputDataConfig": job.get("InputDataConfig") or [],
            "OutputDataConfig": job["OutputDataConfig"],
            "ResourceConfig": job["ResourceConfig"],
            "StoppingCondition": job["StoppingCondition"],
            "CreationTime": record["CreationTime"],
            "LastModifiedTime": record["LastModifiedTime"],
            "SecondaryStatusTransitions": record["SecondaryStatusTransitions"],
            "EnableNetworkIsolation": bool(job.get("EnableNetworkIsolation", False)),
            "EnableInterContainerTrafficEncryption": bool(
                job.get("EnableInterContainerTrafficEncryption", False)
            ),
            "EnableManagedSpotTraining": bool(job.get("EnableManagedSpotTraining", False)),
            "ModelArtifacts": record.get("ModelArtifacts") or {"S3ModelArtifacts": ""},
            INTERRUPTIONS_FIELD: record.get("Interruptions") or [],
        }
        for key in (
            "TuningJobArn",
            "FailureReason",
            "TrainingStartTime",
            "TrainingEndTime",
            "FinalMetricDataList",
            "TrainingTimeInSeconds",
            "BillableTimeInSeconds",
            "DebugRuleEvaluationStatuses",
            "ProfilerRuleEvaluationStatuses",
        ):
            if key in record:
                response[key] = record[key]
        for key in (
            "VpcConfig",
            "CheckpointConfig",
            "DebugHookConfig",
            "DebugRuleConfigurations",
            "TensorBoardOutputConfig",
            "ExperimentConfig",
            "ProfilerConfig",
            "ProfilerRuleConfigurations",
            "Environment",
            "RetryStrategy",
        ):
            if key in job:
                response[key] = job[key]
        result: dict[str, Any] = _aware(response)
        return result

    def stop_training_job(self, **request: Any) -> dict[str, Any]:
        operation = "StopTrainingJob"
        name = require(request, "TrainingJobName", operation)
        with self._lock:
            record = self._training.get(name)
            if record is None:
                raise validation(
                    f"Requested resource not found: training job {name!r} does not exist", operation
                )
            if record["TrainingJobStatus"] != "InProgress":
                raise validation(
                    "The request was rejected because the training job is in status "
                    f"{record['TrainingJobStatus']}.",
                    operation,
                )
            control = self._controls[("training", name)]
        self._updater("training", name)({"TrainingJobStatus": "Stopping"})
        control.stop_reason = "Stopped"
        control.stop_requested.set()
        return {}

    def list_training_jobs(self, **request: Any) -> dict[str, Any]:
        with self._lock:
            records = copy.deepcopy(list(self._training.items()))
        summaries = []
        for name, record in records:
            if request.get("NameContains") and request["NameContains"] not in name:
                continue
            if request.get("StatusEquals") and record["TrainingJobStatus"] != request["StatusEquals"]:
                continue
            after, before = request.get("CreationTimeAfter"), request.get("CreationTimeBefore")
            if after is not None and record["CreationTime"] <= _epoch(after):
                continue
            if before is not None and record["CreationTime"] >= _epoch(before):
                continue
            summary = {
                "TrainingJobName": name,
                "TrainingJobArn": record["TrainingJobArn"],
                "CreationTime": record["CreationTime"],
                "LastModifiedTime": record["LastModifiedTime"],
                "TrainingJobStatus": record["TrainingJobStatus"],
            }
            if "TrainingEndTime" in record:
                summary["TrainingEndTime"] = record["TrainingEndTime"]
            summaries.append(summary)
        sort_by = request.get("SortBy", "CreationTime")
        keys = {"Name": "TrainingJobName", "CreationTime": "CreationTime", "Status": "TrainingJobStatus"}
        if sort_by not in keys:
            raise validation(f"SortBy must be one of {sorted(keys)}", "ListTrainingJobs")
        summaries.sort(
            key=lambda s: s[keys[sort_by]], reverse=request.get("SortOrder", "Ascending") == "Descending"
        )
        result: dict[str, Any] = _aware(_page(summaries, "TrainingJobSummaries", request))
        return result

    # -- processing jobs ---------------------------------------------------------------------------

    def create_processing_job(self, **request: Any) -> dict[str, Any]:
        operation = "CreateProcessingJob"
        check_processing_request(request, operation)
        request = _plain(request)
        name = request["ProcessingJobName"]
        arn = self._arn("processing-job", name)
        control = JobControl()
        with self._lock:
            if name in self._processing:
                raise validation(
                    f"Job name must be unique within an AWS account and region, and a job with this name "
                    f"already exists ({arn})",
                    operation,
                )
            now = time.time()
            record = {
                "request": request,
                "ProcessingJobArn": arn,
                "ProcessingJobStatus": "InProgress",
                "CreationTime": now,
                "LastModifiedTime": now,
            }
            self._processing[name] = record
            self.store.save("processing", record, name)
            self._controls[("processing", name)] = control
        run = ProcessingRun(
            request,
            self.workdir / "processing" / name,
            self.context,
            control,
            self._updater("processing", name),
        )
        self._start_thread(run.run, f"processing-{name}")
        return {"ProcessingJobArn": arn}

    def describe_processing_job(self, **request: Any) -> dict[str, Any]:
        operation = "DescribeProcessingJob"
        name = require(request, "ProcessingJobName", operation)
        with self._lock:
            record = copy.deepcopy(self._processing.get(name))
        if record is None:
            raise validation(f"Could not find requested job with name {name}", operation)
        response = {k: v for k, v in record["request"].items() if k != "Tags"}
        response["ProcessingJobArn"] = record["ProcessingJobArn"]
        for key in (
            "ProcessingJobStatus",
            "CreationTime",
            "LastModifiedTime",
            "ProcessingStartTime",
            "ProcessingEndTime",
            "FailureReason",
            "ExitMessage",
        ):
            if key in record:
                response[key] = record[key]
        result: dict[str, Any] = _aware(response)
        return result

    def stop_processing_job(self, **request: Any) -> dict[str, Any]:
        operation = "StopProcessingJob"
        name = require(request, "ProcessingJobName", operation)
        with self._lock:
            record = self._processing.get(name)
            if record is None:
                raise validation(f"Could not find requested job with name {name}", operation)
            if record["ProcessingJobStatus"] != "InProgress":
                raise validation(
                    f"The request was rejected because the processing job is in status "
                    f"{record['ProcessingJobStatus']}.",
                    operation,
                )
            control = self._controls[("processing", name)]
        self._updater("processing", name)({"ProcessingJobStatus": "Stopping"})
        control.stop_requested.set()
        return {}

    # -- tuning jobs -------------------------------------------------------------------------------

    def create_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        operation = TUNING_OPERATION
        name = require(request, "HyperParameterTuningJobName", operation)
        check_name(name, "HyperParameterTuningJobName", operation, TUNING_NAME_PATTERN)
        require(request, "HyperParameterTuningJobConfig", operation)
        if request.get("TrainingJobDefinitions"):
            raise validation(
                "TrainingJobDefinitions (several algorithms) is not supported by the embedded runtime; "
                "use TrainingJobDefinition",
                operation,
            )
        definition = require(request, "TrainingJobDefinition", operation)
        check_training_definition(definition, operation)
        request = _plain(request)
        arn = self._arn("hyper-parameter-tuning-job", name)
        stop = threading.Event()
        with self._lock:
            if name in self._tuning:
                raise client_error(
                    "ResourceInUse", f"Tuning job with name {name} already exists ({arn})", operation
                )
            check_tuning_request(request, known_tuning_jobs=self._tuning)
            parent_trials = self._parent_trials(request)
            now = time.time()
            record: dict[str, Any] = {
                "request": request,
                "HyperParameterTuningJobArn": arn,
                "HyperParameterTuningJobStatus": "InProgress",
                "CreationTime": now,
                "LastModifiedTime": now,
                "Trials": [],
            }
            self._tuning[name] = record
            self.store.save("tuning", record, name)
            self._tuning_stops[name] = stop
        update = self._updater("tuning", name)
        try:
            run = TuningRun(
                record,
                launch=lambda trial, tuned, control: self._launch_trial(request, arn, trial, tuned, control),
                training_record=lambda trial: self._training_record(trial, "DescribeTrainingJob"),
                parent_trials=parent_trials,
                update=update,
                stop_event=stop,
                seed=self.tuning_seed,
                early_stopping_startup_trials=self.early_stopping_startup_trials,
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
        return {"HyperParameterTuningJobArn": arn}

    def _launch_trial(
        self, request: dict[str, Any], tuning_arn: str, trial: str, tuned: dict[str, str], control: JobControl
    ) -> None:
        definition = request["TrainingJobDefinition"]
        skipped = (
            "StaticHyperParameters",
            "DefinitionName",
            "TuningObjective",
            "HyperParameterRanges",
            "HyperParameterTuningResourceConfig",
        )
        job = {k: copy.deepcopy(v) for k, v in definition.items() if k not in skipped}
        job["TrainingJobName"] = trial
        objective = request["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]
        job["HyperParameters"] = {
            **(definition.get("StaticHyperParameters") or {}),
            **tuned,
            TUNING_OBJECTIVE_HYPERPARAMETER: objective["MetricName"],
        }
        self._launch_training(job, tuning_arn, control)

    def _parent_trials(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        warm = request.get("WarmStartConfig")
        if not warm:
            return []
        trials: list[dict[str, Any]] = []
        for parent in warm["ParentHyperParameterTuningJobs"]:
            record = self._tuning[parent["HyperParameterTuningJobName"]]
            metric = record["request"]["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"][
                "MetricName"
            ]
            for trial in record.get("Trials") or []:
                training = self._training.get(trial["TrainingJobName"], {})
                trials.append(
                    {
                        "TrainingJobName": trial["TrainingJobName"],
                        "TunedHyperParameters": trial["TunedHyperParameters"],
                        "ObjectiveValue": objective_value(training, metric),
                    }
                )
        return trials

    def _tuning_summaries(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            record = copy.deepcopy(self._tuning[name])
            trainings = {
                t["TrainingJobName"]: copy.deepcopy(self._training.get(t["TrainingJobName"]))
                for t in record["Trials"]
            }
        objective = record["request"]["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]
        summaries = []
        for trial in record["Trials"]:
            training = trainings.get(trial["TrainingJobName"])
            if training is None:
                continue
            status = training["TrainingJobStatus"]
            value = objective_value(training, objective["MetricName"])
            summary: dict[str, Any] = {
                "TrainingJobName": trial["TrainingJobName"],
                "TrainingJobArn": training["TrainingJobArn"],
                "TuningJobName": name,
                "CreationTime": training["CreationTime"],
                "TrainingJobStatus": status,
                "TunedHyperParameters": trial["TunedHyperParameters"],
                "ObjectiveStatus": "Succeeded"
                if value is not None
                else ("Failed" if status in TERMINAL else "Pending"),
            }
            for key in ("TrainingStartTime", "TrainingEndTime", "FailureReason"):
                if key in training:
                    summary[key] = training[key]
            if value is not None:
                summary["FinalHyperParameterTuningJobObjectiveMetric"] = {
                    "Type": objective["Type"],
                    "MetricName": objective["MetricName"],
                    "Value": value,
                }
            summaries.append(summary)
        return summaries

    def describe_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        operation = "DescribeHyperParameterTuningJob"
        name = require(request, "HyperParameterTuningJobName", operation)
        with self._lock:
            record = copy.deepcopy(self._tuning.get(name))
        if record is None:
            raise client_error(
                RESOURCE_NOT_FOUND, f"Amazon SageMaker can't find a tuning job with name {name}", operation
            )
        job = record["request"]
        summaries = self._tuning_summaries(name)
        objective = job["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]
        counters = {
            "Completed": 0,
            "InProgress": 0,
            "RetryableError": 0,
            "NonRetryableError": 0,
            "Stopped": 0,
        }
        objectives = {"Succeeded": 0, "Pending": 0, "Failed": 0}
        for summary in summaries:
            status = summary["TrainingJobStatus"]
            if status in ACTIVE:
                counters["InProgress"] += 1
            elif status == "Failed":
                retryable = str(summary.get("FailureReason", "")).startswith("InternalServerError")
                counters["RetryableError" if retryable else "NonRetryableError"] += 1
            else:
                counters[status] += 1
            objectives[summary["ObjectiveStatus"]] += 1
        response: dict[str, Any] = {
            "HyperParameterTuningJobName": name,
            "HyperParameterTuningJobArn": record["HyperParameterTuningJobArn"],
            "HyperParameterTuningJobConfig": job["HyperParameterTuningJobConfig"],
            "TrainingJobDefinition": job["TrainingJobDefinition"],
            "HyperParameterTuningJobStatus": record["HyperParameterTuningJobStatus"],
            "CreationTime": record["CreationTime"],
            "LastModifiedTime": record["LastModifiedTime"],
            "TrainingJobStatusCounters": counters,
            "ObjectiveStatusCounters": objectives,
        }
        for key in ("HyperParameterTuningEndTime", "FailureReason"):
            if key in record:
                response[key] = record[key]
        if job.get("WarmStartConfig"):
            response["WarmStartConfig"] = job["WarmStartConfig"]
        best = _best(summaries, objective["Type"])
        if best is not None:
            response["BestTrainingJob"] = best
        if job.get("WarmStartConfig"):
            everything = list(summaries)
            for parent in job["WarmStartConfig"]["ParentHyperParameterTuningJobs"]:
                if parent["HyperParameterTuningJobName"] in self._tuning:
                    everything.extend(self._tuning_summaries(parent["HyperParameterTuningJobName"]))
            overall = _best(everything, objective["Type"])
            if overall is not None:
                response["OverallBestTrainingJob"] = overall
        result: dict[str, Any] = _aware(response)
        return result

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        operation = "ListTrainingJobsForHyperParameterTuningJob"
        name = require(request, "HyperParameterTuningJobName", operation)
        with self._lock:
            known = name in self._tuning
        if not known:
            raise client_error(
                RESOURCE_NOT_FOUND, f"Amazon SageMaker can't find a tuning job with name {name}", operation
            )
        summaries = self._tuning_summaries(name)
        if request.get("StatusEquals"):
            summaries = [s for s in summaries if s["TrainingJobStatus"] == request["StatusEquals"]]
        sort_by = request.get("SortBy", "Name")
        descending = request.get("SortOrder", "Ascending") == "Descending"
        if sort_by == "FinalObjectiveMetricValue":
            summaries = [s for s in summaries if "FinalHyperParameterTuningJobObjectiveMetric" in s]
            summaries.sort(
                key=lambda s: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"], reverse=descending
            )
        else:
            keys = {"Name": "TrainingJobName", "CreationTime": "CreationTime", "Status": "TrainingJobStatus"}
            if sort_by not in keys:
                raise validation(f"SortBy must be one of {[*keys, 'FinalObjectiveMetricValue']}", operation)
            summaries.sort(key=lambda s: s[keys[sort_by]], reverse=descending)
        result: dict[str, Any] = _aware(_page(summaries, "TrainingJobSummaries", request))
        return result

    def stop_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        operation = "StopHyperParameterTuningJob"
        name = require(request, "HyperParameterTuningJobName", operation)
        with self._lock:
            record = self._tuning.get(name)
            if record is None:
                raise client_error(
                    RESOURCE_NOT_FOUND,
                    f"Amazon SageMaker can't find a tuning job with name {name}",
                    operation,
                )
            if record["HyperParameterTuningJobStatus"] != "InProgress":
                raise validation(
                    f"The request was rejected because the tuning job is in status "
                    f"{record['HyperParameterTuningJobStatus']}.",
                    operation,
                )
            stop = self._tuning_stops[name]
        self._updater("tuning", name)({"HyperParameterTuningJobStatus": "Stopping"})
        stop.set()
        return {}

    # -- model registry (moto's) -------------------------------------------------------------------

    def create_model_package_group(self, **request: Any) -> dict[str, Any]:
        return self.registry.create_model_package_group(**request)

    def describe_model_package_group(self, **request: Any) -> dict[str, Any]:
        return self.registry.describe_model_package_group(**request)

    def create_model_package(self, **request: Any) -> dict[str, Any]:
        return self.registry.create_model_package(**request)

    def describe_model_package(self, **request: Any) -> dict[str, Any]:
        return self.registry.describe_model_package(**request)

    def update_model_package(self, **request: Any) -> dict[str, Any]:
        return self.registry.update_model_package(**request)

    def list_model_packages(self, **request: Any) -> dict[str, Any]:
        return self.registry.list_model_packages(**request)


def _best(summaries: list[dict[str, Any]], objective_type: str) -> dict[str, Any] | None:
    scored = [s for s in summaries if "FinalHyperParameterTuningJobObjectiveMetric" in s]
    if not scored:
        return None
    sign = 1.0 if objective_type == "Maximize" else -1.0
    return max(scored, key=lambda s: sign * float(s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]))


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


__all__ = ["INTERRUPTIONS_FIELD", "VALIDATION", "SageMakerEmulator"]
