"""Register: an accepted model becomes a deployable model package."""

from __future__ import annotations

import dataclasses
from typing import Any

from controller import names, register
from retrain.dev import base_image
from retrain_contract import container as contract
from retrain_contract import serving
from tests.unit.functions.support import Aws, function_environment

MODEL_DATA = "s3://retrain-artifacts/runs/digits/run-1/final/output/model.tar.gz"


def _accepted(run_id: str = "run-1") -> dict[str, Any]:
    return {
        "run": {"dataset": "digits", "run_id": run_id},
        "model": {"model_data": MODEL_DATA, "training_job": "digits-run-1-final"},
        "gate": {
            "reason": "top-1 0.95 >= 0.5",
            "top1": 0.95,
            "evaluation_uri": "s3://retrain-artifacts/e.json",
        },
    }


def test_the_package_is_the_models_archive_on_the_regions_inference_image(aws: Aws, config: Any) -> None:
    # GIVEN the register function's environment as the template sets it (us-east-1)
    image = function_environment(aws, "RegisterModelFunction")[names.ENV_INFERENCE_IMAGE_URI]
    assert image == base_image.inference_uri("us-east-1")
    configured = dataclasses.replace(config, inference_image_uri=image)
    aws.dynamodb.put_item(
        TableName=aws.runs_table, Item={"dataset": {"S": "digits"}, "run_id": {"S": "run-1"}}
    )
    # WHEN an accepted model is registered
    arn = register.register(_accepted(), config=configured, dynamodb=aws.dynamodb, sagemaker=aws.sagemaker)[
        "model_package_arn"
    ]
    # THEN its one container is that image with the training job's model.tar.gz, told to run the handler
    # the archive carries, and it declares the image types, JSON and CPU instances the handler serves
    spec = aws.sagemaker.describe_model_package(ModelPackageName=arn)["InferenceSpecification"]
    [container] = spec["Containers"]
    assert container["Image"] == image
    assert container["ModelDataUrl"] == MODEL_DATA
    assert container["Environment"][contract.PROGRAM_ENV] == serving.PROGRAM
    assert spec["SupportedContentTypes"] == list(serving.CONTENT_TYPES)
    assert spec["SupportedResponseMIMETypes"] == [serving.RESPONSE_TYPE]
    assert spec["SupportedRealtimeInferenceInstanceTypes"] == list(serving.REALTIME_INSTANCE_TYPES)
    assert spec["SupportedTransformInstanceTypes"] == list(serving.TRANSFORM_INSTANCE_TYPES)
    assert "pytorch-inference" in container["Image"] and "training" not in container["Image"]


def test_without_an_inference_image_the_package_has_no_hosting_to_promise(aws: Aws, config: Any) -> None:
    # GIVEN a region the template maps to no inference image (INFERENCE_IMAGE_URI empty)
    aws.dynamodb.put_item(
        TableName=aws.runs_table, Item={"dataset": {"S": "digits"}, "run_id": {"S": "run-1"}}
    )
    configured = dataclasses.replace(config, inference_image_uri="")
    # WHEN an accepted model is registered THEN the package names no container to deploy
    arn = register.register(_accepted(), config=configured, dynamodb=aws.dynamodb, sagemaker=aws.sagemaker)[
        "model_package_arn"
    ]
    assert "InferenceSpecification" not in aws.sagemaker.describe_model_package(ModelPackageName=arn)
