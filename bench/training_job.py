"""One way for the benchmarks to run a training job as SageMaker runs it (script mode, one host).

SageMaker starts the image's entry point with the job's hyperparameters as `--name value` flags, its
channels as SM_CHANNEL_<NAME> directories, the job's name in TRAINING_JOB_NAME, the instance's vCPUs in
SM_NUM_CPUS, under /opt/ml (SAGEMAKER_BASE_DIR here, as the training toolkit allows) and with the
image's code directory (/opt/ml/code: train.py, retrain_training, retrain_contract) on PYTHONPATH.
`run` does that with training_image/train.py in a subprocess of this Python, stops it at its time cap as
MaxRuntimeInSeconds does, and returns what it printed and where it wrote (contract.resolve_paths: the
names and paths the container itself reads). `pack` makes model.tar.gz of a model dir, as SageMaker
uploads it, for a later job's pretrained channel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from retrain_contract import container as contract

ROOT = Path(__file__).resolve().parent.parent
# What the image copies to /opt/ml/code and puts on PYTHONPATH (training_image/Dockerfile).
CODE_DIRS = (ROOT / "training_image", ROOT / "contract")
PROGRAM = ROOT / "training_image" / contract.PROGRAM
MODEL_ARCHIVE = "model.tar.gz"
OUTPUT_TAIL = 3000  # characters of stderr a failed job's error quotes


@dataclass(frozen=True)
class TrainingJob:
    """A training job: CreateTrainingJob's parts that reach the container, on this machine."""

    base: Path  # the job's /opt/ml (SAGEMAKER_BASE_DIR): model/, output/, checkpoints/ under it
    hyperparameters: Mapping[str, str]  # name -> value, passed as `--name value` in this order
    channels: Mapping[str, Path] = field(default_factory=dict)  # channel name -> its local directory
    name: str = contract.DEFAULT_JOB_NAME  # TRAINING_JOB_NAME
    cpus: int | None = None  # the instance's vCPUs: SM_NUM_CPUS, and the job held to that many CPUs
    threads: int | None = None  # OMP_NUM_THREADS (None: the caller's)
    environment: Mapping[str, str] = field(default_factory=dict)  # the job's Environment
    max_runtime_s: float | None = 3600.0  # StoppingCondition.MaxRuntimeInSeconds; None: no cap

    def flags(self) -> list[str]:
        return [part for name, value in self.hyperparameters.items() for part in (f"--{name}", value)]

    @property
    def pinned(self) -> bool:
        """Whether the job runs on fewer CPUs than this machine has (under taskset)."""
        return self.cpus is not None and self.cpus < (os.cpu_count() or 1)

    def command(self) -> list[str]:
        command = [sys.executable, str(PROGRAM), *self.flags()]
        if self.pinned:
            assert self.cpus is not None
            command = ["taskset", "-c", f"0-{self.cpus - 1}", *command]
        return command

    def env(self) -> dict[str, str]:
        """This process's environment with what SageMaker and the image set for the job."""
        caller = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([*map(str, CODE_DIRS), *caller]),
            contract.BASE_DIR_ENV: str(self.base),
            contract.JOB_NAME_ENV: self.name,
        }
        env.update({contract.CHANNEL_ENV_PREFIX + n.upper(): str(p) for n, p in self.channels.items()})
        if self.cpus is not None:
            env[contract.NUM_CPUS_ENV] = str(self.cpus)
        if self.threads is not None:
            env["OMP_NUM_THREADS"] = str(self.threads)
        env.update(self.environment)
        return env

    @property
    def paths(self) -> contract.Paths:
        """Where the container reads and writes, by the contract's own rule."""
        return contract.resolve_paths(self.env())


@dataclass(frozen=True)
class Completed:
    """What a job printed and how it ended."""

    job: TrainingJob
    returncode: int
    stdout: str  # the metric lines (contract.format_metric)
    stderr: str  # the log
    seconds: float  # wall time from the start of the process to its end
    timed_out: bool = False  # stopped at max_runtime_s

    @property
    def failed(self) -> bool:
        return self.timed_out or self.returncode != 0

    def check(self, what: str) -> Completed:
        """Itself, or RuntimeError naming `what` with the end of the log when the job failed."""
        if self.timed_out:
            raise RuntimeError(f"{what}: train.py ran past {self.job.max_runtime_s} s:\n{self.tail}")
        if self.returncode != 0:
            raise RuntimeError(f"{what}: train.py exited {self.returncode}:\n{self.tail}")
        return self

    @property
    def tail(self) -> str:
        return self.stderr[-OUTPUT_TAIL:]

    def metrics(self) -> dict[str, list[contract.MetricPoint]]:
        """Per metric, its points in step order (contract.parse_metric_lines over stdout)."""
        return contract.parse_metric_lines(self.stdout.splitlines())


Watch = Callable[["subprocess.Popen[str]"], None]


def run(job: TrainingJob, watch: Watch | None = None) -> Completed:
    """Run the job to its end or its time cap; `watch`, when given, runs in a thread beside it with the
    process (it returns once the process has ended)."""
    started = time.perf_counter()
    timed_out = False
    with subprocess.Popen(
        job.command(), env=job.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        watcher = threading.Thread(target=watch, args=(process,), daemon=True) if watch else None
        if watcher:
            watcher.start()
        try:
            stdout, stderr = process.communicate(timeout=job.max_runtime_s)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            timed_out = True
        seconds = time.perf_counter() - started
        if watcher:
            watcher.join()
    return Completed(job, process.returncode, stdout, stderr, seconds, timed_out)


def pack(model_dir: Path, into: Path) -> Path:
    """`model_dir` as SageMaker uploads it: into/model.tar.gz (a pretrained channel of its own)."""
    from retrain.embedded.sagemaker.s3io import tar_directory  # the emulator's: SageMaker's packing

    return tar_directory(model_dir, into / MODEL_ARCHIVE)
