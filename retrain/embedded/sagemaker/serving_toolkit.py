"""The serving container of an embedded endpoint: the SageMaker PyTorch inference toolkit's contract.

SageMaker hosting runs a model's image with `serve`: the container answers `GET /ping` and
`POST /invocations` on SAGEMAKER_BIND_TO_PORT (8080 unless set). On the PyTorch inference DLC the toolkit
(aws/sagemaker-pytorch-inference-toolkit, sagemaker_inference/transformer.py) puts /opt/ml/model/code
first on the path, imports SAGEMAKER_PROGRAM (inference.py), calls `model_fn("/opt/ml/model")` once
and, per request, `input_fn(body, content_type)` (a JSON or CSV body decoded to text first),
`predict_fn(data, model)` and `output_fn(prediction, accept)` (Accept absent or */* becomes
SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT); a tuple answer is (body, content type). An error that carries
the toolkit's `status_code` and `message` (its BaseInferenceToolkitError) is answered with that status,
any other with 500; the body is the message and the traceback. This file does the same, run as the
container's first process with the interpreter standing in for the image's Python (standard library
only). Unlike the toolkit it has no default handler functions: a model whose code lacks one of the
four fails to start, with the name of what is missing.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import traceback
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

MODEL_DIR = "/opt/ml/model"
CODE_DIR = f"{MODEL_DIR}/code"
HANDLERS = ("model_fn", "input_fn", "predict_fn", "output_fn")
UTF8_TYPES = ("application/json", "text/csv")
DEFAULT_PORT = 8080


def load_program(variable: str) -> Any:
    """The module `variable` (SAGEMAKER_PROGRAM) names in the model's code directory."""
    sys.path.insert(0, CODE_DIR)
    program = os.environ.get(variable, "inference.py")
    module = importlib.import_module(program.removesuffix(".py"))
    missing = [name for name in HANDLERS if not callable(getattr(module, name, None))]
    if missing:
        raise SystemExit(f"{CODE_DIR}/{program} defines no {', '.join(missing)}")
    return module


def serve(module: Any, model: Any, port: int, default_accept: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/ping":
                self._answer(200, b"", "text/plain")
            else:
                self._answer(404, b"not found", "text/plain")

        def do_POST(self) -> None:
            if self.path != "/invocations":
                self._answer(404, b"not found", "text/plain")
                return
            data: Any = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            content_type = self.headers.get("Content-Type")
            accept = self.headers.get("Accept")
            if not accept or accept == "*/*":
                accept = default_accept
            try:
                if content_type in UTF8_TYPES:
                    data = data.decode("utf-8")
                prediction = module.predict_fn(module.input_fn(data, content_type), model)
                result = module.output_fn(prediction, accept)
                body, answered = result if isinstance(result, tuple) else (result, accept)
                self._answer(200, body if isinstance(body, bytes) else str(body).encode(), answered)
            except Exception as error:
                trace = traceback.format_exc()
                code = getattr(error, "status_code", None)
                known = isinstance(code, int) and hasattr(error, "message")
                status = int(code) if known and code is not None else 500
                message = str(getattr(error, "message", "")) if known else str(error)
                sys.stderr.write(f"Transform failed: {trace}")
                self._answer(status, f"{message}\n{trace}".encode(), "text/plain")

    server = HTTPServer(("127.0.0.1", port), Handler)
    # DeleteEndpoint stops the container as `docker stop` does: SIGTERM to its first process, SIGKILL after
    # a grace period. This is that process, and PID 1 of its namespace ignores a signal it has no handler
    # for: without one, every stop waited out the grace period.
    signal.signal(signal.SIGTERM, _exit)
    server.serve_forever()


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main() -> None:
    """argv[1]: the name of the program's variable (retrain_contract.container.PROGRAM_ENV)."""
    module = load_program(sys.argv[1])
    model = module.model_fn(MODEL_DIR)
    port = int(os.environ.get("SAGEMAKER_BIND_TO_PORT", DEFAULT_PORT))
    default_accept = os.environ.get("SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT", "application/json")
    print(f"model loaded from {MODEL_DIR}; serving on port {port}", flush=True)
    serve(module, model, port, default_accept)


if __name__ == "__main__":
    main()
