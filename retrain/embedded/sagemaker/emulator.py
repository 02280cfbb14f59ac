"""SageMakerEmulator: the SageMaker API of the embedded runtime, with boto3's request and response shapes.

Each operation checks its request (`validation.py`, `tuning.py`), hands the job to the JobScheduler
(`scheduler.py`), which records it and runs it on a thread, and answers from the job's record
(`responses.py`). Training and processing jobs run the training image (`image.py`, from
training_image/Dockerfile; any ImageUri maps to that one image) in containers of their own
(`container.py`); tuning jobs drive trials with optuna; the model registry is moto's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.sagemaker import listing, responses
from retrain.embedded.sagemaker.errors import (
    RESOURCE_NOT_FOUND,
    VALIDATION,
    client_error,
    injected_error,
    validation,
)
from retrain.embedded.sagemaker.hosting import Hosting, Invocation
from retrain.embedded.sagemaker.image import build_image
from retrain.embedded.sagemaker.registry import ModelRegistry
from retrain.embedded.sagemaker.responses import INTERRUPTIONS_FIELD
from retrain.embedded.sagemaker.s3io import S3Uri
from retrain.embedded.sagemaker.scheduler import ACTIVE, JobScheduler, SchedulerSettings
from retrain.embedded.sagemaker.training import CHECKPOINT_PATTERN, JobContext, JobControl
from retrain.embedded.sagemaker.tuning import TUNING_OPERATION
from retrain.embedded.sagemaker.validation import (
    TUNING_NAME_PATTERN,
    check_name,
    check_processing_request,
    check_training_definition,
    check_training_request,
    require,
)

# The resource types of a job ARN whose tags the emulator keeps, and the kind of record each is.
_TAGGED_KINDS = {
    "training-job": "training",
    "processing-job": "processing",
    "hyper-parameter-tuning-job": "tuning",
}


def _rejected_in_status(kind: str, status: str, operation: str) -> Exception:
    return validation(f"The request was rejected because the {kind} job is in status {status}.", operation)


def _by_bucket(places: set[tuple[str, str]]) -> dict[str, list[str]]:
    """(bucket, key or prefix) pairs as bucket -> sorted keys or prefixes."""
    found: dict[str, list[str]] = {}
    for bucket, where in sorted(places):
        found.setdefault(bucket, []).append(where)
    return found


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
        image = context.image or build_image(self.workdir / "image")
        self.context = dataclasses.replace(context, image=image, region=region)
        self.jobs = JobScheduler(
            self.workdir,
            self.context,
            settings or SchedulerSettings(),
            arn_prefix=f"arn:aws:sagemaker:{region}:{account_id}",
        )
        self.registry = ModelRegistry(self.workdir / "records" / "model-registry.jsonl", account_id, region)
        self.hosting = Hosting(
            self.workdir / "hosting",
            self.context,
            lambda name: self.registry.describe_model_package(ModelPackageName=name),
            region=region,
            account_id=account_id,
        )
        # The job records and their store, for inspection (tests).
        self.store = self.jobs.store
        self._training = self.jobs.records["training"]
        self._tuning = self.jobs.records["tuning"]

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every job thread ended (tests, shutdown); False when the timeout passed first."""
        return self.jobs.wait(timeout)

    def close(self, timeout: float = 60.0) -> None:
        """Stop every running job (as StopTrainingJob would) and wait for them, and every endpoint."""
        self.jobs.close(timeout)
        self.hosting.close()

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
        return _by_bucket(ended - active)

    def ended_checkpoint_inputs(self) -> dict[str, list[str]]:
        """bucket -> the checkpoint files (CHECKPOINT_PATTERN) that only ended Processing jobs read: a
        checkpoint evaluation's copy, read by its one job (`ended_checkpoint_prefixes`' reasoning)."""
        ended: set[tuple[str, str]] = set()
        active: set[tuple[str, str]] = set()
        for _, record in self.jobs.snapshots("processing"):
            for channel in record["request"].get("ProcessingInputs") or []:
                uri = (channel.get("S3Input") or {}).get("S3Uri", "")
                if not uri.startswith("s3://") or CHECKPOINT_PATTERN.search(uri) is None:
                    continue
                location = S3Uri.parse(uri)
                where = (location.bucket, location.key)
                (active if record["ProcessingJobStatus"] in ACTIVE else ended).add(where)
        return _by_bucket(ended - active)

    # -- training jobs -----------------------------------------------------------------------------

    def create_training_job(self, **request: Any) -> dict[str, Any]:
        operation = "CreateTrainingJob"
        check_training_request(request, operation)
        injected = self.context.faults.create_training_job_error(request["TrainingJobName"])
        if injected is not None:
            raise injected_error(injected, operation)
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
        """ListTrainingJobs. As the service documents, StatusEquals with MaxResults filters each page after
        it was cut. WarmPoolStatusEquals matches no job: the embedded stack keeps no warm pools (no job
        has a WarmPoolStatus); TrainingPlanArnEquals matches the jobs whose ResourceConfig names that plan."""
        operation = "ListTrainingJobs"
        listing.check_request(operation, request)
        times = listing.TimeFilters.of(request)
        summaries = [
            s
            for s in (responses.training_summary(n, r) for n, r in self.jobs.snapshots("training"))
            if str(request.get("NameContains") or "") in s["TrainingJobName"]
            and times.keep(s["CreationTime"], s["LastModifiedTime"])
            and _equals(s.get("WarmPoolStatus", {}).get("Status"), request.get("WarmPoolStatusEquals"))
            and _equals(s.get("TrainingPlanArn"), request.get("TrainingPlanArnEquals"))
        ]
        status = request.get("StatusEquals")

        def has_status(summary: dict[str, Any]) -> bool:
            return status is None or summary["TrainingJobStatus"] == status

        by = _job_sort("Training")
        ordered = listing.sort(summaries, request, by, "CreationTime", _by_name("Training"))
        if request.get("MaxResults"):
            result = listing.page(ordered, "TrainingJobSummaries", request, operation, keep=has_status)
        else:
            matching = [s for s in ordered if has_status(s)]
            result = listing.page(matching, "TrainingJobSummaries", request, operation)
        aware: dict[str, Any] = responses.aware(result)
        return aware

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

    def list_tags(self, **request: Any) -> dict[str, Any]:
        """A job's tags, as its create request gave them (SageMaker also tags a tuning job's trials with
        the tuning job's). The jobs' state-change events carry no tags for processing jobs: the
        checkpoint-evaluation function reads an ended evaluation's run and step here."""
        operation = "ListTags"
        arn = str(require(request, "ResourceArn", operation))
        resource, _, name = arn.rsplit(":", 1)[-1].partition("/")
        kind = _TAGGED_KINDS.get(resource)
        record = self.jobs.snapshot(kind, name) if kind else None
        if record is None:
            raise validation(f"Could not find resource {arn}", operation)
        return {"Tags": list(record["request"].get("Tags") or [])}

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

    def list_processing_jobs(self, **request: Any) -> dict[str, Any]:
        operation = "ListProcessingJobs"
        listing.check_request(operation, request)
        summaries = [responses.processing_summary(r) for _, r in self.jobs.snapshots("processing")]
        return _job_page(operation, request, "Processing", summaries, default_sort="CreationTime")

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

    def list_hyper_parameter_tuning_jobs(self, **request: Any) -> dict[str, Any]:
        operation = "ListHyperParameterTuningJobs"
        listing.check_request(operation, request)
        summaries = [
            responses.tuning_summary(name, record, self._trial_summaries(name))
            for name, record in self.jobs.snapshots("tuning")
        ]
        return _job_page(operation, request, "HyperParameterTuning", summaries, default_sort="Name")

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        operation = "ListTrainingJobsForHyperParameterTuningJob"
        name = require(request, "HyperParameterTuningJobName", operation)
        listing.check_request(operation, request)
        if self.jobs.snapshot("tuning", name) is None:
            raise _tuning_not_found(name, operation)
        summaries = self._trial_summaries(name)
        if request.get("StatusEquals"):
            summaries = [s for s in summaries if s["TrainingJobStatus"] == request["StatusEquals"]]
        summaries = _sorted_trials(summaries, request)
        result: dict[str, Any] = responses.aware(
            listing.page(summaries, "TrainingJobSummaries", request, operation)
        )
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

    def list_model_package_groups(self, **request: Any) -> dict[str, Any]:
        return self.registry.list_model_package_groups(**request)

    # -- hosting (hosting.py) ----------------------------------------------------------------------

    def create_model(self, **request: Any) -> dict[str, Any]:
        return self.hosting.create_model(**request)

    def describe_model(self, **request: Any) -> dict[str, Any]:
        return self.hosting.describe_model(**request)

    def delete_model(self, **request: Any) -> dict[str, Any]:
        return self.hosting.delete_model(**request)

    def create_endpoint_config(self, **request: Any) -> dict[str, Any]:
        return self.hosting.create_endpoint_config(**request)

    def describe_endpoint_config(self, **request: Any) -> dict[str, Any]:
        return self.hosting.describe_endpoint_config(**request)

    def delete_endpoint_config(self, **request: Any) -> dict[str, Any]:
        return self.hosting.delete_endpoint_config(**request)

    def create_endpoint(self, **request: Any) -> dict[str, Any]:
        return self.hosting.create_endpoint(**request)

    def describe_endpoint(self, **request: Any) -> dict[str, Any]:
        return self.hosting.describe_endpoint(**request)

    def list_endpoints(self, **request: Any) -> dict[str, Any]:
        return self.hosting.list_endpoints(**request)

    def delete_endpoint(self, **request: Any) -> dict[str, Any]:
        return self.hosting.delete_endpoint(**request)

    def invoke_endpoint(self, **request: Any) -> Invocation:
        """SageMaker Runtime's InvokeEndpoint (the status, headers and body it answers with)."""
        return self.hosting.invoke_endpoint(**request)


def _training_not_found(name: str, operation: str) -> Exception:
    return validation(f"Requested resource not found: training job {name!r} does not exist", operation)


def _tuning_not_found(name: str, operation: str) -> Exception:
    return client_error(
        RESOURCE_NOT_FOUND, f"Amazon SageMaker can't find a tuning job with name {name}", operation
    )


def _equals(value: Any, wanted: Any) -> bool:
    """An `...Equals` filter: absent keeps everything, otherwise only an equal value."""
    return wanted is None or value == wanted


def _by_name(kind: str) -> Callable[[dict[str, Any]], str]:
    return lambda summary: str(summary[f"{kind}JobName"])


def _job_sort(kind: str) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """The SortBy values of ListTrainingJobs, ListProcessingJobs and ListHyperParameterTuningJobs."""
    return {
        "Name": _by_name(kind),
        "CreationTime": lambda summary: summary["CreationTime"],
        "Status": lambda summary: summary[f"{kind}JobStatus"],
    }


def _filtered(summaries: list[dict[str, Any]], request: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The summaries that NameContains, StatusEquals and the creation and modification times keep."""
    times = listing.TimeFilters.of(request)
    return [
        s
        for s in summaries
        if str(request.get("NameContains") or "") in s[f"{kind}JobName"]
        and _equals(s[f"{kind}JobStatus"], request.get("StatusEquals"))
        and times.keep(s["CreationTime"], s["LastModifiedTime"])
    ]


def _job_page(
    operation: str, request: dict[str, Any], kind: str, summaries: list[dict[str, Any]], *, default_sort: str
) -> dict[str, Any]:
    """A List<kind>Jobs answer: the summaries filtered, sorted and cut into the requested page."""
    ordered = listing.sort(
        _filtered(summaries, request, kind), request, _job_sort(kind), default_sort, _by_name(kind)
    )
    result: dict[str, Any] = responses.aware(listing.page(ordered, f"{kind}JobSummaries", request, operation))
    return result


def _sorted_trials(summaries: list[dict[str, Any]], request: dict[str, Any]) -> list[dict[str, Any]]:
    """ListTrainingJobsForHyperParameterTuningJob's order (by Name unless told); sorted by
    FinalObjectiveMetricValue, trials without an objective value are left out, as the service does."""
    if request.get("SortBy") == "FinalObjectiveMetricValue":
        summaries = [s for s in summaries if "FinalHyperParameterTuningJobObjectiveMetric" in s]
    keys: dict[str, Callable[[dict[str, Any]], Any]] = {
        **_job_sort("Training"),
        "FinalObjectiveMetricValue": lambda s: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
    }
    return listing.sort(summaries, request, keys, "Name", _by_name("Training"))


__all__ = ["INTERRUPTIONS_FIELD", "VALIDATION", "JobContext", "SageMakerEmulator", "SchedulerSettings"]
