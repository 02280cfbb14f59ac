"""The IAM policy a person (or CI role) needs to run ``sam build && sam deploy`` for this template.

Not written by hand: CloudFormation creates, updates, reads and deletes each resource with the
permissions its resource provider schema lists (``handlers.<op>.permissions``), and cfn-lint ships those
schemas. The policy is the union over every resource type of the translated template (a SAM
function is an AWS::Lambda::Function, a role, event source mappings, permissions...), plus what
CloudFormation and SAM themselves need: change sets of the stack and the SAM transform, and the SAM
CLI's managed artifact bucket (``sam deploy --guided`` creates it in a stack of its own).

``python -m retrain.dev.deployer_policy [--region R]`` prints it as JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from retrain.dev.template_model import REPO, load

HANDLERS: Final = ("create", "update", "delete", "read")
# What CloudFormation and the SAM CLI need beyond the resources (sam deploy's own calls).
DEPLOY_ACTIONS: Final = (
    "cloudformation:CreateChangeSet",
    "cloudformation:DescribeChangeSet",
    "cloudformation:ExecuteChangeSet",
    "cloudformation:DeleteChangeSet",
    "cloudformation:DescribeStacks",
    "cloudformation:DescribeStackEvents",
    "cloudformation:DescribeStackResource",
    "cloudformation:DescribeStackResources",
    "cloudformation:GetTemplate",
    "cloudformation:GetTemplateSummary",
    "cloudformation:ListStackResources",
    "cloudformation:ValidateTemplate",
    # the nested stacks (nested/: the MLflow app, the FSx file system), made with the deployer's rights
    "cloudformation:CreateStack",
    "cloudformation:UpdateStack",
    "cloudformation:DeleteStack",
    "s3:CreateBucket",
    "s3:GetObject",
    "s3:PutObject",
    "s3:ListBucket",
    "s3:GetBucketLocation",
    "s3:PutBucketPolicy",
    "s3:PutBucketVersioning",
    "s3:PutEncryptionConfiguration",
    "s3:PutBucketPublicAccessBlock",
    "s3:PutBucketTagging",
)


# Types whose provider schema lists no handler permissions (legacy, non-registry types), from the
# service's documentation of what creating one needs; a test fails when another such type appears.
SUPPLEMENT: Final[dict[str, tuple[str, ...]]] = {
    "AWS::FSx::FileSystem": (
        "fsx:CreateFileSystem",
        "fsx:DescribeFileSystems",
        "fsx:UpdateFileSystem",
        "fsx:DeleteFileSystem",
        "fsx:TagResource",
        "fsx:UntagResource",
        "ec2:CreateNetworkInterface",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeVpcs",
        "iam:CreateServiceLinkedRole",
    ),
}


class SchemaNotFoundError(LookupError):
    """cfn-lint has no resource provider schema for a type the template uses."""


@functools.cache
def _schemas() -> dict[str, dict[str, Any]]:
    from cfnlint.data import schemas

    found: dict[str, dict[str, Any]] = {}
    for path in (Path(next(iter(schemas.__path__))) / "resources").glob("*.json"):
        schema = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(schema, dict) and "typeName" in schema:
            found[str(schema["typeName"])] = schema
    return found


def resource_permissions(types: Iterable[str]) -> dict[str, list[str]]:
    """Per resource type: the permissions of its create, update, delete and read handlers."""
    schemas = _schemas()
    found: dict[str, list[str]] = {}
    for kind in sorted(set(types)):
        schema = schemas.get(kind)
        if schema is None:
            raise SchemaNotFoundError(f"cfn-lint has no resource provider schema for {kind}")
        handlers = schema.get("handlers", {})
        listed = {p for op in HANDLERS for p in handlers.get(op, {}).get("permissions", [])}
        listed |= set(SUPPLEMENT.get(kind, ()))
        if not listed:
            raise SchemaNotFoundError(f"the schema of {kind} lists no permissions: add them to SUPPLEMENT")
        found[kind] = sorted(listed)
    return found


def policy(template: Path = REPO / "template.yaml", *, region: str = "us-east-1") -> dict[str, Any]:
    """The deployer's policy document: the actions the deploy of `template` in `region` needs."""
    translated = load(template, region=region)
    types = [resource["Type"] for _, resource in translated.translated["Resources"].items()]
    per_type = resource_permissions(types)
    actions = sorted({a for actions in per_type.values() for a in actions} | set(DEPLOY_ACTIONS))
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DeployRetrain",
                "Effect": "Allow",
                "Action": actions,
                "Resource": "*",
            }
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retrain.dev.deployer_policy", description=__doc__)
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--template", type=Path, default=REPO / "template.yaml")
    args = parser.parse_args(argv)
    json.dump(policy(args.template, region=args.region), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
