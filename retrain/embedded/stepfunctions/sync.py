"""``.sync`` SageMaker Tasks: the describe call each job is polled with, and its outcome (running,
completed, or failed with ``States.TaskFailed``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from retrain.embedded.stepfunctions.calls import to_sfn_json
from retrain.embedded.stepfunctions.errors import TASK_FAILED, TaskFailed

# Terminal statuses of the SageMaker jobs a .sync Task waits for, by create action.
SYNC_JOBS: Final[dict[str, tuple[str, str, str]]] = {
    # action: (describe method, name parameter/response key, status key)
    "create_training_job": ("describe_training_job", "TrainingJobName", "TrainingJobStatus"),
    "create_processing_job": ("describe_processing_job", "ProcessingJobName", "ProcessingJobStatus"),
    "create_hyper_parameter_tuning_job": (
        "describe_hyper_parameter_tuning_job",
        "HyperParameterTuningJobName",
        "HyperParameterTuningJobStatus",
    ),
    "create_transform_job": ("describe_transform_job", "TransformJobName", "TransformJobStatus"),
}

_SUCCEEDED: Final = "Completed"
_FAILED_TERMINAL: Final[frozenset[str]] = frozenset({"Failed", "Stopped"})
SYNC_POLL_SECONDS: Final = 0.5


def sync_job_outcome(action: str, description: Mapping[str, Any]) -> dict[str, Any] | None:
    """None while the job runs; its description once Completed; raises TaskFailed if Failed/Stopped."""
    _, _, status_key = SYNC_JOBS[action]
    status = description.get(status_key)
    if status == _SUCCEEDED:
        return dict(to_sfn_json(description))
    if status in _FAILED_TERMINAL:
        raise TaskFailed(TASK_FAILED, json.dumps(to_sfn_json(description), separators=(",", ":")))
    return None
