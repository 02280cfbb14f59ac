"""The SageMaker emulator of the embedded runtime (interfaces §3): jobs as child processes of the
training image, managed spot, tuning on optuna, moto's model registry, and the HTTP API hook."""

from __future__ import annotations

from retrain.embedded.sagemaker.api import OPERATIONS, api_installed, install_api
from retrain.embedded.sagemaker.emulator import INTERRUPTIONS_FIELD, SageMakerEmulator
from retrain.embedded.sagemaker.scheduler import SchedulerSettings
from retrain.embedded.sagemaker.spot import NoFaults, SageMakerFaults, SpotSchedule
from retrain.embedded.sagemaker.training import JobContext

__all__ = [
    "INTERRUPTIONS_FIELD",
    "OPERATIONS",
    "JobContext",
    "NoFaults",
    "SageMakerEmulator",
    "SageMakerFaults",
    "SchedulerSettings",
    "SpotSchedule",
    "api_installed",
    "install_api",
]
