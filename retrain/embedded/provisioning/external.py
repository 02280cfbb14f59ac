"""The resources moto's CloudFormation cannot create (FSx file systems, model package groups, MLflow
apps): created in the embedded services first, their values substituted into the template before moto
creates the rest, with the physical names moto will give the stack's resources predicted (and made
deterministic)."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from retrain.embedded.account import ACCOUNT_ID
from retrain.embedded.provisioning.intrinsics import Intrinsics, substitute
from retrain.embedded.provisioning.parameters import parameter_values
from retrain.embedded.provisioning.sam import ProvisioningError

if TYPE_CHECKING:
    from retrain.embedded.fsx.emulator import FsxEmulator

# Created by moto's CloudFormation without a runtime of their own here: alarms and dashboards change no
# behaviour the emulation runs; the IAM roles' policies are enforced by retrain.embedded.gatekeeper.iam
# (read back from moto's IAM after creation); resource policies (queue, topic, bucket, Lambda
# permissions) are not evaluated (docs/embedded.md).
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


# One creator per resource type moto's CloudFormation lacks: (logical id, properties) -> (Ref, {attr: v}).
ExternalCreator = Callable[[str, dict[str, Any]], tuple[str, dict[str, str]]]


class ExternalCreators:
    """The creators of the template's resources moto's CloudFormation lacks, each made in its embedded
    service: FSx file systems and data repository associations, SageMaker model package groups. A
    resource found already (the state of an earlier run) is taken as it is."""

    def __init__(
        self,
        fsx: FsxEmulator,
        sagemaker: Any,
        *,
        stack_name: str,
        mlflow_app: ExternalCreator | None = None,
    ) -> None:
        self._fsx = fsx
        self._sagemaker = sagemaker
        self._stack_name = stack_name
        self._mlflow_app = mlflow_app

    def by_type(self) -> dict[str, ExternalCreator]:
        """The creators for :func:`create_external`, by resource type."""
        creators: dict[str, ExternalCreator] = {
            "AWS::FSx::FileSystem": self.file_system,
            "AWS::SageMaker::ModelPackageGroup": self.model_package_group,
            "AWS::FSx::DataRepositoryAssociation": self.data_repository_association,
        }
        if self._mlflow_app is not None:
            creators["AWS::SageMaker::MlflowApp"] = self._mlflow_app
        return creators

    def file_system(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, str]]:
        existing = [
            fs
            for fs in self._fsx.describe_file_systems()["FileSystems"]
            if {"Key": "retrain:logical-id", "Value": logical_id} in fs.get("Tags", [])
        ]
        if existing:
            fs = existing[0]
        else:
            request = {
                k: v
                for k, v in props.items()
                if k
                in ("FileSystemType", "StorageCapacity", "StorageType", "SubnetIds", "LustreConfiguration")
            }
            request["Tags"] = [*props.get("Tags", []), {"Key": "retrain:logical-id", "Value": logical_id}]
            fs = self._fsx.create_file_system(**request)["FileSystem"]
        return fs["FileSystemId"], {
            "LustreMountName": fs["LustreConfiguration"]["MountName"],
            "DNSName": fs["DNSName"],
            "ResourceARN": fs["ResourceARN"],
        }

    def data_repository_association(
        self, logical_id: str, props: dict[str, Any]
    ) -> tuple[str, dict[str, str]]:
        fs_id = props["FileSystemId"]
        fs_path = "/" + str(props.get("FileSystemPath", "/")).strip("/")
        fs = self._fsx.describe_file_systems(FileSystemIds=[fs_id])["FileSystems"][0]
        for existing in fs.get("DataRepositoryAssociations", []):
            if existing["FileSystemPath"] == fs_path:
                return str(existing["AssociationId"]), {"AssociationId": str(existing["AssociationId"])}
        created = self._fsx.create_data_repository_association(**props)["Association"]
        return str(created["AssociationId"]), {
            "AssociationId": str(created["AssociationId"]),
            "ResourceARN": str(created["ResourceARN"]),
        }

    def model_package_group(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, str]]:
        name = props.get("ModelPackageGroupName", f"{self._stack_name}-{logical_id}")
        try:
            arn = self._sagemaker.create_model_package_group(
                ModelPackageGroupName=name,
                ModelPackageGroupDescription=props.get("ModelPackageGroupDescription", ""),
            )["ModelPackageGroupArn"]
        except Exception:
            arn = self._sagemaker.describe_model_package_group(ModelPackageGroupName=name)[
                "ModelPackageGroupArn"
            ]
        return str(arn), {"ModelPackageGroupArn": str(arn)}


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
        # A resource whose Condition is false is not part of the stack, whoever would create it.
        if "Condition" in resource and not intrinsics.condition(resource["Condition"]):
            del out["Resources"][logical_id]
            continue
        if kind in supported:
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
                "runtime creates; add a creator in retrain/embedded/provisioning/external.py or mark "
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
    "AWS::IAM::Role": "RoleName",  # an MLflow app's RoleArn (the role's Path is not predicted)
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
                "AWS::IAM::Role": "iam",
            }[kind]
            if kind == "AWS::IAM::Role":
                if "Path" in resource.get("Properties", {}):
                    continue
                arn = f"arn:aws:iam::{ACCOUNT_ID}:role/{name}"
                values[logical_id] = name
            elif kind == "AWS::S3::Bucket":
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
