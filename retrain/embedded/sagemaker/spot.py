"""Managed spot emulation settings and the fault hooks the emulator consults.

The spot schedule decides when the emulated spot market reclaims a training job's instance; the
faults object (owned by the runtime's fault configuration) can make CreateTrainingJob fail or kill a
job in the middle of a checkpoint write.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SpotSchedule:
    """When managed spot training jobs are interrupted.

    Each job whose name matches `job_pattern` and that set EnableManagedSpotTraining is interrupted
    `interruptions` times: once `after_checkpoints` new checkpoints of the current attempt reached
    S3, or `after_seconds` after the attempt started (whichever is set and comes first). The job
    gets SIGTERM, SIGKILL after `grace_seconds`, waits `capacity_wait_seconds` for capacity and
    restarts from the checkpoints in CheckpointConfig.S3Uri. `price_ratio` is the spot price as a
    share of the on-demand price: BillableTimeInSeconds = ceil(seconds on an instance * price_ratio),
    the seconds on an instance being TrainingTimeInSeconds less the waits for capacity.
    """

    interruptions: int = 0
    after_checkpoints: int | None = 1
    after_seconds: float | None = None
    grace_seconds: float = 10.0
    capacity_wait_seconds: float = 1.0
    price_ratio: float = 0.3
    job_pattern: str = "*"

    def __post_init__(self) -> None:
        if self.interruptions < 0:
            raise ValueError(f"SpotSchedule.interruptions must be >= 0, got {self.interruptions}")
        if self.interruptions and self.after_checkpoints is None and self.after_seconds is None:
            raise ValueError("SpotSchedule needs after_checkpoints or after_seconds to interrupt a job")
        if not 0 < self.price_ratio <= 1:
            raise ValueError(f"SpotSchedule.price_ratio must be in (0, 1], got {self.price_ratio}")

    def interruptions_for(self, job_name: str) -> int:
        return self.interruptions if fnmatch.fnmatchcase(job_name, self.job_pattern) else 0


class SageMakerFaults(Protocol):
    """What the emulator asks the runtime's fault configuration (retrain/embedded/faults.py)."""

    def create_training_job_error(self, job_name: str) -> str | None:
        """An error code (ThrottlingException, ResourceLimitExceeded) CreateTrainingJob answers, or None."""
        ...

    def kill_during_checkpoint_write(self, job_name: str) -> bool:
        """Whether this job's instance dies while it writes its next checkpoint (asked once per job)."""
        ...


class NoFaults:
    """No injected faults."""

    def create_training_job_error(self, job_name: str) -> str | None:
        return None

    def kill_during_checkpoint_write(self, job_name: str) -> bool:
        return False
