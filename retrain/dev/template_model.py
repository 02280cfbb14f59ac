"""template.yaml as CloudFormation would create it in a region, without creating anything.

``load(template, region=...)`` does what a deploy does before it touches a resource: checks the parameter
values against their constraints and the template's Rules, translates SAM (as the transform does), and
resolves every intrinsic (conditions, mappings, ``Fn::Sub`` of pseudo parameters) with stand-in names for
the resources (``<stack>-<LogicalId>``). The static IAM check reads the roles from it; a test loads it in
every region that offers SageMaker.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.gatekeeper.iam.evaluator import Policy
from retrain.embedded.gatekeeper.iam.principals import managed_policy
from retrain.embedded.provisioning.intrinsics import Intrinsics
from retrain.embedded.provisioning.parameters import check_parameters, check_rules, parameter_values
from retrain.embedded.provisioning.sam import embedded_parameters, load_template, package, translate

REPO: Final = Path(__file__).resolve().parents[2]
STACK: Final = "retrain"


@dataclass
class Role:
    logical_id: str
    arn: str
    policies: list[Policy]


@dataclass
class Template:
    """A translated template whose intrinsics resolve to stand-in names."""

    translated: dict[str, Any]
    intrinsics: Intrinsics
    roles: dict[str, Role]  # by ARN

    def resolve(self, node: Any) -> Any:
        return self.intrinsics.resolve(node)

    def resources(self, kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for logical_id, resource in self.translated["Resources"].items():
            if resource["Type"] == kind and self.exists(resource):
                yield logical_id, resource

    def exists(self, resource: Mapping[str, Any]) -> bool:
        condition = resource.get("Condition")
        return condition is None or self.intrinsics.condition(str(condition))

    def names(self, kind: str) -> list[str]:
        return [str(self.resolve({"Ref": logical_id})) for logical_id, _ in self.resources(kind)]


# --- the template, translated and resolved ------------------------------------------------------------


class _NoUpload:
    def put_object(self, **request: Any) -> None:
        """``sam package`` uploads the code; the static check only reads it."""


@functools.cache
def partition_of(region: str) -> tuple[str, str]:
    """(partition, URL suffix) of a region, from botocore's partition data."""
    import botocore.session

    session = botocore.session.get_session()
    name = session.get_partition_for_region(region)
    for partition in session.get_data("partitions")["partitions"]:
        if partition["id"] == name:
            return name, str(partition["outputs"]["dnsSuffix"])
    raise ValueError(f"botocore knows no partition of region {region!r}")


def _stand_ins(
    resources: Mapping[str, Any], region: str
) -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    """Ref values and attributes of every resource, as CloudFormation would name them."""
    values: dict[str, Any] = {}
    attributes: dict[tuple[str, str], str] = {}
    partition, _ = partition_of(region)
    prefix = f"arn:{partition}:{{}}:{region}:{ACCOUNT_ID}:"
    for logical_id, resource in resources.items():
        name = f"{STACK}-{logical_id}"
        kind = resource["Type"]
        arn = {
            "AWS::S3::Bucket": f"arn:{partition}:s3:::{name.lower()}",
            "AWS::DynamoDB::Table": prefix.format("dynamodb") + f"table/{name}",
            "AWS::SQS::Queue": prefix.format("sqs") + name,
            "AWS::SNS::Topic": prefix.format("sns") + name,
            "AWS::Lambda::Function": prefix.format("lambda") + f"function:{name}",
            "AWS::IAM::Role": f"arn:{partition}:iam::{ACCOUNT_ID}:role/{name}",
            "AWS::Logs::LogGroup": prefix.format("logs") + f"log-group:{name}:*",
            "AWS::Events::Rule": prefix.format("events") + f"rule/{name}",
            "AWS::SageMaker::MlflowApp": prefix.format("sagemaker") + "mlflow-app/app-0123456789ab",
        }.get(kind, prefix.format("static") + name)
        values[logical_id] = {
            "AWS::S3::Bucket": name.lower(),
            "AWS::SQS::Queue": f"https://sqs.{region}.amazonaws.com/{ACCOUNT_ID}/{name}",
            "AWS::SNS::Topic": arn,
            "AWS::FSx::FileSystem": "fs-0123456789abcdef0",
            "AWS::SageMaker::MlflowApp": arn,  # its Ref is its ARN
        }.get(kind, name)
        attributes.update(
            {
                (logical_id, "Arn"): arn,
                (logical_id, "QueueName"): name,
                (logical_id, "TopicName"): name,
                (logical_id, "Name"): name,
                (logical_id, "LustreMountName"): "abcdefgh",
                (logical_id, "DNSName"): "fs-0123456789abcdef0.fsx.amazonaws.com",
            }
        )
    return values, attributes


def load(
    template_path: Path = REPO / "template.yaml",
    parameters: Mapping[str, str] | None = None,
    *,
    region: str = REGION,
) -> Template:
    """The template as a deploy in `region` would see it (ProvisioningError where it would refuse it)."""
    template = load_template(template_path)
    declared = template.get("Parameters", {})
    values = {k: str(v["Default"]) for k, v in declared.items() if "Default" in v}
    values.update({k: v for k, v in embedded_parameters(region).items() if k in declared and k not in values})
    values.update(parameters or {})
    check_parameters(template, values)
    check_rules(template, values, region=region, stack_name=STACK)
    packaged = package(template, template_path.parent, _NoUpload())
    translated = translate(packaged, values, region)
    refs, attributes = _stand_ins(translated["Resources"], region)
    partition, url_suffix = partition_of(region)
    # State machines named in the template keep their name (policies and environments build ARNs of it).
    intrinsics = Intrinsics(
        {
            "AWS::Region": region,
            "AWS::AccountId": ACCOUNT_ID,
            "AWS::Partition": partition,
            "AWS::StackName": STACK,
            "AWS::URLSuffix": url_suffix,
            "AWS::NoValue": None,
            **refs,
            **parameter_values(translated, values),
        },
        attributes,
        conditions=translated.get("Conditions"),
        mappings=translated.get("Mappings"),
    )
    for logical_id, resource in translated["Resources"].items():
        if resource["Type"] == "AWS::StepFunctions::StateMachine":
            name = str(
                intrinsics.resolve(resource["Properties"].get("StateMachineName", f"{STACK}-{logical_id}"))
            )
            arn = f"arn:{partition}:states:{region}:{ACCOUNT_ID}:stateMachine:{name}"
            intrinsics.values[logical_id] = arn
            intrinsics.attributes.update({(logical_id, "Name"): name, (logical_id, "Arn"): arn})
    roles: dict[str, Role] = {}
    for logical_id, resource in translated["Resources"].items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        if "Condition" in resource and not intrinsics.condition(str(resource["Condition"])):
            continue  # not part of the stack with these parameters
        props = intrinsics.resolve(copy.deepcopy(resource.get("Properties", {})))
        policies = [Policy(p["PolicyName"], p["PolicyDocument"]) for p in props.get("Policies", [])]
        policies += [
            Policy(arn.rsplit("/", 1)[-1], managed_policy(arn)) for arn in props.get("ManagedPolicyArns", [])
        ]
        arn = str(intrinsics.attributes[(logical_id, "Arn")])
        roles[arn] = Role(logical_id, arn, policies)
    return Template(translated, intrinsics, roles)


def resolved_resources(template: Template) -> dict[str, Any]:
    """Every resource the stack would create, its properties resolved (raises where CloudFormation would)."""
    return {
        logical_id: template.resolve(copy.deepcopy(resource))
        for logical_id, resource in template.translated["Resources"].items()
        if template.exists(resource)
    }


def function_environment(template: Template, function: str) -> dict[str, str]:
    """A function's environment as the stack sets it (the transform merges the Globals in)."""
    variables = template.translated["Resources"][function]["Properties"].get("Environment", {})
    resolved = template.resolve(copy.deepcopy(variables.get("Variables", {})))
    return {name: str(value) for name, value in resolved.items()}


@functools.cache
def default_environment(function: str = "PrepareRunFunction") -> dict[str, str]:
    """`function`'s environment with every parameter at its default: what tests configure Lambdas with,
    so that the template stays the one source of the stack's defaults."""
    return function_environment(load(), function)
