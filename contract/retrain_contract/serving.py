"""The serving contract: what a registered model package declares, and what its endpoint answers.

A training job's model.tar.gz is the package's model data as it is: beside model.pt it holds
`code/inference.py` and the modules it imports, which the SageMaker PyTorch inference toolkit loads
(it puts /opt/ml/model/code on the path, imports SAGEMAKER_PROGRAM and calls model_fn, input_fn,
predict_fn, output_fn). Register (functions/controller/register.py) declares these content types and
instance types; the handler (training_image/retrain_training/serving.py), the embedded endpoint and
`retrain predict` hold to them. Pure standard library.
"""

from __future__ import annotations

from typing import TypedDict

from retrain_contract.container import PROGRAM_ENV

# The inference toolkit imports SAGEMAKER_PROGRAM from /opt/ml/model/code (sagemaker_inference.environment).
PROGRAM = "inference.py"
CODE_DIR = "code"
ENVIRONMENT = {PROGRAM_ENV: PROGRAM, "SAGEMAKER_CONTAINER_LOG_LEVEL": "20"}

# A request is the bytes of one image; application/x-image is any image type the handler decodes.
CONTENT_TYPE_ANY_IMAGE = "application/x-image"
CONTENT_TYPE_JPEG = "image/jpeg"
CONTENT_TYPE_PNG = "image/png"
CONTENT_TYPES = (CONTENT_TYPE_ANY_IMAGE, CONTENT_TYPE_JPEG, CONTENT_TYPE_PNG)
# Pillow's name of the format each specific content type promises.
CONTENT_TYPE_FORMATS = {CONTENT_TYPE_JPEG: "JPEG", CONTENT_TYPE_PNG: "PNG"}
RESPONSE_TYPE = "application/json"
# InvokeEndpoint's largest request payload (botocore's model of Body: 6 MiB).
MAX_REQUEST_BYTES = 6 * 1024 * 1024

# The answer: the TOP_K most probable labels (fewer when the model knows fewer), most probable first.
TOP_K = 5
PREDICTIONS_KEY = "predictions"  # a list of Prediction

# CPU instances the package declares (the handler runs on the CPU inference image); a small image
# classifier answers in milliseconds there.
REALTIME_INSTANCE_TYPES = ("ml.m5.large", "ml.m5.xlarge", "ml.c5.xlarge", "ml.c5.2xlarge")
TRANSFORM_INSTANCE_TYPES = REALTIME_INSTANCE_TYPES
DEFAULT_INSTANCE_TYPE = REALTIME_INSTANCE_TYPES[0]
VARIANT_NAME = "AllTraffic"


class Prediction(TypedDict):
    label: str
    probability: float


def endpoint_name(group: str, version: int) -> str:
    """The endpoint `retrain predict` looks for first (and tells people to create) for one package
    version: <group>-v<version>, within SageMaker's 63 characters (the group keeps its tail)."""
    suffix = f"-v{version}"
    return group[: 63 - len(suffix)].rstrip("-") + suffix
