from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from smdebug.trials import create_trial

from retrain_contract import container as contract
from retrain_training import rules
from retrain_training.rules.tensors import TENSOR_RULES
from tests.unit.debugger import traces
from tests.unit.debugger.loops import Loop, train_with_hook
from tests.unit.debugger.traces import Replay

TENSOR_RULE_NAMES = tuple(TENSOR_RULES)


def statuses(paths: contract.Paths) -> dict[str, str]:
    results = rules.evaluate(paths.tensors_dir, paths.profile_dir, names=TENSOR_RULE_NAMES)
    return {r.rule: r.status for r in results}


def found(paths: contract.Paths) -> set[str]:
    """The tensor rules that found issues (IssuesFound) in the job."""
    return {name for name, status in statuses(paths).items() if status == rules.ISSUES}


def test_a_healthy_run_has_no_issues(healthy_run: contract.Paths) -> None:
    assert statuses(healthy_run) == {name: rules.NO_ISSUES for name in TENSOR_RULE_NAMES}


def test_a_huge_learning_rate_is_found_by_exploding_tensor_alone(exploding_run: contract.Paths) -> None:
    assert found(exploding_run) == {"ExplodingTensor"}


def test_a_zero_learning_rate_is_found_by_loss_not_decreasing_alone(zero_lr_run: contract.Paths) -> None:
    assert found(zero_lr_run) == {"LossNotDecreasing"}


def test_a_memorised_training_set_is_found_by_overfit_alone(overfit_run: contract.Paths) -> None:
    assert found(overfit_run) == {"Overfit"}


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
    # THEN it suspects an issue, which warns: the weights moved and the loss did not rise
    assert result.status == rules.SUSPECTED
    assert "or 99.9%" in result.detail


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


def _trial(saves: list[tuple[str, float | None, dict[str, float]]]) -> Replay:
    """A trial of one save per step: its mode (T or E), its loss and its gradients' mean |g|."""
    counts = {"T": 0, "E": 0}
    replayed: list[dict[str, Any]] = []
    for step, (mode, loss, gradients) in enumerate(saves):
        save: dict[str, Any] = {"step": step, "mode": mode, "mode_step": counts[mode]}
        counts[mode] += 1
        if loss is not None:
            save["loss"] = loss
        if gradients:
            save["gradients"] = gradients
        replayed.append(save)
    return Replay(replayed)


def loss_not_decreasing(trial: Replay, labels: int = 2, **parameters: Any) -> rules.RuleResult:
    from retrain_training.rules.tensors import LossNotDecreasing

    rule = LossNotDecreasing(trial, labels=labels, **parameters)
    return rules.judge(rule, trial.steps(), "LossNotDecreasing")


def verdict(losses: list[float], *, weights_move: bool = True) -> str:
    return loss_not_decreasing(
        traces.training(losses, every=1, weights_move=weights_move), num_steps=10
    ).status


def test_the_loss_is_held_against_where_it_started_not_against_one_batch_or_the_last_window() -> None:
    falling = [1.0 - 0.01 * step for step in range(41)]
    # A run from trained weights whose first batch's loss is low by chance: it did not rise above chance
    assert verdict([0.2, *falling[1:]]) != rules.ISSUES
    # A run that learned and levelled off, windows going up and down around 0.5: no issue.
    assert verdict([*falling[:11], *([0.45, 0.55] * 15)]) == rules.NO_ISSUES
    # A loss back above where it started and above chance: a divergence.
    assert verdict([*falling[:21], *[1.2] * 20]) == rules.ISSUES


def test_a_flat_loss_near_zero_is_a_model_that_fits_its_images() -> None:
    # GIVEN a champion fine-tuned on images it fits already: its loss flat near 0.01 (p(label) ~0.99), in
    # a job without its facts (no labels, so no chance level to compare with)
    losses = [float(v) for v in 0.01 * np.exp(np.random.default_rng(4).normal(0.0, 0.2, 41))]
    trial = traces.training(losses, every=1)
    # THEN below converged_loss nothing was left to decrease: no issue, not even a suspicion
    assert loss_not_decreasing(trial, labels=0, num_steps=10).status == rules.NO_ISSUES


def test_a_flat_loss_blocks_only_when_no_weight_moved() -> None:
    # GIVEN a loss that does not move at all
    flat = [1.0] * 41
    # WHEN no weight moved either THEN it is a fault: the learning rate is 0 or every layer is frozen
    assert verdict(flat, weights_move=False) == rules.ISSUES
    # WHEN the weights moved THEN it is a suspicion, a warning: near chance (ln 2), a learning rate too
    # small to matter looks like this, and so does a model that already fits its images
    assert verdict(flat, weights_move=True) == rules.SUSPECTED
    # AND from a start below half of chance the model fits its images: nothing was left to decrease
    assert verdict([0.2] * 41, weights_move=True) == rules.NO_ISSUES


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
        trial = _trial([("T", 2.3, {"gradient/first": g}) for g in gradients])
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

    # WHEN LossNotDecreasing runs THEN it finds that no weight moved, with the steps it compared
    (result,) = rules.evaluate(paths.tensors_dir, paths.profile_dir, names=("LossNotDecreasing",))
    assert result.status == rules.ISSUES
    assert "no weight changed from step 0 to step" in result.detail


def test_a_converged_models_noisy_validation_losses_are_not_overfitting() -> None:
    from retrain_training.rules.tensors import Overfit

    # GIVEN a fine-tune at training losses near 1e-5 whose validation passes of a dozen images move
    # between 3e-6 and 9e-4 (measured: BENCHMARKS.md), rising twice in a row
    passes = [3e-6, 6e-4, 9e-4, 1.6e-5, 9.9e-5]
    saves: list[tuple[str, float | None, dict[str, float]]] = []
    for validation in passes:
        saves += [("T", 1e-5, {}), ("T", 2e-5, {}), ("E", validation, {})]
    trial = _trial(saves)

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
    trial = _trial(saves)

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
    assert rules.with_facts({}, facts) == {
        "Overfit": {"validation_images": 7},
        "LossNotDecreasing": {"labels": 3},
    }
    given = rules.with_facts({"Overfit": {"validation_images": 70}}, facts)
    assert given["Overfit"]["validation_images"] == 70
    # AND a job without the file (managed DebugHookConfig, an older job) has no facts
    paths.training_facts_file.unlink()
    assert rules.read_training_facts(paths.tensors_dir) == {}


def test_gradients_that_vanish_are_found_under_float16_loss_scaling(tmp_path: Path) -> None:
    # GIVEN the vanishing gradients of inputs scaled by 1e-12, from a job whose loss scaler multiplies its
    # loss by 65,536 before the backward: the saved gradients are the scaled loss's
    paths = train_with_hook(tmp_path, Loop(steps=5, input_scale=1e-12, grad_scale=65536.0))
    trial = create_trial(str(paths.tensors_dir))
    (scale,) = trial.tensor_names(collection="loss_scale")
    assert {float(trial.tensor(scale).value(step)[0]) for step in trial.tensor(scale).steps()} == {65536.0}

    # WHEN VanishingGradient runs THEN it finds them, unscaled: per unit of error below 1e-7
    (result,) = rules.evaluate(paths.tensors_dir, paths.profile_dir, names=("VanishingGradient",))
    assert result.status == rules.ISSUES, result.detail
    assert "divided by the loss scale 65536" in result.detail


def test_a_scaled_gradient_is_judged_as_the_gradient_of_the_loss_itself() -> None:
    from retrain_training.rules.tensors import VanishingGradient

    # GIVEN a layer whose gradient per unit of error is 1e-9 (|g| 1e-9 at a loss of 20), saved after a
    # loss scale of 65,536 (6.6e-5 as saved), or the same number without one: a healthy layer
    def found(loss_scale: float | None) -> bool:
        trial = traces.training([20.0] * 6, gradients=[65536e-9] * 6, loss_scale=loss_scale)
        return (
            rules.judge(VanishingGradient(trial), trial.steps(), "VanishingGradient").status == rules.ISSUES
        )

    # THEN with the scale saved beside it the rule divides and finds it; without, the gradient is healthy
    assert found(loss_scale=65536.0)
    assert not found(loss_scale=None)


def test_a_converged_layers_gradient_is_judged_per_unit_of_error() -> None:
    from retrain_training.rules.tensors import VanishingGradient

    # GIVEN a converged fine-tune: the loss 1e-5 at every save, a first-block |g| of 1e-9 (the managed
    # rule's 1e-7 fires at once), which per unit of error, 1 - e^-loss ~ 1e-5, is 1e-4
    trial = traces.training([1e-5] * 8, gradients=[1e-9] * 8)
    # WHEN VanishingGradient judges every save THEN nothing vanished
    result = rules.judge(VanishingGradient(trial), trial.steps(), "VanishingGradient")
    assert result.status == rules.NO_ISSUES, result.detail
    # AND at the loss of a network that learns nothing, ln 10, the same |g| has vanished
    stuck = traces.training([2.3] * 8, gradients=[1e-9] * 8)
    assert rules.judge(VanishingGradient(stuck), stuck.steps(), "VanishingGradient").status == rules.ISSUES


def fast_drop(
    steps: int, settle: float, noise: float, rng: np.random.Generator, start: float = 2.3
) -> list[float]:
    """The losses a job saves every 5 steps: from `start`, down to `settle` within ~15 steps, then flat
    with batch noise of `noise` (relative): a fine-tune of real data that learns fast and settles above 0."""
    at = np.arange(0, steps + 1, 5)
    level = settle + (start - settle) * np.exp(-at / 5.0)
    return [float(v) for v in level * np.exp(rng.normal(0.0, noise, at.size))]


def test_a_fast_drop_that_settles_above_zero_learned() -> None:
    # GIVEN the noise-free curve of a 100-step job falling from 2.3 to 0.3 within ~15 steps, then flat
    # (today's rule: "decreased 60.08% (needs more than 73.44%)", the learning counted as noise)
    losses = fast_drop(100, 0.3, 0.0, np.random.default_rng(0))
    # WHEN LossNotDecreasing judges it THEN no issue
    assert loss_not_decreasing(traces.training(losses), labels=10).status == rules.NO_ISSUES


def test_the_batch_noise_is_not_inflated_by_a_fast_early_drop() -> None:
    from retrain_training.rules.tensors import batch_noise

    # GIVEN a plateau with batch noise of 0.1 (relative), after a drop from 2.3 to 0.5 and without one
    rng = np.random.default_rng(1)
    noisy = fast_drop(300, 0.5, 0.1, rng)
    plateau = noisy[6:]
    # THEN the noise measured over the whole curve is the plateau's, not the drop's
    assert batch_noise(noisy) == pytest.approx(batch_noise(plateau), rel=0.35)
    assert batch_noise(noisy) < 0.1
    # AND the spread of the values themselves, what today's rule took for noise, is six times more
    assert float(np.std(noisy[: len(noisy) // 3], ddof=1)) > 6 * batch_noise(noisy)


def test_plateaus_above_zero_are_never_blocked_by_rates() -> None:
    # GIVEN 600 simulated jobs of 45 to 1,000 steps that learn fast and settle at 0.3 to 1.2 nats, with
    # batch noise of 5-30%, half from a fresh head (ln 10), half from a champion already near the plateau
    rng = np.random.default_rng(2)
    fresh, champion, fitted = Counter(), Counter(), Counter()
    for number in range(600):
        steps = int(rng.choice([45, 100, 150, 300, 1000]))
        settle = float(rng.uniform(0.3, 1.2))
        start = math.log(10) if number % 2 else settle * float(rng.uniform(1.0, 1.3))
        losses = fast_drop(steps, settle, float(rng.uniform(0.05, 0.3)), rng, start=start)
        status = loss_not_decreasing(traces.training(losses), labels=10).status
        (fresh if number % 2 else champion)[status] += 1
        if not number % 2 and losses[0] < math.log(10) / 2:
            fitted[status] += 1
    # THEN none is IssuesFound; those from a fresh head learned, all but a few whose first batch was a
    # lucky one (with the spread of a window as the noise, a third of them did not: 196 of 300)
    assert fresh[rules.ISSUES] == champion[rules.ISSUES] == 0, (fresh, champion)
    assert fresh[rules.NO_ISSUES] >= 0.95 * 300, fresh
    # AND those from a champion that fits its images (a first loss below half of chance) had nothing left
    # to learn; the others at most warn
    assert set(fitted) == {rules.NO_ISSUES} and fitted.total() > 150, fitted


def test_a_learning_rate_of_0_is_found_in_every_seed() -> None:
    # GIVEN 2,000 simulated jobs of 30 to 100 steps at lr 0: the loss flat at ln 10 with batch noise (of
    # which 3.7-5.9% passed today's rule), the saved weights the same at every step
    rng = np.random.default_rng(3)
    missed = 0
    for _ in range(2000):
        saved = int(rng.integers(30, 101)) // 5 + 1
        losses = [float(v) for v in math.log(10) * np.exp(rng.normal(0.0, 0.1, saved))]
        trial = traces.training(losses, weights_move=False)
        missed += loss_not_decreasing(trial, labels=10).status != rules.ISSUES
    # THEN every one is found
    assert missed == 0


def test_too_few_saved_losses_are_insufficient_data_not_a_clean_verdict() -> None:
    # GIVEN a job that saved 4 training losses (its weights moved)
    result = loss_not_decreasing(traces.training([2.3, 2.2, 2.4, 2.3]))
    # THEN the rule says it could not judge, and why
    assert result.status == rules.INSUFFICIENT_DATA
    assert "4 training losses saved, 6 needed" in result.detail
    # AND unmoved weights are judged even then
    assert (
        loss_not_decreasing(traces.training([2.3, 2.2, 2.4, 2.3], weights_move=False)).status == rules.ISSUES
    )


def test_the_hook_saves_enough_of_a_short_job_for_every_rule(tmp_path: Path) -> None:
    from retrain_training import debugger

    # GIVEN a job of 30 steps and the default debug-interval of 50
    tensor_interval, loss_interval = debugger.save_intervals(50, 30)
    # THEN gradients and weights are saved 5 times, not once, and losses every 3 steps
    assert (tensor_interval, loss_interval) == (6, 3)
    assert debugger.save_intervals(50, 10_000) == (50, contract.DEBUG_LOSS_INTERVAL)
    assert debugger.save_intervals(50, 0) == (50, contract.DEBUG_LOSS_INTERVAL)
    # AND every save of gradients has its step's loss: 59 steps save gradients every 10, not 11
    assert debugger.save_intervals(50, 59) == (10, 5)
    assert debugger.save_intervals(7, 10_000) == (5, 5)


def replayed(name: str, rule: str) -> rules.RuleResult:
    """`rule`'s verdict on a real train.py job's saved tensors (fixtures/, written by bench/rules.py)."""
    trial, facts = traces.fixture(name)
    parameters = rules.with_facts({}, facts).get(rule, {})
    return rules.judge(TENSOR_RULES[rule](trial, **parameters), trial.steps(), rule)


def test_a_champions_fine_tune_on_partly_wrong_labels_is_not_blocked() -> None:
    # GIVEN a real second run: a champion fine-tuned on its 192 images and 48 new ones, 8 of them filed
    # under a wrong label; its loss stays near 0.4 (today's rule blocked it: "decreased -39.12%")
    result = replayed("second-run-wrong-labels.json", "LossNotDecreasing")
    # THEN LossNotDecreasing finds no issue: it started from a model that fits its images
    assert result.status == rules.NO_ISSUES, result.detail
    assert "started from a model that fits its images (below half of chance, ln 12 = 2.48)" in result.detail


def test_a_real_diverging_loss_that_stays_finite_is_found() -> None:
    # GIVEN a real job at SGD lr 1e4: its loss jumps from 2.5 to ~1e8 and stays finite
    result = replayed("exploding-loss.json", "LossNotDecreasing")
    # THEN LossNotDecreasing finds the divergence (today's rule took the jump for the start's noise)
    assert result.status == rules.ISSUES, result.detail
    assert "the training diverged" in result.detail


def test_a_real_job_at_lr_0_is_found_by_its_unmoved_weights() -> None:
    result = replayed("lr-0.json", "LossNotDecreasing")
    assert result.status == rules.ISSUES and "no weight changed" in result.detail


def test_a_real_hard_first_run_is_clean_for_every_rule() -> None:
    # GIVEN a real first run on 18 labels, pairs hard to tell apart, 15% labelled wrong: it settles near 1
    # THEN no rule finds or suspects an issue
    for rule in TENSOR_RULES:
        result = replayed("hard-first-run.json", rule)
        assert result.status == rules.NO_ISSUES, (rule, result.detail)


def test_real_float16_gradients_that_died_are_found_through_the_loss_scale() -> None:
    # GIVEN a real float16 job (amp-on-cpu) whose images reach the model as zeros, its gradients saved
    # after the loss scaler's 65,536
    result = replayed("float16-dead-gradients.json", "VanishingGradient")
    assert result.status == rules.ISSUES, result.detail
    assert "divided by the loss scale" in result.detail


def test_a_loss_scalers_overflow_between_two_loss_saves_is_not_an_explosion() -> None:
    from retrain_training.rules.tensors import ExplodingTensor

    # GIVEN a float16 job that saved an infinite gradient at a step with no loss saved, its loss scale
    # saved beside it (GradScaler skipped that step), and finite losses around it
    saves: list[dict[str, Any]] = [
        {"step": 10, "mode": "T", "mode_step": 10, "loss": 1.8},
        {"step": 11, "mode": "T", "mode_step": 11, "loss_scale": 65536.0, "gradients": {"g": math.inf}},
        {"step": 15, "mode": "T", "mode_step": 15, "loss": 1.2},
    ]

    def verdict(saved: list[dict[str, Any]]) -> str:
        trial = Replay(saved)
        return rules.judge(ExplodingTensor(trial), trial.steps(), "ExplodingTensor").status

    # THEN it is the scaler's overflow; without a loss scaler the same infinite gradient is an explosion
    assert verdict(saves) == rules.NO_ISSUES
    without_scale = [{k: v for k, v in s.items() if k != "loss_scale"} for s in saves]
    assert verdict(without_scale) == rules.ISSUES


def test_a_real_float16_job_whose_scaler_overflowed_has_no_explosion() -> None:
    # GIVEN a real float16 job (amp-on-cpu, 59 steps): its gradients, saved every 11 steps, were infinite
    # at step 11, where no loss was saved (today's rule blocked it: "... at step 11 is not finite (inf)")
    result = replayed("float16-overflow.json", "ExplodingTensor")
    assert result.status == rules.NO_ISSUES, result.detail
