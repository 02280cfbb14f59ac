"""The embedded stack's MLflow app: MLflow's REST API for SigV4-signed requests of roles allowed
sagemaker:CallMlflowAppApi on it (as SageMaker's MLflow apps serve), and `retrain ui` on its store."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from controller import names
from retrain.embedded.mlflow_app import ENDPOINT_VARIABLE
from retrain.embedded.stack import EmbeddedStack
from tests.integration.embedded.flow import outputs_of

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[3]


def _role_of(stack: EmbeddedStack, logical_id: str) -> str:
    assert stack.wiring is not None
    return next(s.role_arn for s in stack.wiring.functions.values() if s.logical_id == logical_id)


def _as_role(stack: EmbeddedStack, role_arn: str, arn: str, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    """MLflow's client as a Lambda function of the stack has it: the app's ARN as tracking URI, the
    plugin's endpoint override, the role's keys (the sagemaker-mlflow plugin signs every request)."""
    assert stack.mlflow_app is not None
    key, secret = stack.gatekeeper.credentials(role_arn)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv(ENDPOINT_VARIABLE, stack.mlflow_app.endpoint_url)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", arn)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    return MlflowClient()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_app_serves_the_tracking_role_and_refuses_others_then_retrain_ui_serves_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    with EmbeddedStack(state, parameter_overrides={"MlflowTracking": "create"}) as stack:
        arn = outputs_of(stack)[names.STACK_OUTPUTS["mlflow"]]
        assert stack.mlflow_app is not None and stack.mlflow_app.arn == arn
        # GIVEN the tracking function's role: it creates an experiment and a run through the app
        tracker = _as_role(stack, _role_of(stack, "TrackingFunction"), arn, monkeypatch)
        experiment = tracker.create_experiment("retrain/ui-check")
        run = tracker.create_run(experiment, run_name="run-1").info.run_id
        tracker.log_metric(run, "val-accuracy", 0.75, step=10)
        # WHEN the ingest function's role (no sagemaker:CallMlflowAppApi) tries the same
        other = _as_role(stack, _role_of(stack, "IngestFunction"), arn, monkeypatch)
        with pytest.raises(MlflowException) as refused:
            other.search_experiments()
        # AND a request comes unsigned
        status, body = _get(
            f"{stack.mlflow_app.endpoint_url}/api/2.0/mlflow/experiments/search?max_results=5"
        )
        denied = stack.gatekeeper.denied()
    # THEN the other role is refused with IAM's message, the unsigned request too
    assert "sagemaker:CallMlflowAppApi" in str(refused.value)
    assert [d.action for d in denied] == ["sagemaker:CallMlflowAppApi"]
    assert status == 403 and b"SigV4" in body

    # AND `retrain ui` serves the store (a read-only stack from the saved state gives the artifacts' S3)
    port = _free_port()
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "retrain.cli", "ui", "--port", str(port), "--state-dir", str(state)],
        cwd=REPO_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, status = time.monotonic() + 180, 0
        while time.monotonic() < deadline and process.poll() is None:
            try:
                status, _ = _get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        assert status == 200, process.stdout.read() if process.poll() is not None and process.stdout else ""
        page_status, page = _get(f"http://127.0.0.1:{port}/")
        found_status, found = _get(
            f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/get-by-name?experiment_name=retrain/ui-check"
        )
        runs_request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search",
            data=json.dumps({"experiment_ids": [experiment]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(runs_request, timeout=10) as response:
            searched: dict[str, Any] = json.loads(response.read())
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=120)
    assert page_status == 200 and b"<html" in page.lower()
    assert found_status == 200 and json.loads(found)["experiment"]["experiment_id"] == experiment
    (tracked,) = searched["runs"]
    assert [(m["key"], m["value"], int(m["step"])) for m in tracked["data"]["metrics"]] == [
        ("val-accuracy", 0.75, 10)
    ]
    assert f"MLflow UI: http://127.0.0.1:{port}" in output
    assert process.returncode == 0, output
