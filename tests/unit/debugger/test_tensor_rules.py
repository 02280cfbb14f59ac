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


class _Trial:
    """A trial given as saved values: per global step its mode, its loss and its gradients' mean |g|
    (what the hook saves), read through the calls the rules make on an smdebug trial."""

    def __init__(self, saves: list[tuple[str, float | None, dict[str, float]]]) -> None:
        import logging

        from smdebug.core.modes import ModeKeys

        self.saves = saves
        self.logger = logging.getLogger(__name__)
        self._modes = {"T": ModeKeys.TRAIN, "E": ModeKeys.EVAL}

    def tensor_names(self, collection: str | None = None, regex: object = None) -> list[str]:
        if collection == "losses":
            return ["loss"]
        if collection == "gradients":
            return sorted({name for _, _, gradients in self.saves for name in gradients})
        return []

    def tensor(self, name: str) -> _Tensor:
        return _Tensor(self, name)

    def steps(self) -> list[int]:
        return list(range(len(self.saves)))

    def mode(self, step: int) -> object:
        return self._modes[self.saves[step][0]]

    def mode_step(self, step: int) -> int:
        return sum(1 for mode, _, _ in self.saves[:step] if mode == self.saves[step][0])


class _Tensor:
    def __init__(self, trial: _Trial, name: str) -> None:
        self.trial, self.name = trial, name

    def _value(self, step: int) -> float | None:
        _, loss, gradients = self.trial.saves[step]
        return loss if self.name == "loss" else gradients.get(self.name)

    def steps(self) -> list[int]:
        return [step for step in self.trial.steps() if self._value(step) is not None]

    def value(self, step: int) -> float:
        value = self._value(step)
        assert value is not None
        return value

    def reduction_value(self, step: int, reduction: str, abs: bool = False) -> float:
        return self.value(step)


def _loss_not_decreasing(losses: list[float]) -> bool:
    from retrain_training.rules.tensors import LossNotDecreasing

    rule = LossNotDecreasing(_Trial([("T", loss, {}) for loss in losses]), num_steps=10)
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


def test_a_converged_network_s_tiny_gradients_are_not_a_vanishing_gradient(tmp_path: Path) -> None:
    # GIVEN a network that fits its data with a wide margin, trained on: loss and gradients near 1e-7, as a
    # fine-tuned model's first blocks at the end of a run from ImageNet
    paths = train_with_hook(tmp_path, Loop(steps=100, lr=0.01, interval=10, converged=True))
    trial = create_trial(str(paths.tensors_dir))
    smallest = min(
        float(trial.tensor(name).reduction_value(step, "mean", abs=True))
        for name in trial.tensor_names(collection="gradients")
        for step in trial.tensor(name).steps()
    )
    assert smallest < 1e-7, "the scenario is one the managed rule's absolute threshold rejects"

    # WHEN VanishingGradient runs
    (result,) = rules.evaluate(paths.tensors_dir, paths.profile_dir, names=("VanishingGradient",))

    # THEN per unit of error nothing vanished: no issue
    assert result.status == rules.NO_ISSUES, result.detail


def test_a_vanishing_gradient_is_judged_over_consecutive_saves_not_one() -> None:
    from retrain_training.rules.tensors import VanishingGradient

    def fires(gradients: list[float]) -> bool:
        trial = _Trial([("T", 2.3, {"gradient/first": g}) for g in gradients])
        rule = VanishingGradient(trial)
        return any(rule.invoke_at_step(step) for step in trial.steps())

    # one save below the threshold between healthy ones is noise; two in a row, or the job's only one, is not
    assert not fires([1e-3, 1e-12, 1e-3, 1e-12])
    assert fires([1e-3, 1e-12, 1e-12, 1e-3])
    assert fires([1e-12])


def test_a_zero_learning_rate_over_the_stacks_step_floor_is_found(tmp_path: Path) -> None:
    # GIVEN a job of 100 steps (MinTrainingSteps' default) that learns nothing, the hook at its default
    # interval of 50 (losses every 5 steps): windows of 50 never compared one with the first
    paths = train_with_hook(tmp_path, Loop(lr=0.0, steps=100, interval=50))

    # WHEN LossNotDecreasing runs THEN it finds the flat loss, with the numbers
    (result,) = rules.evaluate(paths.tensors_dir, paths.profile_dir, names=("LossNotDecreasing",))
    assert result.status == rules.ISSUES
    assert "the windows' noise" in result.detail


def test_a_converged_models_noisy_validation_losses_are_not_overfitting() -> None:
    from retrain_training.rules.tensors import Overfit

    # GIVEN a fine-tune at training losses near 1e-5 whose validation passes of a dozen images move
    # between 3e-6 and 9e-4 (measured: BENCHMARKS.md), rising twice in a row
    passes = [3e-6, 6e-4, 9e-4, 1.6e-5, 9.9e-5]
    saves: list[tuple[str, float | None, dict[str, float]]] = []
    for validation in passes:
        saves += [("T", 1e-5, {}), ("T", 2e-5, {}), ("E", validation, {})]
    trial = _Trial(saves)

    # WHEN Overfit runs THEN it fires at the managed rule's settings without min_delta, not with it
    def fires(**parameters: float) -> bool:
        rule = Overfit(trial, **parameters)  # type: ignore[arg-type]
        return any(rule.invoke_at_step(step) for step in trial.steps())

    assert fires(min_delta=0.0)
    assert not fires()


def test_a_rise_of_less_than_two_validation_images_worth_is_not_overfitting() -> None:
    from retrain_training.rules.tensors import Overfit

    # GIVEN the photo demo's fine-tune: 7 validation images whose mean loss rose from 0.045 to 0.122 and
    # stayed there while the training loss was 0.002 (it named every one of them right)
    saves: list[tuple[str, float | None, dict[str, float]]] = []
    for validation in (0.3, 0.045, 0.122, 0.121):
        saves += [("T", 0.002, {}), ("T", 0.002, {}), ("E", validation, {})]
    trial = _Trial(saves)

    def fires(**parameters: int) -> bool:
        rule = Overfit(trial, **parameters)  # type: ignore[arg-type]
        return any(rule.invoke_at_step(step) for step in trial.steps())

    # WHEN Overfit knows the split's size THEN the rise is less than two images turning wrong: no issue
    assert not fires(validation_images=7)
    # AND on a split of 700 images the same rise is a real one
    assert fires(validation_images=700)


def test_the_rule_check_reads_the_jobs_training_facts(tmp_path: Path) -> None:
    # GIVEN a job's tensors and, beside them, its training facts
    paths = train_with_hook(tmp_path, Loop(steps=10))
    paths.training_facts_file.write_text('{"labels": 3, "validation_images": 7}', encoding="utf-8")
    # WHEN the rules' parameters are completed from them THEN Overfit gets the split's size, unless given
    facts = rules.read_training_facts(paths.tensors_dir)
    assert rules.with_facts({}, facts) == {"Overfit": {"validation_images": 7}}
    given = rules.with_facts({"Overfit": {"validation_images": 70}}, facts)
    assert given["Overfit"]["validation_images"] == 70
    # AND a job without the file (managed DebugHookConfig, an older job) has no facts
    paths.training_facts_file.unlink()
    assert rules.read_training_facts(paths.tensors_dir) == {}
