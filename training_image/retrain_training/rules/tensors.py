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
WEIGHTS = "weights"
LOSS_SCALE = "loss_scale"  # float16 training's loss scale where gradients were saved (debugger.py)
# Overfit: how far (nats) a validation pass must be above the best one before it counts.
MIN_DELTA = 0.05
# LossNotDecreasing: the fewest saved training losses it judges a trend from (5 successive differences
# for the batch noise), the losses its end level is the mean of at least, how many standard errors a
# fall must exceed to count (about 1% one-sided for a normal difference) and a rise to be a divergence.
MIN_LOSSES = 6
END_LOSSES = 3
FALL_Z = 2.5
RISE_Z = 4.0
# A loss that starts below this share of chance, ln(labels), is a model that fits its images already (a
# fresh head starts at chance): flat from there, nothing was left to decrease.
FITTED_SHARE_OF_CHANCE = 0.5

# Summaries the hook may have saved (debugger.py saves abs mean and L2 norm); raw values win if saved.
_SUMMARIES = (("max", False), ("min", False), ("mean", False), ("mean", True), ("l2", False))


class DetailedRule(Rule):
    """A Rule that says why it fired: `detail` holds the numbers behind the last decision."""

    # What the rule saw when it suspects an issue it cannot tell from a good run (a warning, never a block).
    suspected = ""
    suspected_step: int | None = None

    def __init__(self, base_trial: Any, other_trials: Any = None) -> None:
        super().__init__(base_trial, action_str="", other_trials=other_trials)
        self.detail = ""
        self.checked = 0  # data points the rule actually evaluated

    def missing_verdict(self) -> str:
        """Why the rule could not judge the job (too few data points); "" when it judged."""
        return "" if self.checked else "the job saved too few data points for this rule to judge"

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
    """A layer that stopped learning while the loss is still high: fires when a saved gradient's mean
    absolute value per unit of error, |g| / (1 - exp(-loss)) with the training loss of the same step's
    batch, stays below `threshold` for `patience` saved steps in a row (for all of them, when the job
    saved fewer).

    The managed rule (threshold 1e-7, the default here too) compares |g| itself with the threshold, at
    any one step. A cross-entropy gradient is proportional to the predictions' error, 1 - p(label) =
    1 - exp(-loss): about the loss itself near convergence, and at most 1. So |g| falls with the loss as
    a network converges: a fine-tuned model at a loss of 1e-5 has first-block gradients near 1e-8 and
    nothing left to learn, and the managed rule rejects it. Per unit of error a converged layer keeps the
    size it had at the first step, while a layer cut off from the signal has |g| ~1e-15 at a loss of
    ln(classes) (BENCHMARKS.md, "The rules by rates"). A frozen layer (freeze-backbone-epochs) has no
    gradient and is not judged; a slowed one (backbone-lr-factor) is given the same gradient as at the
    full rate, only a smaller step. Without saved losses the rule judges |g| alone, as the managed one.

    float16 training saves the gradients of the scaled loss (GradScaler's scale, 65,536 at first): they
    are divided by the scale the hook saved beside them (`loss_scale`), so the threshold means the same
    with mixed precision as without. A step whose scaled gradients overflowed is skipped, as the
    optimizer skipped it.
    """

    def __init__(self, base_trial: Any, threshold: float = 0.0000001, patience: int = 2) -> None:
        super().__init__(base_trial)
        self.threshold = float(threshold)
        self.patience = int(patience)
        if self.patience < 1:
            raise ValueError(f"VanishingGradient patience must be at least 1, got {patience}")
        self._losses = _train_losses(base_trial)
        self._scales = _loss_scales(base_trial)
        self._below: dict[str, list[int]] = {}  # per gradient: the steps of its current run below

    def _loss_at(self, step: int) -> float | None:
        """The training loss saved at `step`, else the last one saved before it; None when none was."""
        index = bisect.bisect_right(self._losses, (step, math.inf))
        return self._losses[index - 1][1] if index else None

    def invoke_at_step(self, step: int) -> bool:
        loss = self._loss_at(step) if self._losses else math.inf
        if loss is None or math.isnan(loss) or loss <= 0:
            return False  # nothing left to learn (0), or ExplodingTensor's case (NaN)
        scale = self._scales.get(step, 1.0)
        if not math.isfinite(scale) or scale <= 0:
            return False
        error = -math.expm1(-loss)  # 1 - exp(-loss): the error a cross-entropy gradient is made of
        for name in self._tensor_names([GRADIENTS]):
            tensor = self.base_trial.tensor(name)
            if step not in tensor.steps():
                continue
            try:
                abs_mean = float(tensor.reduction_value(step, "mean", abs=True)) / scale
            except TensorUnavailableForStep:
                abs_mean = float(np.mean(np.abs(tensor.value(step)))) / scale
            if not math.isfinite(abs_mean):
                continue  # the scaled gradients overflowed: the optimizer skipped this step
            self.checked += 1
            below = self._below.setdefault(name, [])
            if not abs_mean / error < self.threshold:
                below.clear()
                continue
            below.append(step)
            if len(below) >= min(self.patience, len(tensor.steps())):
                measure = (
                    f"mean |gradient| per unit of error {abs_mean / error:.3g} (|g| {abs_mean:.3g} at "
                    f"training loss {loss:.3g}{_unscaled(scale)})"
                    if self._losses
                    else f"mean |gradient| {abs_mean:.3g} (no training loss saved{_unscaled(scale)})"
                )
                self.detail = (
                    f"{name}: {measure} < threshold {self.threshold:g} at {len(below)} saved step(s) in a "
                    f"row ({below[0]}-{below[-1]}): the layer stopped learning while the loss was still high"
                )
                return True
        return False


def _unscaled(scale: float) -> str:
    return f", divided by the loss scale {scale:g}" if scale != 1.0 else ""


def _loss_scales(trial: Any) -> dict[int, float]:
    """The loss scale saved at each step (float16 training), by global step; empty without one."""
    scales: dict[int, float] = {}
    for name in trial.tensor_names(collection=LOSS_SCALE):
        tensor = trial.tensor(name)
        for step in tensor.steps():
            scales[step] = float(np.ravel(tensor.value(step))[0])
    return scales


def _train_losses(trial: Any) -> list[tuple[int, float]]:
    """(global step, mean loss) of every training step whose loss the hook saved, in step order."""
    names = trial.tensor_names(collection=LOSSES)
    losses = []
    for step in sorted(trial.steps()):
        if trial.mode(step) != modes.TRAIN:
            continue
        values = [
            float(np.mean(trial.tensor(n).value(step))) for n in names if step in trial.tensor(n).steps()
        ]
        if values:
            losses.append((step, float(np.mean(values))))
    return losses


class ExplodingTensor(DetailedRule):
    """Fires when a saved tensor holds NaN (or, unless `only_nan`, infinity). Defaults as the managed
    rule: every collection, no regex, only_nan False.

    Unlike the managed rule, a non-finite gradient at a step whose saved losses are all finite is
    not an explosion: that is mixed precision's loss scaling overflowing (GradScaler skips the step
    and lowers the scale), which happens in the first steps of every float16 run. So is one at a step
    that saved no loss but a loss scale (a float16 job's gradient saves fall between its loss saves).
    A real explosion makes the loss (and the weights) non-finite, which the rule then finds.
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
        self._scales = _loss_scales(base_trial)

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
            if name in gradients and self._overflowed(step):
                overflow.append(name)
                continue
            self.detail = f"{name} at step {step} is not finite ({bad[0]})"
            return True
        if overflow:
            self.logger.info(
                f"step {step}: {len(overflow)} gradients not finite while the loss is: loss-scaling overflow"
            )
        return False

    def _overflowed(self, step: int) -> bool:
        """Whether non-finite gradients at `step` are a loss scaler's overflow: the step's saved losses
        are finite, or, where it saved none, it saved the loss scale."""
        losses = [
            n
            for n in self.base_trial.tensor_names(collection=LOSSES)
            if step in self.base_trial.tensor(n).steps()
        ]
        if not losses:
            return step in self._scales
        return all(math.isfinite(v) for n in losses for v in _values(self.base_trial, n, step))


def _loss_names(rule: DetailedRule, regex: str | list[str] | None, use_losses_collection: bool) -> list[str]:
    names = rule._tensor_names([LOSSES] if use_losses_collection else [], ",".join(_split(regex)) or None)
    return names


def _log(loss: float) -> float:
    return math.log(max(loss, 1e-12))


def batch_noise(values: list[float]) -> float:
    """The standard deviation of a loss series' batch-to-batch noise, from its successive differences
    (median absolute deviation, scaled to a normal's standard deviation, over sqrt 2: a difference carries
    two batches' noise). A trend moves every difference alike and a fast early drop only a few, so
    neither counts as noise, as it did in the spread of a window that holds the drop."""
    differences = np.diff(np.asarray(values, dtype=np.float64))
    if differences.size == 0:
        return 0.0
    deviation = float(np.median(np.abs(differences - np.median(differences))))
    return 1.4826 * deviation / math.sqrt(2)


class LossNotDecreasing(DetailedRule):
    """Whether the training loss fell over the job, judged once after it from the saved losses and
    weights, with three outcomes:

    - no issue: the loss ended (the mean of the last `num_steps` steps, a third of a shorter job, at least
      3 saved losses) below the first saved loss, the loss before any update, by more than FALL_Z
      standard errors of the batch noise (`batch_noise`) and by `diff_percent`; or below
      `converged_loss` (0.05 nats, p(label) ~0.95);
    - IssuesFound, which blocks by default, where the evidence tells a fault from a good run: no weight
      moved between the first and the last saved step (a learning rate of 0, every layer frozen), or the
      loss ended above both its start and chance, ln(`labels`) from the job's facts, by RISE_Z standard
      errors on a log scale (a diverging run, the loss finite: SGD at lr 1e4 ends near 1e7);
    - no issue either when it did not fall from a start below half of chance: a model that fits its
      images already (a champion fine-tuned on a few new ones, some of them labelled wrong) has nothing
      left to decrease, and the gate holds the new model to the champion;
    - IssuesSuspected, a warning, where the evidence does not tell: the loss did not fall from near
      chance, the weights moved and it did not rise. A learning rate too small to matter looks like that,
      and so do labels that do not match the images; the gate's floor (better than guessing) judges
      those models.

    With fewer than MIN_LOSSES saved losses the loss is not judged (InsufficientData); unmoved weights
    still are. Managed defaults: use_losses_collection true, num_steps 10, diff_percent 0, each window
    against the one before it while the job runs: that fires at every plateau, by design, to stop a
    finished job, and on batch noise (BENCHMARKS.md, "The rules by rates"). `mode` defaults to TRAIN:
    the validation curve is the Overfit rule's. Non-finite losses are ExplodingTensor's.
    """

    def __init__(  # noqa: PLR0913  # the managed rule's keyword parameters, and the facts' labels
        self,
        base_trial: Any,
        *,
        collection_names: str | list[str] | None = None,
        tensor_regex: str | list[str] | None = None,
        use_losses_collection: bool | str = True,
        num_steps: int = 50,
        diff_percent: float = 0.0,
        converged_loss: float = 0.05,
        labels: int = 0,
        mode: str | None = None,
    ) -> None:
        super().__init__(base_trial)
        extra = _split(collection_names)
        self.names = _loss_names(self, tensor_regex, str(use_losses_collection).lower() == "true")
        for collection in extra:
            self.names += [n for n in base_trial.tensor_names(collection=collection) if n not in self.names]
        self.num_steps = int(num_steps)
        self.diff_percent = float(diff_percent)
        self.converged_loss = float(converged_loss)
        self.labels = int(labels)
        self.mode = getattr(modes, (mode or "TRAIN").upper())
        saved = [
            base_trial.mode_step(s)
            for s in base_trial.steps()
            if base_trial.mode(s) == self.mode and any(s in base_trial.tensor(n).steps() for n in self.names)
        ]
        self._first, self._end = min(saved, default=0), max(saved, default=0)
        self.window = max(1, min(self.num_steps, (self._end - self._first) // 3))
        self._losses: dict[str, list[tuple[int, float]]] = {}
        self._insufficient = ""

    def missing_verdict(self) -> str:
        return "" if self.checked else self._insufficient or super().missing_verdict()

    def invoke_at_step(self, step: int) -> bool:
        if self.base_trial.mode(step) != self.mode:
            return False
        mode_step = self.base_trial.mode_step(step)
        for name in self.names:
            if step not in self.base_trial.tensor(name).steps():
                continue
            loss = float(np.mean(self.base_trial.tensor(name).value(step)))
            if math.isfinite(loss):
                self._losses.setdefault(name, []).append((mode_step, loss))
        if mode_step != self._end:
            return False
        unmoved = self._unmoved_weights()
        if unmoved:
            self.checked += 1
            self.detail = unmoved
            return True
        return any(self._judge(name, losses) for name, losses in self._losses.items())

    def _unmoved_weights(self) -> str:
        """What shows that no saved weight changed from the first saved training step to the last (the
        L2 norms the hook saves, to the last bit); "" when one did, or fewer than 2 steps saved them."""
        names = self.base_trial.tensor_names(collection=WEIGHTS) if self._has(WEIGHTS) else []
        compared, first, last = 0, math.inf, -1
        for name in names:
            tensor = self.base_trial.tensor(name)
            steps = [s for s in tensor.steps() if self.base_trial.mode(s) == modes.TRAIN]
            if len(steps) < 2:
                continue
            before = _values(self.base_trial, name, steps[0])
            after = _values(self.base_trial, name, steps[-1])
            if before != after:
                return ""
            compared += 1
            first, last = min(first, steps[0]), max(last, steps[-1])
        if not compared:
            return ""
        return (
            f"no weight changed from step {first} to step {last} ({compared} weight tensors compared): the "
            "learning rate is 0 or every layer is frozen"
        )

    def _has(self, collection: str) -> bool:
        try:
            return bool(self.base_trial.tensor_names(collection=collection))
        except Exception:  # smdebug raises its own error for a collection the job never saved
            return False

    def _judge(self, name: str, losses: list[tuple[int, float]]) -> bool:
        values = [loss for _, loss in losses]
        if len(values) < MIN_LOSSES:
            self._insufficient = (
                f"{name}: {len(values)} training losses saved, {MIN_LOSSES} needed to tell a trend from "
                "batch noise; train more steps or lower debug-interval"
            )
            return False
        self.checked += 1
        end = [loss for at, loss in losses if at >= self._end - self.window]
        end = end if len(end) >= END_LOSSES else values[-END_LOSSES:]
        began, ended = values[0], float(np.mean(end))
        noise = batch_noise(values)
        error = noise * math.sqrt(1 + 1 / len(end))  # one first loss against the mean of the end's
        fell = began - ended
        needed = max(self.diff_percent / 100 * abs(began), FALL_Z * error)
        if fell > needed or ended < self.converged_loss:
            self.detail = (
                f"{name}: loss {began:.4g} at step {losses[0][0]}, mean {ended:.4g} over steps "
                f"{self._end - self.window}-{self._end}: fell {fell:.3g} (needs more than {needed:.3g})"
                + (f" or below {self.converged_loss:g}" if fell <= needed else "")
            )
            return False
        said = (
            f"{name}: loss {began:.4g} at step {losses[0][0]}, mean {ended:.4g} over steps "
            f"{self._end - self.window}-{self._end}: fell {fell:.3g}, needs more than {needed:.3g} "
            f"({FALL_Z:g} standard errors of the batch noise {noise:.3g}"
            + (f", or {self.diff_percent:g}%)" if self.diff_percent else ")")
        )
        # Diverged: the end above both the start and chance (ln labels, the loss of a uniform guess), by
        # RISE_Z standard errors of the noise on a log scale, where an exploded loss's noise is as small
        # as a healthy one's. A working classifier never ends above chance.
        chance = math.log(self.labels) if self.labels > 1 else None
        ceiling = max(began, chance or 0.0)
        log_noise = batch_noise([_log(v) for v in values])
        rise = _log(ended) - _log(ceiling)
        if rise > RISE_Z * log_noise * math.sqrt(1 + 1 / len(end)):
            self.detail = (
                f"{said}; it ended e^{rise:.3g} times above max(its start, chance), more than {RISE_Z:g} "
                f"standard errors of the log-loss noise {log_noise:.3g}: the training diverged"
            )
            return True
        if chance is not None and began < chance * FITTED_SHARE_OF_CHANCE:
            self.detail = (
                f"{said}; it started from a model that fits its images (below half of chance, "
                f"ln {self.labels} = {chance:.3g}): nothing left to decrease"
            )
            return False
        chance_said = f"; chance is ln {self.labels} = {chance:.3g}" if chance is not None else ""
        self.suspected = (
            f"{said}{chance_said}. The weights moved and the loss did not rise: a learning rate too small to "
            "matter looks like this, and so do labels that do not match the images, or a model that already "
            "fits them. Not blocking; it blocks when no weight moves or the loss rises"
        )
        self.suspected_step = self.base_trial.steps()[-1] if self.base_trial.steps() else None
        return False


class Overfit(DetailedRule):
    """Fires when, for more than `patience` validation passes in a row, the mean validation loss is
    above the mean training loss by more than `ratio_threshold` of it and above its own best (the
    lowest earlier pass) by more than `min_delta`, and by more than two of its images turning from
    right to wrong would raise it: 2 ln(2) / `validation_images` (the job's training facts give it).

    Managed defaults: start_step 0, patience 1, ratio_threshold 0.1. A validation pass is a run of
    consecutive EVAL steps; it is compared with the training losses saved since the previous pass.
    Unlike the managed rule, a gap counts only while the validation loss is not improving: early in
    training a model's validation loss sits well above its training loss (BatchNorm's running
    statistics lag the batch statistics) while both improve, and that is not overfitting. And it must
    rise by `min_delta` (nats; EarlyStopping's min_delta in Keras and Lightning): a converged fine-tune
    has training losses near 1e-5, so the managed ratio is in the hundreds for any validation loss,
    and a validation split of a dozen images moves between 3e-6 and 6e-4 from one pass to the next
    (BENCHMARKS.md), which the managed rule takes for overfitting. And by more than two images' worth:
    an image counts at least ln(2) once it is wrong, so on a split of 7 images one image's doubt moves
    the mean by 0.1 (the photo demo's split rose from 0.045 to 0.122 at training loss 0.002 while the
    model named every image right), while a memorising run's rises far more than its floor.
    """

    def __init__(
        self,
        base_trial: Any,
        *,
        tensor_regex: str | list[str] | None = None,
        start_step: int = 0,
        patience: int = 1,
        ratio_threshold: float = 0.1,
        min_delta: float = MIN_DELTA,
        validation_images: int = 0,
    ) -> None:
        super().__init__(base_trial)
        self.names = _loss_names(self, tensor_regex, True)
        self.validation_images = int(validation_images)
        images_floor = 2 * math.log(2) / self.validation_images if self.validation_images > 0 else 0.0
        self.floor = max(float(min_delta), images_floor)
        self.start_step = int(start_step)
        self.patience = int(patience)
        self.ratio_threshold = float(ratio_threshold)
        self._train: list[float] = []
        self._validation: list[float] = []
        self._violations = 0
        self._best: float | None = None
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
        best = self._best
        self._best = validation if best is None else min(best, validation)
        risen = best is not None and validation > best + self.floor
        self._violations = self._violations + 1 if ratio > self.ratio_threshold and risen else 0
        if self._violations > self.patience:
            self.detail = (
                f"validation loss {validation:.4g} (best {best:.4g}, up more than {self.floor:.3g}) vs "
                f"training loss {train:.4g}: ratio {ratio:.2f} > {self.ratio_threshold:g} for "
                f"{self._violations} validation passes in a row (patience {self.patience})"
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
