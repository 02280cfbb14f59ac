"""Register an accepted model as a package in the data set's model package group (created on first use).

The package is deployable: its container is the region's PyTorch inference image (INFERENCE_IMAGE_URI)
with the training job's model.tar.gz, whose code/inference.py the image's inference toolkit runs
(retrain_contract.serving: the content types, instance types and environment declared here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from controller import clients, names, runs
from controller.config import Config, get_config
from controller.observability import logger, tracer
from retrain_contract import serving

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


def inference_specification(image: str, model_data: str) -> InferenceSpecificationTypeDef:
    """How SageMaker hosts the package: the serving image, the model data, what it takes and answers."""
    environment = dict(serving.ENVIRONMENT)
    # The contract's instance types are plain strings; botocore's model holds them to its enums.
    realtime: Any = list(serving.REALTIME_INSTANCE_TYPES)
    transform: Any = list(serving.TRANSFORM_INSTANCE_TYPES)
    return {
        "Containers": [{"Image": image, "ModelDataUrl": model_data, "Environment": environment}],
        "SupportedContentTypes": list(serving.CONTENT_TYPES),
        "SupportedResponseMIMETypes": [serving.RESPONSE_TYPE],
        "SupportedRealtimeInferenceInstanceTypes": realtime,
        "SupportedTransformInstanceTypes": transform,
    }


def register(
    event: dict[str, Any],
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sagemaker: SageMakerClient,
) -> dict[str, Any]:
    run, model, decision = event["run"], event["model"], event["gate"]
    group = names.model_package_group(config.model_package_group_prefix, run["dataset"])
    ensure_group(group, run["dataset"], sagemaker=sagemaker)
    hosting: dict[str, Any] = {}
    if config.inference_image_uri:
        hosting["InferenceSpecification"] = inference_specification(
            config.inference_image_uri, str(model["model_data"])
        )
    else:
        logger.warning("no PyTorch inference image in this region: the package is registered undeployable")
    response = sagemaker.create_model_package(
        ModelPackageGroupName=group,
        ModelPackageDescription=f"run {run['run_id']}: {decision['reason']}"[:1000],
        ModelApprovalStatus=config.approval_status,  # type: ignore[arg-type]
        **hosting,
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
