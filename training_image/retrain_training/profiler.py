"""System profiler: CPU per core, memory, I/O wait and GPU utilisation/memory sampled in a thread,
plus data-wait versus compute time per training step, as JSON lines under the profile directory.

The system rules (rules/system.py) and the bottleneck report read these files; `read_profile`
is the one reader both use.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import psutil

SYSTEM_FILE = "system.jsonl"
STEPS_FILE = "steps.jsonl"
DEFAULT_INTERVAL_S = 0.5


class _Gpus:
    """NVML handles, or none when the machine has no NVIDIA driver (then no GPU fields are written)."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
        except Exception:  # no driver, no library, or no device: a CPU machine
            self._handles = []

    def sample(self) -> list[dict[str, float]]:
        if self._nvml is None:
            return []
        out = []
        for index, handle in enumerate(self._handles):
            util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            out.append(
                {
                    "index": index,
                    "utilization_percent": float(util.gpu),
                    "memory_used_mb": memory.used / 2**20,
                    "memory_total_mb": memory.total / 2**20,
                }
            )
        return out

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = None


def sample_system(gpus: _Gpus) -> dict[str, Any]:
    """One sample; CPU figures are averages since the previous call (psutil keeps the last reading)."""
    per_core = psutil.cpu_percent(percpu=True)
    times = psutil.cpu_times_percent()
    memory = psutil.virtual_memory()
    return {
        "timestamp": time.time(),
        "cpu_percent": per_core,
        "iowait_percent": float(getattr(times, "iowait", 0.0)),
        "memory_percent": memory.percent,
        "memory_used_mb": (memory.total - memory.available) / 2**20,
        "gpus": gpus.sample(),
    }


class SystemProfiler:
    """Context manager: samples every `interval_s` in a daemon thread; `step()` records a step's timing."""

    def __init__(self, out_dir: Path, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        if interval_s <= 0:
            raise ValueError(f"profile interval must be positive, got {interval_s} s")
        self.out_dir = Path(out_dir)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._system: IO[str] | None = None
        self._steps: IO[str] | None = None
        self._lock = threading.Lock()
        self._gpus: _Gpus | None = None

    def __enter__(self) -> SystemProfiler:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # Append: a resumed (spot-restarted) job continues the same files.
        self._system = (self.out_dir / SYSTEM_FILE).open("a", encoding="utf-8")
        self._steps = (self.out_dir / STEPS_FILE).open("a", encoding="utf-8")
        self._gpus = _Gpus()
        psutil.cpu_percent(percpu=True)
        psutil.cpu_times_percent()
        self._thread = threading.Thread(target=self._run, name="system-profiler", daemon=True)
        self._thread.start()
        return self

    def step(self, step: int, data_wait_s: float, compute_s: float) -> None:
        line = json.dumps(
            {"timestamp": time.time(), "step": step, "data_wait_s": data_wait_s, "compute_s": compute_s}
        )
        with self._lock:
            if self._steps is not None:
                self._steps.write(line + "\n")

    def _run(self) -> None:
        assert self._gpus is not None
        while not self._stop.wait(self.interval_s):
            self._write_sample()

    def _write_sample(self) -> None:
        assert self._gpus is not None
        line = json.dumps(sample_system(self._gpus))
        with self._lock:
            if self._system is not None:
                self._system.write(line + "\n")
                self._system.flush()
            if self._steps is not None:
                self._steps.flush()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._write_sample()
        with self._lock:
            for handle in (self._system, self._steps):
                if handle is not None:
                    handle.close()
            self._system = self._steps = None
        if self._gpus is not None:
            self._gpus.close()


@dataclass
class Profile:
    """What a job's profile directory holds, as plain lists."""

    system: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def has_gpu(self) -> bool:
        return any(sample.get("gpus") for sample in self.system)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line:
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short when the job was stopped
    return rows


def read_profile(profile_dir: Path) -> Profile:
    return Profile(
        system=_read_lines(Path(profile_dir) / SYSTEM_FILE), steps=_read_lines(Path(profile_dir) / STEPS_FILE)
    )


class PhaseClock:
    """Wall seconds per phase of a job, summed over its repeats: what the job costs besides its
    training steps (start-up, data, model, the first step, validation, checkpoints, the model write)."""

    TRAINING = "training"  # the steps after the first: the part that scales with the data

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    @property
    def fixed_s(self) -> float:
        return sum(s for name, s in self.seconds.items() if name != self.TRAINING)

    def line(self) -> str:
        phases = ", ".join(f"{name} {seconds:.2f}" for name, seconds in self.seconds.items())
        total = sum(self.seconds.values())
        return f"job phases (s): {phases}; fixed cost {self.fixed_s:.2f} of {total:.2f}"
