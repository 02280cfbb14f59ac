"""SageMaker job state-change events, as SageMaker puts them on EventBridge."""

from __future__ import annotations

import datetime
import json
from typing import Any

from retrain.embedded.events.sagemaker_jobs import JobEvents


class _Jobs:
    def __init__(self) -> None:
        self.status: dict[str, str] = {}

    def create_processing_job(self, **request: Any) -> dict[str, Any]:
        name = request["ProcessingJobName"]
        self.status[name] = "InProgress"
        return {"ProcessingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:processing-job/{name}"}

    def describe_processing_job(self, **request: Any) -> dict[str, Any]:
        name = request["ProcessingJobName"]
        return {
            "ProcessingJobName": name,
            "ProcessingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:processing-job/{name}",
            "ProcessingJobStatus": self.status[name],
            "CreationTime": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        }

    def stop_processing_job(self, **request: Any) -> dict[str, Any]:
        return {}


class _Events:
    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803 - boto3's name
        self.entries += Entries
        return {"FailedEntryCount": 0}


def test_each_status_change_of_a_processing_job_is_one_event_without_tags_as_sagemaker_sends_it() -> None:
    # GIVEN a tagged processing job that runs, then completes, described twice at each status
    jobs, events = _Jobs(), _Events()
    proxy = JobEvents(jobs, events)
    proxy.create_processing_job(
        ProcessingJobName="eval-1", Tags=[{"Key": "retrain:checkpoint-step", "Value": "40"}]
    )
    proxy.publish_changes()
    proxy.publish_changes()
    jobs.status["eval-1"] = "Completed"
    proxy.publish_changes()
    proxy.publish_changes()
    # THEN one event per status change, and no Tags in it: AWS's documented processing-job sample has
    # none (tests/events/sagemaker_processing_job_state_change.json), unlike the training and tuning ones
    assert [e["DetailType"] for e in events.entries] == ["SageMaker Processing Job State Change"] * 2
    details = [json.loads(e["Detail"]) for e in events.entries]
    assert [d["ProcessingJobStatus"] for d in details] == ["InProgress", "Completed"]
    assert all("Tags" not in d for d in details)
    assert events.entries[0]["Source"] == "aws.sagemaker"
    assert events.entries[0]["Resources"] == [
        "arn:aws:sagemaker:us-east-1:123456789012:processing-job/eval-1"
    ]


def test_a_training_jobs_event_carries_its_tags_as_a_map() -> None:
    # GIVEN a tagged training job, as AWS's training-job sample shows its Tags
    from retrain.embedded.events.sagemaker_jobs import state_change_event

    event = state_change_event(
        "create_training_job",
        {"TrainingJobName": "t-1", "TrainingJobStatus": "Completed"},
        [{"Key": "retrain:run-id", "Value": "r-1"}],
    )
    # THEN the detail holds them as a map
    assert json.loads(event["Detail"])["Tags"] == {"retrain:run-id": "r-1"}


def test_other_calls_pass_through_unwatched() -> None:
    jobs, events = _Jobs(), _Events()
    proxy = JobEvents(jobs, events)

    assert proxy.stop_processing_job(ProcessingJobName="x") == {}
    assert proxy.publish_changes() == 0


class _Tuning:
    """A tuning job that launches its trials one at a time, listed 1 per page."""

    def __init__(self) -> None:
        self.status = "InProgress"
        self.trials: dict[str, str] = {}

    def create_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        arn = "arn:aws:sagemaker:us-east-1:123456789012:hyper-parameter-tuning-job/t"
        return {"HyperParameterTuningJobArn": arn}

    def describe_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        return {"HyperParameterTuningJobName": "t", "HyperParameterTuningJobStatus": self.status}

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        names = sorted(self.trials)
        start = int(request.get("NextToken") or 0)
        page = names[start : start + 1]
        more = start + 1 < len(names)
        return {
            "TrainingJobSummaries": [{"TrainingJobName": n} for n in page],
            **({"NextToken": str(start + 1)} if more else {}),
        }

    def describe_training_job(self, **request: Any) -> dict[str, Any]:
        name = request["TrainingJobName"]
        return {"TrainingJobName": name, "TrainingJobStatus": self.trials[name]}


def test_the_trials_of_a_tuning_job_send_their_state_changes_with_the_tuning_jobs_tags() -> None:
    # GIVEN a tuning job tagged with its run, created through the proxy
    tuning, events = _Tuning(), _Events()
    proxy = JobEvents(tuning, events)
    proxy.create_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="t", Tags=[{"Key": "retrain:run-id", "Value": "flowers-00001"}]
    )
    # WHEN its first trial runs, then a second, both end, and the tuning job ends
    tuning.trials["t-001"] = "InProgress"
    proxy.publish_changes()
    tuning.trials["t-002"] = "InProgress"
    proxy.publish_changes()
    tuning.trials.update({"t-001": "Completed", "t-002": "Stopped"})
    tuning.status = "Completed"
    proxy.publish_changes()
    proxy.publish_changes()

    # THEN each trial's status changes are events carrying the tuning job's tags, each sent once
    trials = [
        json.loads(e["Detail"])
        for e in events.entries
        if e["DetailType"] == "SageMaker Training Job State Change"
    ]
    assert [(d["TrainingJobName"], d["TrainingJobStatus"]) for d in trials] == [
        ("t-001", "InProgress"),
        ("t-002", "InProgress"),
        ("t-001", "Completed"),
        ("t-002", "Stopped"),
    ]
    assert all(d["Tags"] == {"retrain:run-id": "flowers-00001"} for d in trials)


def test_an_events_detail_holds_the_fields_of_awss_sample_only() -> None:
    # GIVEN a training job's full description, with fields AWS's documented event sample does not show
    from retrain.embedded.events.sagemaker_jobs import DOCUMENTED_FIELDS, state_change_event

    description = {
        "TrainingJobName": "t-1",
        "TrainingJobStatus": "Completed",
        "TuningJobArn": "arn:aws:sagemaker:us-east-1:123456789012:hyper-parameter-tuning-job/x",
        "ModelArtifacts": {"S3ModelArtifacts": "s3://b/model.tar.gz"},
        "BillableTimeInSeconds": 12,
    }
    # WHEN its state change is put on EventBridge THEN only the sample's fields (and the tags) are in it:
    # a handler must describe the job for the rest, as on AWS
    detail = json.loads(state_change_event("create_training_job", description, [])["Detail"])
    assert set(detail) == {"TrainingJobName", "TrainingJobStatus", "Tags"}
    assert "TrainingJobArn" in DOCUMENTED_FIELDS["create_training_job"]
