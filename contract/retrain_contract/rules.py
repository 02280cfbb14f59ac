"""The Debugger rules as every part names them: the training image's rule check evaluates them, the gate
blocks a model on the ones the stack's BlockingRules parameter names and warns on the others, and the
notification and the report say what each finding means and what to do about it.

Pure standard library (it ships in the training image and in the Lambdas' layer).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# The tensor rules judge the training (is the model learning?); the system rules judge how the job used
# its machine (is the GPU fed?). A slow loader makes an expensive job, not a bad model.
TENSOR_RULES: Final = ("VanishingGradient", "ExplodingTensor", "LossNotDecreasing", "Overfit")
SYSTEM_RULES: Final = ("CPUBottleneck", "LowGPUUtilization", "StepOutlier", "IOBottleneck")
RULE_NAMES: Final = (*TENSOR_RULES, *SYSTEM_RULES)

# Verdicts, in Debugger's words (RuleEvaluationStatus).
NO_ISSUES: Final = "NoIssuesFound"
ISSUES: Final = "IssuesFound"
ERROR: Final = "Error"
STOPPED: Final = "Stopped"
NO_VERDICT: Final = (ERROR, STOPPED)  # the check itself failed: a blocking rule's counts as a finding
# Open mode's two verdicts besides Debugger's (the managed rules never give them). Neither blocks a model,
# whatever BlockingRules says; the gate's reason, the notification and the report name them.
INSUFFICIENT_DATA: Final = "InsufficientData"  # the job saved too few data points for the rule to judge
SUSPECTED: Final = "IssuesSuspected"  # what a fault shows, but a good run can show it too: a warning
WARN_ONLY: Final = (INSUFFICIENT_DATA, SUSPECTED)

# What the gate does with a rule's finding: reject the model, or register it and say what was found.
BLOCK: Final = "block"
WARN: Final = "warn"

BLOCKING_RULES_PARAMETER: Final = "BlockingRules"

# DebuggerMode=managed runs AWS's own rules. These two warn there whatever BlockingRules says: AWS's
# VanishingGradient compares |g| with 1e-7 at any one step, which converged fine-tunes fall below and which
# sees the loss-scaled gradients of float16 training; AWS's LossNotDecreasing compares each window of steps
# with the one before, which a plateau fails by design (BENCHMARKS.md, "The rules by rates").
MANAGED_WARN_ONLY: Final = ("VanishingGradient", "LossNotDecreasing")

# What a person can do about each rule's finding (the notification and the report print it).
ADVICE: Final[dict[str, str]] = {
    "VanishingGradient": (
        "a layer received almost no gradient per unit of loss while the loss stayed high: check that the "
        "images reach the model normalised (not all one value), that no layer saturates, and that the "
        "weights the run starts from load; a higher learning rate or a shallower model helps a network "
        "that does not learn at all"
    ),
    "ExplodingTensor": (
        "the loss or the weights became NaN or infinite: lower the learning rate (LearningRateMax), "
        "use adamw, or check the images for corrupt values"
    ),
    "LossNotDecreasing": (
        "the training loss did not fall below where it started: when no weight moved, the learning rate "
        "is zero or every layer is frozen; when it rose, lower the learning rate (LearningRateMax) or use "
        "adamw; when it stayed flat while the weights moved, the model may fit its images already (nothing "
        "wrong), the learning rate may be too small (LearningRateMin), or the labels may not match the images"
    ),
    "Overfit": (
        "the validation loss rose above its best while the training loss stayed below it: the model is "
        "memorising its training images; add images, lower Epochs, or lower CropScaleMin (stronger "
        "augmentation)"
    ),
    "CPUBottleneck": (
        "the device waited for the input pipeline: raise num-workers, use the dali loader on a GPU, or "
        "pick an instance with more vCPUs per GPU"
    ),
    "LowGPUUtilization": (
        "the GPU was mostly idle: raise BatchSize, feed it faster (dali, more workers), or use a "
        "smaller instance"
    ),
    "StepOutlier": (
        "some steps took far longer than the rest: look for checkpoint writes, spot restarts or a "
        "shared file system in the job's log and profile"
    ),
    "IOBottleneck": ("the job waited on storage: use FSx for Lustre (DataSource fsx) or fewer, larger files"),
}


class RuleNameError(ValueError):
    """A rule name that no rule has."""


def parse_rule_list(text: str, *, source: str = BLOCKING_RULES_PARAMETER) -> tuple[str, ...]:
    """A comma-separated list of rule names (BlockingRules), in RULE_NAMES' order; empty: none. An
    unknown name is refused, naming `source` and the names it may hold."""
    given = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in given if name not in RULE_NAMES]
    if unknown:
        raise RuleNameError(
            f"{source} names unknown rule(s) {', '.join(unknown)}; use some of {', '.join(RULE_NAMES)}, "
            "separated by commas, or leave it empty so that no rule blocks a model"
        )
    return tuple(name for name in RULE_NAMES if name in given)


def action(rule: str, blocking: Iterable[str], *, status: str = "", managed: bool = False) -> str:
    """BLOCK when `rule` is one of `blocking`, else WARN; always WARN for a verdict that cannot block
    (WARN_ONLY) and, under managed Debugger, for MANAGED_WARN_ONLY's rules."""
    if status in WARN_ONLY or (managed and rule in MANAGED_WARN_ONLY):
        return WARN
    return BLOCK if rule in set(blocking) else WARN
