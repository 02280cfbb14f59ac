"""SageMaker job state-change events on the emulated EventBridge, as SageMaker sends them.

SageMaker puts an ``aws.sagemaker`` event on the default bus each time a training, processing or tuning
job changes status; rules in the template react to them (checkpoint evaluations finishing, for one).
:class:`JobEvents` stands in front of the SageMaker emulator (for Step Functions and the HTTP API alike),
notes every job created through it, and a watcher thread describes those jobs and puts one event per
status change, with the job's description as the detail and, for training and tuning jobs, its tags as a
map: AWS's documented samples ("Events that Amazon SageMaker AI sends to Amazon EventBridge") show `Tags`
in those events and not in the processing job's, so a rule or handler that needs a processing job's tags
reads them with ListTags, as on AWS. The training jobs a
tuning job launches are watched too, with the tuning job's tags ("Tags that you specify for the tuning
job are also added to all training jobs that the tuning job launches", CreateHyperParameterTuningJob).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Final

from retrain.embedded.stepfunctions.calls import to_sfn_json

LOG = logging.getLogger(__name__)
SOURCE: Final = "aws.sagemaker"
# create method -> (describe method, name key, status key, detail-type)
KINDS: Final[dict[str, tuple[str, str, str, str]]] = {
    "create_training_job": (
        "describe_training_job",
        "TrainingJobName",
        "TrainingJobStatus",
        "SageMaker Training Job State Change",
    ),
    "create_processing_job": (
        "describe_processing_job",
        "ProcessingJobName",
        "ProcessingJobStatus",
        "SageMaker Processing Job State Change",
    ),
    "create_hyper_parameter_tuning_job": (
        "describe_hyper_parameter_tuning_job",
        "HyperParameterTuningJobName",
        "HyperParameterTuningJobStatus",
        "SageMaker HyperParameter Tuning Job State Change",
    ),
}
TERMINAL: Final = frozenset({"Completed", "Failed", "Stopped"})
TAGGED_EVENTS: Final = frozenset({"create_training_job", "create_hyper_parameter_tuning_job"})
# The detail fields of AWS's documented sample of each event (FailureReason: "if the value of
# TrainingJobStatus is Failed, the event contains the FailureReason field"); the rest of the job's
# description is left out, as SageMaker leaves it out, so no handler can come to rely on it here.
DOCUMENTED_FIELDS: Final[dict[str, frozenset[str]]] = {
    "create_training_job": frozenset(
        {
            "TrainingJobName",
            "TrainingJobArn",
            "TrainingJobStatus",
            "SecondaryStatus",
            "FailureReason",
            "HyperParameters",
            "AlgorithmSpecification",
            "RoleArn",
            "InputDataConfig",
            "OutputDataConfig",
            "ResourceConfig",
            "VpcConfig",
            "StoppingCondition",
            "CreationTime",
            "TrainingStartTime",
            "TrainingEndTime",
            "LastModifiedTime",
            "SecondaryStatusTransitions",
        }
    ),
    "create_processing_job": frozenset(
        {
            "ProcessingInputs",
            "ProcessingOutputConfig",
            "ProcessingJobName",
            "ProcessingResources",
            "StoppingCondition",
            "AppSpecification",
            "NetworkConfig",
            "RoleArn",
            "ProcessingJobArn",
            "ProcessingJobStatus",
            "FailureReason",
            "LastModifiedTime",
            "CreationTime",
        }
    ),
    "create_hyper_parameter_tuning_job": frozenset(
        {
            "HyperParameterTuningJobName",
            "HyperParameterTuningJobArn",
            "TrainingJobDefinition",
            "HyperParameterTuningJobStatus",
            "CreationTime",
            "LastModifiedTime",
            "TrainingJobStatusCounters",
            "ObjectiveStatusCounters",
        }
    ),
}
TRAINING: Final = "create_training_job"
TUNING: Final = "create_hyper_parameter_tuning_job"


def state_change_event(kind: str, description: dict[str, Any], tags: list[dict[str, str]]) -> dict[str, Any]:
    """The PutEvents entry SageMaker sends for one status change of a job."""
    _, _, _, detail_type = KINDS[kind]
    documented = DOCUMENTED_FIELDS[kind]
    detail = {k: v for k, v in dict(to_sfn_json(description)).items() if k in documented}
    if kind in TAGGED_EVENTS:
        detail["Tags"] = {tag["Key"]: tag["Value"] for tag in tags}
    return {
        "Source": SOURCE,
        "DetailType": detail_type,
        "Detail": json.dumps(detail),
        "Resources": [
            str(
                description.get("TrainingJobArn")
                or description.get("ProcessingJobArn")
                or description.get("HyperParameterTuningJobArn")
                or ""
            )
        ],
    }


class JobEvents:
    """A pass-through to the SageMaker service that also publishes its jobs' state changes."""

    def __init__(self, service: Any, events_client: Any, *, poll_seconds: float = 1.0) -> None:
        self._service = service
        self._events = events_client
        self._poll = poll_seconds
        self._watched: dict[tuple[str, str], tuple[list[dict[str, str]], str | None]] = {}
        self._trials: set[str] = set()  # tuning trials ever watched (an ended one is not watched again)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="sagemaker-events")

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._service, name)
        if name not in KINDS:
            return method

        def create(**request: Any) -> Any:
            response = method(**request)
            _, name_key, _, _ = KINDS[name]
            with self._lock:
                self._watched[(name, str(request[name_key]))] = (list(request.get("Tags") or []), None)
            return response

        return create

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10.0)
        self.publish_changes()

    def _watch_trials(self) -> None:
        """Watch the trials the watched tuning jobs launched since the last look (each once)."""
        with self._lock:
            tuning = [(job, tags) for (kind, job), (tags, _) in self._watched.items() if kind == TUNING]
        for job, tags in tuning:
            request: dict[str, Any] = {"HyperParameterTuningJobName": job, "MaxResults": 100}
            while True:
                try:
                    page = self._service.list_training_jobs_for_hyper_parameter_tuning_job(**request)
                except Exception:
                    LOG.exception("listing the trials of tuning job %s for their state-change events", job)
                    break
                with self._lock:
                    for summary in page.get("TrainingJobSummaries", []):
                        trial = str(summary["TrainingJobName"])
                        if trial not in self._trials:
                            self._trials.add(trial)
                            self._watched[(TRAINING, trial)] = (list(tags), None)
                if not page.get("NextToken"):
                    break
                request["NextToken"] = page["NextToken"]

    def publish_changes(self) -> int:
        """Describe every watched job once and put an event for each changed status; how many."""
        self._watch_trials()
        with self._lock:
            watched = list(self._watched.items())
        sent = 0
        for (kind, job), (tags, last) in watched:
            describe, name_key, status_key, _ = KINDS[kind]
            try:
                description = getattr(self._service, describe)(**{name_key: job})
            except Exception:
                LOG.exception("describing %s %s for its state-change event", kind, job)
                continue
            status = description.get(status_key)
            if status == last:
                continue
            try:
                self._events.put_events(Entries=[state_change_event(kind, description, tags)])
            except Exception:
                LOG.exception("putting the state-change event of %s %s", kind, job)
                continue
            sent += 1
            with self._lock:
                if status in TERMINAL:
                    self._watched.pop((kind, job), None)
                else:
                    self._watched[(kind, job)] = (tags, status)
        return sent

    def _loop(self) -> None:
        while not self._stop.wait(self._poll):
            try:
                self.publish_changes()
            except Exception:
                LOG.exception("publishing SageMaker state-change events")
