"""Provisioning the embedded stack from ``template.yaml``: the same template ``sam deploy`` ships to AWS.

The SAM template is translated with aws-sam-translator (as CloudFormation's SAM transform does), after the
two steps ``sam package`` would do: function code is zipped to a deployment bucket and the state machine's
DefinitionUri is read inline. The result is created as a CloudFormation stack in the moto server, so
``describe_stacks`` returns the template's Outputs to the CLI exactly as on AWS. What moto's CloudFormation
does not implement is filled in around it, each in one place:

- FSx file systems and SageMaker model package groups are created in the embedded services first, and
  every ``Ref``/``Fn::GetAtt``/``${}`` to them is replaced by the real values before the stack is created;
- state machine ``DefinitionSubstitutions`` become an ``Fn::Sub`` moto resolves;
- bucket versioning and notification configuration (S3 -> EventBridge/SQS) are applied after creation;
- Lambda functions, SQS event-source mappings and scheduled rules are wired to the embedded Lambda
  runtime (:class:`Wiring`), and moto's own inline SQS -> Lambda delivery is switched off.

:func:`unwired` lists any function, event source, rule, queue, table or state machine the template
declares that the runtime did not wire, so a test fails when the template grows something new.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from retrain.embedded.account import ACCOUNT_ID
from retrain.embedded.awslambda.runtime import FunctionSpec
from retrain.embedded.events.scheduler import ScheduledRule
from retrain.embedded.events.sqs_poller import SqsMapping

DEPLOY_BUCKET: Final = "retrain-embedded-deployment"


def embedded_parameters(region: str) -> dict[str, str]:
    """Values of the template's parameters without a Default, as AWS would accept them: the emulation
    runs training_image/ itself and needs no VPC."""
    return {
        "TrainingImageUri": f"{ACCOUNT_ID}.dkr.ecr.{region}.amazonaws.com/retrain-training:latest",
        "SubnetIds": "subnet-0e0b0e0d0e0d0e0b0",
        "SecurityGroupIds": "sg-0e0b0e0d0e0d0e0b0",
    }


WIRED_TYPES: Final = (
    "AWS::Lambda::Function",
    "AWS::Lambda::EventSourceMapping",
    "AWS::Events::Rule",
    "AWS::SQS::Queue",
    "AWS::DynamoDB::Table",
    "AWS::StepFunctions::StateMachine",
)
# Created by moto's CloudFormation without a runtime of their own here: alarms and dashboards change no
# behaviour the emulation runs; the IAM roles' policies are enforced by retrain.embedded.gatekeeper.iam
# (read back from moto's IAM after creation); resource policies (queue, topic, bucket, Lambda
# permissions) are not evaluated (README, Deploying to AWS).
INERT_TYPES: Final = frozenset(
    {
        "AWS::Lambda::Permission",
        "AWS::SQS::QueuePolicy",
        "AWS::SNS::TopicPolicy",
        "AWS::S3::BucketPolicy",
        "AWS::CloudWatch::Alarm",
        "AWS::CloudWatch::Dashboard",
        "AWS::Logs::LogGroup",
        "AWS::IAM::Role",
        "AWS::IAM::Policy",
        "AWS::IAM::ManagedPolicy",
        "AWS::SNS::Subscription",
        "AWS::EC2::SecurityGroup",
        "AWS::Lambda::EventInvokeConfig",
    }
)


class ProvisioningError(RuntimeError):
    """The template declares something the embedded runtime cannot create; the message says what."""


class _CfnLoader(yaml.SafeLoader):  # type: ignore[misc]
    """YAML with CloudFormation's short-form tags (``!Ref``, ``!GetAtt``, ``!Sub`` ...) as long forms."""


def _tag(loader: _CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        return {"Fn::GetAtt": value.split(".", 1)}
    if suffix == "Condition":
        return {"Condition": value}
    return {f"Fn::{suffix}": value}


_CfnLoader.add_multi_constructor("!", _tag)


def load_template(path: Path) -> dict[str, Any]:
    loaded = yaml.load(path.read_text(encoding="utf-8"), Loader=_CfnLoader)
    if not isinstance(loaded, dict) or "Resources" not in loaded:
        raise ProvisioningError(f"{path} is not a CloudFormation/SAM template (no Resources)")
    return loaded


def _zip_dir(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*.py")):
            if "__pycache__" not in path.parts:
                archive.write(path, path.relative_to(directory).as_posix())
    return buffer.getvalue()


def package(
    template: dict[str, Any], base_dir: Path, s3_client: Any
) -> tuple[dict[str, Any], dict[str, Path]]:
    """What ``sam package`` does: code to S3, state machine definitions inline. Returns the code dirs too."""
    out = copy.deepcopy(template)
    global_code = out.get("Globals", {}).get("Function", {}).get("CodeUri")
    code_dirs: dict[str, Path] = {}
    uploaded: dict[Path, str] = {}
    for logical_id, resource in out["Resources"].items():
        props = resource.setdefault("Properties", {})
        if resource.get("Type") == "AWS::Serverless::Function":
            code_uri = props.get("CodeUri", global_code)
            if not isinstance(code_uri, str) or code_uri.startswith("s3://"):
                raise ProvisioningError(
                    f"{logical_id}: CodeUri must be a local folder for the embedded stack"
                )
            directory = (base_dir / code_uri).resolve()
            if not directory.is_dir():
                raise ProvisioningError(
                    f"{logical_id}: CodeUri {code_uri!r} is not a folder next to the template"
                )
            if directory not in uploaded:
                key = f"code/{directory.name}-{len(uploaded)}.zip"
                s3_client.put_object(Bucket=DEPLOY_BUCKET, Key=key, Body=_zip_dir(directory))
                uploaded[directory] = key
            props["CodeUri"] = f"s3://{DEPLOY_BUCKET}/{uploaded[directory]}"
            code_dirs[logical_id] = directory
        elif resource.get("Type") == "AWS::Serverless::StateMachine" and isinstance(
            props.get("DefinitionUri"), str
        ):
            definition_path = base_dir / props.pop("DefinitionUri")
            props["Definition"] = json.loads(definition_path.read_text(encoding="utf-8"))
    return out, code_dirs


def translate(packaged: dict[str, Any], parameters: dict[str, str], region: str) -> dict[str, Any]:
    """SAM -> CloudFormation, with state machine substitutions as an Fn::Sub moto resolves."""
    import boto3
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    values: dict[str, Any] = {
        "AWS::Region": region,
        "AWS::AccountId": ACCOUNT_ID,
        "AWS::Partition": "aws",
        **parameters,
    }
    translator = Translator({}, Parser(), boto_session=boto3.session.Session(region_name=region))
    translated: dict[str, Any] = translator.translate(
        copy.deepcopy(packaged), parameter_values=values, get_managed_policy_map=dict
    )
    for resource in translated["Resources"].values():
        props = resource.get("Properties", {})
        if resource.get("Type") == "AWS::StepFunctions::StateMachine":
            definition = props.pop("Definition", None)
            substitutions = props.pop("DefinitionSubstitutions", None) or {}
            if definition is not None:
                props["DefinitionString"] = json.dumps(definition, indent=1)
            if substitutions:
                text = props["DefinitionString"]
                if not isinstance(text, str):
                    text = _join_literal(text)
                props["DefinitionString"] = definition_with_substitutions(text, substitutions)
    return translated


def definition_with_substitutions(text: str, substitutions: dict[str, Any]) -> dict[str, Any]:
    """DefinitionSubstitutions as an Fn::Join of literal text and the substituted values.

    Not an Fn::Sub: moto resolves that with string.Template, which turns the ASL's ``$$.Execution``
    context paths into ``$.Execution``. Placeholders the substitutions do not name stay as written."""
    parts: list[Any] = []
    last = 0
    for match in re.finditer(r"\$\{([^}]+)\}", text):
        if match.group(1) not in substitutions:
            continue
        parts += [text[last : match.start()], substitutions[match.group(1)]]
        last = match.end()
    parts.append(text[last:])
    return {"Fn::Join": ["", parts]}


def _join_literal(value: Any) -> str:
    """SAM renders an inline definition as Fn::Join of literal lines; turn it back into the text."""
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        if all(isinstance(part, str) for part in parts):
            return str(sep).join(parts)
    raise ProvisioningError(f"state machine DefinitionString {str(value)[:80]!r} is not literal text")


def substitute(node: Any, values: dict[str, str], attributes: dict[tuple[str, str], str]) -> Any:
    """Replace Ref/GetAtt/${} of resources created outside moto's CloudFormation by their real values."""
    if isinstance(node, list):
        return [substitute(item, values, attributes) for item in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Ref"} and node["Ref"] in values:
        return values[node["Ref"]]
    if set(node) == {"Fn::GetAtt"}:
        target = node["Fn::GetAtt"]
        parts = target.split(".", 1) if isinstance(target, str) else target
        if (parts[0], parts[1]) in attributes:
            return attributes[(parts[0], parts[1])]
    if set(node) == {"Fn::Sub"}:
        sub = node["Fn::Sub"]
        text, variables = (sub, {}) if isinstance(sub, str) else (sub[0], sub[1])

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in values and name not in variables:
                return values[name]
            logical, _, attr = name.partition(".")
            if attr and (logical, attr) in attributes:
                return attributes[(logical, attr)]
            return match.group(0)

        text = re.sub(r"\$\{([^!}][^}]*)\}", replace, text)
        variables = substitute(variables, values, attributes)
        return {"Fn::Sub": [text, variables] if variables else text}
    return {key: substitute(value, values, attributes) for key, value in node.items()}


class Intrinsics:
    """Evaluates CloudFormation intrinsics to plain values, for the resources created outside moto."""

    def __init__(
        self,
        values: dict[str, Any],
        attributes: dict[tuple[str, str], str],
        *,
        conditions: dict[str, Any] | None = None,
        mappings: dict[str, Any] | None = None,
    ) -> None:
        self.values, self.attributes = values, attributes
        self._conditions = conditions or {}
        self._mappings = mappings or {}
        self._evaluated: dict[str, bool] = {}

    def condition(self, name: str) -> bool:
        if name not in self._evaluated:
            if name not in self._conditions:
                raise ProvisioningError(f"condition {name!r} is not declared in the template's Conditions")
            self._evaluated[name] = bool(self.resolve(self._conditions[name]))
        return self._evaluated[name]

    def resolve(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.resolve(item) for item in node]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            if key == "Ref":
                if arg not in self.values:
                    raise ProvisioningError(f"cannot resolve Ref {arg!r} before the stack exists")
                return self.values[arg]
            if key == "Fn::GetAtt":
                parts = arg.split(".", 1) if isinstance(arg, str) else arg
                if (parts[0], parts[1]) not in self.attributes:
                    raise ProvisioningError(f"cannot resolve GetAtt {parts!r} before the stack exists")
                return self.attributes[(parts[0], parts[1])]
            if key == "Fn::Sub":
                text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))

                def replace(match: re.Match[str]) -> str:
                    name = match.group(1)
                    if name in variables:
                        return str(variables[name])
                    if "." in name:
                        return str(self.resolve({"Fn::GetAtt": name.split(".", 1)}))
                    return str(self.resolve({"Ref": name}))

                return re.sub(r"\$\{([^!}][^}]*)\}", replace, text)
            if key == "Fn::Join":
                return str(arg[0]).join(str(v) for v in self.resolve(arg[1]))
            if key == "Fn::Select":
                return self.resolve(arg[1])[int(self.resolve(arg[0]))]
            if key == "Fn::Split":
                return str(self.resolve(arg[1])).split(arg[0])
            if key == "Fn::If":
                return self.resolve(arg[1] if self.condition(arg[0]) else arg[2])
            if key == "Fn::FindInMap":
                name, top, second = (self.resolve(a) for a in arg)
                return self._mappings[name][top][second]
            if key == "Fn::Equals":
                left, right = self.resolve(arg)
                return str(left) == str(right)
            if key == "Fn::Contains":
                values, value = self.resolve(arg)
                return str(value) in [str(v) for v in values]
            if key == "Fn::EachMemberEquals":
                values, value = self.resolve(arg)
                return all(str(v) == str(value) for v in values)
            if key == "Fn::EachMemberIn":
                values, allowed = self.resolve(arg)
                return all(str(v) in [str(a) for a in allowed] for v in values)
            if key == "Fn::And":
                return all(self.resolve(a) for a in arg)
            if key == "Fn::Or":
                return any(self.resolve(a) for a in arg)
            if key == "Fn::Not":
                return not self.resolve(arg[0])
            if key == "Condition":
                return self.condition(arg)
        return {key: self.resolve(value) for key, value in node.items()}


def check_parameters(template: dict[str, Any], parameters: dict[str, str]) -> None:
    """Refuse parameter values as CloudFormation does before it creates anything: AllowedValues,
    AllowedPattern (the whole value), lengths, numbers and their range; the ConstraintDescription
    is the message when the template gives one."""
    problems = []
    for name, declared in template.get("Parameters", {}).items():
        value = parameters.get(name)
        if value is None:
            problems.append(f"Parameter '{name}' has no value: it has no Default, so give one")
            continue
        broken = _parameter_problem(declared, value)
        if broken:
            described = declared.get("ConstraintDescription")
            problems.append(
                f"Parameter '{name}' failed to satisfy constraint: {described}"
                if described
                else f"Parameter '{name}' {broken}"
            )
    if problems:
        raise ProvisioningError("; ".join(problems))


def _parameter_problem(declared: dict[str, Any], value: str) -> str | None:
    kind = str(declared.get("Type", "String"))
    items = [v.strip() for v in value.split(",")] if "List" in kind else [value]
    for item in items:
        allowed = declared.get("AllowedValues")
        if allowed is not None and item not in [str(a) for a in allowed]:
            return f"must be one of {[str(a) for a in allowed]}, not {item!r}"
        pattern = declared.get("AllowedPattern")
        if pattern is not None and re.fullmatch(str(pattern), item) is None:
            return f"must match pattern {pattern}, not {item!r}"
        if "MinLength" in declared and len(item) < int(declared["MinLength"]):
            return f"must be at least {declared['MinLength']} characters"
        if "MaxLength" in declared and len(item) > int(declared["MaxLength"]):
            return f"must be at most {declared['MaxLength']} characters"
        if kind == "Number":
            try:
                number = float(item)
            except ValueError:
                return f"must be a number, not {item!r}"
            if "MinValue" in declared and number < float(declared["MinValue"]):
                return f"must be at least {declared['MinValue']}"
            if "MaxValue" in declared and number > float(declared["MaxValue"]):
                return f"must be at most {declared['MaxValue']}"
    return None


def check_rules(
    template: dict[str, Any], parameters: dict[str, str], *, region: str, stack_name: str
) -> None:
    """The template's Rules, as CloudFormation checks them before it creates anything: every assertion of
    a rule whose RuleCondition holds must hold, else the AssertDescription is the error."""
    values: dict[str, Any] = {
        "AWS::Region": region,
        "AWS::AccountId": ACCOUNT_ID,
        "AWS::Partition": "aws-cn" if region.startswith("cn-") else "aws",
        "AWS::StackName": stack_name,
        **parameter_values(template, parameters),
    }
    intrinsics = Intrinsics(values, {}, conditions=template.get("Conditions"))
    failed = []
    for name, rule in (template.get("Rules") or {}).items():
        if "RuleCondition" in rule and not intrinsics.resolve(rule["RuleCondition"]):
            continue
        for assertion in rule.get("Assertions", []):
            if not intrinsics.resolve(assertion["Assert"]):
                failed.append(f"{name}: {assertion.get('AssertDescription', 'an assertion failed')}")
    if failed:
        raise ProvisioningError("Template rule(s) failed: " + "; ".join(failed))


def parameter_values(template: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    """Ref values of the parameters: list parameters as lists, the rest as given."""
    declared = template.get("Parameters", {})
    return {
        name: [v.strip() for v in value.split(",")]
        if "List" in str(declared.get(name, {}).get("Type", ""))
        else value
        for name, value in parameters.items()
    }


# One creator per resource type moto's CloudFormation lacks: (logical id, properties) -> (Ref, {attr: v}).
ExternalCreator = Callable[[str, dict[str, Any]], tuple[str, dict[str, str]]]


def create_external(
    translated: dict[str, Any],
    creators: dict[str, ExternalCreator],
    supported: Iterable[str],
    *,
    stack_name: str,
    parameters: dict[str, str],
    region: str,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Create what moto's CloudFormation cannot, substitute its values, and drop it from the template.

    An external resource's own properties may name stack resources (an FSx ImportPath names the data
    bucket): those are resolved to the names moto will give them (see :func:`predicted_values`).
    Returns the template to create and {logical id: resource type} of what was created outside it."""
    supported = set(supported)
    out = copy.deepcopy(translated)
    created: dict[str, str] = {}
    values: dict[str, str] = {}
    attributes: dict[tuple[str, str], str] = {}
    known, known_attributes = predicted_values(translated, stack_name=stack_name, region=region)
    intrinsics = Intrinsics(
        {**known, **parameter_values(translated, parameters)},
        known_attributes,
        conditions=translated.get("Conditions"),
        mappings=translated.get("Mappings"),
    )
    for logical_id, resource in list(out["Resources"].items()):
        kind = resource["Type"]
        if kind in supported:
            continue
        if "Condition" in resource and not intrinsics.condition(resource["Condition"]):
            del out["Resources"][logical_id]
            continue
        if kind in creators:
            intrinsics.values.update(values)
            intrinsics.attributes.update(attributes)
            try:
                props = intrinsics.resolve(resource.get("Properties", {}))
            except ProvisioningError as error:
                raise ProvisioningError(f"{logical_id}: {error}") from None
            ref, attrs = creators[kind](logical_id, props)
            values[logical_id] = ref
            attributes.update({(logical_id, name): value for name, value in attrs.items()})
            created[logical_id] = kind
        elif kind not in INERT_TYPES:
            raise ProvisioningError(
                f"template resource {logical_id} has type {kind}, which neither moto nor the embedded "
                "runtime creates; add a creator in retrain/embedded/provisioning/template.py or mark "
                "the type inert there"
            )
        del out["Resources"][logical_id]
    out = substitute(out, values, attributes)
    for resource in out["Resources"].values():
        depends = resource.get("DependsOn")
        if isinstance(depends, list):
            resource["DependsOn"] = [d for d in depends if d in out["Resources"]] or None
        elif isinstance(depends, str) and depends not in out["Resources"]:
            resource["DependsOn"] = None
        if resource.get("DependsOn") is None:
            resource.pop("DependsOn", None)
    return out, created


_NAME_PROPERTIES: Final = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
}


def predicted_values(
    translated: dict[str, Any], *, stack_name: str, region: str
) -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    """Ref/GetAtt values of pseudo parameters and named resources before moto creates them
    (physical names are deterministic, see :func:`deterministic_names`)."""
    from moto.cloudformation import parsing

    values: dict[str, Any] = {
        "AWS::StackName": stack_name,
        "AWS::Region": region,
        "AWS::AccountId": ACCOUNT_ID,
        "AWS::Partition": "aws",
        "AWS::URLSuffix": "amazonaws.com",
        "AWS::NoValue": None,
    }
    attributes: dict[tuple[str, str], str] = {}
    with deterministic_names():
        for logical_id, resource in translated["Resources"].items():
            kind = resource["Type"]
            if kind not in _NAME_PROPERTIES:
                continue
            given = resource.get("Properties", {}).get(_NAME_PROPERTIES[kind])
            name = (
                given
                if isinstance(given, str)
                else str(parsing.generate_resource_name(kind, stack_name, logical_id))
            )
            arn_service = {
                "AWS::S3::Bucket": "s3",
                "AWS::DynamoDB::Table": "dynamodb",
                "AWS::SQS::Queue": "sqs",
                "AWS::SNS::Topic": "sns",
            }[kind]
            if kind == "AWS::S3::Bucket":
                arn = f"arn:aws:s3:::{name}"
                values[logical_id] = name
            elif kind == "AWS::DynamoDB::Table":
                arn = f"arn:aws:dynamodb:{region}:{ACCOUNT_ID}:table/{name}"
                values[logical_id] = name
            else:
                arn = f"arn:aws:{arn_service}:{region}:{ACCOUNT_ID}:{name}"
                values[logical_id] = arn if kind == "AWS::SNS::Topic" else name
            attributes[(logical_id, "Arn")] = arn
    return values, attributes


def moto_supported_types() -> set[str]:
    """The resource types moto's CloudFormation creates (read from moto, so an upgrade is picked up)."""
    from moto.cloudformation import parsing

    return set(parsing.get_model_map())


@contextmanager
def deterministic_names() -> Iterator[None]:
    """Physical names moto's CloudFormation generates, made stable per (stack, logical id), so a stack
    re-created from saved state gets the same bucket and table names its saved records point at."""
    from moto.cloudformation import parsing

    module: Any = parsing
    original = module.random_suffix
    current: list[str] = []

    def generate(resource_type: str, stack_name: str, logical_id: str) -> str:
        current.append(hashlib.sha256(f"{stack_name}/{logical_id}".encode()).hexdigest()[:12].upper())
        try:
            return str(original_generate(resource_type, stack_name, logical_id))
        finally:
            current.pop()

    original_generate = module.generate_resource_name
    module.random_suffix = lambda: current[-1] if current else original()
    module.generate_resource_name = generate
    try:
        yield
    finally:
        module.generate_resource_name = original_generate
        module.random_suffix = original


@dataclass
class Wiring:
    """What the runtime runs for the stack, keyed so tests can check that nothing was left out."""

    functions: dict[str, FunctionSpec] = field(default_factory=dict)  # physical name -> spec
    sqs_mappings: list[SqsMapping] = field(default_factory=list)
    scheduled_rules: list[ScheduledRule] = field(default_factory=list)
    pattern_rules: list[str] = field(default_factory=list)
    queues: dict[str, str] = field(default_factory=dict)  # logical id -> url
    tables: dict[str, str] = field(default_factory=dict)
    state_machines: dict[str, str] = field(default_factory=dict)
    external: dict[str, str] = field(default_factory=dict)
    logical_ids: dict[str, str] = field(default_factory=dict)  # logical id -> type, of what got wired
    # bucket -> NotificationConfiguration, applied by apply_notifications() once saved data is back
    bucket_notifications: dict[str, dict[str, Any]] = field(default_factory=dict)


def apply_notifications(wiring: Wiring, s3_client: Any) -> None:
    """Turn on the buckets' event notifications (S3 -> EventBridge/SQS/Lambda).

    Done after restoring saved objects, so a restart does not replay every old upload and checkpoint."""
    for bucket, config in wiring.bucket_notifications.items():
        if config:
            s3_client.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration=config)


def wire(
    translated: dict[str, Any],
    code_dirs: dict[str, Path],
    *,
    physical: dict[str, str],
    lambda_client: Any,
    sqs_client: Any,
    events_client: Any,
    s3_client: Any,
) -> Wiring:
    """Read back what moto created and build the runtime's view of it; apply what moto's CFN skipped."""
    wiring = Wiring()
    resources = translated["Resources"]
    for logical_id, resource in resources.items():
        kind, props = resource["Type"], resource.get("Properties", {})
        name = physical.get(logical_id)
        if name is None:
            continue
        if kind == "AWS::Lambda::Function":
            config = lambda_client.get_function_configuration(FunctionName=name)
            code_dir = code_dirs.get(logical_id)
            if code_dir is None:
                raise ProvisioningError(f"function {logical_id} has no local code folder (CodeUri)")
            wiring.functions[config["FunctionName"]] = FunctionSpec(
                name=config["FunctionName"],
                handler=config["Handler"],
                code_dir=code_dir,
                environment={
                    k: str(v) for k, v in config.get("Environment", {}).get("Variables", {}).items()
                },
                timeout_seconds=float(config.get("Timeout", 3)),
                memory_mb=int(config.get("MemorySize", 128)),
                logical_id=logical_id,
                role_arn=str(config.get("Role", "")),
            )
        elif kind == "AWS::SQS::Queue":
            wiring.queues[logical_id] = name
        elif kind == "AWS::DynamoDB::Table":
            wiring.tables[logical_id] = name
        elif kind == "AWS::StepFunctions::StateMachine":
            wiring.state_machines[logical_id] = name
        elif kind == "AWS::S3::Bucket":
            _apply_bucket_versioning(s3_client, name, props)
            wiring.bucket_notifications[name] = _notification_configuration(props, physical, sqs_client)
        else:
            continue
        wiring.logical_ids[logical_id] = kind
    for logical_id, resource in resources.items():
        kind, props = resource["Type"], resource.get("Properties", {})
        if kind == "AWS::Lambda::EventSourceMapping":
            wiring.sqs_mappings.append(_sqs_mapping(logical_id, props, physical, sqs_client))
            wiring.logical_ids[logical_id] = kind
        elif kind == "AWS::Events::Rule" and logical_id in physical:
            rule_name = physical[logical_id].split("/")[-1]
            if props.get("ScheduleExpression"):
                rule = events_client.describe_rule(Name=rule_name)
                targets = events_client.list_targets_by_rule(Rule=rule_name)["Targets"]
                wiring.scheduled_rules.append(
                    ScheduledRule(rule_name, rule["Arn"], rule["ScheduleExpression"], tuple(targets))
                )
            else:
                wiring.pattern_rules.append(rule_name)
            wiring.logical_ids[logical_id] = kind
    return wiring


def _ref_name(value: Any) -> str | None:
    if isinstance(value, dict):
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            return str(target.split(".")[0] if isinstance(target, str) else target[0])
    return None


def _queue_url(value: Any, physical: dict[str, str], sqs_client: Any) -> tuple[str, str]:
    logical = _ref_name(value)
    if logical is not None and logical in physical:
        url = physical[logical]
    elif isinstance(value, str) and value.startswith("arn:aws:sqs:"):
        url = sqs_client.get_queue_url(QueueName=value.rsplit(":", 1)[-1])["QueueUrl"]
    else:
        raise ProvisioningError(f"cannot tell which queue {value!r} names")
    arn = sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def _sqs_mapping(
    logical_id: str, props: dict[str, Any], physical: dict[str, str], sqs_client: Any
) -> SqsMapping:
    source = props.get("EventSourceArn")
    logical = _ref_name(source)
    from_queue = (logical is not None and physical.get(logical, "").startswith("http")) or (
        isinstance(source, str) and source.startswith("arn:aws:sqs:")
    )
    if not from_queue:
        raise ProvisioningError(
            f"{logical_id}: only SQS event sources run in the embedded stack, not {source!r}"
        )
    url, arn = _queue_url(source, physical, sqs_client)
    function = _ref_name(props.get("FunctionName"))
    function_name = physical.get(function, function) if function else str(props.get("FunctionName"))
    return SqsMapping(
        function=str(function_name),
        queue_url=url,
        queue_arn=arn,
        batch_size=int(props.get("BatchSize", 10)),
        batching_window_seconds=float(props.get("MaximumBatchingWindowInSeconds", 0)),
        report_batch_item_failures="ReportBatchItemFailures" in (props.get("FunctionResponseTypes") or []),
        enabled=bool(props.get("Enabled", True)),
    )


def _resolve_arn(value: Any, physical: dict[str, str], sqs_client: Any) -> Any:
    logical = _ref_name(value)
    if logical is None or logical not in physical:
        return value
    target = physical[logical]
    if target.startswith("http"):
        return _queue_url(value, physical, sqs_client)[1]
    return target


def _apply_bucket_versioning(s3_client: Any, bucket: str, props: dict[str, Any]) -> None:
    versioning = props.get("VersioningConfiguration")
    if versioning:
        s3_client.put_bucket_versioning(
            Bucket=bucket, VersioningConfiguration={"Status": versioning["Status"]}
        )


def _notification_configuration(
    props: dict[str, Any], physical: dict[str, str], sqs_client: Any
) -> dict[str, Any]:
    """The bucket's NotificationConfiguration in the S3 API's shape (moto's CloudFormation skips it)."""
    notification = props.get("NotificationConfiguration")
    if not notification:
        return {}
    config: dict[str, Any] = {}
    if notification.get("EventBridgeConfiguration", {}).get("EventBridgeEnabled") in (True, "true", "True"):
        config["EventBridgeConfiguration"] = {}
    for cfn_key, api_key, arn_key in (
        ("QueueConfigurations", "QueueConfigurations", "QueueArn"),
        ("LambdaConfigurations", "LambdaFunctionConfigurations", "LambdaFunctionArn"),
        ("TopicConfigurations", "TopicConfigurations", "TopicArn"),
    ):
        cfn_arn_key = {"QueueArn": "Queue", "LambdaFunctionArn": "Function", "TopicArn": "Topic"}[arn_key]
        entries = []
        for entry in notification.get(cfn_key, []):
            api_entry: dict[str, Any] = {arn_key: _resolve_arn(entry[cfn_arn_key], physical, sqs_client)}
            api_entry["Events"] = [entry["Event"]]
            if "Filter" in entry:
                rules = entry["Filter"]["S3Key"]["Rules"]
                api_entry["Filter"] = {"Key": {"FilterRules": rules}}
            entries.append(api_entry)
        if entries:
            config[api_key] = entries
    return config


def unwired(translated: dict[str, Any], wiring: Wiring) -> list[str]:
    """Every function, event source, rule, queue, table or state machine declared but not wired."""
    return sorted(
        f"{logical_id} ({resource['Type']})"
        for logical_id, resource in translated["Resources"].items()
        if resource["Type"] in WIRED_TYPES and logical_id not in wiring.logical_ids
    )
