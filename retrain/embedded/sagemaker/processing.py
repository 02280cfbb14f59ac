"""One processing job: the training image (any ImageUri: this project has one) in a container of its
own, running AppSpecification's ContainerEntrypoint (evaluate.py, rule_check.py) as SageMaker does."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from retrain.embedded.sagemaker.container import Container, ContainerSpec, job_spec
from retrain.embedded.sagemaker.logs import PROCESSING_LOG_GROUP, LogShipper, log_stream_name
from retrain.embedded.sagemaker.s3io import (
    InsufficientDiskError,
    S3Uri,
    Volume,
    download_manifest,
    download_prefix,
    upload_tree,
)
from retrain.embedded.sagemaker.training import (
    POLL_SECONDS,
    JobContext,
    JobControl,
    JobFailedError,
    Updater,
    drop_instance_files,
    rewrite_local_path,
)
from retrain_contract import container as contract

DEFAULT_MAX_RUNTIME = 86400


class ProcessingRun:
    """Runs one processing job to a terminal status."""

    def __init__(
        self,
        request: dict[str, Any],
        job_dir: Path,
        context: JobContext,
        control: JobControl,
        update: Updater,
    ) -> None:
        self.request = request
        self.name: str = request["ProcessingJobName"]
        self.job_dir = job_dir
        self.ctx = context
        self.control = control
        self.update = update
        self.base = job_dir / "opt" / "ml"
        stopping = request.get("StoppingCondition") or {}
        self.max_runtime = float(stopping.get("MaxRuntimeInSeconds", DEFAULT_MAX_RUNTIME))
        self.tail: list[str] = []

    def run(self) -> None:
        start = time.time()
        self.update({"ProcessingStartTime": start})
        status, reason, exit_message = "Completed", None, None
        try:
            self._as_execution_role()
            self._prepare()
            with self.ctx.processing_slots or contextlib.nullcontext():  # a free slot, when bounded
                exit_message = self._execute(time.time())
            self._upload_outputs()
        except JobFailedError as exc:
            status, reason = "Failed", str(exc)
        except _StoppedError:
            status = "Stopped"
        except Exception as exc:
            status, reason = "Failed", f"InternalServerError: {type(exc).__name__}: {exc}"
        finally:
            if not self.ctx.keep_instance_files:
                drop_instance_files(self.job_dir)
        changes: dict[str, Any] = {"ProcessingEndTime": time.time(), "ProcessingJobStatus": status}
        if reason is not None:
            changes["FailureReason"] = reason[: contract.FAILURE_REASON_LIMIT]
            changes["ExitMessage"] = reason[: contract.FAILURE_REASON_LIMIT]
        elif exit_message:
            changes["ExitMessage"] = exit_message
        self.update(changes)

    def _as_execution_role(self) -> None:
        image = str(self.request["AppSpecification"].get("ImageUri", ""))
        try:
            self.ctx = self.ctx.as_role(str(self.request.get("RoleArn", "")), image)
        except Exception as exc:
            raise JobFailedError(f"ClientError: SageMaker could not act as the job's role: {exc}") from exc

    def _prepare(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)
        self.base.mkdir(parents=True)
        self.ctx.built_image.install(self.base)
        config = self.base / "config"
        config.mkdir(parents=True, exist_ok=True)
        (config / "processingjobconfig.json").write_text(
            json.dumps(self.request, default=str), encoding="utf-8"
        )
        resource = {"current_host": contract.DEFAULT_HOST, "hosts": [contract.DEFAULT_HOST]}
        (config / "resourceconfig.json").write_text(json.dumps(resource), encoding="utf-8")
        (self.base / "output").mkdir(parents=True, exist_ok=True)
        cluster = (self.request.get("ProcessingResources") or {}).get("ClusterConfig") or {}
        size_gb = int(cluster.get("VolumeSizeInGB") or 0)
        volume = Volume(size_gb) if size_gb > 0 else None
        for item in self.request.get("ProcessingInputs") or []:
            s3 = item["S3Input"]
            target = rewrite_local_path(s3["LocalPath"], self.base)
            target.mkdir(parents=True, exist_ok=True)
            uri = S3Uri.parse(s3["S3Uri"])
            # File mode copies the input to the ML storage volume (Pipe streams it).
            on_volume = volume if s3.get("S3InputMode", "File") == "File" else None
            try:
                if s3.get("S3DataType", "S3Prefix") == "ManifestFile":
                    count = download_manifest(self.ctx.s3, uri, target, on_volume)
                else:
                    count = download_prefix(self.ctx.s3, uri, target, self.ctx.input_cache, on_volume)
            except InsufficientDiskError as exc:
                raise JobFailedError(
                    "ClientError: Data download failed:Insufficient disk space "
                    f"(input {item['InputName']!r}: {exc}). "
                    "Give the job a larger ClusterConfig.VolumeSizeInGB."
                ) from exc
            except Exception as exc:
                raise JobFailedError(
                    f"ClientError: downloading input {item['InputName']!r} from {uri} failed: {exc}"
                ) from exc
            if count == 0:
                raise JobFailedError(
                    f"ClientError: no S3 objects found under {uri} (input {item['InputName']!r})"
                )
        for item in (self.request.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
            rewrite_local_path(item["S3Output"]["LocalPath"], self.base).mkdir(parents=True, exist_ok=True)

    def _container_spec(self) -> ContainerSpec:
        image = self.ctx.built_image
        app = self.request["AppSpecification"]
        network = self.request.get("NetworkConfig") or {}
        return job_spec(
            image,
            image.job_command(app.get("ContainerEntrypoint") or [], app.get("ContainerArguments") or []),
            self.base,
            network_isolation=bool(network.get("EnableNetworkIsolation")),
            layers=(
                {"AWS_REGION": self.ctx.region},
                self.ctx.aws_environment(),
                self.ctx.thread_environment(),
                {k: str(v) for k, v in (self.request.get("Environment") or {}).items()},
            ),
        )

    def _execute(self, start: float) -> str | None:
        stream = log_stream_name(self.name, contract.DEFAULT_HOST, start)
        self.update({"LogStreams": [stream]})
        shipper = LogShipper(self.ctx.logs, PROCESSING_LOG_GROUP, stream, self.job_dir / "logs" / "job.log")
        process = Container(self._container_spec(), self.job_dir / "container")
        reader = threading.Thread(target=self._read, args=(process, shipper), daemon=True)
        reader.start()
        stopped = False
        try:
            while process.poll() is None:
                time.sleep(POLL_SECONDS)
                if self.control.stop_requested.is_set() or time.time() - start > self.max_runtime:
                    stopped = self.control.stop_requested.is_set()
                    process.stop(self.ctx.stop_grace_seconds)
                    if not stopped:
                        reader.join(timeout=30)
                        shipper.flush()
                        raise JobFailedError(
                            f"ClientError: the job exceeded MaxRuntimeInSeconds ({int(self.max_runtime)})"
                        )
        finally:
            if process.poll() is None:
                process.kill()
            process.cleanup()
        reader.join(timeout=30)
        shipper.flush()
        if stopped:
            raise _StoppedError
        if process.returncode != 0:
            failure = self.base / "output" / contract.FAILURE_FILE
            text = " ".join(failure.read_text(encoding="utf-8").split()) if failure.is_file() else ""
            last = next((line for line in reversed(self.tail) if line.strip()), "")
            raise JobFailedError(
                f"AlgorithmError: {text or f'exit code {process.returncode}; last log line: {last}'}"
            )
        message = self.base / "output" / "message"
        return message.read_text(encoding="utf-8").strip() if message.is_file() else None

    def _read(self, process: Container, shipper: LogShipper) -> None:
        stdout = process.process.stdout
        assert stdout is not None
        for line in stdout:
            shipper.write(line)
            self.tail = [*self.tail[-19:], line.rstrip("\n")]
        stdout.close()

    def _upload_outputs(self) -> None:
        for item in (self.request.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
            s3 = item["S3Output"]
            upload_tree(self.ctx.s3, rewrite_local_path(s3["LocalPath"], self.base), S3Uri.parse(s3["S3Uri"]))


class _StoppedError(Exception):
    pass
