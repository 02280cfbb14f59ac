from __future__ import annotations

import math
from pathlib import Path

import pytest
from smdebug.trials import create_trial

from retrain_contract import container as contract
from retrain_training import rules
from retrain_training.rules.tensors import TENSOR_RULES
from tests.unit.debugger.loops import Loop, train_with_hook

TENSOR_RULE_NAMES = tuple(TENSOR_RULES)


def statuses(paths: contract.Paths) -> dict[str, str]:
    results = rules.evaluate(paths.tensors_dir, paths.profile_dir, names=TENSOR_RULE_NAMES)
    return {r.rule: r.status for r in results}


def issues_only(found: str) -> dict[str, str]:
    return {name: rules.ISSUES if name == found else rules.NO_ISSUES for name in TENSOR_RULE_NAMES}


def test_a_healthy_run_has_no_issues(healthy_run: contract.Paths) -> None:
    assert statuses(healthy_run) == {name: rules.NO_ISSUES for name in TENSOR_RULE_NAMES}


def test_a_huge_learning_rate_is_found_by_exploding_tensor_alone(exploding_run: contract.Paths) -> None:
    assert statuses(exploding_run) == issues_only("ExplodingTensor")


def test_a_zero_learning_rate_is_found_by_loss_not_decreasing_alone(zero_lr_run: contract.Paths) -> None:
    assert statuses(zero_lr_run) == issues_only("LossNotDecreasing")


def test_a_memorised_training_set_is_found_by_overfit_alone(overfit_run: contract.Paths) -> None:
    assert statuses(overfit_run) == issues_only("Overfit")


def test_an_issue_names_the_step_and_the_numbers(overfit_run: contract.Paths) -> None:
    # WHEN the Overfit rule fires
    (result,) = rules.evaluate(overfit_run.tensors_dir, overfit_run.profile_dir, names=("Overfit",))

    # THEN it says at which step and with which ratio against which threshold
    assert result.step is not None and result.step > 0
    assert "ratio" in result.detail and "> 0.1" in result.detail


def test_loss_scaling_overflow_is_not_an_explosion(tmp_path: Path) -> None:
    # GIVEN a run with mixed precision's loss scaling starting so high that gradients overflow
    paths = train_with_hook(tmp_path, Loop(steps=4, input_scale=100.0, grad_scale=3e38))
    trial = create_trial(str(paths.tensors_dir))
    overflowed = [
        name
        for name in trial.tensor_names(collection="gradients")
        if not math.isfinite(float(trial.tensor(name).reduction_value(0, "l2", abs=False)))
    ]
    assert overflowed, "the scenario needs a non-finite gradient"

    # WHEN ExplodingTensor runs
    (result,) = rules.evaluate(paths.tensors_dir, paths.profile_dir, names=("ExplodingTensor",))

    # THEN the skipped, overflowing steps are not reported: the loss stayed finite
    assert result.status == rules.NO_ISSUES


def test_gradients_that_vanish_are_found(tmp_path: Path) -> None:
    # GIVEN inputs scaled by 1e-12: the first layer's weight gradients are ~1e-12
    paths = train_with_hook(tmp_path, Loop(steps=5, input_scale=1e-12))

    # WHEN the VanishingGradient rule runs
    (result,) = rules.evaluate(paths.tensors_dir, paths.profile_dir, names=("VanishingGradient",))

    # THEN it fires on that gradient, below the managed default threshold 1e-7
    assert result.status == rules.ISSUES
    assert "< threshold 1e-07" in result.detail


def test_a_rule_parameter_changes_the_decision(healthy_run: contract.Paths) -> None:
    # GIVEN a healthy run WHEN LossNotDecreasing demands a 99.9% drop from the first 10 steps
    (result,) = rules.evaluate(
        healthy_run.tensors_dir,
        healthy_run.profile_dir,
        {"LossNotDecreasing": {"diff_percent": "99.9", "num_steps": "10"}},
        names=("LossNotDecreasing",),
    )
    # THEN it fires
    assert result.status == rules.ISSUES


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_missing_or_empty_tensors_give_error_with_a_clear_detail(tmp_path: Path, make: str) -> None:
    # GIVEN a tensors directory that is missing or holds nothing
    tensors = tmp_path / "tensors"
    if make == "empty":
        tensors.mkdir()

    # WHEN the tensor rules run
    results = rules.evaluate(tensors, tmp_path / "profile", names=TENSOR_RULE_NAMES)

    # THEN every tensor rule is Error, naming the directory and what to do
    assert {r.status for r in results} == {rules.ERROR}
    assert all(str(tensors) in r.detail and "debug-hook true" in r.detail for r in results)


def test_unknown_rule_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown rules"):
        rules.evaluate(tmp_path, tmp_path, names=("DeadRelu",))


class _Losses:
    """A trial of training losses alone, one per step (what LossNotDecreasing reads)."""

    def __init__(self, losses: list[float]) -> None:
        import logging

        self.losses = losses
        self.name = "losses"
        self.logger = logging.getLogger(__name__)

    def tensor_names(self, collection: str | None = None, regex: object = None) -> list[str]:
        return ["loss"] if collection == "losses" else []

    def tensor(self, name: str) -> _Losses:
        return self

    def steps(self) -> list[int]:
        return list(range(len(self.losses)))

    def value(self, step: int) -> float:
        return self.losses[step]

    def mode(self, step: int) -> object:
        from smdebug.core.modes import ModeKeys

        return ModeKeys.TRAIN

    def mode_step(self, step: int) -> int:
        return step


def _loss_not_decreasing(losses: list[float]) -> bool:
    from retrain_training.rules.tensors import LossNotDecreasing

    rule = LossNotDecreasing(_Losses(losses), num_steps=10)
    return any(rule.invoke_at_step(step) for step in range(len(losses)))


def test_the_loss_is_held_against_where_it_started_not_against_one_batch_or_the_last_window() -> None:
    falling = [1.0 - 0.01 * step for step in range(41)]
    # A run from trained weights: its first batch's loss is low by chance, the rest fall steadily.
    assert not _loss_not_decreasing([0.2, *falling[1:]])
    # A run that learned and levelled off, windows going up and down around 0.5: no issue.
    assert not _loss_not_decreasing([*falling[:11], *([0.45, 0.55] * 15)])
    # No learning, or a loss back above where it started: issues.
    assert _loss_not_decreasing([1.0] * 41)
    assert _loss_not_decreasing([*falling[:21], *[1.2] * 20])
