"""One training job on an emulated instance: a child process of the training image under the contract.

The run follows SageMaker's lifecycle: Starting -> Downloading (channels, checkpoints) -> Training ->
Uploading (model.tar.gz, output.tar.gz) -> Completed | Failed | Stopped, with Interrupted/Restarting
for managed spot. Checkpoints are synced to CheckpointConfig.S3Uri while the job runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrain.embedded.account import REGION
from retrain.embedded.s3files import InputCache
from retrain.embedded.sagemaker import debugger
from retrain.embedded.sagemaker.container import Container, ContainerSpec, job_spec
from retrain.embedded.sagemaker.image import ContainerImage
from retrain.embedded.sagemaker.logs import (
    TRAINING_LOG_GROUP,
    LogsClient,
    LogShipper,
    MetricTracker,
    compile_metric_definitions,
    log_stream_name,
)
from retrain.embedded.sagemaker.s3io import (
    InsufficientDiskError,
    S3Uri,
    Volume,
    download_manifest,
    download_prefix,
    tar_directory,
    upload_file,
)
from retrain.embedded.sagemaker.slots import NewestFirstSlots
from retrain.embedded.sagemaker.spot import NoFaults, SageMakerFaults, SpotSchedule
from retrain_contract import container as contract

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

CHECKPOINT_PATTERN = re.compile(contract.CHECKPOINT_REGEX)
POLL_SECONDS = 0.1
# What SageMaker passes a training container to run the image's training (`docker run <image> train`).
TRAIN_ARGUMENT = "train"
# resourceconfig.json's group of a job with one instance group.
INSTANCE_GROUP = "homogeneousCluster"

# Records are plain JSON dicts; an updater applies changes under the emulator's lock and persists.
Updater = Callable[[dict[str, Any]], None]
Transition = Callable[[str, str], None]


# (execution role ARN, image URI) -> the S3 and CloudWatch Logs clients of the role's session, after the
# role's permission to pull the image is checked; raises when SageMaker could not act as the role.
RoleSession = Callable[[str, str], tuple[Any, Any]]


@dataclass(frozen=True)
class JobContext:
    """The environment every job runs in: the clients, the image, the spot and fault settings.

    `image` is the training image every TrainingImage/ImageUri runs (the emulator builds the project's
    from training_image/Dockerfile when none is given). `grace_seconds` (SIGTERM to SIGKILL when a job
    is stopped) defaults to the spot schedule's."""

    s3: S3Client
    logs: LogsClient | None = None
    image: ContainerImage | None = None
    fsx_root: Callable[[str, str], Path] | None = None
    spot: SpotSchedule = field(default_factory=SpotSchedule)
    faults: SageMakerFaults = field(default_factory=NoFaults)
    grace_seconds: float | None = None
    role_session: RoleSession | None = None
    # What a job's process needs to call AWS as its execution role (as SageMaker's credentials endpoint
    # gives it): the role's keys and the endpoint to send requests to. Only a job without network
    # isolation reaches the endpoint; an isolated one has loopback only (container.py).
    role_environment: Callable[[str], dict[str, str]] | None = None
    role_arn: str = ""
    # Whether a job's instance files (/opt/ml: the downloaded channels, the model and output directories,
    # the local checkpoints; the archives it uploaded) stay on disk after the job ends. SageMaker discards
    # the instance; its model, output and checkpoints are in S3 and its logs in CloudWatch Logs. The
    # embedded stack drops them (its state would grow by every job's data and weights); left as they
    # are, tests can inspect what a job saw. The job's local logs stay either way.
    keep_instance_files: bool = True
    # Processing jobs (evaluations, checkpoint evaluations, rule checks) running their program at once,
    # newest waiter first (slots.py), or None for no bound. On SageMaker each has its own instance.
    processing_slots: NewestFirstSlots | None = None
    # Intra-op threads (OMP_NUM_THREADS) of each job's process, unless the job's environment sets them.
    # On SageMaker a job has its instance's cores to itself; here concurrent jobs share this machine's,
    # and torch's OpenMP threads spin-wait when they outnumber the cores: two tuning trials with two
    # threads each on 2 cores trained at 8 images/s, against 250 for one thread each.
    job_threads: int | None = 1
    # Where jobs' small input objects are kept between jobs (s3files.InputCache), or None to fetch each.
    input_cache: InputCache | None = None
    region: str = REGION
    # The clock a job's MaxRuntimeInSeconds and MaxWaitTimeInSeconds are counted on (seconds). A test
    # gives one that starts counting at a point of the job's own (its program's first step), so a short
    # limit cannot strike before the program runs, whatever the machine's load: a hook, not a race.
    limit_clock: Callable[[], float] = time.time

    @property
    def built_image(self) -> ContainerImage:
        if self.image is None:
            raise RuntimeError("the job context has no image; SageMakerEmulator builds one")
        return self.image

    def thread_environment(self) -> dict[str, str]:
        """The environment that holds a job's process to `job_threads` intra-op threads."""
        if self.job_threads is None:
            return {}
        return {name: str(self.job_threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}

    @property
    def stop_grace_seconds(self) -> float:
        return self.spot.grace_seconds if self.grace_seconds is None else self.grace_seconds

    def as_role(self, role_arn: str, image: str) -> JobContext:
        """The context of a job that acts as its execution role: what it reads and writes in S3 and its
        logs go through that role's session (denied where the role's policies deny, as on SageMaker)."""
        if self.role_session is None or not role_arn:
            return self
        s3, logs = self.role_session(role_arn, image)
        return dataclasses.replace(
            self, s3=s3, logs=logs if self.logs is not None else None, role_arn=role_arn
        )

    def aws_environment(self) -> dict[str, str]:
        """The job's AWS credentials and endpoint (none without a role or outside the embedded stack)."""
        if self.role_environment is None or not self.role_arn:
            return {}
        return self.role_environment(self.role_arn)


@dataclass
class JobControl:
    """Signals between the API thread (stop, early stopping) and the job's thread."""

    stop_requested: threading.Event = field(default_factory=threading.Event)
    stop_reason: str = "Stopped"
    on_metric: Callable[[str, float], None] | None = None


def container_tree(job_dir: Path) -> dict[str, Path]:
    base = job_dir / "opt" / "ml"
    return {
        "base": base,
        "config": base / "input" / "config",
        "data": base / "input" / "data",
        "model": base / "model",
        "output": base / "output",
        "output_data": base / "output" / "data",
        "checkpoints": base / "checkpoints",
    }


def rewrite_local_path(local_path: str, base: Path) -> Path:
    """A container path under /opt/ml mapped into the job's own tree."""
    prefix = contract.DEFAULT_BASE_DIR.rstrip("/") + "/"
    if not local_path.startswith(prefix):
        raise ValueError(f"{local_path!r} is not under {contract.DEFAULT_BASE_DIR}")
    return base / local_path[len(prefix) :]


# What a job directory holds besides its logs (and rule results): the instance's /opt/ml tree and the
# archives of its model and output as uploaded.
INSTANCE_DIRS = ("opt", "artifacts")


def drop_instance_files(job_dir: Path) -> None:
    """Remove what an ended job's instance held; a channel that is a mounted file system (a symlink) is
    unlinked, never followed."""
    for name in INSTANCE_DIRS:
        shutil.rmtree(job_dir / name, ignore_errors=True)


def checkpoint_steps(root: Path, job_name: str) -> list[int]:
    """Steps of this job's checkpoints found under a checkpoint directory (the local path of a job with
    a prefix of its own is /opt/ml/checkpoints/<job>: its files are matched by their whole path)."""
    steps = []
    for path in root.rglob(f"{contract.CHECKPOINT_PREFIX}*{contract.CHECKPOINT_SUFFIX}"):
        match = CHECKPOINT_PATTERN.search(path.as_posix())
        if match and match.group("job") == job_name:
            steps.append(int(match.group("step")))
    return sorted(steps)


class CheckpointSync:
    """Uploads files of the local checkpoint directory once they stop changing, as SageMaker's agent
    does while the job runs, and deletes the S3 copy of a file the job deleted ("If a checkpoint is
    deleted in the SageMaker container, it will also be deleted in the S3 folder", Use checkpoints in
    Amazon SageMaker); a final sync does both for whatever is left."""

    def __init__(self, s3: S3Client, local: Path, remote: S3Uri) -> None:
        self.s3 = s3
        self.local = local
        self.remote = remote
        self._seen: dict[Path, tuple[int, int]] = {}
        self._uploaded: dict[Path, tuple[int, int]] = {}

    def restore(self) -> int:
        shutil.rmtree(self.local, ignore_errors=True)
        self.local.mkdir(parents=True, exist_ok=True)
        self._seen.clear()
        self._uploaded.clear()
        count = download_prefix(self.s3, self.remote, self.local)
        for path in self.local.rglob("*"):
            if path.is_file():
                self._uploaded[path] = _signature(path)
        return count

    def stable_new_files(self) -> list[Path]:
        """Files whose size and mtime did not change since the previous poll and are not uploaded yet."""
        ready = []
        for path in sorted(p for p in self.local.rglob("*") if p.is_file()):
            try:
                signature = _signature(path)
            except FileNotFoundError:
                continue
            if path.name.startswith(".") or path.name.endswith(".tmp"):
                continue
            if self._seen.get(path) == signature and self._uploaded.get(path) != signature:
                ready.append(path)
            self._seen[path] = signature
        return ready

    def upload(self, path: Path) -> bool:
        """Upload one file; False when the job deleted it first (a checkpoint it pruned meanwhile: the
        agent syncs what the job keeps, and there is nothing of it in S3 to delete)."""
        try:
            signature = _signature(path)
            upload_file(self.s3, path, self.remote.join(path.relative_to(self.local).as_posix()))
        except FileNotFoundError:
            self._seen.pop(path, None)
            return False
        self._uploaded[path] = signature
        return True

    def deleted_files(self) -> list[Path]:
        """Files synced to S3 that the job has deleted since."""
        return sorted(path for path in self._uploaded if not path.exists())

    def delete(self, path: Path) -> None:
        remote = self.remote.join(path.relative_to(self.local).as_posix())
        self.s3.delete_object(Bucket=remote.bucket, Key=remote.key)
        self._uploaded.pop(path, None)
        self._seen.pop(path, None)

    def final(self) -> None:
        for path in self.deleted_files():
            self.delete(path)
        for path in sorted(p for p in self.local.rglob("*") if p.is_file()):
            if self._uploaded.get(path) != _signature(path):
                self.upload(path)


def _signature(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


class JobFailedError(Exception):
    """The job ends Failed with this FailureReason."""


class JobStoppedError(Exception):
    """The job ends Stopped with this secondary status (Stopped, MaxRuntimeExceeded, MaxWaitTimeExceeded)."""


@dataclass
class _AttemptWatch:
    """What the supervision of one attempt tracks: how it ended, if not on its own."""

    start: float
    restored: set[Path]
    limit_start: float = 0.0  # on JobContext.limit_clock
    new_checkpoints: int = 0
    stop: str | None = None
    interrupt: str | None = None


class TrainingRun:
    """Runs one training job to a terminal status; `update` persists every change of the record."""

    def __init__(
        self,
        request: dict[str, Any],
        *,
        job_dir: Path,
        context: JobContext,
        control: JobControl,
        update: Updater,
        transition: Transition,
        rule_statuses: dict[str, list[dict[str, Any]]] | None = None,
        arn: str = "",
    ) -> None:
        self.request = request
        self.name: str = request["TrainingJobName"]
        self.arn = arn
        self.job_dir = job_dir
        self.ctx = context
        self.control = control
        self.update = update
        self.transition = transition
        self.tree = container_tree(job_dir)
        self.hyperparameters: dict[str, str] = dict(request.get("HyperParameters") or {})
        algorithm = request["AlgorithmSpecification"]
        self.tracker = MetricTracker(
            compile_metric_definitions(algorithm.get("MetricDefinitions") or [], "CreateTrainingJob"),
            on_value=self._on_metric,
        )
        stopping = request["StoppingCondition"]
        self.max_runtime = float(stopping["MaxRuntimeInSeconds"])
        self.spot = bool(request.get("EnableManagedSpotTraining"))
        self.max_wait = float(stopping["MaxWaitTimeInSeconds"]) if self.spot else math.inf
        self.interruptions_left = self.ctx.spot.interruptions_for(self.name) if self.spot else 0
        self.kill_on_checkpoint = self.ctx.faults.kill_during_checkpoint_write(self.name)
        self.running_seconds = 0.0
        self.waiting_seconds = 0.0
        self.limited_running = 0.0  # running seconds on the limit clock (MaxRuntimeInSeconds)
        self.limits_started = 0.0  # the job's start on the limit clock (MaxWaitTimeInSeconds)
        self.rule_statuses = rule_statuses or {}
        self.retries_left = int((request.get("RetryStrategy") or {}).get("MaximumRetryAttempts", 0))
        self.started = 0.0
        self.interruptions: list[dict[str, Any]] = []
        self.log_streams: list[str] = []
        self.process: Container | None = None
        self.checkpoint_sync: CheckpointSync | None = None
        self.tail: list[str] = []

    def _on_metric(self, name: str, value: float) -> None:
        if self.control.on_metric is not None:
            self.control.on_metric(name, value)

    # -- lifecycle -------------------------------------------------------------------------------

    def run(self) -> None:
        self.started = time.time()
        self.limits_started = self.ctx.limit_clock()
        self.update({"TrainingStartTime": self.started})
        status, secondary, reason = "Completed", "Completed", None
        try:
            self.transition("Starting", "Preparing the instances for training")
            self.ctx = self._as_execution_role()
            self._prepare_tree()
            self.transition("Downloading", "Downloading input data")
            self._download_channels()
            self._train()
        except JobFailedError as exc:
            status, secondary, reason = "Failed", "Failed", str(exc)
        except JobStoppedError as exc:
            status, secondary = "Stopped", str(exc)
        except Exception as exc:  # the job must end Failed, never hang InProgress
            status, secondary, reason = (
                "Failed",
                "Failed",
                f"InternalServerError: {type(exc).__name__}: {exc}",
            )
        try:
            self._finish(status, secondary, reason)
        finally:
            if not self.ctx.keep_instance_files:
                drop_instance_files(self.job_dir)

    def _as_execution_role(self) -> JobContext:
        image = str(self.request["AlgorithmSpecification"].get("TrainingImage", ""))
        try:
            return self.ctx.as_role(str(self.request.get("RoleArn", "")), image)
        except Exception as exc:
            raise JobFailedError(f"ClientError: SageMaker could not act as the job's role: {exc}") from exc

    def _finish(self, status: str, secondary: str, reason: str | None) -> None:
        end = time.time()
        changes: dict[str, Any] = {}
        try:
            if self.checkpoint_sync is not None:
                self.checkpoint_sync.final()
            if status != "Failed" or (
                self.tree["output_data"].is_dir() and any(self.tree["output_data"].iterdir())
            ):
                self.transition("Uploading", "Uploading generated training model")
                changes.update(self._upload_artifacts(include_model=status != "Failed"))
        except Exception as exc:
            if status != "Failed":
                status, secondary = "Failed", "Failed"
                reason = f"InternalServerError: uploading the job's artifacts failed: {exc}"
        if self.rule_statuses and status != "Completed":
            changes.update(debugger.stop_statuses(self.rule_statuses, f"the training job ended {status}"))
        training_seconds = max(1, math.ceil(end - self.started))
        if self.spot:
            on_instance = max(0.0, end - self.started - self.waiting_seconds)
            billable = max(1, math.ceil(on_instance * self.ctx.spot.price_ratio))
        else:
            billable = training_seconds
        changes.update(
            {
                "TrainingEndTime": end,
                "TrainingTimeInSeconds": training_seconds,
                "BillableTimeInSeconds": min(billable, training_seconds),
                "FinalMetricDataList": self.tracker.final_metric_data(),
                "Interruptions": self.interruptions,
                "LogStreams": self.log_streams,
            }
        )
        if reason is not None:
            changes["FailureReason"] = reason[: contract.FAILURE_REASON_LIMIT]
        self.update(changes)
        messages = {
            "Completed": "Training job completed",
            "Failed": f"Training job failed: {reason}",
            "Stopped": "Training job stopped",
            "MaxRuntimeExceeded": "Training job stopped: MaxRuntimeInSeconds exceeded",
            "MaxWaitTimeExceeded": "Training job stopped: MaxWaitTimeInSeconds exceeded",
        }
        self.transition(secondary, messages.get(secondary, secondary))
        self.update({"TrainingJobStatus": status})
        if self.rule_statuses and status == "Completed":
            # As on SageMaker, rule evaluations finish after the job: the job reads Completed while its
            # rules are still InProgress.
            self.update(
                debugger.evaluate_rules(
                    self.request,
                    self.rule_statuses,
                    code_dir=self.ctx.built_image.code_dir,
                    base=self.tree["base"],
                    job_dir=self.job_dir,
                    logs=self.ctx.logs,
                    job_name=self.name,
                )
            )

    def _prepare_tree(self) -> None:
        """The instance's /opt/ml: the image's own (its code), the job's configuration files as SageMaker
        writes them, and the directories it mounts."""
        shutil.rmtree(self.tree["base"], ignore_errors=True)
        self.tree["base"].mkdir(parents=True)
        self.ctx.built_image.install(self.tree["base"])
        for key in ("config", "data", "model", "output_data", "checkpoints"):
            self.tree[key].mkdir(parents=True, exist_ok=True)
        config = self.tree["config"]
        (config / "hyperparameters.json").write_text(json.dumps(self.hyperparameters), encoding="utf-8")
        (config / "inputdataconfig.json").write_text(json.dumps(self._input_data_config()), encoding="utf-8")
        (config / "resourceconfig.json").write_text(json.dumps(self._resource_config()), encoding="utf-8")
        debugger.write_hook_config(self.request, self.tree["base"])
        checkpoint = self.request.get("CheckpointConfig")
        if checkpoint:
            local = rewrite_local_path(
                checkpoint.get("LocalPath", contract.CHECKPOINT_LOCAL_PATH), self.tree["base"]
            )
            self.tree["checkpoints"] = local
            self.checkpoint_sync = CheckpointSync(self.ctx.s3, local, S3Uri.parse(checkpoint["S3Uri"]))

    def _input_data_config(self) -> dict[str, dict[str, str]]:
        """inputdataconfig.json: each channel's input mode, content type and S3 distribution."""
        default_mode = self.request["AlgorithmSpecification"].get("TrainingInputMode", "File")
        channels: dict[str, dict[str, str]] = {}
        for channel in self.request.get("InputDataConfig") or []:
            entry = {"TrainingInputMode": channel.get("InputMode", default_mode)}
            s3 = channel["DataSource"].get("S3DataSource")
            if s3 is not None:
                entry["S3DistributionType"] = s3.get("S3DataDistributionType", "FullyReplicated")
            entry["RecordWrapperType"] = channel.get("RecordWrapperType", "None")
            if channel.get("ContentType"):
                entry["ContentType"] = channel["ContentType"]
            channels[channel["ChannelName"]] = entry
        return channels

    def _resource_config(self) -> dict[str, Any]:
        """resourceconfig.json of a job on one instance."""
        instance_type = str(self.request["ResourceConfig"].get("InstanceType", ""))
        hosts = [contract.DEFAULT_HOST]
        return {
            "current_host": contract.DEFAULT_HOST,
            "current_instance_type": instance_type,
            "current_group_name": INSTANCE_GROUP,
            "hosts": hosts,
            "instance_groups": [
                {"instance_group_name": INSTANCE_GROUP, "instance_type": instance_type, "hosts": hosts}
            ],
            "network_interface_name": "eth0",
        }

    def _download_channels(self) -> None:
        """The channels onto the instance; File-mode S3 channels are copied to the ML storage volume and
        fail the job when they do not fit it, as SageMaker's download does (FastFile streams, FSx is
        mounted: neither takes the volume's space)."""
        size_gb = int(self.request["ResourceConfig"].get("VolumeSizeInGB") or 0)
        volume = Volume(size_gb) if size_gb > 0 else None
        default_mode = self.request["AlgorithmSpecification"].get("TrainingInputMode", "File")
        for channel in self.request.get("InputDataConfig") or []:
            name = channel["ChannelName"]
            on_volume = volume if channel.get("InputMode", default_mode) == "File" else None
            target = self.tree["data"] / name
            source = channel["DataSource"]
            try:
                if "FileSystemDataSource" in source:
                    fsx = source["FileSystemDataSource"]
                    if self.ctx.fsx_root is None:
                        raise JobFailedError(
                            f"ClientError: channel {name!r} uses FileSystemDataSource but no file system "
                            "is mounted in this runtime"
                        )
                    mounted = self.ctx.fsx_root(fsx["FileSystemId"], fsx["DirectoryPath"])
                    if not mounted.is_dir():
                        raise JobFailedError(
                            f"ClientError: channel {name!r}: {fsx['DirectoryPath']} does not exist on file "
                            f"system {fsx['FileSystemId']}"
                        )
                    target.symlink_to(mounted, target_is_directory=True)
                    continue
                s3 = source["S3DataSource"]
                uri = S3Uri.parse(s3["S3Uri"])
                target.mkdir(parents=True, exist_ok=True)
                if s3.get("S3DataType", "S3Prefix") == "ManifestFile":
                    count = download_manifest(self.ctx.s3, uri, target, on_volume)
                else:
                    count = download_prefix(self.ctx.s3, uri, target, self.ctx.input_cache, on_volume)
                if count == 0:
                    raise JobFailedError(
                        "ClientError: Data download failed:No S3 objects found under S3 URL "
                        f'"{uri}" given in input data source. Please ensure that the bucket exists in '
                        f"the selected region (channel {name!r})."
                    )
            except JobFailedError:
                raise
            except InsufficientDiskError as exc:
                raise JobFailedError(
                    f"ClientError: Data download failed:Insufficient disk space (channel {name!r}: {exc}). "
                    "Give the job a larger ResourceConfig.VolumeSizeInGB."
                ) from exc
            except Exception as exc:
                reason = f"ClientError: Data download failed for channel {name!r}: {exc}"
                raise JobFailedError(reason) from exc

    # -- attempts ----------------------------------------------------------------------------------

    def _train(self) -> None:
        attempt = 0
        while True:
            attempt += 1
            resumed_step = self._restore_checkpoints()
            if attempt == 1:
                self.transition("Training", "Training image download completed. Training in progress.")
            else:
                self.transition(
                    "Training",
                    f"Restarted from checkpoints in S3 (attempt {attempt}); newest checkpoint step "
                    f"{resumed_step if resumed_step is not None else 'none'}",
                )
            try:
                outcome = self._attempt(attempt, resumed_step)
            except JobFailedError as exc:
                # RetryStrategy: SageMaker restarts a job that failed with an InternalServerError.
                if not str(exc).startswith("InternalServerError") or self.retries_left <= 0:
                    raise
                self.retries_left -= 1
                self.transition("Restarting", f"Retrying after {exc} ({self.retries_left} retries left)")
                continue
            if outcome == "done":
                return
            self._wait_for_capacity(attempt)

    def _restore_checkpoints(self) -> int | None:
        if self.checkpoint_sync is None:
            return None
        self.checkpoint_sync.restore()
        steps = checkpoint_steps(self.checkpoint_sync.local, self.name)
        return steps[-1] if steps else None

    def _sagemaker_environment(self) -> dict[str, str]:
        """What SageMaker sets in a training container besides the image's ENV and the job's Environment."""
        return {
            contract.JOB_NAME_ENV: self.name,
            "TRAINING_JOB_ARN": self.arn,
            "AWS_REGION": self.ctx.region,
        }

    def _container_spec(self) -> ContainerSpec:
        """The image's ENTRYPOINT with `train`, or the job's ContainerEntrypoint and ContainerArguments."""
        image = self.ctx.built_image
        algorithm = self.request["AlgorithmSpecification"]
        argv = image.job_command(
            algorithm.get("ContainerEntrypoint") or [],
            algorithm.get("ContainerArguments") or [],
            default=[TRAIN_ARGUMENT],
        )
        return job_spec(
            image,
            argv,
            self.tree["base"],
            network_isolation=bool(self.request.get("EnableNetworkIsolation")),
            layers=(
                self._sagemaker_environment(),
                self.ctx.aws_environment(),
                self.ctx.thread_environment(),
                self.request.get("Environment") or {},
            ),
        )

    def _attempt(self, attempt: int, resumed_step: int | None) -> str:
        """Runs the container once; 'done' when it exited on its own, 'interrupted' for a spot restart."""
        (self.tree["output"] / contract.FAILURE_FILE).unlink(missing_ok=True)
        start = time.time()
        shipper = self._open_log_stream(attempt, start)
        if resumed_step is not None:
            shipper.write(f"[retrain emulator] restored checkpoints from S3; newest step {resumed_step}")
        process = Container(self._container_spec(), self.job_dir / "container" / f"attempt-{attempt}")
        self.process = process
        reader = threading.Thread(target=self._read_output, args=(process, shipper), daemon=True)
        reader.start()
        watch = _AttemptWatch(
            start=start, restored=set(self._local_checkpoints()), limit_start=self.ctx.limit_clock()
        )
        try:
            self._supervise(process, watch, shipper)
        finally:
            if process.poll() is None:
                self._terminate(process)
            reader.join(timeout=30)
            self.running_seconds += time.time() - start
            self.limited_running += self.ctx.limit_clock() - watch.limit_start
            shipper.flush()
            process.cleanup()
            self.process = None
        return self._outcome(process, watch, attempt, shipper)

    def _open_log_stream(self, attempt: int, start: float) -> LogShipper:
        """This attempt's log stream (recorded on the job) and its local log file."""
        stream = log_stream_name(self.name, contract.DEFAULT_HOST, start)
        if stream in self.log_streams:
            stream = f"{stream}-{attempt}"
        self.log_streams.append(stream)
        self.update({"LogStreams": self.log_streams})
        return LogShipper(
            self.ctx.logs, TRAINING_LOG_GROUP, stream, self.job_dir / "logs" / f"attempt-{attempt}.log"
        )

    def _supervise(self, process: Container, watch: _AttemptWatch, shipper: LogShipper) -> None:
        """Polls the running container: syncs checkpoints, and ends it on a stop, a time limit, a spot
        interruption or an injected fault (recorded in `watch`)."""
        while process.poll() is None:
            time.sleep(POLL_SECONDS)
            elapsed = time.time() - watch.start
            if self.kill_on_checkpoint and self._tear_checkpoint_write(process, watch, shipper):
                return
            self._sync_checkpoints(watch)
            watch.stop = self._stop_due(self.ctx.limit_clock() - watch.limit_start)
            if watch.stop is not None:
                self.transition("Stopping", f"Stopping the training job ({watch.stop})")
                self._terminate(process)
                return
            if self.interruptions_left > 0 and self._spot_due(watch.new_checkpoints, elapsed):
                watch.interrupt = "spot"
                self._terminate(process)
                return

    def _tear_checkpoint_write(self, process: Container, watch: _AttemptWatch, shipper: LogShipper) -> bool:
        """The injected fault, once the job wrote its first new checkpoint; True when it struck."""
        written = [p for p in self._local_checkpoints() if p not in watch.restored]
        if not written:
            return False
        self.kill_on_checkpoint = False
        watch.interrupt = self._kill_during_write(process, written[-1], shipper)
        return True

    def _sync_checkpoints(self, watch: _AttemptWatch) -> None:
        if self.checkpoint_sync is None:
            return
        for path in self.checkpoint_sync.stable_new_files():
            if self.checkpoint_sync.upload(path):
                watch.new_checkpoints += int(CHECKPOINT_PATTERN.search(path.as_posix()) is not None)
        for path in self.checkpoint_sync.deleted_files():
            self.checkpoint_sync.delete(path)

    def _stop_due(self, limit_elapsed: float) -> str | None:
        """The secondary status the job stops with now (a StopTrainingJob, a time limit), if any;
        `limit_elapsed` is this attempt's running time on the limit clock."""
        if self.control.stop_requested.is_set():
            return self.control.stop_reason
        if self.limited_running + limit_elapsed > self.max_runtime:
            return "MaxRuntimeExceeded"
        if self.ctx.limit_clock() - self.limits_started > self.max_wait:
            return "MaxWaitTimeExceeded"
        return None

    def _outcome(self, process: Container, watch: _AttemptWatch, attempt: int, shipper: LogShipper) -> str:
        if watch.stop is not None:
            raise JobStoppedError(watch.stop)
        if watch.interrupt is not None:
            if self.checkpoint_sync is not None:
                self.checkpoint_sync.final()
            self._record_interruption(attempt, watch.interrupt, shipper)
            return "interrupted"
        returncode = process.wait()
        if returncode != 0:
            raise JobFailedError(self._failure_reason(returncode))
        return "done"

    def _spot_due(self, new_checkpoints: int, elapsed: float) -> bool:
        by_checkpoints = (
            self.ctx.spot.after_checkpoints is not None and new_checkpoints >= self.ctx.spot.after_checkpoints
        )
        by_time = self.ctx.spot.after_seconds is not None and elapsed >= self.ctx.spot.after_seconds
        return by_checkpoints or by_time

    def _local_checkpoints(self) -> list[Path]:
        """This job's checkpoint files on the instance, oldest step first."""
        if self.checkpoint_sync is None:
            return []
        found = []
        for path in self.checkpoint_sync.local.rglob(
            f"{contract.CHECKPOINT_PREFIX}*{contract.CHECKPOINT_SUFFIX}"
        ):
            match = CHECKPOINT_PATTERN.search(path.as_posix())
            if match and match.group("job") == self.name:
                found.append((int(match.group("step")), path))
        return [path for _, path in sorted(found)]

    def _kill_during_write(self, process: Container, path: Path, shipper: LogShipper) -> str:
        """Injected fault: the instance dies while it writes its newest checkpoint `path`; the torn file
        (its first half) is what the checkpoint sync leaves in S3."""
        process.kill()
        size = path.stat().st_size
        with path.open("r+b") as handle:
            handle.truncate(size // 2)
        shipper.write(f"[retrain emulator] injected fault: instance lost while writing {path.name}")
        if not self.spot:
            raise JobFailedError(
                f"InternalServerError: the training instance was lost while it wrote checkpoint {path.name} "
                "(injected fault)"
            )
        return "checkpoint-write"

    def _terminate(self, process: Container) -> None:
        """SIGTERM to the container's first process, SIGKILL after the grace period, as SageMaker stops
        a container."""
        process.stop(self.ctx.stop_grace_seconds)

    def _record_interruption(self, attempt: int, cause: str, shipper: LogShipper) -> None:
        steps = checkpoint_steps(self.checkpoint_sync.local, self.name) if self.checkpoint_sync else []
        newest = steps[-1] if steps else None
        if cause == "spot":
            self.interruptions_left -= 1
        self.interruptions.append(
            {"Attempt": attempt, "Time": time.time(), "Cause": cause, "NewestCheckpointStep": newest}
        )
        self.update({"Interruptions": self.interruptions})
        message = (
            f"Spot capacity reclaimed (interruption {len(self.interruptions)}, {cause}); newest checkpoint "
            f"in S3 is step {newest if newest is not None else 'none'}"
        )
        shipper.write(f"[retrain emulator] {message}")
        shipper.flush()
        self.transition("Interrupted", message)

    def _wait_for_capacity(self, attempt: int) -> None:
        began = time.time()
        deadline = began + self.ctx.spot.capacity_wait_seconds
        try:
            while time.time() < deadline:
                if self.control.stop_requested.is_set():
                    raise JobStoppedError(self.control.stop_reason)
                if self.ctx.limit_clock() - self.limits_started > self.max_wait:
                    raise JobStoppedError("MaxWaitTimeExceeded")
                time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.time())))
        finally:
            self.waiting_seconds += time.time() - began
        self.transition("Restarting", f"Spot capacity available; restarting the job (attempt {attempt + 1})")

    def _read_output(self, process: Container, shipper: LogShipper) -> None:
        stdout = process.process.stdout
        assert stdout is not None
        for line in stdout:
            shipper.write(line)
            self.tracker.feed(line)
            self.tail = [*self.tail[-19:], line.rstrip("\n")]
        stdout.close()

    def _failure_reason(self, returncode: int) -> str:
        failure = self.tree["output"] / contract.FAILURE_FILE
        if failure.is_file():
            text = " ".join(failure.read_text(encoding="utf-8", errors="replace").split())
            if text:
                return f"AlgorithmError: {text}"
        last = next((line for line in reversed(self.tail) if line.strip()), "")
        return f"AlgorithmError: ExecuteUserScriptError: exit code {returncode}; last log line: {last}"

    def _upload_artifacts(self, *, include_model: bool) -> dict[str, Any]:
        output = S3Uri.parse(self.request["OutputDataConfig"]["S3OutputPath"]).join(self.name, "output")
        changes: dict[str, Any] = {}
        staging = self.job_dir / "artifacts"
        if include_model:
            archive = tar_directory(self.tree["model"], staging / "model.tar.gz")
            target = output.join("model.tar.gz")
            upload_file(self.ctx.s3, archive, target)
            changes["ModelArtifacts"] = {"S3ModelArtifacts": str(target)}
        archive = tar_directory(self.tree["output_data"], staging / "output.tar.gz")
        upload_file(self.ctx.s3, archive, output.join("output.tar.gz"))
        debugger.upload_outputs(
            self.request, self.ctx.s3, self.tree["base"], self.tree["output_data"], self.name
        )
        return changes
