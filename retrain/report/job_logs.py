"""Metric curves of SageMaker jobs, read back from their CloudWatch Logs streams.

SageMaker writes a training job's stdout to `/aws/sagemaker/TrainingJobs`, stream `<job>/algo-1-<time>`;
the container prints one metric per line (`contract.format_metric`). The metric value regexes are the
contract's, the same ones tuning's MetricDefinitions use.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from retrain_contract.container import MetricPoint, parse_metric_lines

__all__ = ["JobCurves", "MetricPoint", "parse_metric_lines"]

TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
PROCESSING_LOG_GROUP = "/aws/sagemaker/ProcessingJobs"


@dataclass
class JobCurves:
    """Per metric, its points in step order; a step re-run after a spot resume keeps its last value."""

    job_name: str
    metrics: dict[str, list[MetricPoint]] = field(default_factory=dict)


def log_lines(logs: Any, group: str, job_name: str) -> Iterator[str]:
    """Every message of every stream of a job, streams in name order (a spot restart opens a new one)."""
    streams: list[str] = []
    kwargs: dict[str, Any] = {"logGroupName": group, "logStreamNamePrefix": f"{job_name}/"}
    try:
        while True:
            page = logs.describe_log_streams(**kwargs)
            streams.extend(s["logStreamName"] for s in page.get("logStreams", []))
            if not page.get("nextToken"):
                break
            kwargs["nextToken"] = page["nextToken"]
    except logs.exceptions.ResourceNotFoundException:
        return
    for stream in sorted(streams):
        token: str | None = None
        while True:
            request: dict[str, Any] = {"logGroupName": group, "logStreamName": stream, "startFromHead": True}
            if token is not None:
                request["nextToken"] = token
            page = logs.get_log_events(**request)
            for event in page.get("events", []):
                yield str(event.get("message", ""))
            next_token = page.get("nextForwardToken")
            if not page.get("events") or next_token is None or next_token == token:
                break
            token = next_token


def job_curves(logs: Any, job_name: str) -> JobCurves:
    lines = list(log_lines(logs, TRAINING_LOG_GROUP, job_name))
    return JobCurves(job_name=job_name, metrics=parse_metric_lines(lines))
