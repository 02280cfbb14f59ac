"""One Lambda execution environment: a long-lived process that imports one handler and runs invocations.

This file is the embedded runtime's bootstrap, the part AWS's own runtime plays on Lambda, so it is
standalone: the standard library only, nothing of this project. :mod:`.runtime` starts it as a script
with the template's runtime interpreter (``python3.13 -I -S worker.py HANDLER [OPT ...]``: isolated, no
site-packages of the interpreter, no script folder on the path) in the function's environment
(the template's variables, Lambda's own, ``LAMBDA_TASK_ROOT``, ``AWS_ENDPOINT_URL``, the role's keys).

Before the handler's module is imported, ``sys.path`` becomes what the Lambda Python runtime searches: the
task root (``/var/task``: the function's ``sam build`` output), then each layer's ``python/lib/pythonX.Y/
site-packages`` and ``python/`` (``/opt``, later layers first, as a later layer's files win when Lambda
unpacks them into /opt), then the standard library. What the handler imports beyond that fails here as it
fails on AWS.

A handler module that cannot be loaded fails the invocation with the error the Lambda Python runtime
reports (``Runtime.ImportModuleError``: ``Unable to import module 'm': No module named 'x'``,
``Runtime.UserCodeSyntaxError``, ``Runtime.HandlerNotFound``, ...), and the environment ends, so the next
invocation initialises a new one.

Requests and replies are JSON lines on a private pipe; the handler's prints and logs go to stderr.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any

Handler = Callable[[Any, Any], Any]


class LambdaContext:
    """The attributes of Lambda's context object that handlers and Powertools read."""

    def __init__(self, request_id: str, deadline: float, invoked_function_arn: str) -> None:
        name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "function")
        self.function_name = name
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.invoked_function_arn = invoked_function_arn
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.aws_request_id = request_id
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", f"/aws/lambda/{name}")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "embedded")
        self._deadline = deadline

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.time()) * 1000))


def search_path(task_root: str, layers: list[str]) -> list[str]:
    """The folders the Lambda Python runtime puts before the standard library, in its order."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    folders = [task_root]
    for opt in layers:
        folders += [os.path.join(opt, "python", "lib", version, "site-packages"), os.path.join(opt, "python")]
    return folders


def _fault(error_type: str, message: str, trace: list[str] | None = None) -> dict[str, Any]:
    return {"errorType": error_type, "errorMessage": message, "stackTrace": trace or []}


class InitError(Exception):
    """The handler could not be loaded; ``fault`` is the error the Lambda Python runtime reports."""

    def __init__(self, error_type: str, message: str, trace: list[str] | None = None) -> None:
        super().__init__(f"{error_type}: {message}")
        self.fault = _fault(error_type, message, trace)


def load_handler(handler_path: str) -> Handler:
    """The handler ``module.function`` names, or InitError as Lambda names the failure."""
    try:
        module_name, function_name = handler_path.rsplit(".", 1)
    except ValueError as exc:
        raise InitError("Runtime.MalformedHandlerName", f"Bad handler '{handler_path}': {exc}") from None
    if module_name.split(".")[0] in sys.builtin_module_names:
        raise InitError(
            "Runtime.BuiltInModuleConflict", f"Cannot use built-in module {module_name} as a handler module"
        )
    try:
        module = importlib.import_module(module_name.replace("/", "."))
    except ImportError as exc:
        raise InitError(
            "Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}"
        ) from None
    except SyntaxError as exc:
        trace = [f'  File "{exc.filename}" Line {exc.lineno}\n    {exc.text}']
        raise InitError(
            "Runtime.UserCodeSyntaxError", f"Syntax error in module '{module_name}': {exc}", trace
        ) from None
    except Exception as exc:
        raise InitError(type(exc).__name__, str(exc), traceback.format_tb(exc.__traceback__)) from None
    handler: Handler | None = getattr(module, function_name, None)
    if handler is None:
        raise InitError(
            "Runtime.HandlerNotFound", f"Handler '{function_name}' missing on module '{module_name}'"
        )
    return handler


def main() -> None:
    handler_path, layers = sys.argv[1], sys.argv[2:]
    replies = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # the handler's prints join its logs, never the reply pipe
    sys.stdout = sys.stderr
    sys.path[:0] = search_path(os.environ["LAMBDA_TASK_ROOT"], layers)
    handler: Handler | None = None
    init_error: dict[str, Any] | None = None
    try:
        handler = load_handler(handler_path)
    except InitError as failed:
        init_error = failed.fault
        print(f"[ERROR] {failed}", file=sys.stderr, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        request_id = str(request.get("request_id") or uuid.uuid4())
        print(f"START RequestId: {request_id} Version: $LATEST", file=sys.stderr, flush=True)
        if handler is None:
            # Lambda fails the invocation with the init error and discards the environment.
            replies.write(json.dumps({"error": init_error, "init_error": True}) + "\n")
            print(f"END RequestId: {request_id}", file=sys.stderr, flush=True)
            return
        context = LambdaContext(
            request_id, time.time() + float(request["timeout"]), str(request.get("invoked_function_arn", ""))
        )
        reply: dict[str, Any]
        try:
            reply = {"result": handler(request["payload"], context)}
        except Exception as exc:
            reply = {"error": _fault(type(exc).__name__, str(exc), traceback.format_tb(exc.__traceback__))}
            traceback.print_exc()
        print(f"END RequestId: {request_id}", file=sys.stderr, flush=True)
        try:
            replies.write(json.dumps(reply) + "\n")
        except (TypeError, ValueError) as exc:
            error = _fault("Runtime.MarshalError", f"Unable to marshal response: {exc}")
            replies.write(json.dumps({"error": error}) + "\n")


if __name__ == "__main__":
    main()
