"""One Lambda execution environment: a long-lived process that imports one handler and runs invocations.

Started by :mod:`retrain.embedded.awslambda.runtime` with the function's own environment (the template's
variables plus AWS_ENDPOINT_URL), so module-level configuration is read per function as on Lambda.
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
from typing import Any

from retrain.embedded.account import ACCOUNT_ID, REGION


class LambdaContext:
    """The attributes of Lambda's context object that handlers and Powertools read."""

    def __init__(self, request_id: str, deadline: float) -> None:
        name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "function")
        region = os.environ.get("AWS_REGION", REGION)
        self.function_name = name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{region}:{ACCOUNT_ID}:function:{name}"
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.aws_request_id = request_id
        self.log_group_name = f"/aws/lambda/{name}"
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "embedded")
        self._deadline = deadline

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.time()) * 1000))


def main() -> None:
    code_dir, handler_path = sys.argv[1], sys.argv[2]
    replies = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # the handler's prints join its logs, never the reply pipe
    sys.stdout = sys.stderr
    sys.path.insert(0, code_dir)
    module_name, _, function_name = handler_path.rpartition(".")
    handler = getattr(importlib.import_module(module_name), function_name)
    for line in sys.stdin:
        request = json.loads(line)
        request_id = str(request.get("request_id") or uuid.uuid4())
        context = LambdaContext(request_id, time.time() + float(request["timeout"]))
        print(f"START RequestId: {request_id} Version: $LATEST", file=sys.stderr, flush=True)
        reply: dict[str, Any]
        try:
            reply = {"result": handler(request["payload"], context)}
        except Exception as exc:
            reply = {
                "error": {
                    "errorType": type(exc).__name__,
                    "errorMessage": str(exc),
                    "stackTrace": traceback.format_tb(exc.__traceback__),
                }
            }
            traceback.print_exc()
        print(f"END RequestId: {request_id}", file=sys.stderr, flush=True)
        try:
            replies.write(json.dumps(reply) + "\n")
        except (TypeError, ValueError) as exc:
            error = {
                "errorType": "Runtime.MarshalError",
                "errorMessage": f"Unable to marshal response: {exc}",
            }
            replies.write(json.dumps({"error": error}) + "\n")


if __name__ == "__main__":
    main()
