"""Job logs to CloudWatch Logs (as SageMaker ships a container's stdout) and metrics read from them."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# boto3 "logs" client (no mypy_boto3_logs stubs are installed).
LogsClient = Any

TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
PROCESSING_LOG_GROUP = "/aws/sagemaker/ProcessingJobs"


def log_stream_name(job_name: str, host: str, started: float) -> str:
    return f"{job_name}/{host}-{int(started)}"


class LogShipper:
    """Appends lines to a local log file and to a CloudWatch Logs stream, in batches."""

    def __init__(self, logs: LogsClient | None, group: str, stream: str, local_file: Path) -> None:
        self.logs = logs
        self.group = group
        self.stream = stream
        self.local_file = local_file
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        local_file.parent.mkdir(parents=True, exist_ok=True)
        if logs is not None:
            with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
                logs.create_log_group(logGroupName=group)
            with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
                logs.create_log_stream(logGroupName=group, logStreamName=stream)

    def write(self, line: str) -> None:
        line = line.rstrip("\n")
        with self._lock:
            with self.local_file.open("a", encoding="utf-8") as out:
                out.write(line + "\n")
            self._pending.append({"timestamp": int(time.time() * 1000), "message": line or " "})
            if len(self._pending) >= 200:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self.logs is None or not self._pending:
            self._pending.clear()
            return
        batch, self._pending = self._pending, []
        self.logs.put_log_events(logGroupName=self.group, logStreamName=self.stream, logEvents=batch)


@dataclass
class MetricDefinition:
    name: str
    regex: re.Pattern[str]


def compile_metric_definitions(
    definitions: Iterable[dict[str, str]], operation: str
) -> list[MetricDefinition]:
    """MetricDefinitions as SageMaker takes them: the first capture group of Regex is the value."""
    compiled: list[MetricDefinition] = []
    for definition in definitions:
        name, regex = definition.get("Name"), definition.get("Regex")
        if not name or not regex:
            raise ValueError(f"{operation}: each MetricDefinition needs Name and Regex, got {definition}")
        try:
            pattern = re.compile(regex)
        except re.error as exc:
            raise ValueError(f"{operation}: MetricDefinition {name!r} has an invalid Regex ({exc})") from exc
        if pattern.groups < 1:
            raise ValueError(
                f"{operation}: MetricDefinition {name!r} Regex needs a capture group for the value"
            )
        compiled.append(MetricDefinition(name, pattern))
    return compiled


@dataclass
class MetricTracker:
    """Every value of every defined metric seen in the log, in order."""

    definitions: list[MetricDefinition]
    on_value: Callable[[str, float], None] | None = None
    values: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def feed(self, line: str) -> None:
        for definition in self.definitions:
            match = definition.regex.search(line)
            if match is None:
                continue
            try:
                value = float(match.group(1))
            except (TypeError, ValueError):
                continue
            self.values.setdefault(definition.name, []).append((time.time(), value))
            if self.on_value is not None:
                self.on_value(definition.name, value)

    def final_metric_data(self) -> list[dict[str, Any]]:
        """FinalMetricDataList: the last value of each metric, with when it was logged (epoch seconds)."""
        return [
            {"MetricName": name, "Value": series[-1][1], "Timestamp": series[-1][0]}
            for name, series in self.values.items()
            if series
        ]
