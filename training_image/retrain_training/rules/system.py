"""System rules over the profiler's JSON lines, as smdebug `Rule` subclasses.

Names, parameters and defaults are the managed profiler rules' (smdebug_rulesconfig.profiler_rules,
which AWS publishes, and the "List of Debugger built-in rules" page). The managed rules count
500 ms system samples; ours also have each step's data-wait and compute time, which measures
"the device waited for the input pipeline" directly, also on a machine without a GPU.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from retrain_training.profiler import Profile
from retrain_training.rules.tensors import DetailedRule


class SystemRule(DetailedRule):
    """A rule over one job's profile; `invoke(i)` evaluates data point i (a step or a sample)."""

    uses_samples = False  # True: data points are system samples; False: training steps

    def __init__(self, profile: Profile) -> None:
        # Rule.__init__ wants an smdebug trial to prefetch tensors from; these rules read the profile,
        # so only the attributes Rule's evaluation uses are set.
        from smdebug.core.logger import get_logger

        self.base_trial = None
        self.other_trials = None
        self.trials: list[Any] = []
        self.rule_name = type(self).__name__
        self.logger = get_logger()
        self.detail = ""
        self.checked = 0
        self.profile = profile
        self._step_times = [float(s["timestamp"]) for s in profile.steps]

    def datapoints(self) -> range:
        return range(len(self.profile.system if self.uses_samples else self.profile.steps))

    def training_step(self, index: int) -> int:
        """The training step a data point belongs to (for a sample: the last step recorded before it)."""
        if not self.uses_samples:
            return int(self.profile.steps[index]["step"])
        if not self.profile.steps:
            return 0
        at = bisect.bisect_right(self._step_times, float(self.profile.system[index]["timestamp"]))
        return int(self.profile.steps[max(at - 1, 0)]["step"])

    def invoke(self, step: int) -> None:
        from smdebug.exceptions import RuleEvaluationConditionMet

        if self.invoke_at_step(step):
            raise RuleEvaluationConditionMet(self.rule_name, self.training_step(step))


def _gpu_util(sample: dict[str, Any]) -> float | None:
    gpus = sample.get("gpus") or []
    return float(np.mean([g["utilization_percent"] for g in gpus])) if gpus else None


def _cpu_util(sample: dict[str, Any]) -> float:
    cores = sample.get("cpu_percent") or [0.0]
    return float(np.mean(cores))


def data_wait_share(step: dict[str, Any]) -> float:
    total = float(step["data_wait_s"]) + float(step["compute_s"])
    return float(step["data_wait_s"]) / total * 100 if total > 0 else 0.0


class _ShareRule(SystemRule):
    """Counts bottlenecked data points; fires once, after `patience` points, more than `threshold`
    percent of them are bottlenecked."""

    threshold: float
    patience: int

    def __init__(self, profile: Profile) -> None:
        super().__init__(profile)
        self.bottlenecks = 0

    def is_bottleneck(self, index: int) -> tuple[bool, str]:
        raise NotImplementedError

    def missing_verdict(self) -> str:
        if self.checked >= self.patience:
            return ""
        points = "samples" if self.uses_samples else "steps"
        return (
            f"{self.checked} {points}, and the rule concludes after {self.patience} (its patience: the "
            "stack's SystemRulePatience)"
        )

    def invoke_at_step(self, step: int) -> bool:
        hit, why = self.is_bottleneck(step)
        self.checked += 1
        self.bottlenecks += int(hit)
        share = self.bottlenecks / self.checked * 100
        if self.checked >= self.patience and share > self.threshold:
            self.detail = (
                f"{self.bottlenecks} of {self.checked} {'samples' if self.uses_samples else 'steps'} "
                f"({share:.0f}%) bottlenecked, more than {self.threshold:g}%: {why}"
            )
            return True
        return False


class CPUBottleneck(_ShareRule):
    """The device starves while the CPU side works. A step is bottlenecked when its data wait is
    more than `data_wait_threshold` percent of its time, or (GPU machines) the nearest sample shows
    GPU utilisation below `gpu_threshold` while CPU utilisation is above `cpu_threshold` (the managed
    rule's test). Managed defaults: threshold 50, gpu_threshold 10, cpu_threshold 90, patience 1000.
    `data_wait_threshold` (50) has no managed counterpart."""

    def __init__(
        self,
        profile: Profile,
        *,
        threshold: float = 50,
        gpu_threshold: float = 10,
        cpu_threshold: float = 90,
        patience: int = 1000,
        data_wait_threshold: float = 50,
        scan_interval_us: int = 60 * 1000 * 1000,
    ) -> None:
        super().__init__(profile)
        self.threshold = float(threshold)
        self.gpu_threshold = float(gpu_threshold)
        self.cpu_threshold = float(cpu_threshold)
        self.patience = int(patience)
        self.data_wait_threshold = float(data_wait_threshold)
        self._sample_times = [float(s["timestamp"]) for s in profile.system]

    def is_bottleneck(self, index: int) -> tuple[bool, str]:
        step = self.profile.steps[index]
        share = data_wait_share(step)
        if share > self.data_wait_threshold:
            return True, f"step {step['step']} waited for data {share:.0f}% of its time"
        if self._sample_times:
            at = min(
                bisect.bisect_left(self._sample_times, float(step["timestamp"])), len(self._sample_times) - 1
            )
            sample = self.profile.system[at]
            gpu, cpu = _gpu_util(sample), _cpu_util(sample)
            if gpu is not None and gpu < self.gpu_threshold and cpu > self.cpu_threshold:
                return (
                    True,
                    f"GPU {gpu:.0f}% < {self.gpu_threshold:g}% while CPU {cpu:.0f}% > "
                    f"{self.cpu_threshold:g}%",
                )
        return False, ""


class IOBottleneck(_ShareRule):
    """I/O wait above `io_threshold` percent while the GPU is below `gpu_threshold` (on a machine
    without a GPU: I/O wait alone). Managed defaults: threshold 50, gpu_threshold 10,
    io_threshold 50, patience 1000."""

    uses_samples = True

    def __init__(
        self,
        profile: Profile,
        *,
        threshold: float = 50,
        gpu_threshold: float = 10,
        io_threshold: float = 50,
        patience: int = 1000,
        scan_interval_us: int = 60 * 1000 * 1000,
    ) -> None:
        super().__init__(profile)
        self.threshold = float(threshold)
        self.gpu_threshold = float(gpu_threshold)
        self.io_threshold = float(io_threshold)
        self.patience = int(patience)

    def is_bottleneck(self, index: int) -> tuple[bool, str]:
        sample = self.profile.system[index]
        iowait, gpu = float(sample.get("iowait_percent", 0.0)), _gpu_util(sample)
        if iowait > self.io_threshold and (gpu is None or gpu < self.gpu_threshold):
            gpu_text = "" if gpu is None else f" while GPU {gpu:.0f}% < {self.gpu_threshold:g}%"
            return True, f"I/O wait {iowait:.0f}% > {self.io_threshold:g}%{gpu_text}"
        return False, ""


class LowGPUUtilization(SystemRule):
    """Per GPU over the last `window` samples, once `patience` samples exist: p95 below
    `threshold_p95` is under-utilisation; p95 above it with p5 below `threshold_p5` is fluctuation.
    Managed defaults: threshold_p95 70, threshold_p5 10, window 500, patience 1000. A profile
    without GPU samples has nothing to check."""

    uses_samples = True

    def __init__(
        self,
        profile: Profile,
        *,
        threshold_p95: float = 70,
        threshold_p5: float = 10,
        window: int = 500,
        patience: int = 1000,
        scan_interval_us: int = 60 * 1000 * 1000,
    ) -> None:
        super().__init__(profile)
        self.threshold_p95 = float(threshold_p95)
        self.threshold_p5 = float(threshold_p5)
        self.window = int(window)
        self.patience = int(patience)
        self._history: dict[int, list[float]] = {}

    def missing_verdict(self) -> str:
        if not self._history:
            self.detail = "no GPU in the profile: nothing to check"
            return ""
        fewest = min(len(history) for history in self._history.values())
        if fewest >= self.patience:
            return ""
        return (
            f"{fewest} GPU samples, and the rule concludes after {self.patience} (its patience: the stack's "
            "SystemRulePatience)"
        )

    def invoke_at_step(self, step: int) -> bool:
        for gpu in self.profile.system[step].get("gpus") or []:
            history = self._history.setdefault(int(gpu["index"]), [])
            history.append(float(gpu["utilization_percent"]))
            self.checked += 1
            if len(history) < self.patience:
                continue
            recent = history[-self.window :]
            p95, p5 = float(np.percentile(recent, 95)), float(np.percentile(recent, 5))
            if p95 < self.threshold_p95:
                self.detail = (
                    f"GPU {gpu['index']} under-utilised: p95 {p95:.0f}% < {self.threshold_p95:g}% "
                    f"over the last {len(recent)} samples"
                )
                return True
            if p5 < self.threshold_p5:
                self.detail = (
                    f"GPU {gpu['index']} fluctuates: p95 {p95:.0f}% but p5 {p5:.0f}% < "
                    f"{self.threshold_p5:g}% over the last {len(recent)} samples"
                )
                return True
        return False


class StepOutlier(SystemRule):
    """Step times (data wait + compute) above mean + `stddev` standard deviations of the job's steps;
    fires when there are more than `n_outliers`. Managed defaults: stddev 3, n_outliers 10, mode
    None (our profile records training steps only)."""

    def __init__(
        self,
        profile: Profile,
        *,
        stddev: float = 3,
        mode: str | None = None,
        n_outliers: int = 10,
        scan_interval_us: int = 60 * 1000 * 1000,
    ) -> None:
        super().__init__(profile)
        self.stddev = float(stddev)
        self.n_outliers = int(n_outliers)
        durations = np.array([float(s["data_wait_s"]) + float(s["compute_s"]) for s in profile.steps])
        self.durations = durations
        self.limit = float(durations.mean() + self.stddev * durations.std()) if len(durations) else 0.0
        self.outliers = 0

    def missing_verdict(self) -> str:
        timed = len(self.durations)
        return "" if timed >= 2 else f"{timed} steps timed; outliers need 2 or more"

    def invoke_at_step(self, step: int) -> bool:
        self.checked += 1
        duration = float(self.durations[step])
        if len(self.durations) < 2 or duration <= self.limit:
            return False
        self.outliers += 1
        if self.outliers > self.n_outliers:
            self.detail = (
                f"{self.outliers} steps took longer than {self.limit:.3f} s (mean "
                f"{self.durations.mean():.3f} s + {self.stddev:g} x std {self.durations.std():.3f} s), "
                f"more than the {self.n_outliers} allowed; the latest, step "
                f"{self.profile.steps[step]['step']}, "
                f"took {duration:.3f} s"
            )
            return True
        return False


SYSTEM_RULES: dict[str, type[SystemRule]] = {
    rule.__name__: rule for rule in (CPUBottleneck, LowGPUUtilization, StepOutlier, IOBottleneck)
}
