"""The embedded stack's SageMaker MLflow app (``AWS::SageMaker::MlflowApp``): MLflow's own tracking
server, its store under the state directory, behind a gate that asks what SageMaker's front asks.

On AWS an MLflow app is an HTTPS endpoint (``https://mlflow.sagemaker.<region>.app.aws``) that serves
MLflow's REST API to SigV4-signed requests (signing name ``sagemaker``) of principals allowed
``sagemaker:CallMlflowAppApi`` on the app's ARN; run artifacts go to the app's ``ArtifactStoreUri`` in
S3, written by the client itself. Here the same client code (MLflow with the ``sagemaker-mlflow``
plugin, which signs the requests) reaches :class:`MlflowApp`'s gated endpoint through the plugin's
``SAGEMAKER_MLFLOW_CUSTOM_ENDPOINT`` (as boto3 reaches the stack through ``AWS_ENDPOINT_URL``): an
unsigned request or a role without that permission is refused, the rest is served by ``mlflow server``'s
application in a process of its own (``python -m retrain.embedded.mlflow_app``; its runs in
``<state>/mlflow/mlflow.db``, artifacts in the stack's S3 as the app's role). The server starts on the
first request, so a stack that never tracks a run never pays for it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from werkzeug.serving import make_server

from retrain.embedded.gatekeeper.gate import Gatekeeper, RequestRefusedError
from retrain.embedded.gatekeeper.iam.actions import Access
from retrain.embedded.server import signer

LOG = logging.getLogger(__name__)

# What SageMaker authorises for every request to an MLflow app (Service Authorization Reference,
# Amazon SageMaker: CallMlflowAppApi, resource type mlflow-app).
CALL_ACTION: Final = "sagemaker:CallMlflowAppApi"
ENDPOINT_VARIABLE: Final = "SAGEMAKER_MLFLOW_CUSTOM_ENDPOINT"  # sagemaker-mlflow's endpoint override
START_TIMEOUT_S: Final = 90.0
ENDPOINT_FILE: Final = "endpoint.url"  # the gated endpoint's URL, under <state>/mlflow/ while it serves
_HOP_HEADERS: Final = frozenset(
    {"connection", "transfer-encoding", "keep-alive", "content-length", "server", "date"}
)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def store_path(state_dir: Path) -> Path:
    """The app's tracking store: MLflow's SQL store, one SQLite file under the state directory."""
    return (state_dir / "mlflow" / "mlflow.db").resolve()


def store_uri(state_dir: Path) -> str:
    return f"sqlite:///{store_path(state_dir)}"


class MlflowApp:
    """One MLflow app of the stack: its ARN, its gated endpoint, and MLflow's server behind it."""

    def __init__(
        self,
        *,
        name: str,
        arn: str,
        artifact_store_uri: str,
        state_dir: Path,
        gatekeeper: Gatekeeper,
        server_environment: Callable[[], dict[str, str]],
    ) -> None:
        self.name, self.arn, self.artifact_store_uri = name, arn, artifact_store_uri
        self.state_dir = state_dir
        self.gatekeeper = gatekeeper
        self._server_environment = server_environment  # AWS access as the app's role, for S3 artifacts
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.server_port = 0
        self._front: Any = None
        self.endpoint_url = ""

    # -- the gated endpoint
    def start(self) -> str:
        """Serve the gated endpoint (MLflow's server itself starts on the first request); its URL."""
        if self._front is None:
            port = _free_port()
            self._front = make_server("127.0.0.1", port, self, threaded=True)
            threading.Thread(
                target=self._front.serve_forever, daemon=True, name=f"mlflow-app-{self.name}"
            ).start()
            self.endpoint_url = f"http://127.0.0.1:{port}"
            # for the CLI of a background stack (retrain.local.background), as server.json is
            (self.state_dir / "mlflow").mkdir(parents=True, exist_ok=True)
            (self.state_dir / "mlflow" / ENDPOINT_FILE).write_text(self.endpoint_url, encoding="utf-8")
        return self.endpoint_url

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        signed = signer(environ)
        if signed is None or signed[1] != "sagemaker":
            return _refuse(
                start_response,
                403,
                "MissingAuthenticationTokenException",
                "an MLflow app serves SigV4-signed requests (signing name sagemaker) only",
            )
        principal = self.gatekeeper.principals.for_access_key(signed[0])
        if principal is not None:
            try:
                self.gatekeeper.authorize(principal, [Access(CALL_ACTION, self.arn)], service="sagemaker")
            except RequestRefusedError as refused:
                return _refuse(start_response, 403, refused.code, refused.message)
        try:
            base = self.ensure_server()
        except RuntimeError as error:
            return _refuse(start_response, 503, "ServiceUnavailable", str(error))
        return self._forward(base, environ, start_response)

    def _forward(self, base: str, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else None
        query = environ.get("QUERY_STRING", "")
        url = f"{base}{environ.get('PATH_INFO', '/')}" + (f"?{query}" if query else "")
        headers = {"Content-Type": environ["CONTENT_TYPE"]} if environ.get("CONTENT_TYPE") else {}
        request = urllib.request.Request(url, data=body, headers=headers, method=environ["REQUEST_METHOD"])
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status, reply_headers, payload = response.status, response.headers.items(), response.read()
        except urllib.error.HTTPError as error:
            status, reply_headers, payload = error.code, error.headers.items(), error.read()
        start_response(
            f"{status} {'OK' if status < 400 else 'Error'}",
            [(k, v) for k, v in reply_headers if k.lower() not in _HOP_HEADERS]
            + [("Content-Length", str(len(payload)))],
        )
        return [payload]

    # -- MLflow's server
    def ensure_server(self) -> str:
        """Start MLflow's server once (first request); the base URL it serves on."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return f"http://127.0.0.1:{self.server_port}"
            (self.state_dir / "mlflow").mkdir(parents=True, exist_ok=True)
            self.server_port = _free_port()
            with (self.state_dir / "mlflow" / "server.log").open("ab") as log:
                self._process = start_server(
                    self.state_dir,
                    self.artifact_store_uri,
                    self.server_port,
                    environment=self._server_environment(),
                    output=log,
                )
            try:
                return wait_until_serving(self._process, self.server_port)
            except RuntimeError as error:
                raise RuntimeError(f"{error}: see {self.state_dir / 'mlflow' / 'server.log'}") from None

    def stop(self) -> None:
        if self._front is not None:
            self._front.shutdown()
            self._front = None
            (self.state_dir / "mlflow" / ENDPOINT_FILE).unlink(missing_ok=True)
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(10)
                except subprocess.TimeoutExpired:
                    self._process.kill()
            self._process = None


def start_server(
    state_dir: Path, artifact_root: str, port: int, *, environment: dict[str, str], output: Any = None
) -> subprocess.Popen[bytes]:
    """MLflow's server on the state directory's store, in a process of its own (:func:`serve`), with AWS
    access from `environment` for the artifacts in S3."""
    command = [sys.executable, "-m", __name__, "--store", store_uri(state_dir)]
    command += ["--artifact-root", artifact_root, "--port", str(port)]
    return subprocess.Popen(
        command,
        stdout=output,
        stderr=subprocess.STDOUT if output is not None else None,
        env={**os.environ, **environment},
    )


def wait_until_serving(
    process: subprocess.Popen[bytes], port: int, timeout_s: float = START_TIMEOUT_S
) -> str:
    """The server's base URL once it answers /health; RuntimeError if it exits or stays silent."""
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"MLflow's server exited ({process.returncode})")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"{base}/health", timeout=2).close()
            return base
        time.sleep(0.2)
    raise RuntimeError(f"MLflow's server did not answer on {base} within {timeout_s:.0f} s")


def _refuse(start_response: StartResponse, status: int, code: str, message: str) -> list[bytes]:
    body = json.dumps({"error_code": code, "message": message}).encode()
    start_response(
        f"{status} {'Forbidden' if status == 403 else 'Unavailable'}",
        [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
    )
    return [body]


def serve(store: str, artifact_root: str, port: int, host: str = "127.0.0.1") -> None:
    """MLflow's tracking server application (REST API and UI) on one port: what `mlflow server` runs,
    without its job runners, which the tracking of runs does not use."""
    os.environ["_MLFLOW_SERVER_FILE_STORE"] = store
    os.environ["_MLFLOW_SERVER_REGISTRY_STORE"] = store
    os.environ["_MLFLOW_SERVER_ARTIFACT_ROOT"] = artifact_root
    os.environ["_MLFLOW_SERVER_SERVE_ARTIFACTS"] = "false"
    from mlflow.server import app
    from mlflow.server.handlers import initialize_backend_stores

    initialize_backend_stores(store, store, artifact_root)
    make_server(host, port, app, threaded=True).serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--artifact-root", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request (retrain ui's terminal)
    serve(args.store, args.artifact_root, args.port)


if __name__ == "__main__":
    main()
