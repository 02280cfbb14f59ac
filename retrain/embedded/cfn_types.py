"""CloudFormation's DescribeType for the emulated account (moto 5.2.5 has none): the public resource types a
region offers, each with its provider schema, from cfn-lint's per-region lists (:mod:`retrain.dev.regions`).

A type the region's list lacks answers TypeNotFoundException, as CloudFormation does. A type whose schema
lists no handlers (a legacy type such as AWS::FSx::FileSystem) is NON_PROVISIONABLE in the registry's
words, and CloudFormation still creates it in a template.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from retrain.dev import regions
from retrain.dev.template_model import partition_of


class TypeNotFoundError(LookupError):
    """The region does not offer the type."""


def _provisioning_type(handlers: dict[str, Any]) -> str:
    if "update" in handlers:
        return "FULLY_MUTABLE"
    return "IMMUTABLE" if "create" in handlers else "NON_PROVISIONABLE"


def describe_type(region: str, type_name: str) -> dict[str, Any]:
    """DescribeType's answer for a public resource type in `region`."""
    schema = regions.type_schema(type_name, region)
    if schema is None:
        raise TypeNotFoundError(f"The type '{type_name}' cannot be found in {region}.")
    parsed = json.loads(schema)
    partition, _ = partition_of(region)
    return {
        "Arn": f"arn:{partition}:cloudformation:{region}::type/resource/{type_name.replace('::', '-')}",
        "Type": "RESOURCE",
        "TypeName": type_name,
        "DefaultVersionId": "00000001",
        "IsDefaultVersion": True,
        "Description": str(parsed.get("description", "")),
        "Schema": schema,
        "ProvisioningType": _provisioning_type(parsed.get("handlers") or {}),
        "DeprecatedStatus": "LIVE",
        "Visibility": "PUBLIC",
    }


@contextmanager
def installed() -> Iterator[None]:
    """moto's CloudFormation answers DescribeType (public resource types) while the context lasts."""
    from moto.cloudformation.exceptions import CloudFormationError
    from moto.cloudformation.responses import CloudFormationResponse
    from moto.core.responses import ActionResult

    class TypeNotFoundResponseError(CloudFormationError):
        code = "TypeNotFoundException"

    def handler(self: Any) -> ActionResult:
        kind = self._get_param("TypeName")
        if self._get_param("Type", "RESOURCE") != "RESOURCE" or not kind:
            raise TypeNotFoundResponseError("The emulation describes public resource types by TypeName only.")
        try:
            return ActionResult(describe_type(self.region, str(kind)))
        except TypeNotFoundError as error:
            raise TypeNotFoundResponseError(str(error)) from None

    response_class: Any = CloudFormationResponse
    before = response_class.__dict__.get("describe_type")
    response_class.describe_type = handler
    try:
        yield
    finally:
        if before is None:
            del response_class.describe_type
        else:
            response_class.describe_type = before
