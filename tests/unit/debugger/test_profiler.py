from __future__ import annotations

import time
from pathlib import Path

import pytest

from retrain_training import profiler


def test_profiler_writes_system_samples_and_step_timings(tmp_path: Path) -> None:
    # GIVEN a profiler sampling every 50 ms
    with profiler.SystemProfiler(tmp_path, interval_s=0.05) as prof:
        # WHEN three steps are recorded over ~0.2 s
        for step in range(3):
            time.sleep(0.07)
            prof.step(step, data_wait_s=0.01 * step, compute_s=0.05)

    # THEN the system file holds per-core CPU samples and the steps file one line per step
    profile = profiler.read_profile(tmp_path)
    assert len(profile.system) >= 3
    sample = profile.system[0]
    assert len(sample["cpu_percent"]) >= 1
    assert {"iowait_percent", "memory_percent", "memory_used_mb", "gpus", "timestamp"} <= sample.keys()
    assert [row["step"] for row in profile.steps] == [0, 1, 2]
    assert profile.steps[2]["data_wait_s"] == pytest.approx(0.02)


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
