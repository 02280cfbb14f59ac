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

from retrain.embedded.sagemaker import listing
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
        """moto's description, with the required CreatedBy moto leaves out: empty, as no Studio user
        profile created the group (the embedded stack's callers are IAM roles)."""
        name = str(request["ModelPackageGroupName"]).rsplit("/", 1)[-1]
        group = self._find(self.backend.describe_model_package_group, name, "DescribeModelPackageGroup")
        response: dict[str, Any] = _aware(group.gen_response_object())
        response.setdefault("CreatedBy", {})
        return response

    def _find(self, getter: Any, name: str, operation: str) -> Any:
        """moto's object for one resource, its service errors as the client error boto3 raises."""
        try:
            return getter(name)
        except ServiceException as exc:
            raise client_error(exc.code, exc.message, operation) from exc

    def create_model_package(self, **request: Any) -> dict[str, Any]:
        return {"ModelPackageArn": self._call("CreateModelPackage", request)}

    def describe_model_package(self, **request: Any) -> dict[str, Any]:
        package = self._find(
            self.backend.describe_model_package, request["ModelPackageName"], "DescribeModelPackage"
        )
        return _package_description(package)

    def update_model_package(self, **request: Any) -> dict[str, Any]:
        return {"ModelPackageArn": self._call("UpdateModelPackage", request)}

    def list_model_packages(self, **request: Any) -> dict[str, Any]:
        """ListModelPackages: a group's versions when ModelPackageGroupName names one, otherwise the
        unversioned packages (the service's default ModelPackageType), or those ModelPackageType asks for."""
        operation = "ListModelPackages"
        listing.check_request(operation, request)
        group = request.get("ModelPackageGroupName")
        group_name = None if group is None else str(group).rsplit("/", 1)[-1]
        kind = request.get("ModelPackageType") or ("Unversioned" if group is None else "Versioned")
        kinds = ("Versioned", "Unversioned") if kind == "Both" else (kind,)
        times = listing.TimeFilters.of(request)
        with self._lock:
            # (name, summary): a version's name (its group's) is matched and sorted on, though not listed.
            named = [
                (p.model_package_name, _package_summary(p)) for p in self.backend.model_packages.values()
            ]
        kept = [
            (name, s)
            for name, s in named
            if ("Versioned" if "ModelPackageVersion" in s else "Unversioned") in kinds
            and (group_name is None or s.get("ModelPackageGroupName") == group_name)
            and request.get("ModelApprovalStatus") in (None, s.get("ModelApprovalStatus"))
            and str(request.get("NameContains") or "") in name
            and times.keep(listing.epoch(s["CreationTime"]))
        ]
        ordered = listing.sort(
            [{"name": name, "summary": s} for name, s in kept],
            request,
            {
                "Name": lambda e: e["name"],
                "CreationTime": lambda e: listing.epoch(e["summary"]["CreationTime"]),
            },
            "CreationTime",
            tie=lambda e: (e["summary"].get("ModelPackageVersion", 0), e["summary"]["ModelPackageArn"]),
        )
        summaries = [e["summary"] for e in ordered]
        return listing.page(summaries, "ModelPackageSummaryList", request, operation)

    def list_model_package_groups(self, **request: Any) -> dict[str, Any]:
        """ListModelPackageGroups of this account (`CrossAccountFilterOption` SameAccount, the default);
        `CrossAccount` lists the groups other accounts share with this one, and the embedded stack is one
        account that no other shares with."""
        operation = "ListModelPackageGroups"
        listing.check_request(operation, request)
        if request.get("CrossAccountFilterOption") == "CrossAccount":
            return listing.page([], "ModelPackageGroupSummaryList", request, operation)
        times = listing.TimeFilters.of(request)
        with self._lock:
            summaries = [
                _aware({k: v for k, v in g.gen_response_object().items() if k in _GROUP_SUMMARY_KEYS})
                for g in self.backend.model_package_groups.values()
            ]
        summaries = [
            s
            for s in summaries
            if str(request.get("NameContains") or "") in s["ModelPackageGroupName"]
            and times.keep(listing.epoch(s["CreationTime"]))
        ]
        ordered = listing.sort(
            summaries,
            request,
            {
                "Name": lambda s: s["ModelPackageGroupName"],
                "CreationTime": lambda s: listing.epoch(s["CreationTime"]),
            },
            "CreationTime",
            tie=lambda s: s["ModelPackageGroupName"],
        )
        return listing.page(ordered, "ModelPackageGroupSummaryList", request, operation)


_GROUP_SUMMARY_KEYS = (
    "ModelPackageGroupName",
    "ModelPackageGroupArn",
    "ModelPackageGroupDescription",
    "CreationTime",
    "ModelPackageGroupStatus",
)
_PACKAGE_SUMMARY_KEYS = (
    "ModelPackageName",
    "ModelPackageGroupName",
    "ModelPackageVersion",
    "ModelPackageArn",
    "ModelPackageDescription",
    "CreationTime",
    "ModelPackageStatus",
    "ModelApprovalStatus",
)


def _package_description(package: Any) -> dict[str, Any]:
    """moto's description of a model package, with what the service answers and moto leaves out or
    makes up: a version's ModelPackageName (its group's name; a required member), and no Studio user
    profile as its creator (moto names a fake one; the embedded stack's callers are IAM roles)."""
    response: dict[str, Any] = _aware(package.gen_response_object())
    response.setdefault("ModelPackageName", package.model_package_name)
    response["CreatedBy"] = {}
    if "LastModifiedBy" in response:
        response["LastModifiedBy"] = {}
    return response


def _package_summary(package: Any) -> dict[str, Any]:
    """A ListModelPackages entry. A version's carries no ModelPackageName (as the service's and moto's
    do not): clients such as sagemaker-core describe a listed package by its name when it has one."""
    full = _package_description(package)
    summary = {k: full[k] for k in _PACKAGE_SUMMARY_KEYS if k in full}
    if "ModelPackageVersion" in summary:
        del summary["ModelPackageName"]
    return summary
