"""SageMakerEmulator: the SageMaker API of the embedded runtime, with boto3's request and response shapes.

Each operation checks its request (`validation.py`, `tuning.py`), hands the job to the JobScheduler
(`scheduler.py`), which records it and runs it on a thread, and answers from the job's record
(`responses.py`). Training and processing jobs run the `training_image/` code as child processes (any
ImageUri maps to that one image); tuning jobs drive trials with optuna; the model registry is moto's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.sagemaker import responses
from retrain.embedded.sagemaker.errors import (
    RESOURCE_LIMIT_EXCEEDED,
    RESOURCE_NOT_FOUND,
    VALIDATION,
    client_error,
    validation,
)
from retrain.embedded.sagemaker.registry import ModelRegistry, _page
from retrain.embedded.sagemaker.responses import INTERRUPTIONS_FIELD
from retrain.embedded.sagemaker.s3io import S3Uri
from retrain.embedded.sagemaker.scheduler import ACTIVE, JobScheduler, SchedulerSettings
from retrain.embedded.sagemaker.training import JobContext, JobControl
from retrain.embedded.sagemaker.tuning import TUNING_OPERATION
from retrain.embedded.sagemaker.validation import (
    TUNING_NAME_PATTERN,
    check_name,
    check_processing_request,
    check_training_definition,
    check_training_request,
    require,
)

# The messages of the CreateTrainingJob errors a fault injects.
_INJECTED_MESSAGES = {
    "ThrottlingException": "Rate exceeded",
    RESOURCE_LIMIT_EXCEEDED: "The account-level service limit 'ml.g5.xlarge for spot training "
    "job usage' is 1 Instances, with current utilization of 1 Instances and a request delta of "
    "1 Instances.",
}
_TRIAL_SORT_KEYS = {"Name": "TrainingJobName", "CreationTime": "CreationTime", "Status": "TrainingJobStatus"}


def _rejected_in_status(kind: str, status: str, operation: str) -> Exception:
    return validation(f"The request was rejected because the {kind} job is in status {status}.", operation)


class SageMakerEmulator:
    """SageMaker for the embedded runtime. Methods take and return boto3's shapes, raise ClientError.

    `context` is what every job runs with (clients, the image's code, spot and fault settings);
    `settings` the concurrency limit and the tuning sampler's settings."""

    def __init__(
        self,
        workdir: Path,
        context: JobContext,
        *,
        settings: SchedulerSettings | None = None,
        region: str = REGION,
        account_id: str = ACCOUNT_ID,
    ) -> None:
        self.workdir = Path(workdir)
        self.region = region
        self.account_id = account_id
        self.context = dataclasses.replace(context, code_dir=Path(context.code_dir).resolve())
        self.jobs = JobScheduler(
            self.workdir,
            self.context,
            settings or SchedulerSettings(),
            arn_prefix=f"arn:aws:sagemaker:{region}:{account_id}",
        )
        self.registry = ModelRegistry(self.workdir / "records" / "model-registry.jsonl", account_id, region)
        # The job records and their store, for inspection (tests).
        self.store = self.jobs.store
        self._training = self.jobs.records["training"]
        self._tuning = self.jobs.records["tuning"]

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every job thread ended (tests, shutdown); False when the timeout passed first."""
        return self.jobs.wait(timeout)

    def close(self, timeout: float = 60.0) -> None:
        """Stop every running job (as StopTrainingJob would) and wait for them."""
        self.jobs.close(timeout)

    def ended_checkpoint_prefixes(self) -> dict[str, list[str]]:
        """bucket -> the CheckpointConfig prefixes that only ended training jobs write: no job can resume
        from them any more (a job is never resumed after it ended, nor after a restart of the runtime)."""
        ended: set[tuple[str, str]] = set()
        active: set[tuple[str, str]] = set()
        for _, record in self.jobs.snapshots("training"):
            uri = (record["request"].get("CheckpointConfig") or {}).get("S3Uri")
            if uri:
                location = S3Uri.parse(uri)
                where = (location.bucket, location.key.rstrip("/") + "/")
                (active if record["TrainingJobStatus"] in ACTIVE else ended).add(where)
        prefixes: dict[str, list[str]] = {}
        for bucket, prefix in sorted(ended - active):
            prefixes.setdefault(bucket, []).append(prefix)
        return prefixes

    # -- training jobs -----------------------------------------------------------------------------

    def create_training_job(self, **request: Any) -> dict[str, Any]:
        operation = "CreateTrainingJob"
        check_training_request(request, operation)
        injected = self.context.faults.create_training_job_error(request["TrainingJobName"])
        if injected is not None:
            message = _INJECTED_MESSAGES.get(injected, f"injected fault {injected}")
            raise client_error(injected, message, operation)
        return {"TrainingJobArn": self.jobs.launch_training(responses.plain(request), None, JobControl())}

    def describe_training_job(self, **request: Any) -> dict[str, Any]:
        operation = "DescribeTrainingJob"
        name = require(request, "TrainingJobName", operation)
        record = self.jobs.snapshot("training", name)
        if record is None:
            raise _training_not_found(name, operation)
        return responses.training_description(name, record)

    def stop_training_job(self, **request: Any) -> dict[str, Any]:
        operation = "StopTrainingJob"
        name = require(request, "TrainingJobName", operation)

        def check(record: dict[str, Any] | None) -> None:
            if record is None:
                raise _training_not_found(name, operation)
            if record["TrainingJobStatus"] != "InProgress":
                raise _rejected_in_status("training", record["TrainingJobStatus"], operation)

        self.jobs.request_stop("training", name, check)
        return {}

    def list_training_jobs(self, **request: Any) -> dict[str, Any]:
        summaries = [
            responses.training_summary(name, record)
            for name, record in self.jobs.snapshots("training")
            if _listed(name, record, request)
        ]
        sort_by = request.get("SortBy", "CreationTime")
        if sort_by not in _TRIAL_SORT_KEYS:
            raise validation(f"SortBy must be one of {sorted(_TRIAL_SORT_KEYS)}", "ListTrainingJobs")
        summaries.sort(
            key=lambda s: s[_TRIAL_SORT_KEYS[sort_by]],
            reverse=request.get("SortOrder", "Ascending") == "Descending",
        )
        result: dict[str, Any] = responses.aware(_page(summaries, "TrainingJobSummaries", request))
        return result

    # -- processing jobs ---------------------------------------------------------------------------

    def create_processing_job(self, **request: Any) -> dict[str, Any]:
        check_processing_request(request, "CreateProcessingJob")
        return {"ProcessingJobArn": self.jobs.launch_processing(responses.plain(request))}

    def describe_processing_job(self, **request: Any) -> dict[str, Any]:
        operation = "DescribeProcessingJob"
        name = require(request, "ProcessingJobName", operation)
        record = self.jobs.snapshot("processing", name)
        if record is None:
            raise validation(f"Could not find requested job with name {name}", operation)
        return responses.processing_description(record)

    def stop_processing_job(self, **request: Any) -> dict[str, Any]:
        operation = "StopProcessingJob"
        name = require(request, "ProcessingJobName", operation)

        def check(record: dict[str, Any] | None) -> None:
            if record is None:
                raise validation(f"Could not find requested job with name {name}", operation)
            if record["ProcessingJobStatus"] != "InProgress":
                raise _rejected_in_status("processing", record["ProcessingJobStatus"], operation)

        self.jobs.request_stop("processing", name, check)
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
        return {"HyperParameterTuningJobArn": self.jobs.launch_tuning(responses.plain(request))}

    def _trial_summaries(self, name: str) -> list[dict[str, Any]]:
        record, trainings = self.jobs.tuning_snapshot(name)
        return responses.trial_summaries(name, record, trainings)

    def describe_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        operation = "DescribeHyperParameterTuningJob"
        name = require(request, "HyperParameterTuningJobName", operation)
        record = self.jobs.snapshot("tuning", name)
        if record is None:
            raise _tuning_not_found(name, operation)
        summaries = self._trial_summaries(name)
        parent_summaries: list[dict[str, Any]] = []
        warm = record["request"].get("WarmStartConfig")
        for parent in warm["ParentHyperParameterTuningJobs"] if warm else []:
            if parent["HyperParameterTuningJobName"] in self.jobs.records["tuning"]:
                parent_summaries.extend(self._trial_summaries(parent["HyperParameterTuningJobName"]))
        return responses.tuning_description(name, record, summaries, parent_summaries)

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        operation = "ListTrainingJobsForHyperParameterTuningJob"
        name = require(request, "HyperParameterTuningJobName", operation)
        if self.jobs.snapshot("tuning", name) is None:
            raise _tuning_not_found(name, operation)
        summaries = self._trial_summaries(name)
        if request.get("StatusEquals"):
            summaries = [s for s in summaries if s["TrainingJobStatus"] == request["StatusEquals"]]
        summaries = _sorted_trials(summaries, request, operation)
        result: dict[str, Any] = responses.aware(_page(summaries, "TrainingJobSummaries", request))
        return result

    def stop_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        operation = "StopHyperParameterTuningJob"
        name = require(request, "HyperParameterTuningJobName", operation)

        def check(record: dict[str, Any] | None) -> None:
            if record is None:
                raise _tuning_not_found(name, operation)
            if record["HyperParameterTuningJobStatus"] != "InProgress":
                raise _rejected_in_status("tuning", record["HyperParameterTuningJobStatus"], operation)

        self.jobs.request_stop("tuning", name, check)
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


def _training_not_found(name: str, operation: str) -> Exception:
    return validation(f"Requested resource not found: training job {name!r} does not exist", operation)


def _tuning_not_found(name: str, operation: str) -> Exception:
    return client_error(
        RESOURCE_NOT_FOUND, f"Amazon SageMaker can't find a tuning job with name {name}", operation
    )


def _listed(name: str, record: dict[str, Any], request: dict[str, Any]) -> bool:
    """Whether ListTrainingJobs' filters (name, status, creation time) keep this job."""
    if request.get("NameContains") and request["NameContains"] not in name:
        return False
    if request.get("StatusEquals") and record["TrainingJobStatus"] != request["StatusEquals"]:
        return False
    after, before = request.get("CreationTimeAfter"), request.get("CreationTimeBefore")
    if after is not None and record["CreationTime"] <= responses.epoch(after):
        return False
    return before is None or record["CreationTime"] < responses.epoch(before)


def _sorted_trials(
    summaries: list[dict[str, Any]], request: dict[str, Any], operation: str
) -> list[dict[str, Any]]:
    sort_by = request.get("SortBy", "Name")
    descending = request.get("SortOrder", "Ascending") == "Descending"
    if sort_by == "FinalObjectiveMetricValue":
        scored = [s for s in summaries if "FinalHyperParameterTuningJobObjectiveMetric" in s]
        return sorted(
            scored,
            key=lambda s: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
            reverse=descending,
        )
    if sort_by not in _TRIAL_SORT_KEYS:
        raise validation(
            f"SortBy must be one of {[*_TRIAL_SORT_KEYS, 'FinalObjectiveMetricValue']}", operation
        )
    return sorted(summaries, key=lambda s: s[_TRIAL_SORT_KEYS[sort_by]], reverse=descending)


__all__ = ["INTERRUPTIONS_FIELD", "VALIDATION", "JobContext", "SageMakerEmulator", "SchedulerSettings"]
