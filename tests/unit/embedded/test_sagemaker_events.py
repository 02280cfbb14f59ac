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


def test_each_status_change_of_a_created_job_is_one_event_with_tags_as_a_map() -> None:
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

    assert [e["DetailType"] for e in events.entries] == ["SageMaker Processing Job State Change"] * 2
    details = [json.loads(e["Detail"]) for e in events.entries]
    assert [d["ProcessingJobStatus"] for d in details] == ["InProgress", "Completed"]
    assert details[1]["Tags"] == {"retrain:checkpoint-step": "40"}
    assert events.entries[0]["Source"] == "aws.sagemaker"


def test_other_calls_pass_through_unwatched() -> None:
    jobs, events = _Jobs(), _Events()
    proxy = JobEvents(jobs, events)

    assert proxy.stop_processing_job(ProcessingJobName="x") == {}
    assert proxy.publish_changes() == 0
