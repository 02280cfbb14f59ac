"""`retrain ui`: the MLflow UI of the stack's experiment tracking (the MlflowTrackingArn output).

On AWS the UI of a SageMaker MLflow app or tracking server opens through a presigned URL (SageMaker's
CreatePresignedMlflowAppUrl / CreatePresignedMlflowTrackingServerUrl, asked with the caller's own
credentials). On the embedded stack it is MLflow's own server on the state directory's store, reading the
runs' artifacts from the stack's S3 as the operator.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from controller import names
from retrain.deployment import Deployment
from retrain.embedded import mlflow_app
from retrain.errors import RetrainError

REPORT_ARTIFACTS = "report"  # the parent run's folder of report.md and its charts


class TrackingNotConfiguredError(RetrainError):
    """The stack tracks no runs in MLflow (MlflowTracking is empty)."""


def tracking_arn(deployment: Deployment) -> str:
    arn = deployment.outputs.get(names.STACK_OUTPUTS["mlflow"], "")
    if not arn:
        raise TrackingNotConfiguredError(
            f"stack {deployment.stack_name} tracks no runs in MLflow: deploy it with the parameter "
            "MlflowTracking=create (a serverless MLflow app) or the ARN of your MLflow app or tracking server"
        )
    return arn


def presigned_url(sagemaker: Any, arn: str) -> str:
    """A URL that opens the MLflow UI of the app or tracking server `arn` (valid for 5 minutes)."""
    kind, _, ident = arn.split(":", 5)[5].partition("/")
    if kind == "mlflow-app":
        return str(sagemaker.create_presigned_mlflow_app_url(Arn=arn)["AuthorizedUrl"])
    return str(
        sagemaker.create_presigned_mlflow_tracking_server_url(TrackingServerName=ident)["AuthorizedUrl"]
    )


@contextlib.contextmanager
def local_ui(deployment: Deployment, state_dir: Path, port: int) -> Iterator[str]:
    """MLflow's server (REST API and UI) on the embedded stack's store, for as long as the block runs."""
    store = mlflow_app.store_path(state_dir)
    if not store.exists():
        raise TrackingNotConfiguredError(
            f"no MLflow store at {store}: no run was tracked yet (`retrain demo` and `retrain local up` "
            "track every run; a stack of your own needs -p MlflowTracking=create)"
        )
    credentials = deployment.session.get_credentials()
    if credentials is None:
        raise RetrainError("no AWS credentials to read the runs' artifacts with")
    environment = {
        "AWS_ENDPOINT_URL": str(deployment.endpoint_url),
        "AWS_ACCESS_KEY_ID": credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
        "AWS_DEFAULT_REGION": deployment.session.region_name or "us-east-1",
    }
    bucket = deployment.output(names.STACK_OUTPUTS["artifact_bucket"])
    process = mlflow_app.start_server(state_dir, f"s3://{bucket}/mlflow", port, environment=environment)
    try:
        try:
            url = mlflow_app.wait_until_serving(process, port)
        except RuntimeError as error:
            raise RetrainError(f"{error}; is port {port} free? (--port)") from None
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


@contextlib.contextmanager
def client_environment(deployment: Deployment) -> Iterator[None]:
    """MLflow's client configured for the stack's app or tracking server while the block runs: its ARN
    as the tracking URI (the sagemaker-mlflow plugin signs as the caller); on the embedded stack, its
    MLflow app's endpoint and S3 (run artifacts), as the operator."""
    values = {"MLFLOW_TRACKING_URI": tracking_arn(deployment)}
    if deployment.local:
        credentials = deployment.session.get_credentials()
        if credentials is None or not deployment.mlflow_endpoint:
            raise RetrainError("the embedded stack's MLflow app is not serving")
        values.update(
            SAGEMAKER_MLFLOW_CUSTOM_ENDPOINT=deployment.mlflow_endpoint,
            MLFLOW_S3_ENDPOINT_URL=str(deployment.endpoint_url),
            AWS_ACCESS_KEY_ID=credentials.access_key,
            AWS_SECRET_ACCESS_KEY=credentials.secret_key,
            AWS_DEFAULT_REGION=deployment.session.region_name or "us-east-1",
        )
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def log_report(deployment: Deployment, mlflow_run_id: str, out_dir: Path) -> str:
    """The report and its charts as artifacts of the run's parent run; a warning, or "" when logged
    (or when the stack tracks nothing)."""
    if not mlflow_run_id or not deployment.outputs.get(names.STACK_OUTPUTS["mlflow"]):
        return ""
    from mlflow import MlflowClient

    try:
        with client_environment(deployment):
            MlflowClient().log_artifacts(mlflow_run_id, str(out_dir), REPORT_ARTIFACTS)
    except Exception as error:  # tracking never fails a command: say what was not logged
        return f"the report was not logged to MLflow run {mlflow_run_id}: {type(error).__name__}: {error}"[
            :600
        ]
    return ""
