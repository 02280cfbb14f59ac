"""The gate's floor (better than guessing, by the validation split's size) and the verdicts that warn."""

from __future__ import annotations

import math
import random

import pytest

from controller import config as config_module
from controller import gate, notes, runs
from controller.errors import ConfigurationError
from retrain_contract import rules as rule_names

BLOCKING = ("VanishingGradient", "ExplodingTensor", "LossNotDecreasing")
DEFAULT = gate.Thresholds(None, 0.0, BLOCKING)  # MinAccuracy left empty


def exact_tail(hits: int, n: int, p: float) -> float:
    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(hits, n + 1))


@pytest.mark.parametrize(
    ("hits", "n", "p"), [(0, 5, 0.3), (3, 7, 3 / 7), (6, 7, 3 / 7), (9, 60, 5 / 60), (60, 60, 0.5)]
)
def test_the_binomial_tail_is_the_exact_sum(hits: int, n: int, p: float) -> None:
    assert gate.binomial_tail(hits, n, p) == pytest.approx(exact_tail(hits, n, p), rel=1e-9, abs=1e-300)


def test_the_binomial_tail_of_a_million_images_takes_a_few_terms() -> None:
    # GIVEN a split of 10^6 images, a tenth of them in the most common label
    # THEN one point above guessing is within the noise and two are far beyond it
    assert gate.binomial_tail(100_300, 1_000_000, 0.1) > 0.05
    assert gate.binomial_tail(102_000, 1_000_000, 0.1) < 1e-9


def test_a_first_run_on_hard_data_clearly_better_than_guessing_registers() -> None:
    # GIVEN 18 labels and a validation split of 60 images, the most common label 5 of them (0.083), and a
    # challenger at top-1 0.433, which MinAccuracy 0.5 rejected
    split = gate.Split(samples=60, majority=5)
    result = gate.decide(0.433, None, [], DEFAULT, split)
    # THEN it registers, and the reason says what guessing scores
    assert result["decision"] == "accepted"
    assert "guessing the most common label scores 0.0833 of 60 images" in result["reason"]
    # AND with the absolute floor the stack asks for, it does not
    assert gate.decide(0.433, None, [], gate.Thresholds(0.5, 0.0, BLOCKING), split)["decision"] == "rejected"


def test_a_model_no_better_than_guessing_is_rejected_with_a_reason_that_says_so() -> None:
    split = gate.Split(samples=60, majority=5)
    result = gate.decide(0.133, None, [], DEFAULT, split)
    assert result["decision"] == "rejected"
    assert result["reason"].startswith("top-1 accuracy 0.1330 is not clearly better than guessing")
    assert "p = " in result["reason"] and "MinAccuracy" in result["reason"]


def test_the_splits_size_decides_how_far_above_guessing_a_model_must_be() -> None:
    # GIVEN the same top-1 above guessing (0.6 against 0.5) on a small and on a large split
    small, large = gate.Split(10, 5), gate.Split(1000, 500)
    # THEN 6 of 10 is luck, 600 of 1000 is not
    assert gate.decide(0.6, None, [], DEFAULT, small)["decision"] == "rejected"
    assert gate.decide(0.6, None, [], DEFAULT, large)["decision"] == "accepted"


def guessing_model_top1(split: gate.Split, rng: random.Random) -> float:
    """The top-1 of a model that learned nothing and names the most common label: each image right with
    the label's share, drawn."""
    return sum(rng.random() < split.guess for _ in range(split.samples)) / split.samples


def test_the_floor_by_rates_lets_through_at_most_its_significance_of_guessing_models() -> None:
    # GIVEN 2,000 models that guess the most common label, on splits of 7 to 400 images of 2 to 20 labels
    rng = random.Random(0)
    passed = 0
    trials = 2000
    for _ in range(trials):
        labels = rng.randint(2, 20)
        samples = rng.randint(7, 400)
        split = gate.Split(samples, max(1, round(samples / labels * rng.uniform(1.0, 1.5))))
        passed += (
            gate.decide(guessing_model_top1(split, rng), None, [], DEFAULT, split)["decision"] == "accepted"
        )
    # THEN at most GUESS_SIGNIFICANCE of them register (the test is one-sided and discrete: fewer)
    assert passed / trials <= gate.GUESS_SIGNIFICANCE


def test_a_later_run_is_held_to_the_champion_as_before() -> None:
    split = gate.Split(100, 10)
    result = gate.decide(0.80, 0.82, [], DEFAULT, split)
    assert result["decision"] == "rejected" and "does not beat the champion's 0.8200" in result["reason"]


def verdict(rule: str, status: str, detail: str = "") -> runs.RuleResult:
    return {"rule": rule, "status": status, "detail": detail}


@pytest.mark.parametrize("status", [rule_names.SUSPECTED, rule_names.INSUFFICIENT_DATA])
def test_a_blocking_rule_that_cannot_tell_or_cannot_judge_warns_and_the_reason_says_so(status: str) -> None:
    # GIVEN LossNotDecreasing, which BlockingRules names, suspects an issue or had too few data points
    found = [verdict("LossNotDecreasing", status, "the loss did not fall")]
    # WHEN the gate decides THEN the model registers, and the reason names the rule and what it said
    result = gate.decide(0.9, None, found, DEFAULT, gate.Split(100, 10))
    assert result["decision"] == "accepted"
    assert "LossNotDecreasing" in result["reason"]
    words = (
        "suspected issues"
        if status == rule_names.SUSPECTED
        else "too few data points to judge (not blocking)"
    )
    assert words in result["reason"]
    # AND its action is warn, and the record says BlockingRules names it
    (acted,) = gate.with_actions(found, BLOCKING)
    assert acted["action"] == rule_names.WARN and acted["blocking"] is True


def test_a_blocking_rules_finding_still_rejects() -> None:
    found = [verdict("LossNotDecreasing", rule_names.ISSUES, "no weight changed")]
    result = gate.decide(0.9, None, found, DEFAULT, gate.Split(100, 10))
    assert result["decision"] == "rejected" and "LossNotDecreasing found issues" in result["reason"]


def test_under_managed_debugger_the_rules_measured_to_false_alarm_warn() -> None:
    # GIVEN AWS's VanishingGradient and LossNotDecreasing found issues (a converged fine-tune, a plateau),
    # and its ExplodingTensor too
    found = [verdict(name, rule_names.ISSUES) for name in rule_names.MANAGED_WARN_ONLY]
    # WHEN the gate decides in managed mode THEN the two warn and the model registers
    managed = gate.decide(0.9, None, found, DEFAULT, gate.Split(100, 10), managed=True)
    assert managed["decision"] == "accepted" and "(warnings, not blocking)" in managed["reason"]
    # AND in open mode this tree's rules' findings block
    assert gate.decide(0.9, None, found, DEFAULT, gate.Split(100, 10))["decision"] == "rejected"
    # AND managed ExplodingTensor still blocks
    exploding = [verdict("ExplodingTensor", rule_names.ISSUES)]
    assert gate.decide(0.9, None, exploding, DEFAULT, None, managed=True)["decision"] == "rejected"


def test_the_split_is_read_from_the_evaluation_report() -> None:
    report = {"samples": 12, "per_class": {"a": {"support": 7}, "b": {"support": 5}}}
    assert gate.split_of(report) == gate.Split(12, 7)
    assert gate.split_of({"top1": 0.5}) is None


def test_the_notification_says_when_a_blocking_rule_could_not_judge_and_what_it_suspects() -> None:
    record = {
        "rule_results": gate.with_actions(
            [
                verdict("LossNotDecreasing", rule_names.SUSPECTED, "the loss did not fall"),
                verdict("VanishingGradient", rule_names.INSUFFICIENT_DATA, "1 gradient save"),
                verdict("CPUBottleneck", rule_names.INSUFFICIENT_DATA, "10 steps, concludes after 1000"),
            ],
            BLOCKING,
        )
    }
    lines = notes.rule_lines(record)
    assert len(lines) == 2  # a rule that blocks nothing and could not judge is not news
    assert lines[0].startswith(
        "Rule LossNotDecreasing suspected issues it cannot tell from a good run (a warning"
    )
    assert "What to do:" in lines[0]
    assert lines[1] == (
        "Rule VanishingGradient had too few data points to judge (a warning, not blocking): 1 gradient save."
    )


@pytest.mark.parametrize(("raw", "expected"), [("", None), ("0.5", 0.5), ("1", 1.0), ("0", 0.0)])
def test_min_accuracy_is_a_share_or_empty(raw: str, expected: float | None) -> None:
    assert config_module._optional_fraction({"MIN_ACCURACY": raw}, "MIN_ACCURACY") == expected


@pytest.mark.parametrize("raw", ["1.5", "-0.1", "half"])
def test_a_min_accuracy_that_is_no_share_is_refused_naming_it(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="MIN_ACCURACY"):
        config_module._optional_fraction({"MIN_ACCURACY": raw}, "MIN_ACCURACY")
