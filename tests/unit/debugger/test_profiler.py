from __future__ import annotations

import time
from pathlib import Path

import pytest

from retrain_training import profiler


def _sample_lines(directory: Path) -> int:
    path = directory / profiler.SYSTEM_FILE
    return len(path.read_text(encoding="utf-8").splitlines()) if path.is_file() else 0


def test_profiler_writes_system_samples_and_step_timings(tmp_path: Path) -> None:
    # GIVEN a profiler sampling every 50 ms
    with profiler.SystemProfiler(tmp_path, interval_s=0.05) as prof:
        # WHEN three steps are recorded, and the profiler runs until its thread wrote two samples
        for step in range(3):
            prof.step(step, data_wait_s=0.01 * step, compute_s=0.05)
        deadline = time.monotonic() + 30  # a hang guard, not a speed requirement
        while _sample_lines(tmp_path) < 2:
            assert time.monotonic() < deadline, "the sampling thread wrote no two samples"
            time.sleep(0.01)

    # THEN the system file holds those samples and the one taken on exit, each with per-core CPU
    # figures, in time order, and the steps file one line per step
    profile = profiler.read_profile(tmp_path)
    assert len(profile.system) >= 3
    for sample in profile.system:
        assert len(sample["cpu_percent"]) >= 1
        assert {"iowait_percent", "memory_percent", "memory_used_mb", "gpus", "timestamp"} <= sample.keys()
    timestamps = [sample["timestamp"] for sample in profile.system]
    assert timestamps == sorted(timestamps)
    assert [row["step"] for row in profile.steps] == [0, 1, 2]
    assert profile.steps[2]["data_wait_s"] == pytest.approx(0.02)
    assert profile.steps[2]["compute_s"] == pytest.approx(0.05)


def test_a_profiler_stopped_before_its_first_interval_leaves_one_sample(tmp_path: Path) -> None:
    # GIVEN a profiler sampling every minute
    # WHEN it is stopped at once
    with profiler.SystemProfiler(tmp_path, interval_s=60):
        pass
    # THEN its thread took no sample, and the sample taken on exit is there
    assert len(profiler.read_profile(tmp_path).system) == 1


def test_profiler_appends_when_a_resumed_job_reopens_it(tmp_path: Path) -> None:
    # GIVEN a profile from a first (interrupted) run
    with profiler.SystemProfiler(tmp_path, interval_s=1) as prof:
        prof.step(0, 0.0, 0.1)

    # WHEN the job restarts and records more steps
    with profiler.SystemProfiler(tmp_path, interval_s=1) as prof:
        prof.step(1, 0.0, 0.1)

    # THEN both runs' steps are there
    assert [row["step"] for row in profiler.read_profile(tmp_path).steps] == [0, 1]


def test_a_truncated_last_line_is_skipped(tmp_path: Path) -> None:
    (tmp_path / profiler.STEPS_FILE).write_text(
        '{"step": 0, "data_wait_s": 0, "compute_s": 1}\n{"step": 1, "da'
    )
    assert [row["step"] for row in profiler.read_profile(tmp_path).steps] == [0]


def test_a_non_positive_interval_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="interval"):
        profiler.SystemProfiler(tmp_path, interval_s=0)


@pytest.mark.gpu
def test_on_a_gpu_the_samples_hold_its_utilisation_and_memory(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    # GIVEN the GPU busy with matrix products for ~2 s while the profiler samples it through NVML
    a = torch.randn(4096, 4096, device="cuda")
    with profiler.SystemProfiler(tmp_path, interval_s=0.2):
        until = time.monotonic() + 2
        while time.monotonic() < until:
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    # THEN every sample has the device's utilisation and memory, and some saw it working
    gpus = [sample["gpus"] for sample in profiler.read_profile(tmp_path).system]
    assert gpus and all(len(g) == torch.cuda.device_count() for g in gpus)
    assert max(g[0]["utilization_percent"] for g in gpus) > 0
    assert all(0 < g[0]["memory_used_mb"] <= g[0]["memory_total_mb"] for g in gpus)
