"""Lambda invokes moto serves (the Invoke API, ``lambda:invoke`` and function-ARN Task states, S3
notifications), run by the installed ``lambda_invoker`` instead of Docker, with Lambda's error payload.
A request over Lambda's payload limit (6 MB synchronous, 1 MB asynchronous) is refused as Lambda refuses
it: ``RequestEntityTooLargeException``, HTTP 413."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from retrain.embedded.limits import LAMBDA_ASYNC_REQUEST_BYTES, LAMBDA_SYNC_REQUEST_BYTES
from retrain.embedded.stepfunctions.errors import TaskFailed
from retrain.embedded.stepfunctions.services import ACTIVE

LOG = logging.getLogger(__name__)


def _header(headers: Any, name: str) -> str | None:
    """A request header by its lower-case name, from a dict or moto's (werkzeug's) headers, whose
    iteration yields (name, value) pairs."""
    if headers is None:
        return None
    for key, value in headers.items():
        if str(key).lower() == name:
            return str(value) if value is not None else None
    return None


def lambda_error_payload(exc: BaseException) -> dict[str, Any]:
    """The payload Lambda returns for an unhandled handler error (Step Functions reads ``errorType``)."""
    if isinstance(exc, TaskFailed):
        return {"errorType": exc.error, "errorMessage": exc.cause}
    return {"errorType": type(exc).__name__, "errorMessage": str(exc), "stackTrace": []}


def request_too_large(function_name: str, size: int, limit: int, *, event: bool) -> Exception:
    """Lambda's refusal of an Invoke whose payload is over ``limit`` bytes, in its words (the synchronous
    one, which omits the size, with the function and the size added)."""
    from moto.core.exceptions import JsonRESTError

    class RequestEntityTooLargeError(JsonRESTError):
        code = 413

    if event:
        message = f"{size} byte payload is too large for the Event invocation type (limit {limit} bytes)"
    else:
        message = (
            f"Request must be smaller than {limit} bytes for the InvokeFunction operation (the payload for "
            f"{function_name} is {size} bytes: put large data in S3 and pass its URI)"
        )
    return RequestEntityTooLargeError("RequestEntityTooLargeException", message)


def run_invoker(function_name: str, payload: dict[str, Any]) -> tuple[bytes, bool]:
    invoker = ACTIVE.lambda_invoker
    if invoker is None:
        raise RuntimeError("no Lambda runtime is installed")
    try:
        result = invoker(function_name, payload)
    except Exception as exc:
        LOG.info("function %s failed: %s", function_name, exc)
        return json.dumps(lambda_error_payload(exc)).encode(), True
    return json.dumps(result).encode(), False


def patched_lambda_invoke(
    original: Callable[..., Any],
) -> Callable[[Any, Any, Any, Any], str | bytes]:
    def invoke(fn: Any, body: Any, request_headers: Any, response_headers: Any) -> str | bytes:
        if ACTIVE.lambda_invoker is None:
            return original(fn, body, request_headers, response_headers)  # type: ignore[no-any-return]
        if isinstance(body, bytes | bytearray):
            body = body.decode()
        invocation_type = _header(request_headers, "x-amz-invocation-type") or "RequestResponse"
        size = len(body.encode("utf-8")) if isinstance(body, str) else len(json.dumps(body or {}).encode())
        event = invocation_type == "Event"
        limit = LAMBDA_ASYNC_REQUEST_BYTES if event else LAMBDA_SYNC_REQUEST_BYTES
        if size > limit:
            raise request_too_large(fn.function_name, size, limit, event=event)
        payload = json.loads(body) if isinstance(body, str) and body else (body or {})
        if invocation_type == "DryRun":
            return b""
        if invocation_type == "Event":
            threading.Thread(
                target=run_invoker, args=(fn.function_name, payload), name=f"lambda-{fn.function_name}"
            ).start()
            return b""
        result, errored = run_invoker(fn.function_name, payload)
        if errored:
            response_headers["x-amz-function-error"] = "Unhandled"
        return result

    return invoke
