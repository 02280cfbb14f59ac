"""ClientErrors shaped like the SageMaker service's, so callers handle the emulator as they handle AWS."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

VALIDATION = "ValidationException"
RESOURCE_NOT_FOUND = "ResourceNotFound"
RESOURCE_LIMIT_EXCEEDED = "ResourceLimitExceeded"
RESOURCE_IN_USE = "ResourceInUse"
THROTTLING = "ThrottlingException"

_HTTP_STATUS = {THROTTLING: 400, RESOURCE_NOT_FOUND: 400, RESOURCE_LIMIT_EXCEEDED: 400, VALIDATION: 400}
# What the service says with an error code the fault configuration injects into CreateTrainingJob.
_INJECTED_MESSAGES = {
    THROTTLING: "Rate exceeded",
    RESOURCE_LIMIT_EXCEEDED: "The account-level service limit 'ml.g5.xlarge for spot training "
    "job usage' is 1 Instances, with current utilization of 1 Instances and a request delta of "
    "1 Instances.",
}


def client_error(code: str, message: str, operation: str) -> ClientError:
    """A botocore ClientError with the code, message and HTTP status the service answers with."""
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": _HTTP_STATUS.get(code, 400)},
    }
    return ClientError(response, operation)


def validation(message: str, operation: str) -> ClientError:
    return client_error(VALIDATION, message, operation)


def injected_error(code: str, operation: str) -> ClientError:
    """The ClientError an injected fault answers with, worded as the service words that code."""
    return client_error(code, _INJECTED_MESSAGES.get(code, f"injected fault {code}"), operation)
