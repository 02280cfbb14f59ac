"""Hyperparameter tuning jobs on optuna: strategies, ranges, limits, early stopping and warm start.

Bayesian maps to optuna's TPE sampler, Random to its random sampler, Grid to its grid sampler
(categorical ranges only, as on SageMaker). Early stopping Auto is optuna's median rule: a trial stops
when its objective at an epoch is worse than the median of earlier trials' values at that epoch.
Warm start adds the parent jobs' finished trials to the study before the first new trial.
"""

from __future__ import annotations

import itertools
import math
import random
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from botocore.exceptions import ClientError

from retrain.embedded.sagemaker.errors import RESOURCE_LIMIT_EXCEEDED, THROTTLING, validation
from retrain.embedded.sagemaker.logs import compile_metric_definitions
from retrain.embedded.sagemaker.training import POLL_SECONDS, JobControl

OPERATION = TUNING_OPERATION = "CreateHyperParameterTuningJob"
STRATEGIES = ("Bayesian", "Random", "Grid")
SCALING_TYPES = ("Auto", "Linear", "Logarithmic", "ReverseLogarithmic")
WARM_START_TYPES = ("IdenticalDataAndAlgorithm", "TransferLearning")
TERMINAL = ("Completed", "Failed", "Stopped")
REVERSE_SUFFIX = "#reverse-log"
MAX_PARENTS = 5
LAUNCH_RETRY_SECONDS = 1.0

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True)
class ParameterSpec:
    name: str
    kind: str  # Integer | Continuous | Categorical
    low: float = 0.0
    high: float = 0.0
    scaling: str = "Auto"
    values: tuple[str, ...] = ()

    @property
    def param_name(self) -> str:
        return self.name + REVERSE_SUFFIX if self.scaling == "ReverseLogarithmic" else self.name

    def distribution(self) -> optuna.distributions.BaseDistribution:
        if self.kind == "Categorical":
            return optuna.distributions.CategoricalDistribution(list(self.values))
        if self.kind == "Integer":
            return optuna.distributions.IntDistribution(
                int(self.low), int(self.high), log=self.scaling == "Logarithmic"
            )
        if self.scaling == "ReverseLogarithmic":
            return optuna.distributions.FloatDistribution(1 - self.high, 1 - self.low, log=True)
        return optuna.distributions.FloatDistribution(self.low, self.high, log=self.scaling == "Logarithmic")

    def to_hyperparameter(self, internal: Any) -> str:
        if self.kind == "Categorical":
            return str(internal)
        if self.kind == "Integer":
            return str(int(internal))
        value = 1 - float(internal) if self.scaling == "ReverseLogarithmic" else float(internal)
        return repr(value)

    def from_hyperparameter(self, raw: str) -> Any:
        """The optuna value for a parent trial's hyperparameter, or None when outside this range."""
        try:
            if self.kind == "Categorical":
                value: Any = raw
            elif self.kind == "Integer":
                value = int(float(raw))
            else:
                value = float(raw)
                if self.scaling == "ReverseLogarithmic":
                    value = 1 - value
        except ValueError:
            return None
        distribution = self.distribution()
        try:
            if distribution._contains(distribution.to_internal_repr(value)):
                return value
        except (ValueError, TypeError):
            return None
        return None


def parse_ranges(ranges: Mapping[str, Any], static: Mapping[str, str]) -> list[ParameterSpec]:
    specs: list[ParameterSpec] = []
    for kind, key in (
        ("Integer", "IntegerParameterRanges"),
        ("Continuous", "ContinuousParameterRanges"),
        ("Categorical", "CategoricalParameterRanges"),
    ):
        for item in ranges.get(key) or []:
            name = item.get("Name")
            if not name:
                raise validation(f"{key}: every range needs a Name", OPERATION)
            if name in static:
                raise validation(
                    f"Hyperparameter {name!r} is both static and tunable; "
                    "remove it from StaticHyperParameters",
                    OPERATION,
                )
            specs.append(
                _categorical_spec(name, item) if kind == "Categorical" else _numeric_spec(name, kind, item)
            )
    if not specs:
        raise validation("HyperParameterTuningJobConfig.ParameterRanges defines no range to tune", OPERATION)
    return specs


def _categorical_spec(name: str, item: Mapping[str, Any]) -> ParameterSpec:
    values = tuple(str(v) for v in item.get("Values") or [])
    if not values:
        raise validation(f"CategoricalParameterRange {name!r} needs at least one value", OPERATION)
    return ParameterSpec(name, "Categorical", values=values)


def _numeric_spec(name: str, kind: str, item: Mapping[str, Any]) -> ParameterSpec:
    """An Integer or Continuous range, refused as SageMaker refuses it."""
    scaling = item.get("ScalingType", "Auto")
    if scaling not in SCALING_TYPES:
        raise validation(f"Range {name!r}: ScalingType must be one of {SCALING_TYPES}", OPERATION)
    try:
        low, high = float(item["MinValue"]), float(item["MaxValue"])
    except (KeyError, ValueError) as exc:
        raise validation(f"Range {name!r}: MinValue and MaxValue must be numbers", OPERATION) from exc
    if kind == "Integer" and (low != int(low) or high != int(high)):
        raise validation(f"IntegerParameterRange {name!r}: MinValue and MaxValue must be integers", OPERATION)
    if low > high:
        raise validation(f"Range {name!r}: MinValue {low} is greater than MaxValue {high}", OPERATION)
    if scaling == "Logarithmic" and low <= 0:
        raise validation(
            f"Range {name!r}: Logarithmic scaling needs MinValue > 0, got {item['MinValue']}", OPERATION
        )
    if scaling == "ReverseLogarithmic" and (kind != "Continuous" or not 0 <= low < high < 1):
        raise validation(
            f"Range {name!r}: ReverseLogarithmic scaling is for continuous ranges within [0, 1)", OPERATION
        )
    return ParameterSpec(name, kind, low, high, scaling)


def make_sampler(strategy: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """Bayesian: TPE (constant liar, so parallel trials do not all sample the same point); Random and
    Grid: the random sampler, Grid's points being enqueued up front."""
    if strategy == "Bayesian":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=2, constant_liar=True)
    return optuna.samplers.RandomSampler(seed=seed)


def grid_points(specs: list[ParameterSpec], seed: int | None) -> list[dict[str, Any]]:
    """Every combination of the categorical values once, in a seeded random order as the service
    does not promise an order either. (optuna's GridSampler stops the study itself, which only works
    inside study.optimize, not with ask-and-tell.)"""
    points = [
        dict(zip((s.param_name for s in specs), combination, strict=True))
        for combination in itertools.product(*(s.values for s in specs))
    ]
    random.Random(seed).shuffle(points)
    return points


def check_tuning_request(request: Mapping[str, Any], *, known_tuning_jobs: Mapping[str, Any]) -> None:
    """What CreateHyperParameterTuningJob rejects up front (the training definition is checked apart)."""
    config = request.get("HyperParameterTuningJobConfig") or {}
    strategy = config.get("Strategy")
    if strategy not in STRATEGIES:
        raise validation(
            f"HyperParameterTuningJobConfig.Strategy {strategy!r} is not supported; use one of {STRATEGIES}",
            OPERATION,
        )
    definition = request.get("TrainingJobDefinition") or {}
    _check_objective(config, definition)
    static = definition.get("StaticHyperParameters") or {}
    specs = parse_ranges(config.get("ParameterRanges") or {}, static)
    if strategy == "Grid" and any(s.kind != "Categorical" for s in specs):
        raise validation("The Grid strategy supports categorical parameter ranges only", OPERATION)
    _check_limits(config, strategy)
    warm = request.get("WarmStartConfig")
    if warm:
        _check_warm_start(warm, len(static) + len(specs), specs, known_tuning_jobs)


def _check_objective(config: Mapping[str, Any], definition: Mapping[str, Any]) -> None:
    """The objective must name one of the definition's metrics, whose regexes must compile."""
    objective = config.get("HyperParameterTuningJobObjective") or {}
    if objective.get("Type") not in ("Maximize", "Minimize") or not objective.get("MetricName"):
        raise validation(
            "HyperParameterTuningJobObjective needs Type (Maximize|Minimize) and MetricName", OPERATION
        )
    metric_definitions = (definition.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or []
    metric_names = [m.get("Name") for m in metric_definitions]
    if objective["MetricName"] not in metric_names:
        raise validation(
            f"The objective metric {objective['MetricName']!r} is not among the training job definition's "
            f"MetricDefinitions {metric_names}; add a definition with a Regex for it",
            OPERATION,
        )
    try:
        compile_metric_definitions(metric_definitions, OPERATION)
    except ValueError as exc:
        raise validation(str(exc), OPERATION) from exc


def _check_limits(config: Mapping[str, Any], strategy: str) -> None:
    limits = config.get("ResourceLimits") or {}
    if strategy != "Grid" and not limits.get("MaxNumberOfTrainingJobs"):
        raise validation("ResourceLimits.MaxNumberOfTrainingJobs is required for this strategy", OPERATION)
    if int(limits.get("MaxParallelTrainingJobs", 0)) < 1:
        raise validation("ResourceLimits.MaxParallelTrainingJobs must be at least 1", OPERATION)
    if config.get("TrainingJobEarlyStoppingType", "Off") not in ("Off", "Auto"):
        raise validation("TrainingJobEarlyStoppingType must be Off or Auto", OPERATION)


def _check_warm_start(
    warm: Mapping[str, Any],
    hyperparameter_count: int,
    specs: list[ParameterSpec],
    known_tuning_jobs: Mapping[str, Any],
) -> None:
    """Either warm start type may move a hyperparameter between static and tunable, but the job must have
    as many static plus tunable hyperparameters as each parent (SageMaker refuses it otherwise)."""
    if warm.get("WarmStartType") not in WARM_START_TYPES:
        raise validation(f"WarmStartConfig.WarmStartType must be one of {WARM_START_TYPES}", OPERATION)
    parents = warm.get("ParentHyperParameterTuningJobs") or []
    if not 1 <= len(parents) <= MAX_PARENTS:
        raise validation(f"WarmStartConfig needs 1 to {MAX_PARENTS} parent tuning jobs", OPERATION)
    for parent in parents:
        name = parent.get("HyperParameterTuningJobName")
        record = known_tuning_jobs.get(name)
        if record is None:
            raise validation(f"Parent tuning job {name!r} does not exist", OPERATION)
        if record["HyperParameterTuningJobStatus"] not in ("Completed", "Stopped"):
            raise validation(
                f"Parent tuning job {name!r} is {record['HyperParameterTuningJobStatus']}; warm start "
                "needs parents that are Completed or Stopped",
                OPERATION,
            )
        parent_count = _hyperparameter_count(record["request"])
        if parent_count != hyperparameter_count:
            raise validation(
                f"The number of static plus tunable hyperparameters ({hyperparameter_count}) must be the "
                f"same as in parent tuning job {name!r} ({parent_count}) for a warm start",
                OPERATION,
            )
        if warm["WarmStartType"] == "IdenticalDataAndAlgorithm":
            _check_same_tuned_names(name, record, specs)


def _hyperparameter_count(request: Mapping[str, Any]) -> int:
    static = (request.get("TrainingJobDefinition") or {}).get("StaticHyperParameters") or {}
    ranges = (request.get("HyperParameterTuningJobConfig") or {}).get("ParameterRanges") or {}
    return len(static) + len(parse_ranges(ranges, static))


def _check_same_tuned_names(parent: str, record: Mapping[str, Any], specs: list[ParameterSpec]) -> None:
    parent_config = record["request"]["HyperParameterTuningJobConfig"]
    parent_specs = parse_ranges(parent_config.get("ParameterRanges") or {}, {})
    if {s.name for s in parent_specs} != {s.name for s in specs}:
        raise validation(
            f"IdenticalDataAndAlgorithm warm start needs the same tunable hyperparameters as "
            f"parent {parent!r}: {sorted(s.name for s in parent_specs)}",
            OPERATION,
        )


@dataclass
class Trial:
    name: str
    number: int
    optuna_trial: optuna.trial.Trial
    tuned: dict[str, str]
    control: JobControl
    reported: int = 0
    early_stopped: bool = False
    told: bool = False


TrialLauncher = Callable[[str, dict[str, str], JobControl], None]
RecordReader = Callable[[str], dict[str, Any]]


class TuningRun:
    """Drives one tuning job: launches trials within the limits, tells optuna their results."""

    def __init__(
        self,
        record: dict[str, Any],
        *,
        launch: TrialLauncher,
        training_record: RecordReader,
        parent_trials: list[dict[str, Any]],
        update: Callable[[dict[str, Any]], None],
        stop_event: threading.Event,
        seed: int | None = None,
        early_stopping_startup_trials: int = 2,
    ) -> None:
        request = record["request"]
        self.name: str = request["HyperParameterTuningJobName"]
        self.config = request["HyperParameterTuningJobConfig"]
        self.objective = self.config["HyperParameterTuningJobObjective"]
        self.specs = parse_ranges(
            self.config.get("ParameterRanges") or {},
            request["TrainingJobDefinition"].get("StaticHyperParameters") or {},
        )
        self.distributions = {s.param_name: s.distribution() for s in self.specs}
        limits = self.config["ResourceLimits"]
        strategy = self.config["Strategy"]
        max_jobs = int(limits.get("MaxNumberOfTrainingJobs") or 0)
        if strategy == "Grid":
            grid = math.prod(len(s.values) for s in self.specs)
            max_jobs = min(max_jobs, grid) if max_jobs else grid
        self.max_jobs = max_jobs
        self.max_parallel = int(limits["MaxParallelTrainingJobs"])
        self.early_stopping = self.config.get("TrainingJobEarlyStoppingType", "Off") == "Auto"
        pruner: optuna.pruners.BasePruner = (
            optuna.pruners.MedianPruner(n_startup_trials=early_stopping_startup_trials, n_warmup_steps=0)
            if self.early_stopping
            else optuna.pruners.NopPruner()
        )
        direction = (
            optuna.study.StudyDirection.MAXIMIZE
            if self.objective["Type"] == "Maximize"
            else optuna.study.StudyDirection.MINIMIZE
        )
        self.study = optuna.create_study(
            direction=direction, sampler=make_sampler(strategy, seed), pruner=pruner
        )
        self.warm_started = self._add_parent_trials(parent_trials)
        if strategy == "Grid":
            for point in grid_points(self.specs, seed)[: self.max_jobs]:
                self.study.enqueue_trial(point)
        self.launch = launch
        self.training_record = training_record
        self.update = update
        self.stop_event = stop_event
        self.trials: list[Trial] = []

    def _add_parent_trials(self, parent_trials: list[dict[str, Any]]) -> int:
        added = 0
        for parent in parent_trials:
            value = parent.get("ObjectiveValue")
            if value is None:
                continue
            params: dict[str, Any] = {}
            for spec in self.specs:
                raw = (parent.get("TunedHyperParameters") or {}).get(spec.name)
                converted = spec.from_hyperparameter(raw) if raw is not None else None
                if converted is not None:
                    params[spec.param_name] = converted
            if not params:
                continue
            self.study.add_trial(
                optuna.trial.create_trial(
                    params=params,
                    distributions={k: self.distributions[k] for k in params},
                    value=float(value),
                )
            )
            added += 1
        return added

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # the tuning job must end, never hang InProgress
            for trial in self.trials:
                trial.control.stop_requested.set()
            self.update(
                {
                    "HyperParameterTuningJobStatus": "Failed",
                    "FailureReason": f"InternalServerError: {type(exc).__name__}: {exc}",
                    "HyperParameterTuningEndTime": time.time(),
                }
            )

    def _run(self) -> None:
        while not self.stop_event.is_set():
            self._collect_finished()
            running = [t for t in self.trials if not t.told]
            if len(self.trials) < self.max_jobs and len(running) < self.max_parallel:
                self._start_trial()
                continue
            if len(self.trials) >= self.max_jobs and not running:
                break
            time.sleep(POLL_SECONDS)
        if self.stop_event.is_set():
            for trial in self.trials:
                trial.control.stop_reason = "Stopped"
                trial.control.stop_requested.set()
            while any(not t.told for t in self.trials):
                self._collect_finished()
                time.sleep(POLL_SECONDS)
        self._finish()

    def _start_trial(self) -> None:
        number = len(self.trials) + 1
        optuna_trial = self.study.ask(self.distributions)
        tuned = {s.name: s.to_hyperparameter(optuna_trial.params[s.param_name]) for s in self.specs}
        name = f"{self.name}-{number:03d}-{secrets.token_hex(4)}"
        trial = Trial(name, number, optuna_trial, tuned, JobControl())
        trial.control.on_metric = lambda metric, value, t=trial: self._on_metric(t, metric, value)
        self.trials.append(trial)
        self.update({"Trials": [self._trial_entry(t) for t in self.trials]})
        try:
            self.launch(name, tuned, trial.control)
        except ClientError as exc:
            # Not a trial: the point is asked again once the account has room, as the service waits.
            self.trials.pop()
            self.study.tell(optuna_trial, state=optuna.trial.TrialState.FAIL)
            self.update({"Trials": [self._trial_entry(t) for t in self.trials], "LastLaunchError": str(exc)})
            if exc.response.get("Error", {}).get("Code") not in (RESOURCE_LIMIT_EXCEEDED, THROTTLING):
                raise RuntimeError(f"could not start trial {name}: {exc}") from exc
            self.study.enqueue_trial(optuna_trial.params)
            time.sleep(LAUNCH_RETRY_SECONDS)

    def _on_metric(self, trial: Trial, metric: str, value: float) -> None:
        if metric != self.objective["MetricName"] or trial.told or math.isnan(value):
            return
        trial.optuna_trial.report(value, trial.reported)
        trial.reported += 1
        if self.early_stopping and not trial.early_stopped and trial.optuna_trial.should_prune():
            trial.early_stopped = True
            trial.control.stop_reason = "Stopped"
            trial.control.stop_requested.set()

    def _collect_finished(self) -> None:
        changed = False
        for trial in self.trials:
            if trial.told:
                continue
            record = self.training_record(trial.name)
            if record.get("TrainingJobStatus") not in TERMINAL:
                continue
            value = objective_value(record, self.objective["MetricName"])
            if trial.early_stopped:
                self.study.tell(trial.optuna_trial, state=optuna.trial.TrialState.PRUNED)
            elif record["TrainingJobStatus"] == "Completed" and value is not None:
                self.study.tell(trial.optuna_trial, value)
            else:
                self.study.tell(trial.optuna_trial, state=optuna.trial.TrialState.FAIL)
            trial.told = True
            changed = True
        if changed:
            self.update({"Trials": [self._trial_entry(t) for t in self.trials]})

    def _trial_entry(self, trial: Trial) -> dict[str, Any]:
        return {
            "TrainingJobName": trial.name,
            "Number": trial.number,
            "TunedHyperParameters": trial.tuned,
            "EarlyStopped": trial.early_stopped,
        }

    def _finish(self) -> None:
        succeeded = 0
        for trial in self.trials:
            record = self.training_record(trial.name)
            if objective_value(record, self.objective["MetricName"]) is not None:
                succeeded += 1
        changes: dict[str, Any] = {
            "HyperParameterTuningEndTime": time.time(),
            "WarmStartedTrials": self.warm_started,
        }
        if self.stop_event.is_set():
            changes["HyperParameterTuningJobStatus"] = "Stopped"
        elif succeeded == 0:
            changes["HyperParameterTuningJobStatus"] = "Failed"
            changes["FailureReason"] = (
                f"All {len(self.trials)} training jobs failed or reported no {self.objective['MetricName']} "
                "value; see their FailureReason and logs"
            )
        else:
            changes["HyperParameterTuningJobStatus"] = "Completed"
        self.update(changes)


def objective_value(training_record: Mapping[str, Any], metric_name: str) -> float | None:
    """The final value of the objective metric a training job logged, if it logged one."""
    for item in training_record.get("FinalMetricDataList") or []:
        if item["MetricName"] == metric_name and not math.isnan(float(item["Value"])):
            return float(item["Value"])
    return None
