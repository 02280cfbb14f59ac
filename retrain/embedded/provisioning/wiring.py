"""What the embedded runtime runs for a provisioned stack: functions, SQS event-source mappings, scheduled
rules and bucket notifications, read back from moto once it created the stack (:class:`Wiring`), with
what moto's CloudFormation skips (bucket versioning and notifications) applied."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from retrain.embedded.awslambda.runtime import FunctionSpec
from retrain.embedded.events.scheduler import ScheduledRule
from retrain.embedded.events.sqs_poller import SqsMapping
from retrain.embedded.provisioning.build import FunctionBuild
from retrain.embedded.provisioning.sam import ProvisioningError

WIRED_TYPES: Final = (
    "AWS::Lambda::Function",
    "AWS::Lambda::EventSourceMapping",
    "AWS::Events::Rule",
    "AWS::SQS::Queue",
    "AWS::DynamoDB::Table",
    "AWS::StepFunctions::StateMachine",
)


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
    builds: dict[str, FunctionBuild],
    *,
    physical: dict[str, str],
    lambda_client: Any,
    sqs_client: Any,
    events_client: Any,
    s3_client: Any,
    parameters: Mapping[str, Any] | None = None,
) -> Wiring:
    """Read back what moto created and build the runtime's view of it; apply what moto's CFN skipped."""
    wiring = Wiring()
    parameters = parameters or {}
    resources = translated["Resources"]
    for logical_id, resource in resources.items():
        kind, props = resource["Type"], resource.get("Properties", {})
        name = physical.get(logical_id)
        if name is None:
            continue
        if kind == "AWS::Lambda::Function":
            wiring.functions.update(_function(logical_id, name, builds, lambda_client))
        elif kind == "AWS::S3::Bucket":
            _apply_bucket_versioning(s3_client, name, props)
            wiring.bucket_notifications[name] = _notification_configuration(props, physical, sqs_client)
        elif kind in _NAMED:
            getattr(wiring, _NAMED[kind])[logical_id] = name
        else:
            continue
        wiring.logical_ids[logical_id] = kind
    for logical_id, resource in resources.items():
        kind, props = resource["Type"], resource.get("Properties", {})
        if kind == "AWS::Lambda::EventSourceMapping":
            wiring.sqs_mappings.append(_sqs_mapping(logical_id, props, physical, sqs_client, parameters))
            wiring.logical_ids[logical_id] = kind
        elif kind == "AWS::Events::Rule" and logical_id in physical:
            _wire_rule(wiring, physical[logical_id].split("/")[-1], props, events_client)
            wiring.logical_ids[logical_id] = kind
    return wiring


# Resource types the runtime only needs the physical name of -> the Wiring field that keeps it.
_NAMED: Final = {
    "AWS::SQS::Queue": "queues",
    "AWS::DynamoDB::Table": "tables",
    "AWS::StepFunctions::StateMachine": "state_machines",
}


def _function(
    logical_id: str, name: str, builds: dict[str, FunctionBuild], lambda_client: Any
) -> dict[str, FunctionSpec]:
    """The function as the Lambda runtime runs it: {its name: spec}, from the configuration moto holds
    and the function's build (``sam build``'s output of its CodeUri, and its layers)."""
    config = lambda_client.get_function_configuration(FunctionName=name)
    build = builds.get(logical_id)
    if build is None:
        raise ProvisioningError(f"function {logical_id} has no build of its code (CodeUri)")
    if config.get("Runtime") != build.runtime:
        raise ProvisioningError(
            f"function {logical_id}: deployed with Runtime {config.get('Runtime')}, built for {build.runtime}"
        )
    spec = FunctionSpec(
        name=config["FunctionName"],
        handler=config["Handler"],
        code_dir=build.task_root,
        layers=build.layers,
        runtime=build.runtime,
        environment={k: str(v) for k, v in config.get("Environment", {}).get("Variables", {}).items()},
        timeout_seconds=float(config.get("Timeout", 3)),
        memory_mb=int(config.get("MemorySize", 128)),
        logical_id=logical_id,
        role_arn=str(config.get("Role", "")),
    )
    return {spec.name: spec}


def _wire_rule(wiring: Wiring, rule_name: str, props: dict[str, Any], events_client: Any) -> None:
    """A scheduled rule goes to the scheduler (moto never fires it); a pattern rule is moto's to match."""
    if props.get("ScheduleExpression"):
        rule = events_client.describe_rule(Name=rule_name)
        targets = events_client.list_targets_by_rule(Rule=rule_name)["Targets"]
        wiring.scheduled_rules.append(
            ScheduledRule(rule_name, rule["Arn"], rule["ScheduleExpression"], tuple(targets))
        )
    else:
        wiring.pattern_rules.append(rule_name)


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
    logical_id: str,
    props: dict[str, Any],
    physical: dict[str, str],
    sqs_client: Any,
    parameters: Mapping[str, Any],
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
        maximum_concurrency=_number((props.get("ScalingConfig") or {}).get("MaximumConcurrency"), parameters),
    )


def _number(value: Any, parameters: Mapping[str, Any]) -> int | None:
    """A number property, given as is or as a Ref to a parameter; None when absent."""
    name = _ref_name(value)
    if name is not None:
        value = parameters.get(name)
    return None if value is None else int(value)


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
