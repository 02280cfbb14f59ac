"""Register an accepted model as a package in the data set's model package group (created on first use)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from controller import clients, names, runs
from controller.config import Config, get_config
from controller.observability import logger, tracer

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sagemaker import SageMakerClient
    from mypy_boto3_sagemaker.type_defs import InferenceSpecificationTypeDef


def ensure_group(group: str, dataset: str, *, sagemaker: SageMakerClient) -> None:
    try:
        sagemaker.describe_model_package_group(ModelPackageGroupName=group)
        return
    except ClientError as error:
        if error.response["Error"]["Code"] not in ("ValidationException", "ResourceNotFound"):
            raise
    try:
        sagemaker.create_model_package_group(
            ModelPackageGroupName=group,
            ModelPackageGroupDescription=f"retrain models of data set {dataset}",
        )
    except ClientError as error:
        if "already exists" not in str(error):
            raise


def register(
    event: dict[str, Any],
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sagemaker: SageMakerClient,
) -> dict[str, Any]:
    run, model, decision = event["run"], event["model"], event["gate"]
    image, instance_type = str(run["training_image"]), str(run["evaluation_instance_type"])
    group = names.model_package_group(config.model_package_group_prefix, run["dataset"])
    ensure_group(group, run["dataset"], sagemaker=sagemaker)
    specification: InferenceSpecificationTypeDef = {
        "Containers": [{"Image": image, "ModelDataUrl": str(model["model_data"])}],
        "SupportedContentTypes": ["application/x-image", "image/jpeg", "image/png"],
        "SupportedResponseMIMETypes": ["application/json"],
        "SupportedRealtimeInferenceInstanceTypes": [instance_type],  # type: ignore[list-item]
        "SupportedTransformInstanceTypes": [instance_type],  # type: ignore[list-item]
    }
    response = sagemaker.create_model_package(
        ModelPackageGroupName=group,
        ModelPackageDescription=f"run {run['run_id']}: {decision['reason']}"[:1000],
        ModelApprovalStatus=config.approval_status,  # type: ignore[arg-type]
        InferenceSpecification=specification,
        ModelMetrics={
            "ModelQuality": {
                "Statistics": {"ContentType": "application/json", "S3Uri": str(decision["evaluation_uri"])}
            }
        },
        CustomerMetadataProperties={
            "dataset": run["dataset"],
            "run_id": run["run_id"],
            "training_job": str(model.get("training_job", "")),
            "top1": f"{float(decision['top1']):.6f}",
        },
    )
    arn = response["ModelPackageArn"]
    runs.update_run(
        run["dataset"],
        run["run_id"],
        {"model_package_arn": arn},
        table_name=config.runs_table,
        client=dynamodb,
    )
    logger.info("model registered", extra={"model_package_arn": arn, "group": group})
    return {"model_package_arn": arn, "model_package_group": group}


@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return register(
        event,
        config=get_config(),
        dynamodb=clients.dynamodb(),
        sagemaker=clients.sagemaker(),
    )
