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


def client_error(code: str, message: str, operation: str) -> ClientError:
    """A botocore ClientError with the code, message and HTTP status the service answers with."""
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": _HTTP_STATUS.get(code, 400)},
    }
    return ClientError(response, operation)


def validation(message: str, operation: str) -> ClientError:
    return client_error(VALIDATION, message, operation)
