"""What IAM authorises for one API request: the actions, the resource ARNs and the condition keys.

``accesses(service, operation, params)`` answers for the operations this project's code, its state
machine and its SageMaker jobs call, the way the Service Authorization Reference lists them: most
operations are one action of the same name on the resource their parameters name; some need more
(``CreateTrainingJob`` with a role is also ``iam:PassRole`` on it, with tags also ``sagemaker:AddTags``;
``CopyObject`` reads one object and writes another); S3 and Lambda name some actions differently
(``ListObjectsV2`` is ``s3:ListBucket``, ``Invoke`` is ``lambda:InvokeFunction``).

An operation the table does not know raises :class:`UnknownOperationError`: the embedded stack refuses
what it cannot authorise rather than letting it through, so a new call in the code gets a mapping here
(iam-simulate then checks that the ARN fits a resource type of the action).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlparse

SAGEMAKER_SERVICE_PRINCIPAL: Final = "sagemaker.amazonaws.com"
# What a state machine with a Logging configuration needs of its role (CreateStateMachine checks it).
LOG_DELIVERY_ACTIONS: Final = (
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
)

# boto3 service name -> IAM service prefix, where they differ.
IAM_PREFIX: Final[Mapping[str, str]] = {"stepfunctions": "states"}


@dataclass(frozen=True)
class Access:
    """One action on one resource, with the condition keys the request carries."""

    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)


class UnknownOperationError(LookupError):
    """The embedded stack has no IAM mapping for the operation (so it refuses the request)."""


@dataclass(frozen=True)
class Scope:
    region: str
    account: str
    partition: str = "aws"

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        return (
            f"arn:{self.partition}:{service}:{self.region if region else ''}:"
            f"{self.account if account else ''}:{resource}"
        )


Resolver = Callable[[str, Mapping[str, Any], Scope], list[Access]]


def accesses(
    service: str, operation: str, params: Mapping[str, Any], *, region: str, account: str
) -> list[Access]:
    """The accesses a request needs, all of which must be allowed."""
    scope = Scope(region, account, "aws-cn" if region.startswith("cn-") else "aws")
    resolver = _SERVICES.get(service)
    if resolver is None:
        raise UnknownOperationError(f"{service}:{operation}")
    return resolver(operation, params, scope)


def _action(service: str, operation: str) -> str:
    return f"{IAM_PREFIX.get(service, service)}:{operation}"


def _unknown(service: str, operation: str) -> UnknownOperationError:
    return UnknownOperationError(f"{service}:{operation}")


# --- DynamoDB ----------------------------------------------------------------------------------------
def _dynamodb(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    def table(name: str, index: str | None = None) -> str:
        if name.startswith("arn:"):
            return name
        return scope.arn("dynamodb", f"table/{name}" + (f"/index/{index}" if index else ""))

    if operation in ("BatchGetItem", "BatchWriteItem"):
        return [Access(f"dynamodb:{operation}", table(name)) for name in params.get("RequestItems", {})]
    if operation in ("ListTables",):
        return [Access("dynamodb:ListTables", "*")]
    if operation in (
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "DescribeTable",
        "ConditionCheckItem",
    ):
        index = params.get("IndexName") if operation in ("Query", "Scan") else None
        return [Access(f"dynamodb:{operation}", table(str(params["TableName"]), index))]
    raise _unknown("dynamodb", operation)


# --- S3 ----------------------------------------------------------------------------------------------
_S3_OBJECT: Final[Mapping[str, str]] = {
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
    "DeleteObject": "s3:DeleteObject",
    "GetObjectTagging": "s3:GetObjectTagging",
}
_S3_VERSIONED: Final[Mapping[str, str]] = {
    "s3:GetObject": "s3:GetObjectVersion",
    "s3:DeleteObject": "s3:DeleteObjectVersion",
    "s3:GetObjectTagging": "s3:GetObjectVersionTagging",
}
_S3_BUCKET: Final[Mapping[str, str]] = {
    "ListObjects": "s3:ListBucket",
    "ListObjectsV2": "s3:ListBucket",
    "HeadBucket": "s3:ListBucket",
    "ListObjectVersions": "s3:ListBucketVersions",
    "ListMultipartUploads": "s3:ListBucketMultipartUploads",
    "GetBucketLocation": "s3:GetBucketLocation",
    "CreateBucket": "s3:CreateBucket",
    "GetBucketVersioning": "s3:GetBucketVersioning",
    "PutBucketVersioning": "s3:PutBucketVersioning",
    "GetBucketNotificationConfiguration": "s3:GetBucketNotification",
    "PutBucketNotificationConfiguration": "s3:PutBucketNotification",
}


def _s3(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    bucket = str(params.get("Bucket", ""))

    def obj(key: str) -> str:
        return f"arn:{scope.partition}:s3:::{bucket}/{key}"

    if operation == "ListBuckets":
        return [Access("s3:ListAllMyBuckets", "*")]
    if operation in _S3_OBJECT:
        action = _S3_OBJECT[operation]
        if params.get("VersionId"):
            action = _S3_VERSIONED.get(action, action)
        return [Access(action, obj(str(params["Key"])))]
    if operation == "DeleteObjects":
        delete = params.get("Delete") or {}
        if not isinstance(delete, Mapping):  # the keys are known only at run time (a static check)
            return [Access("s3:DeleteObject", obj(str(delete)))]
        items = delete.get("Objects", [])
        return [
            Access("s3:DeleteObjectVersion" if i.get("VersionId") else "s3:DeleteObject", obj(str(i["Key"])))
            for i in items
        ]
    if operation == "CopyObject":
        source = params["CopySource"]
        if isinstance(source, str):
            source_bucket, _, source_key = source.lstrip("/").partition("/")
            source_key, _, version = source_key.partition("?versionId=")
        else:
            source_bucket, source_key = str(source["Bucket"]), str(source["Key"])
            version = str(source.get("VersionId") or "")
        read = "s3:GetObjectVersion" if version else "s3:GetObject"
        return [
            Access(read, f"arn:{scope.partition}:s3:::{source_bucket}/{source_key}"),
            Access("s3:PutObject", obj(str(params["Key"]))),
        ]
    if operation in _S3_BUCKET:
        context: dict[str, str] = {}
        if operation in ("ListObjects", "ListObjectsV2", "ListObjectVersions"):
            context = {"s3:prefix": str(params.get("Prefix") or "")}
            if params.get("Delimiter"):
                context["s3:delimiter"] = str(params["Delimiter"])
        return [Access(_S3_BUCKET[operation], f"arn:{scope.partition}:s3:::{bucket}", context)]
    raise _unknown("s3", operation)


# --- SageMaker ---------------------------------------------------------------------------------------
# SageMaker builds resource ARNs from lower-cased names.
_SAGEMAKER_JOBS: Final[Mapping[str, tuple[str, str]]] = {
    # operation suffix -> (ARN resource type, name parameter)
    "TrainingJob": ("training-job", "TrainingJobName"),
    "ProcessingJob": ("processing-job", "ProcessingJobName"),
    "HyperParameterTuningJob": ("hyper-parameter-tuning-job", "HyperParameterTuningJobName"),
    "TransformJob": ("transform-job", "TransformJobName"),
}


# List calls whose action has no resource type (ListModelPackages' model-package is optional): they are
# authorised on "*" (Service Authorization Reference, Amazon SageMaker).
_SAGEMAKER_LISTS: Final = frozenset(
    {
        "ListTrainingJobs",
        "ListProcessingJobs",
        "ListHyperParameterTuningJobs",
        "ListModelPackages",
        "ListModelPackageGroups",
        "ListEndpoints",
    }
)
# Hosting resources: operation suffix -> (ARN resource type, name parameter).
_SAGEMAKER_HOSTING: Final[Mapping[str, tuple[str, str]]] = {
    "Model": ("model", "ModelName"),
    "EndpointConfig": ("endpoint-config", "EndpointConfigName"),
    "Endpoint": ("endpoint", "EndpointName"),
}


def _sagemaker(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    def arn(kind: str, name: str) -> str:
        return scope.arn("sagemaker", f"{kind}/{name.lower()}")

    action = f"sagemaker:{operation}"
    for suffix, (kind, name_key) in _SAGEMAKER_JOBS.items():
        if operation in (f"Create{suffix}", f"Describe{suffix}", f"Stop{suffix}"):
            resource = arn(kind, str(params[name_key]))
            found = [Access(action, resource)]
            if operation.startswith("Create"):
                found += _passed_roles(params, scope)
                if params.get("Tags"):
                    found.append(Access("sagemaker:AddTags", resource))
            return found
    if operation == "ListTrainingJobsForHyperParameterTuningJob":
        return [Access(action, arn("hyper-parameter-tuning-job", str(params["HyperParameterTuningJobName"])))]
    if operation in ("CreateModelPackageGroup", "DescribeModelPackageGroup", "DeleteModelPackageGroup"):
        group = str(params["ModelPackageGroupName"])  # Describe and Delete also take the group's ARN
        resource = group if group.startswith("arn:") else arn("model-package-group", group)
        return _tagged(action, resource, params)
    for suffix, (kind, name_key) in _SAGEMAKER_HOSTING.items():
        if operation in (f"Create{suffix}", f"Describe{suffix}", f"Delete{suffix}"):
            resource = arn(kind, str(params[name_key]))
            found = _tagged(action, resource, params)
            if operation == "CreateModel" and params.get("ExecutionRoleArn"):
                found.append(
                    Access(
                        "iam:PassRole",
                        str(params["ExecutionRoleArn"]),
                        {"iam:PassedToService": SAGEMAKER_SERVICE_PRINCIPAL},
                    )
                )
            return found
    if operation == "CreateModelPackage":
        # A versioned package is model-package/<group>/<version>; its version is not known before creation.
        group = str(params.get("ModelPackageGroupName") or params.get("ModelPackageName") or "")
        return _tagged(action, arn("model-package", group.rsplit("/", 1)[-1]), params)
    return _sagemaker_named(operation, params, action, arn)


def _tagged(action: str, resource: str, params: Mapping[str, Any]) -> list[Access]:
    """The action on the resource, and sagemaker:AddTags on it when the request carries Tags."""
    found = [Access(action, resource)]
    if params.get("Tags"):
        found.append(Access("sagemaker:AddTags", resource))
    return found


def _sagemaker_named(
    operation: str, params: Mapping[str, Any], action: str, arn: Callable[[str, str], str]
) -> list[Access]:
    """SageMaker operations on a resource their parameters name by ARN (or a package's name), or on all."""
    if operation in ("DescribeModelPackage", "UpdateModelPackage"):
        name = str(params["ModelPackageName"])
        return [Access(action, name if name.startswith("arn:") else arn("model-package", name))]
    if operation in _SAGEMAKER_LISTS:
        return [Access(action, "*")]
    if operation in ("AddTags", "ListTags", "DeleteTags"):
        return [Access(action, str(params["ResourceArn"]))]
    raise _unknown("sagemaker", operation)


# The EventBridge rule Step Functions manages to learn when a .sync job ends, per create operation.
SYNC_RULES: Final[Mapping[str, str]] = {
    "CreateTrainingJob": "StepFunctionsGetEventsForSageMakerTrainingJobsRule",
    "CreateProcessingJob": "StepFunctionsGetEventsForSageMakerProcessingJobsRule",
    "CreateHyperParameterTuningJob": "StepFunctionsGetEventsForSageMakerTuningJobsRule",
    "CreateTransformJob": "StepFunctionsGetEventsForSageMakerTransformJobsRule",
}


def sync_accesses(operation: str, params: Mapping[str, Any], *, region: str, account: str) -> list[Access]:
    """What a ``sagemaker:<create>.sync`` Task does besides the create, as the state machine's role: it
    tags the job it starts, reads its tags, describes it until it ends (and stops it when the execution
    stops), and keeps the managed EventBridge rule that reports its end (Step Functions' IAM docs)."""
    if operation not in SYNC_RULES:
        raise UnknownOperationError(f"sagemaker:{operation}.sync")
    scope = Scope(region, account, "aws-cn" if region.startswith("cn-") else "aws")
    suffix = operation.removeprefix("Create")
    kind, name_key = _SAGEMAKER_JOBS[suffix]
    job = scope.arn("sagemaker", f"{kind}/{str(params[name_key]).lower()}")
    rule = scope.arn("events", f"rule/{SYNC_RULES[operation]}")
    return [
        Access(f"sagemaker:Describe{suffix}", job),
        Access(f"sagemaker:Stop{suffix}", job),
        Access("sagemaker:AddTags", job),
        Access("sagemaker:ListTags", job),
        *(Access(action, rule) for action in ("events:PutTargets", "events:PutRule", "events:DescribeRule")),
    ]


def _passed_roles(params: Mapping[str, Any], scope: Scope) -> list[Access]:
    """iam:PassRole for every role a create request hands to SageMaker."""
    roles = [params.get("RoleArn"), (params.get("TrainingJobDefinition") or {}).get("RoleArn")]
    roles += [d.get("RoleArn") for d in params.get("TrainingJobDefinitions") or []]
    return [
        Access("iam:PassRole", str(role), {"iam:PassedToService": SAGEMAKER_SERVICE_PRINCIPAL})
        for role in roles
        if role
    ]


# --- Step Functions, SNS, SQS, Lambda, EventBridge ----------------------------------------------------
def _states(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    action = f"states:{operation}"
    if operation in ("StartExecution", "DescribeStateMachine", "ListExecutions", "StartSyncExecution"):
        return [Access(action, str(params["stateMachineArn"]))]
    if operation in ("DescribeExecution", "GetExecutionHistory", "StopExecution"):
        return [Access(action, str(params["executionArn"]))]
    if operation == "ListStateMachines":
        return [Access(action, "*")]
    raise _unknown("stepfunctions", operation)


def _sns(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    if operation == "Publish":
        return [Access("sns:Publish", str(params.get("TopicArn") or params.get("TargetArn")))]
    if operation in ("GetTopicAttributes", "ListSubscriptionsByTopic", "Subscribe"):
        return [Access(f"sns:{operation}", str(params["TopicArn"]))]
    raise _unknown("sns", operation)


_SQS_BATCH: Final[Mapping[str, str]] = {
    "DeleteMessageBatch": "sqs:DeleteMessage",
    "SendMessageBatch": "sqs:SendMessage",
    "ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}


def _sqs(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    if operation == "GetQueueUrl":
        name = str(params["QueueName"])
    elif "QueueUrl" in params:
        name = urlparse(str(params["QueueUrl"])).path.rstrip("/").rsplit("/", 1)[-1]
    else:
        raise _unknown("sqs", operation)
    action = _SQS_BATCH.get(operation, f"sqs:{operation}")
    return [Access(action, scope.arn("sqs", name))]


def _lambda(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    action = {"Invoke": "lambda:InvokeFunction", "InvokeAsync": "lambda:InvokeFunction"}.get(
        operation, f"lambda:{operation}"
    )
    if operation in ("Invoke", "InvokeAsync", "GetFunction", "GetFunctionConfiguration"):
        name = str(params["FunctionName"])
        if not name.startswith("arn:"):
            name = scope.arn("lambda", f"function:{name}")
        elif name.count(":") > 6:  # a qualified ARN: the function's ARN is what policies name
            name = name.rsplit(":", 1)[0]
        return [Access(action, name)]
    raise _unknown("lambda", operation)


def _events(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    if operation == "PutEvents":
        buses = {str(e.get("EventBusName") or "default") for e in params.get("Entries", [])}
        return [
            Access("events:PutEvents", b if b.startswith("arn:") else scope.arn("events", f"event-bus/{b}"))
            for b in sorted(buses)
        ]
    if operation in ("PutRule", "DescribeRule", "PutTargets", "ListTargetsByRule", "RemoveTargets"):
        name = str(params.get("Name") or params.get("Rule"))
        return [Access(f"events:{operation}", scope.arn("events", f"rule/{name}"))]
    raise _unknown("events", operation)


# --- CloudWatch Logs, FSx, the rest -------------------------------------------------------------------
def _logs(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    group = str(params.get("logGroupName", ""))
    action = f"logs:{operation}"
    if operation in ("CreateLogGroup", "DescribeLogStreams", "FilterLogEvents", "PutRetentionPolicy"):
        return [Access(action, scope.arn("logs", f"log-group:{group}"))]
    if operation in ("CreateLogStream", "PutLogEvents", "GetLogEvents"):
        stream = str(params["logStreamName"])
        return [Access(action, scope.arn("logs", f"log-group:{group}:log-stream:{stream}"))]
    if operation == "DescribeLogGroups":
        return [Access(action, "*")]
    raise _unknown("logs", operation)


def _fsx(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    if operation == "CreateDataRepositoryTask":
        return [
            Access("fsx:CreateDataRepositoryTask", scope.arn("fsx", f"file-system/{params['FileSystemId']}"))
        ]
    if operation in ("DescribeDataRepositoryTasks", "DescribeFileSystems"):
        return [Access(f"fsx:{operation}", "*")]
    raise _unknown("fsx", operation)


def _ecr(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    if operation == "GetAuthorizationToken":
        return [Access("ecr:GetAuthorizationToken", "*")]
    if operation in ("BatchGetImage", "GetDownloadUrlForLayer", "BatchCheckLayerAvailability"):
        registry = str(params.get("registryId") or scope.account)
        arn = f"arn:{scope.partition}:ecr:{scope.region}:{registry}:repository/{params['repositoryName']}"
        return [Access(f"ecr:{operation}", arn)]
    raise _unknown("ecr", operation)


def _sts(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    if operation == "GetCallerIdentity":
        return []  # no permission is needed to ask who you are
    raise _unknown("sts", operation)


def _plain(service: str, operations: frozenset[str]) -> Resolver:
    """Operations authorised on "*" (no resource types, or nothing a resource policy scopes)."""

    def resolve(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
        if operation not in operations:
            raise _unknown(service, operation)
        return [Access(_action(service, operation), "*")]

    return resolve


def _sagemaker_runtime(operation: str, params: Mapping[str, Any], scope: Scope) -> list[Access]:
    if operation == "InvokeEndpoint":
        name = str(params["EndpointName"]).lower()
        return [Access("sagemaker:InvokeEndpoint", scope.arn("sagemaker", f"endpoint/{name}"))]
    raise _unknown("sagemaker-runtime", operation)


_SERVICES: Final[Mapping[str, Resolver]] = {
    "dynamodb": _dynamodb,
    "s3": _s3,
    "sagemaker": _sagemaker,
    "sagemaker-runtime": _sagemaker_runtime,
    "stepfunctions": _states,
    "sns": _sns,
    "sqs": _sqs,
    "lambda": _lambda,
    "events": _events,
    "logs": _logs,
    "fsx": _fsx,
    "xray": _plain("xray", frozenset({"PutTraceSegments", "PutTelemetryRecords", "GetSamplingTargets"})),
    "ecr": _ecr,
    "sts": _sts,
}
