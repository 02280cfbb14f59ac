"""Request checks SageMaker does before it accepts a job, with its ValidationException wording."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from retrain.embedded.sagemaker.errors import validation
from retrain_contract import container as contract

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
TUNING_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,31}$")
INPUT_MODES = ("File", "FastFile", "Pipe")
S3_DATA_TYPES = ("S3Prefix", "ManifestFile", "AugmentedManifestFile")


def require(request: Mapping[str, Any], field: str, operation: str) -> Any:
    value = request.get(field)
    if value is None or value in ("", {}):
        raise validation(
            f"1 validation error detected: Value null at '{_camel(field)}' failed to satisfy constraint: "
            "Member must not be null",
            operation,
        )
    return value


def _camel(field: str) -> str:
    return field[:1].lower() + field[1:]


def check_name(name: str, field: str, operation: str, pattern: re.Pattern[str] = NAME_PATTERN) -> None:
    if not isinstance(name, str) or not pattern.match(name):
        raise validation(
            f"1 validation error detected: Value '{name}' at '{_camel(field)}' failed to satisfy constraint: "
            f"Member must satisfy regular expression pattern: {pattern.pattern}",
            operation,
        )


def check_training_request(request: Mapping[str, Any], operation: str = "CreateTrainingJob") -> None:
    """What CreateTrainingJob rejects before it starts anything."""
    check_name(require(request, "TrainingJobName", operation), "TrainingJobName", operation)
    check_training_definition(request, operation)


def check_training_definition(request: Mapping[str, Any], operation: str) -> None:
    """The parts a training job and a tuning job's TrainingJobDefinition share, in the service's order."""
    algorithm = _check_algorithm(request, operation)
    require(request, "RoleArn", operation)
    _check_output(request, operation)
    _check_resources(request, operation)
    _check_stopping_condition(request, operation)
    _check_hyperparameters(request, operation)
    _check_channels(request, algorithm.get("TrainingInputMode", "File"), operation)
    _check_local_paths(request, operation)


def _check_algorithm(request: Mapping[str, Any], operation: str) -> Mapping[str, Any]:
    algorithm: Mapping[str, Any] = require(request, "AlgorithmSpecification", operation)
    if not algorithm.get("TrainingImage") and not algorithm.get("AlgorithmName"):
        raise validation("AlgorithmSpecification needs a TrainingImage or an AlgorithmName", operation)
    mode = algorithm.get("TrainingInputMode", "File")
    if mode not in INPUT_MODES:
        raise validation(
            f"Value '{mode}' at 'algorithmSpecification.trainingInputMode' failed to satisfy constraint: "
            f"Member must satisfy enum value set: {list(INPUT_MODES)}",
            operation,
        )
    return algorithm


def _check_output(request: Mapping[str, Any], operation: str) -> None:
    output = require(request, "OutputDataConfig", operation)
    if not str(output.get("S3OutputPath", "")).startswith("s3://"):
        raise validation("OutputDataConfig.S3OutputPath must be an S3 URI (s3://bucket/prefix)", operation)


def _check_resources(request: Mapping[str, Any], operation: str) -> None:
    resources = require(request, "ResourceConfig", operation)
    for field in ("InstanceType", "InstanceCount", "VolumeSizeInGB"):
        if field not in resources and "InstanceGroups" not in resources:
            raise validation(f"ResourceConfig.{field} is required", operation)
    if int(resources.get("InstanceCount", 1)) != 1:
        raise validation(
            f"ResourceConfig.InstanceCount is {resources.get('InstanceCount')}: the embedded runtime "
            "runs one instance per job; set InstanceCount to 1",
            operation,
        )


def _check_stopping_condition(request: Mapping[str, Any], operation: str) -> None:
    stopping = require(request, "StoppingCondition", operation)
    max_runtime = stopping.get("MaxRuntimeInSeconds")
    if max_runtime is None or int(max_runtime) < 1:
        raise validation("StoppingCondition.MaxRuntimeInSeconds must be at least 1", operation)
    max_wait = stopping.get("MaxWaitTimeInSeconds")
    if not request.get("EnableManagedSpotTraining"):
        if max_wait is not None:
            raise validation(
                "MaxWaitTimeInSeconds is only valid with EnableManagedSpotTraining; remove it or enable spot",
                operation,
            )
        return
    if max_wait is None:
        raise validation("Invalid MaxWaitTimeInSeconds. It is required for managed spot training.", operation)
    if int(max_wait) < int(max_runtime):
        raise validation(
            f"Invalid MaxWaitTimeInSeconds. It must be present and be greater than or equal to "
            f"MaxRuntimeInSeconds ({max_wait} < {max_runtime}).",
            operation,
        )


def _check_hyperparameters(request: Mapping[str, Any], operation: str) -> None:
    hyperparameters = request.get("HyperParameters") or request.get("StaticHyperParameters") or {}
    for key, value in hyperparameters.items():
        if not isinstance(value, str):
            raise validation(
                f"HyperParameters value for {key!r} must be a string, got {type(value).__name__}", operation
            )


def _check_channels(request: Mapping[str, Any], default_mode: str, operation: str) -> None:
    names = set()
    for channel in request.get("InputDataConfig") or []:
        name = require(channel, "ChannelName", operation)
        if name in names:
            raise validation(f"Channel names must be unique; {name!r} appears twice", operation)
        names.add(name)
        _check_channel(channel, name, default_mode, operation)


def _check_channel(channel: Mapping[str, Any], name: str, default_mode: str, operation: str) -> None:
    source = require(channel, "DataSource", operation)
    if channel.get("InputMode", default_mode) == "Pipe":
        raise validation(
            f"Channel {name!r}: Pipe input mode is not supported by the retrain training image; "
            "use File or FastFile",
            operation,
        )
    s3 = source.get("S3DataSource")
    fsx = source.get("FileSystemDataSource")
    if (s3 is None) == (fsx is None):
        raise validation(
            f"Channel {name!r}: DataSource needs exactly one of S3DataSource and FileSystemDataSource",
            operation,
        )
    if s3 is not None:
        _check_s3_source(s3, name, operation)
    if fsx is not None:
        for field in ("FileSystemId", "FileSystemType", "DirectoryPath", "FileSystemAccessMode"):
            require(fsx, field, operation)


def _check_s3_source(s3: Mapping[str, Any], name: str, operation: str) -> None:
    if s3.get("S3DataType", "S3Prefix") not in S3_DATA_TYPES[:2]:
        raise validation(
            f"Channel {name!r}: S3DataType {s3.get('S3DataType')!r} is not supported here; use "
            "S3Prefix or ManifestFile",
            operation,
        )
    if not str(s3.get("S3Uri", "")).startswith("s3://"):
        raise validation(f"Channel {name!r}: S3Uri must be an S3 URI (s3://bucket/prefix)", operation)


def _check_local_paths(request: Mapping[str, Any], operation: str) -> None:
    """The Debugger hook and checkpoint directories must lie in the job's /opt/ml tree."""
    hook = request.get("DebugHookConfig")
    if hook and not str(hook.get("LocalPath", contract.DEBUG_HOOK_LOCAL_PATH)).startswith("/opt/ml/"):
        raise validation("DebugHookConfig.LocalPath must be under /opt/ml in the embedded runtime", operation)
    checkpoint = request.get("CheckpointConfig")
    if checkpoint is None:
        return
    if not str(checkpoint.get("S3Uri", "")).startswith("s3://"):
        raise validation("CheckpointConfig.S3Uri must be an S3 URI (s3://bucket/prefix)", operation)
    local = str(checkpoint.get("LocalPath", contract.CHECKPOINT_LOCAL_PATH))
    if not local.startswith("/opt/ml/"):
        raise validation(
            f"CheckpointConfig.LocalPath {local!r} must be under /opt/ml in the embedded runtime",
            operation,
        )


def check_processing_request(request: Mapping[str, Any], operation: str = "CreateProcessingJob") -> None:
    check_name(require(request, "ProcessingJobName", operation), "ProcessingJobName", operation)
    app = require(request, "AppSpecification", operation)
    require(app, "ImageUri", operation)
    require(request, "RoleArn", operation)
    resources = require(request, "ProcessingResources", operation)
    cluster = require(resources, "ClusterConfig", operation)
    if int(cluster.get("InstanceCount", 1)) != 1:
        raise validation(
            "ProcessingResources.ClusterConfig.InstanceCount must be 1 in the embedded runtime", operation
        )
    for item in request.get("ProcessingInputs") or []:
        name = require(item, "InputName", operation)
        s3 = item.get("S3Input")
        if s3 is None:
            raise validation(f"ProcessingInput {name!r}: only S3Input is supported here", operation)
        if not str(s3.get("LocalPath", "")).startswith("/opt/ml/processing/"):
            raise validation(
                f"ProcessingInput {name!r}: LocalPath must be under /opt/ml/processing/", operation
            )
        if not str(s3.get("S3Uri", "")).startswith("s3://"):
            raise validation(f"ProcessingInput {name!r}: S3Uri must be an S3 URI", operation)
        if s3.get("S3InputMode", "File") != "File":
            raise validation(f"ProcessingInput {name!r}: only S3InputMode File is supported", operation)
    for item in (request.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
        name = require(item, "OutputName", operation)
        s3 = item.get("S3Output")
        if s3 is None or not str(s3.get("LocalPath", "")).startswith("/opt/ml/processing/"):
            raise validation(
                f"ProcessingOutput {name!r}: S3Output.LocalPath must be under /opt/ml/processing/", operation
            )
        if not str(s3.get("S3Uri", "")).startswith("s3://"):
            raise validation(f"ProcessingOutput {name!r}: S3Uri must be an S3 URI", operation)
