from __future__ import annotations

from pathlib import Path

import pytest

from retrain_training import bottleneck_report, profiler
from tests.unit.debugger.profiles import profiled_loop, write_gpu_profile


def test_a_starved_gpu_gets_the_dali_recommendation_with_its_numbers(tmp_path: Path) -> None:
    # GIVEN a profile where the CPUs run at 97% and the GPU at 30%
    profile = profiler.read_profile(write_gpu_profile(tmp_path, samples=40, cpu=97.0, gpu=30.0))

    # WHEN it is summarised
    summary = bottleneck_report.summarize(profile)

    # THEN the p95s are measured and the advice quotes them
    assert summary.cpu is not None and summary.cpu[95] == pytest.approx(97.0)
    assert summary.gpu is not None and summary.gpu[95] == pytest.approx(30.0)
    advice = summary.recommendations[0]
    assert "loader=dali" in advice and "CPU p95 97%" in advice and "GPU p95 30%" in advice


def test_a_sleeping_loader_is_reported_as_input_bound_with_its_data_wait_share(tmp_path: Path) -> None:
    # GIVEN steps that wait 30 ms for data and compute 10 ms
    profile = profiler.read_profile(profiled_loop(tmp_path, steps=15, compute_s=0.01, data_wait_s=0.03))

    # WHEN it is summarised
    summary = bottleneck_report.summarize(profile)

    # THEN about three quarters of step time is data wait, and the advice says so
    assert summary.data_wait_share == pytest.approx(75, abs=10)
    share = f"wait for data {summary.data_wait_share:.0f}% of their time"
    assert any(r.startswith("Input-bound") and share in r for r in summary.recommendations)


def test_write_report_writes_markdown_with_its_charts(tmp_path: Path) -> None:
    # GIVEN a real profile WHEN the report is written
    profiled_loop(tmp_path / "profile", steps=10, compute_s=0.01, data_wait_s=0.0)
    report = bottleneck_report.write_report(tmp_path / "profile", tmp_path / "report")

    # THEN the markdown has the percentile table and links two PNGs that exist
    text = report.read_text()
    assert "| metric | p50 | p95 | p99 |" in text
    for image in (bottleneck_report.HEATMAP_FILE, bottleneck_report.STEPS_FILE):
        assert f"]({image})" in text
        assert (tmp_path / "report" / image).read_bytes()[:4] == b"\x89PNG"


def test_a_missing_profile_is_refused_with_the_directory_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nothing")):
        bottleneck_report.write_report(tmp_path / "nothing", tmp_path / "report")
