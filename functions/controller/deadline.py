"""When a run has outlived its own time limits: the stuck-run check compares its record's deadline.

A healthy run can take as long as its limits allow: the freezing job (a Processing job of at most an
hour, FREEZE_SECONDS), the FSx import's polls, the tuning job's rounds of
trials (ceil(MaxNumberOfTrainingJobs / MaxParallelTrainingJobs), each up to MaxWaitTimeInSeconds with
spot, MaxRuntimeInSeconds on demand) and the final job's. StuckRunSeconds is the margin on top: the rule
check and the evaluations (Processing jobs of at most an hour each) and the API back-offs.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retrain_contract.run import Run


FREEZE_SECONDS = 3600  # the freezing job's MaxRuntimeInSeconds (statemachine/training.asl.json)


def longest_seconds(run: Run) -> int:
    """The longest the run's import and training jobs may take within their limits."""
    stopping = run["stopping_condition"]
    per_job = int(stopping.get("MaxWaitTimeInSeconds", 0)) if run["spot"] else 0
    per_job = max(per_job, int(stopping["MaxRuntimeInSeconds"]))
    rounds = 0 if run["fixed_hyperparameters"] else math.ceil(run["max_jobs"] / max(1, run["parallel_jobs"]))
    final = 1 if run["final_training"] else 0
    # whether the run imports is known after the freezing job: a run on FSx may
    importing = run["import_max_polls"] * run["import_poll_seconds"] if run["data_source"] == "fsx" else 0
    return FREEZE_SECONDS + importing + (rounds + final) * per_job


def deadline(run: Run, prepared_at: datetime, *, margin_seconds: int) -> datetime:
    """When a run prepared at `prepared_at` has outlived its limits by `margin_seconds`."""
    return prepared_at + timedelta(seconds=longest_seconds(run) + margin_seconds)
