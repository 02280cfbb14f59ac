from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from smdebug_rulesconfig.profiler_rules import rules as managed

from retrain_training import rules
from retrain_training.rules.system import SYSTEM_RULES
from tests.unit.debugger.profiles import profiled_loop, write_gpu_profile

SYSTEM_RULE_NAMES = tuple(SYSTEM_RULES)
# The managed defaults wait for 1,000 data points; these short runs have tens, so the tests scale
# patience down the way a RuleParameters override would.
SHORT = {
    "CPUBottleneck": {"patience": 5},
    "IOBottleneck": {"patience": 5},
    "LowGPUUtilization": {"patience": 5},
}


def statuses(profile_dir: Path, parameters: dict | None = None) -> dict[str, str]:
    results = rules.evaluate(
        Path("/nonexistent"),
        profile_dir,
        SHORT if parameters is None else parameters,
        names=SYSTEM_RULE_NAMES,
    )
    return {r.rule: r.status for r in results}


def issues_only(*found: str) -> dict[str, str]:
    return {name: rules.ISSUES if name in found else rules.NO_ISSUES for name in SYSTEM_RULE_NAMES}


def test_a_healthy_profile_has_no_issues(tmp_path: Path) -> None:
    profile = profiled_loop(tmp_path, steps=30, compute_s=0.01, data_wait_s=0.0)
    assert statuses(profile) == issues_only()


def test_a_loader_that_sleeps_every_batch_is_a_cpu_bottleneck(tmp_path: Path) -> None:
    # GIVEN steps that wait 30 ms for data and compute 10 ms
    profile = profiled_loop(tmp_path, steps=20, compute_s=0.01, data_wait_s=0.03)
    # THEN CPUBottleneck fires, and no other rule
    assert statuses(profile) == issues_only("CPUBottleneck")


def test_a_loader_that_stalls_now_and_then_gives_step_outliers(tmp_path: Path) -> None:
    # GIVEN 180 steps of 5 ms where every 15th step's loader stalls 60 ms (12 stalls > n_outliers 10)
    profile = profiled_loop(tmp_path, steps=180, compute_s=0.005, data_wait_s=0.06, stall_every=15)
    # THEN StepOutlier fires, and no other rule
    assert statuses(profile) == issues_only("StepOutlier")


def test_a_starved_gpu_with_busy_cpus_is_a_cpu_bottleneck_and_low_utilization(tmp_path: Path) -> None:
    profile = write_gpu_profile(tmp_path, samples=20, cpu=97.0, gpu=5.0)
    assert statuses(profile) == issues_only("CPUBottleneck", "LowGPUUtilization")


def test_io_wait_with_an_idle_gpu_is_an_io_bottleneck(tmp_path: Path) -> None:
    profile = write_gpu_profile(tmp_path, samples=20, cpu=30.0, gpu=5.0, iowait=80.0)
    assert statuses(profile) == issues_only("IOBottleneck", "LowGPUUtilization")


def test_a_busy_gpu_has_no_issues(tmp_path: Path) -> None:
    profile = write_gpu_profile(tmp_path, samples=20, cpu=60.0, gpu=95.0)
    assert statuses(profile) == issues_only()


def test_the_managed_patience_holds_back_a_short_run(tmp_path: Path) -> None:
    # GIVEN a starved GPU for 20 samples WHEN the rules run with the managed defaults (patience 1000)
    profile = write_gpu_profile(tmp_path, samples=20, cpu=97.0, gpu=5.0)
    # THEN nothing is concluded yet by the rules with a patience, and each says so rather than that it
    # found nothing; StepOutlier has no patience
    assert statuses(profile, {}) == {
        name: rules.NO_ISSUES if name == "StepOutlier" else rules.INSUFFICIENT_DATA
        for name in SYSTEM_RULE_NAMES
    }


def test_a_missing_profile_is_an_error_naming_the_directory(tmp_path: Path) -> None:
    results = rules.evaluate(tmp_path / "t", tmp_path / "profile", names=SYSTEM_RULE_NAMES)
    assert {r.status for r in results} == {rules.ERROR}
    assert str(tmp_path / "profile") in results[0].detail


@pytest.mark.parametrize("name", SYSTEM_RULE_NAMES)
def test_defaults_are_the_managed_rules_defaults(name: str) -> None:
    ours = inspect.signature(SYSTEM_RULES[name]).parameters
    theirs = inspect.signature(getattr(managed, name)).parameters
    for parameter, spec in theirs.items():
        if parameter == "self":
            continue
        assert ours[parameter].default == spec.default, parameter
