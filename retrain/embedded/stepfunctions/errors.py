"""The errors a Task state fails with, named and worded as Step Functions reports them: :class:`TaskFailed`,
the optimized SageMaker integration's error names and causes, and those of ``aws-sdk:<service>`` Tasks."""

from __future__ import annotations

import functools
import uuid
from typing import Final

from botocore.exceptions import ClientError

SAGEMAKER_API_ERROR: Final = "SageMaker.AmazonSageMakerException"
TASK_FAILED: Final = "States.TaskFailed"

# Pascal-cased service names Step Functions puts in front of aws-sdk error names.
_SDK_ERROR_SERVICE_NAMES: Final[dict[str, str]] = {
    "fsx": "FSx",
    "sagemaker": "SageMaker",
    "dynamodb": "DynamoDb",
    "sfn": "Sfn",
    "s3": "S3",
    "sqs": "Sqs",
    "sns": "Sns",
}


class TaskFailed(Exception):  # noqa: N818 - the name the interface fixes
    """Fails the Task state that raised it with this Error and Cause (Retry/Catch match ``error``)."""

    def __init__(self, error: str, cause: str) -> None:
        super().__init__(f"{error}: {cause}")
        self.error = error
        self.cause = cause


@functools.cache
def _sagemaker_modeled_errors() -> frozenset[str]:
    """The error codes SageMaker's API model declares (ResourceLimitExceeded, ResourceInUse, ...)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return frozenset(shape for shape in model.shape_names if model.shape_for(shape).metadata.get("exception"))


def sagemaker_error_name(code: str) -> str:
    """The error a SageMaker Task state fails with: a modelled error by its SDK exception class
    (SageMaker.ResourceLimitExceededException); every other one (ValidationException, throttling,
    AccessDeniedException) as SageMaker.AmazonSageMakerException, the cause telling them apart."""
    if code in _sagemaker_modeled_errors():
        return f"SageMaker.{code}" if code.endswith("Exception") else f"SageMaker.{code}Exception"
    return SAGEMAKER_API_ERROR


def sagemaker_api_failure(error: ClientError) -> TaskFailed:
    """The Error/Cause Step Functions' optimized SageMaker integration reports for a failed API call."""
    err = error.response.get("Error", {})
    meta = error.response.get("ResponseMetadata", {})
    code = str(err.get("Code", "Unknown"))
    cause = (
        f"{err.get('Message', '')} (Service: AmazonSageMaker; "
        f"Status Code: {meta.get('HTTPStatusCode', 400)}; "
        f"Error Code: {code}; Request ID: {meta.get('RequestId', uuid.uuid4())}; "
        "Proxy: null)"
    )
    return TaskFailed(sagemaker_error_name(code), cause)


def sdk_api_failure(service: str, error: ClientError) -> TaskFailed:
    """The Error/Cause of an ``aws-sdk:<service>:<action>`` Task whose call failed."""
    code = str(error.response.get("Error", {}).get("Code", "Unknown"))
    if not code.endswith("Exception"):
        code += "Exception"
    pascal = _SDK_ERROR_SERVICE_NAMES.get(service.lower(), service[:1].upper() + service[1:])
    meta = error.response.get("ResponseMetadata", {})
    cause = (
        f"{error.response.get('Error', {}).get('Message', '')} (Service: {pascal}, "
        f"Status Code: {meta.get('HTTPStatusCode', 400)}, Request ID: {meta.get('RequestId', uuid.uuid4())})"
    )
    return TaskFailed(f"{pascal}.{code}", cause)
