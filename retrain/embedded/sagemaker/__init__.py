"""The SageMaker emulator of the embedded runtime (interfaces §3): jobs as child processes of the
training image, managed spot, tuning on optuna, moto's model registry, and the HTTP API hook."""

from __future__ import annotations

from retrain.embedded.sagemaker.api import OPERATIONS, api_installed, install_api
from retrain.embedded.sagemaker.emulator import INTERRUPTIONS_FIELD, SageMakerEmulator
from retrain.embedded.sagemaker.spot import NoFaults, SageMakerFaults, SpotSchedule

__all__ = [
    "INTERRUPTIONS_FIELD",
    "OPERATIONS",
    "NoFaults",
    "SageMakerEmulator",
    "SageMakerFaults",
    "SpotSchedule",
    "api_installed",
    "install_api",
]
