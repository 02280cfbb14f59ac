"""Tensor rules over the hook's output, written as smdebug `Rule` subclasses (Debugger "custom rules").

smdebug 1.0.34 ships the Rule API but not the built-in rules, so these re-implement the four the
issue names, with the managed rules' names, parameters and defaults. Sources for each default:
the AWS "List of Debugger built-in rules" page (docs.aws.amazon.com/sagemaker/latest/dg/
debugger-built-in-rules.html) and the configs AWS publishes in smdebug_rulesconfig.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
from smdebug import modes
from smdebug.exceptions import TensorUnavailableForStep
from smdebug.rules.rule import Rule

LOSSES = "losses"
GRADIENTS = "gradients"

# Summaries the hook may have saved (debugger.py saves abs mean and L2 norm); raw values win if saved.
_SUMMARIES = (("max", False), ("min", False), ("mean", False), ("mean", True), ("l2", False))


class DetailedRule(Rule):
    """A Rule that says why it fired: `detail` holds the numbers behind the last decision."""

    def __init__(self, base_trial: Any, other_trials: Any = None) -> None:
        super().__init__(base_trial, action_str="", other_trials=other_trials)
        self.detail = ""
        self.checked = 0  # data points the rule actually evaluated

    def _tensor_names(self, collection_names: Iterable[str] = (), regex: str | None = None) -> list[str]:
        names: set[str] = set()
        for collection in collection_names:
            names.update(self.base_trial.tensor_names(collection=collection))
        if regex:
            names.update(self.base_trial.tensor_names(regex=_split(regex)))
        return sorted(names)


def _split(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    return [part.strip() for part in value.split(",") if part.strip()]


def _values(trial: Any, name: str, step: int) -> list[float]:
    """The raw value when it was saved, else the saved summaries (max, min, mean, l2 norm)."""
    tensor = trial.tensor(name)
    try:
        return [float(v) for v in np.ravel(tensor.value(step))]
    except TensorUnavailableForStep:
        pass
    out = []
    for reduction, absolute in _SUMMARIES:
        try:
            out.append(float(tensor.reduction_value(step, reduction, abs=absolute)))
        except TensorUnavailableForStep:
            continue
    return out


class VanishingGradient(DetailedRule):
    """Fires when the mean absolute value of a gradient drops below `threshold` (default 1e-7, as the
    managed rule; the hook saves each gradient's abs mean)."""

    def __init__(self, base_trial: Any, threshold: float = 0.0000001) -> None:
        super().__init__(base_trial)
        self.threshold = float(threshold)

    def invoke_at_step(self, step: int) -> bool:
        for name in self._tensor_names([GRADIENTS]):
            if step not in self.base_trial.tensor(name).steps():
                continue
            try:
                abs_mean = float(self.base_trial.tensor(name).reduction_value(step, "mean", abs=True))
            except TensorUnavailableForStep:
                abs_mean = float(np.mean(np.abs(self.base_trial.tensor(name).value(step))))
            self.checked += 1
            if abs_mean < self.threshold:
                self.detail = f"{name}: mean |gradient| {abs_mean:.3g} < threshold {self.threshold:g}"
                return True
        return False


class ExplodingTensor(DetailedRule):
    """Fires when a saved tensor holds NaN (or, unless `only_nan`, infinity). Defaults as the managed
    rule: every collection, no regex, only_nan False.

    Unlike the managed rule, a non-finite gradient at a step whose saved losses are all finite is
    not an explosion: that is mixed precision's loss scaling overflowing (GradScaler skips the step
    and lowers the scale), which happens in the first steps of every amp run. A real explosion
    makes the loss (and the weights) non-finite, which the rule then finds.
    """

    def __init__(
        self,
        base_trial: Any,
        *,
        collection_names: str | list[str] | None = None,
        tensor_regex: str | list[str] | None = None,
        only_nan: bool | str = False,
    ) -> None:
        super().__init__(base_trial)
        self.collection_names = _split(collection_names)
        self.tensor_regex = ",".join(_split(tensor_regex)) or None
        self.only_nan = str(only_nan).lower() == "true"

    def invoke_at_step(self, step: int) -> bool:
        if self.collection_names or self.tensor_regex:
            names = self._tensor_names(self.collection_names, self.tensor_regex)
        else:
            names = sorted(self.base_trial.tensor_names())
        gradients = set(self.base_trial.tensor_names(collection=GRADIENTS))
        overflow: list[str] = []
        for name in names:
            if step not in self.base_trial.tensor(name).steps():
                continue
            values = _values(self.base_trial, name, step)
            self.checked += 1
            bad = [v for v in values if math.isnan(v) or (not self.only_nan and math.isinf(v))]
            if not bad:
                continue
            if name in gradients and self._losses_finite(step):
                overflow.append(name)
                continue
            self.detail = f"{name} at step {step} is not finite ({bad[0]})"
            return True
        if overflow:
            self.logger.info(
                f"step {step}: {len(overflow)} gradients not finite while the loss is: loss-scaling overflow"
            )
        return False

    def _losses_finite(self, step: int) -> bool:
        losses = [
            n
            for n in self.base_trial.tensor_names(collection=LOSSES)
            if step in self.base_trial.tensor(n).steps()
        ]
        if not losses:
            return False
        return all(math.isfinite(v) for n in losses for v in _values(self.base_trial, n, step))


def _loss_names(rule: DetailedRule, regex: str | list[str] | None, use_losses_collection: bool) -> list[str]:
    names = rule._tensor_names([LOSSES] if use_losses_collection else [], ",".join(_split(regex)) or None)
    return names


class LossNotDecreasing(DetailedRule):
    """Fires when, `num_steps` steps or more into training, the loss is not below where it started by
    more than `diff_percent`.

    Managed defaults: diff_percent 0 (any decrease passes), use_losses_collection true; num_steps is 50
    here, not 10: the managed rule's losses are saved every 500 steps, so it compares batches 500 steps
    apart, while the hook here saves them every 5 (DEBUG_LOSS_INTERVAL) and a window of 10 steps held 2
    or 3 single batches, which a fine-tuned run's noise alone made "increase" (0.97, 0.77, 0.75 then
    0.58, 1.11). Each check compares window means: the losses saved since the previous check against
    those of the first `num_steps` steps. Unlike the managed rule, which compares each window with the
    one before it, a run whose loss fell and then levelled off does not fire (at a plateau, windows go
    up as often as down, and the managed rule fires there by design, to stop a converged job), and
    neither does one that starts from trained weights with a lucky first batch. Zero or dead learning
    and a loss that climbs back above its start still do. `mode` defaults to TRAIN rather than the
    managed rule's EVAL-first order: the hook saves every validation batch as its own EVAL step, and
    the validation curve is the Overfit rule's. Non-finite losses are ExplodingTensor's, not this rule's.
    """

    def __init__(
        self,
        base_trial: Any,
        *,
        collection_names: str | list[str] | None = None,
        tensor_regex: str | list[str] | None = None,
        use_losses_collection: bool | str = True,
        num_steps: int = 50,
        diff_percent: float = 0.0,
        mode: str | None = None,
    ) -> None:
        super().__init__(base_trial)
        extra = _split(collection_names)
        self.names = _loss_names(self, tensor_regex, str(use_losses_collection).lower() == "true")
        for collection in extra:
            self.names += [n for n in base_trial.tensor_names(collection=collection) if n not in self.names]
        self.num_steps = int(num_steps)
        self.diff_percent = float(diff_percent)
        self.mode = getattr(modes, (mode or "TRAIN").upper())
        self._pending: dict[str, list[float]] = {}
        self._first: dict[str, int] = {}
        self._start: dict[str, tuple[int, float]] = {}  # the first window's last step and mean loss
        self._last: dict[str, tuple[int, float]] = {}

    def invoke_at_step(self, step: int) -> bool:
        if self.base_trial.mode(step) != self.mode:
            return False
        mode_step = self.base_trial.mode_step(step)
        for name in self.names:
            if step not in self.base_trial.tensor(name).steps():
                continue
            loss = float(np.mean(self.base_trial.tensor(name).value(step)))
            if not math.isfinite(loss):
                continue
            pending = self._pending.setdefault(name, [])
            pending.append(loss)
            first = self._first.setdefault(name, mode_step)
            last = self._last.get(name)
            if mode_step - (first if last is None else last[0]) < self.num_steps:
                continue
            current = float(np.mean(pending))
            pending.clear()
            self._last[name] = (mode_step, current)
            if last is None:  # the first window is where the loss started
                self._start[name] = (mode_step, current)
                continue
            self.checked += 1
            start = self._start[name]
            decrease = (start[1] - current) / abs(start[1]) * 100 if start[1] else 0.0
            if decrease <= self.diff_percent:
                self.detail = (
                    f"{name}: mean loss {current:.4g} over steps {last[0] + 1}-{mode_step} vs "
                    f"{start[1]:.4g} over steps {first}-{start[0]}: decreased {decrease:.2f}% "
                    f"(needs > {self.diff_percent:g}%)"
                )
                return True
        return False


class Overfit(DetailedRule):
    """Fires when (mean validation loss - mean training loss) / mean training loss exceeds
    `ratio_threshold` while the validation loss is not falling, for more than `patience`
    validation passes in a row.

    Managed defaults: start_step 0, patience 1, ratio_threshold 0.1. A validation pass is a run of
    consecutive EVAL steps; it is compared with the training losses saved since the previous pass.
    Unlike the managed rule, a gap counts only while validation loss is not falling: early in
    training a model's validation loss sits well above its training loss (BatchNorm's running
    statistics lag the batch statistics) while both improve, and that is not overfitting.
    """

    def __init__(
        self,
        base_trial: Any,
        *,
        tensor_regex: str | list[str] | None = None,
        start_step: int = 0,
        patience: int = 1,
        ratio_threshold: float = 0.1,
    ) -> None:
        super().__init__(base_trial)
        self.names = _loss_names(self, tensor_regex, True)
        self.start_step = int(start_step)
        self.patience = int(patience)
        self.ratio_threshold = float(ratio_threshold)
        self._train: list[float] = []
        self._validation: list[float] = []
        self._violations = 0
        self._previous_validation: float | None = None
        self._steps: list[int] = sorted(base_trial.steps())

    def _loss(self, step: int) -> float | None:
        values = [
            float(np.mean(self.base_trial.tensor(n).value(step)))
            for n in self.names
            if step in self.base_trial.tensor(n).steps()
        ]
        finite = [v for v in values if math.isfinite(v)]
        return float(np.mean(finite)) if finite else None

    def invoke_at_step(self, step: int) -> bool:
        if step < self.start_step:
            return False
        loss = self._loss(step)
        mode = self.base_trial.mode(step)
        if loss is not None and mode == modes.TRAIN:
            self._train.append(loss)
        elif loss is not None and mode == modes.EVAL:
            self._validation.append(loss)
        pass_ends = mode == modes.EVAL and self._next_mode(step) != modes.EVAL
        if not pass_ends or not self._validation or not self._train:
            return False
        train, validation = float(np.mean(self._train)), float(np.mean(self._validation))
        self._train, self._validation = [], []
        self.checked += 1
        ratio = (validation - train) / train if train else 0.0
        previous, self._previous_validation = self._previous_validation, validation
        not_falling = previous is not None and validation >= previous
        self._violations = self._violations + 1 if ratio > self.ratio_threshold and not_falling else 0
        if self._violations > self.patience:
            self.detail = (
                f"validation loss {validation:.4g} (up from {previous:.4g}) vs training loss {train:.4g}: "
                f"ratio {ratio:.2f} > {self.ratio_threshold:g} for {self._violations} validation passes "
                f"in a row (patience {self.patience})"
            )
            return True
        return False

    def _next_mode(self, step: int) -> Any:
        index = bisect.bisect_right(self._steps, step)
        return self.base_trial.mode(self._steps[index]) if index < len(self._steps) else None


TENSOR_RULES: dict[str, type[DetailedRule]] = {
    rule.__name__: rule for rule in (VanishingGradient, ExplodingTensor, LossNotDecreasing, Overfit)
}

__all__ = [
    "TENSOR_RULES",
    "DetailedRule",
    "ExplodingTensor",
    "LossNotDecreasing",
    "Overfit",
    "VanishingGradient",
]
