"""Turn a failed FSx import (data repository task) into a clear failure, quoting its completion report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controller import clients
from controller.errors import ImportFailedError
from controller.observability import logger, tracer
from controller.s3io import split_uri

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_s3 import S3Client

REPORT_LINES = 5


def report_excerpt(report_path: str, task_id: str, *, s3: S3Client) -> list[str]:
    """The first failed-file lines of the task's CSV report(s) under `report_path`."""
    bucket, prefix = split_uri(report_path.rstrip("/") + "/")
    lines: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            if task_id in obj["Key"] and obj["Key"].endswith(".csv"):
                text = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode(errors="replace")
                lines.extend(line for line in text.splitlines() if line.strip())
                if len(lines) >= REPORT_LINES:
                    return lines[:REPORT_LINES]
    return lines


def explain(task: dict[str, Any], *, s3: S3Client) -> str:
    task_id = str(task.get("TaskId", "?"))
    lifecycle = str(task.get("Lifecycle", "?"))
    reason = str((task.get("FailureDetails") or {}).get("Message", "no failure message"))
    status = task.get("Status") or {}
    parts = [
        f"FSx import task {task_id} ended {lifecycle}: {reason}",
        f"{status.get('FailedCount', '?')} of {status.get('TotalCount', '?')} files failed",
    ]
    report = task.get("Report") or {}
    if report.get("Enabled") and report.get("Path"):
        excerpt = report_excerpt(str(report["Path"]), task_id, s3=s3)
        parts.append(
            f"report {report['Path']}: " + (" | ".join(excerpt) if excerpt else "no failed-file lines")
        )
    parts.append("fix or remove the listed objects under the data bucket, then start the run again")
    return "; ".join(parts)


def read_report(event: dict[str, Any], *, s3: S3Client) -> dict[str, Any]:
    """Always raises ImportFailedError: this state runs only for a failed import."""
    raise ImportFailedError(explain(event.get("task") or {}, s3=s3))


@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return read_report(event, s3=clients.s3())
