"""`retrain predict`: the top labels of local images from a data set's champion, through an endpoint.

The model package is `--model-package`, or the data set's champion (the datasets table's row, as
finalize records it). Its endpoint is one in service whose model was created from that package (looked
for among the endpoints whose name holds the package's group; `endpoint_name` is the one the commands
below create). On AWS, where an endpoint costs money while it runs, a package without one is not
deployed: the error gives the exact commands. On the embedded stack the same calls deploy it
(CreateModel from the package, CreateEndpointConfig, CreateEndpoint, the endpoint_in_service waiter),
so `retrain predict` answers at once. Each image goes to InvokeEndpoint as its own request, its content
type from its extension.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import botocore.exceptions

from controller import datasets, names
from retrain.deployment import Deployment
from retrain.errors import RetrainError, UsageError
from retrain_contract import serving

CONTENT_TYPES = {
    ".jpg": serving.CONTENT_TYPE_JPEG,
    ".jpeg": serving.CONTENT_TYPE_JPEG,
    ".png": serving.CONTENT_TYPE_PNG,
}
WAIT = {"Delay": 2, "MaxAttempts": 450}  # 15 minutes: an endpoint on AWS takes several
MAX_ENDPOINTS_SCANNED = 100


class NoEndpointError(RetrainError):
    """The package has no endpoint in service; the message holds the commands that make one."""

    exit_code = 8


@dataclass(frozen=True)
class Package:
    arn: str
    group: str
    version: int
    approved: bool

    @property
    def endpoint(self) -> str:
        return serving.endpoint_name(self.group, self.version)


@dataclass(frozen=True)
class Answer:
    image: Path
    predictions: list[serving.Prediction]


def champion_package(deployment: Deployment, dataset: str) -> str:
    """The model package ARN of the data set's champion."""
    row = datasets.get(
        dataset,
        table_name=deployment.output(names.STACK_OUTPUTS["datasets_table"]),
        client=deployment.client("dynamodb"),
    )
    arn = str((row.get("champion") or {}).get("model_package_arn") or "")
    if not arn:
        raise UsageError(
            f"data set {dataset!r} has no champion yet: a run must pass the gate first (`retrain runs`), "
            "or name a package with --model-package ARN"
        )
    return arn


def describe_package(sagemaker: Any, arn: str) -> Package:
    try:
        package = sagemaker.describe_model_package(ModelPackageName=arn)
    except botocore.exceptions.ClientError as error:
        raise UsageError(f"model package {arn}: {error.response['Error'].get('Message', error)}") from None
    if not package.get("InferenceSpecification"):
        raise RetrainError(
            f"model package {arn} declares no serving container (no PyTorch inference image in its region): "
            "it cannot be deployed"
        )
    group = str(package.get("ModelPackageGroupName") or package["ModelPackageName"])
    return Package(
        arn, group, int(package.get("ModelPackageVersion") or 1), package["ModelApprovalStatus"] == "Approved"
    )


def find_endpoint(sagemaker: Any, package: Package) -> str | None:
    """An endpoint in service whose model was made from the package (its conventional name first)."""
    listed = sagemaker.list_endpoints(
        NameContains=package.group, StatusEquals="InService", MaxResults=MAX_ENDPOINTS_SCANNED
    )["Endpoints"]
    names_found = sorted((e["EndpointName"] for e in listed), key=lambda n: n != package.endpoint)
    for name in names_found:
        config = sagemaker.describe_endpoint_config(
            EndpointConfigName=sagemaker.describe_endpoint(EndpointName=name)["EndpointConfigName"]
        )
        for variant in config["ProductionVariants"]:
            model = sagemaker.describe_model(ModelName=variant["ModelName"])
            containers = [model.get("PrimaryContainer") or {}, *(model.get("Containers") or [])]
            if any(c.get("ModelPackageName") == package.arn for c in containers):
                return str(name)
    return None


def deploy_commands(
    package: Package, role_arn: str, instance_type: str = serving.DEFAULT_INSTANCE_TYPE
) -> list[str]:
    """The AWS CLI commands that deploy the package as `retrain predict` looks for it."""
    name = package.endpoint
    variant = json.dumps(
        [
            {
                "VariantName": serving.VARIANT_NAME,
                "ModelName": name,
                "InstanceType": instance_type,
                "InitialInstanceCount": 1,
            }
        ]
    )
    commands = [] if package.approved else [approval_command(package)]
    commands += [
        f"aws sagemaker create-model --model-name {name} --execution-role-arn {role_arn} "
        f"--primary-container ModelPackageName={package.arn}",
        f"aws sagemaker create-endpoint-config --endpoint-config-name {name} "
        f"--production-variants {shlex.quote(variant)}",
        f"aws sagemaker create-endpoint --endpoint-name {name} --endpoint-config-name {name}",
        f"aws sagemaker wait endpoint-in-service --endpoint-name {name}",
    ]
    return commands


def approval_command(package: Package) -> str:
    return (
        f"aws sagemaker update-model-package --model-package-arn {package.arn} "
        "--model-approval-status Approved"
    )


def deploy(sagemaker: Any, package: Package, role_arn: str) -> str:
    """Create the package's model, endpoint configuration and endpoint; wait until it is in service."""
    name = package.endpoint
    sagemaker.create_model(
        ModelName=name, ExecutionRoleArn=role_arn, PrimaryContainer={"ModelPackageName": package.arn}
    )
    sagemaker.create_endpoint_config(
        EndpointConfigName=name,
        ProductionVariants=[
            {
                "VariantName": serving.VARIANT_NAME,
                "ModelName": name,
                "InstanceType": serving.DEFAULT_INSTANCE_TYPE,
                "InitialInstanceCount": 1,
            }
        ],
    )
    sagemaker.create_endpoint(EndpointName=name, EndpointConfigName=name)
    try:
        sagemaker.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=WAIT)
    except botocore.exceptions.WaiterError:
        reason = sagemaker.describe_endpoint(EndpointName=name).get(
            "FailureReason", "it did not come into service"
        )
        raise RetrainError(f"endpoint {name} of {package.arn} failed: {reason}") from None
    return name


def approve(sagemaker: Any, package: Package) -> Package:
    sagemaker.update_model_package(ModelPackageArn=package.arn, ModelApprovalStatus="Approved")
    return Package(package.arn, package.group, package.version, approved=True)


def check_images(images: list[Path]) -> None:
    """Every image a readable JPEG or PNG file within InvokeEndpoint's payload limit, before any call."""
    if not images:
        raise UsageError("give at least one image file (JPEG or PNG)")
    for image in images:
        if not image.is_file():
            raise UsageError(f"{image} is not a file: give the path of a JPEG or PNG image")
        if image.suffix.lower() not in CONTENT_TYPES:
            raise UsageError(
                f"{image} is not a .jpg, .jpeg or .png file: the model reads JPEG and PNG images"
            )
        if image.stat().st_size > serving.MAX_REQUEST_BYTES:
            raise UsageError(
                f"{image} is {image.stat().st_size} bytes, above InvokeEndpoint's "
                f"{serving.MAX_REQUEST_BYTES}: send a smaller image"
            )


def classify(runtime: Any, endpoint: str, images: list[Path]) -> list[Answer]:
    answers = []
    for image in images:
        try:
            response = runtime.invoke_endpoint(
                EndpointName=endpoint,
                Body=image.read_bytes(),
                ContentType=CONTENT_TYPES[image.suffix.lower()],
                Accept=serving.RESPONSE_TYPE,
            )
        except botocore.exceptions.ClientError as error:
            original = str(
                error.response.get("OriginalMessage") or error.response["Error"].get("Message", "")
            )
            raise RetrainError(
                f"{image}: the endpoint {endpoint} refused it: {original.splitlines()[0]}"
            ) from None
        answers.append(Answer(image, json.loads(response["Body"].read())[serving.PREDICTIONS_KEY]))
    return answers


def predict(
    deployment: Deployment,
    images: list[Path],
    *,
    dataset: str | None,
    package_arn: str | None,
    approve_package: bool = False,
) -> tuple[str, str, list[Answer]]:
    """(package ARN, endpoint, answers): the images classified by the package's endpoint."""
    check_images(images)
    if package_arn is None:
        if dataset is None:
            raise UsageError("give --dataset NAME (its champion answers) or --model-package ARN")
        package_arn = champion_package(deployment, dataset)
    sagemaker = deployment.client("sagemaker")
    package = describe_package(sagemaker, package_arn)
    endpoint = find_endpoint(sagemaker, package)
    if endpoint is None:
        role = deployment.output(names.STACK_OUTPUTS["sagemaker_role"])
        if not deployment.local:
            commands = "\n  ".join(deploy_commands(package, role))
            delete = f"aws sagemaker delete-endpoint --endpoint-name {package.endpoint}"
            raise NoEndpointError(
                f"model package {package.arn} has no endpoint in service. Deploy it (it costs while it "
                f"runs; delete it with `{delete}`):\n  {commands}\nthen run this command again"
            )
        if not package.approved:
            if not approve_package:
                raise UsageError(
                    f"model package {package.arn} is not Approved, and SageMaker deploys only approved "
                    "versions: pass --approve to approve it (as its reviewer), or run "
                    f"`{approval_command(package)}`"
                )
            package = approve(sagemaker, package)
        endpoint = deploy(sagemaker, package, role)
    return package.arn, endpoint, classify(deployment.client("sagemaker-runtime"), endpoint, images)
