"""The model registry: moto's SageMaker backend implements it well, so the emulator reuses it and only
adds a journal that replays the registry after a restart of the embedded stack."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from moto.core.exceptions import ServiceException
from moto.sagemaker.models import SageMakerModelBackend, sagemaker_backends

from retrain.embedded.sagemaker.errors import client_error

# Each boto3 operation -> the moto backend method and its (request key -> keyword) mapping.
_CREATE_GROUP = {
    "ModelPackageGroupName": "model_package_group_name",
    "ModelPackageGroupDescription": "model_package_group_description",
    "Tags": "tags",
}
_CREATE_PACKAGE = {
    "ModelPackageName": "model_package_name",
    "ModelPackageGroupName": "model_package_group_name",
    "ModelPackageDescription": "model_package_description",
    "InferenceSpecification": "inference_specification",
    "ValidationSpecification": "validation_specification",
    "SourceAlgorithmSpecification": "source_algorithm_specification",
    "CertifyForMarketplace": "certify_for_marketplace",
    "Tags": "tags",
    "ModelApprovalStatus": "model_approval_status",
    "MetadataProperties": "metadata_properties",
    "ModelMetrics": "model_metrics",
    "ClientToken": "client_token",
    "CustomerMetadataProperties": "customer_metadata_properties",
    "DriftCheckBaselines": "drift_check_baselines",
    "Domain": "domain",
    "Task": "task",
    "SamplePayloadUrl": "sample_payload_url",
    "AdditionalInferenceSpecifications": "additional_inference_specifications",
}
_UPDATE_PACKAGE = {
    "ModelPackageArn": "model_package_arn",
    "ModelApprovalStatus": "model_approval_status",
    "ApprovalDescription": "approval_description",
    "CustomerMetadataProperties": "customer_metadata_properties",
    "CustomerMetadataPropertiesToRemove": "customer_metadata_properties_to_remove",
    "AdditionalInferenceSpecificationsToAdd": "additional_inference_specifications_to_add",
}
_DEFAULTS = {"CertifyForMarketplace": False, "CustomerMetadataPropertiesToRemove": []}


def _kwargs(request: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    unknown = set(request) - set(mapping)
    if unknown:
        raise ValueError(f"unsupported request fields {sorted(unknown)}")
    return {kw: request.get(key, _DEFAULTS.get(key)) for key, kw in mapping.items()}


def _aware(value: Any) -> Any:
    """moto keeps naive UTC datetimes; boto3 hands out aware ones."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    if isinstance(value, dict):
        return {k: _aware(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_aware(v) for v in value]
    return value


class ModelRegistry:
    """Model package groups and versions in moto's backend for one account and region."""

    def __init__(self, journal: Path, account_id: str, region: str) -> None:
        self.journal = journal
        self.account_id = account_id
        self.region = region
        self._lock = threading.Lock()
        self._replay()

    @property
    def backend(self) -> SageMakerModelBackend:
        backend: SageMakerModelBackend = sagemaker_backends[self.account_id][self.region]
        return backend

    def _replay(self) -> None:
        """Re-create what the journal holds, unless this process's backend already has it."""
        if not self.journal.is_file():
            return
        backend = self.backend
        for line in self.journal.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            operation, request = entry["operation"], entry["request"]
            if (
                operation == "CreateModelPackageGroup"
                and request["ModelPackageGroupName"] in backend.model_package_groups
            ):
                return
            try:
                self._call(operation, request, record=False)
            except ClientError:
                continue

    def _call(self, operation: str, request: dict[str, Any], *, record: bool = True) -> Any:
        backend = self.backend
        methods: dict[str, tuple[Callable[..., Any], dict[str, str]]] = {
            "CreateModelPackageGroup": (backend.create_model_package_group, _CREATE_GROUP),
            "CreateModelPackage": (backend.create_model_package, _CREATE_PACKAGE),
            "UpdateModelPackage": (backend.update_model_package, _UPDATE_PACKAGE),
        }
        method, mapping = methods[operation]
        try:
            kwargs = _kwargs(request, mapping)
        except ValueError as exc:
            raise client_error("ValidationException", f"{operation}: {exc}", operation) from exc
        with self._lock:
            try:
                result = method(**kwargs)
            except ServiceException as exc:
                raise client_error(exc.code, exc.message, operation) from exc
            if record:
                self.journal.parent.mkdir(parents=True, exist_ok=True)
                with self.journal.open("a", encoding="utf-8") as out:
                    out.write(json.dumps({"operation": operation, "request": request}, default=str) + "\n")
        return result

    def create_model_package_group(self, **request: Any) -> dict[str, Any]:
        name = request.get("ModelPackageGroupName")
        if name in self.backend.model_package_groups:
            raise client_error(
                "ValidationException",
                f"Model Package Group already exists: {self.backend.model_package_groups[name].arn}",
                "CreateModelPackageGroup",
            )
        return {"ModelPackageGroupArn": self._call("CreateModelPackageGroup", request)}

    def describe_model_package_group(self, **request: Any) -> dict[str, Any]:
        name = request["ModelPackageGroupName"]
        return self._describe(self.backend.describe_model_package_group, name, "DescribeModelPackageGroup")

    def _describe(self, getter: Any, name: str, operation: str) -> dict[str, Any]:
        """moto's description of one resource, its service errors as the client error boto3 raises."""
        try:
            found = getter(name)
        except ServiceException as exc:
            raise client_error(exc.code, exc.message, operation) from exc
        result: dict[str, Any] = _aware(found.gen_response_object())
        return result

    def create_model_package(self, **request: Any) -> dict[str, Any]:
        return {"ModelPackageArn": self._call("CreateModelPackage", request)}

    def describe_model_package(self, **request: Any) -> dict[str, Any]:
        return self._describe(
            self.backend.describe_model_package, request["ModelPackageName"], "DescribeModelPackage"
        )

    def update_model_package(self, **request: Any) -> dict[str, Any]:
        return {"ModelPackageArn": self._call("UpdateModelPackage", request)}

    def list_model_packages(self, **request: Any) -> dict[str, Any]:
        group = request.get("ModelPackageGroupName")
        packages = [
            p
            for p in self.backend.model_packages.values()
            if (group is None and p.model_package_version is None)
            or (group is not None and p.model_package_group_name == group.split("/")[-1])
        ]
        status = request.get("ModelApprovalStatus")
        if status is not None:
            packages = [p for p in packages if p.model_approval_status == status]
        if request.get("NameContains"):
            packages = [p for p in packages if request["NameContains"] in p.model_package_name]
        key = (
            (lambda p: p.model_package_name)
            if request.get("SortBy") == "Name"
            else (lambda p: p.creation_time)
        )
        packages.sort(key=key, reverse=request.get("SortOrder", "Ascending") == "Descending")
        summaries = []
        for package in packages:
            full = package.gen_response_object()
            summaries.append(
                _aware(
                    {
                        k: full[k]
                        for k in (
                            "ModelPackageName",
                            "ModelPackageGroupName",
                            "ModelPackageVersion",
                            "ModelPackageArn",
                            "ModelPackageDescription",
                            "CreationTime",
                            "ModelPackageStatus",
                            "ModelApprovalStatus",
                        )
                        if k in full
                    }
                )
            )
        return _page(summaries, "ModelPackageSummaryList", request)


def _page(items: list[dict[str, Any]], key: str, request: dict[str, Any]) -> dict[str, Any]:
    start = int(request.get("NextToken") or 0)
    size = int(request.get("MaxResults") or 100)
    result: dict[str, Any] = {key: items[start : start + size]}
    if start + size < len(items):
        result["NextToken"] = str(start + size)
    return result
