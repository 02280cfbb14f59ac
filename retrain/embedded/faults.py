"""Fault injection for the embedded stack: what tests and the demo's options can make go wrong.

One frozen config object, parsed from the demo's ``--fault`` options (``import-fails``,
``throttle[:N]``, ``resource-limit[:N]``, ``kill-checkpoint-write``, ``rule-finds-issues``,
``loader-delay-ms:N``, ``vanishing-gradient``, ``duplicate-events``), kept in the stack's state directory
and handed to the parts that act on it: the FSx emulation (a failed import task), the SageMaker emulator
(CreateTrainingJob errors, a job killed while it writes a checkpoint), the emulated EventBridge (every
event delivered twice, the copy late) and, through hyperparameters, the container (a slow loader, which
the CPUBottleneck rule finds and the gate warns about, from the container's ``inject-loader-delay-ms``
knob; a vanishing gradient, which the VanishingGradient rule finds and the gate blocks on, from its
``inject-fault`` knob).
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from retrain_contract import container as contract

CREATE_TRAINING_JOB_ERRORS: Final[dict[str, str]] = {
    "throttle": "ThrottlingException",
    "resource-limit": "ResourceLimitExceeded",
}
FAULT_NAMES: Final = (
    "import-fails",
    "throttle[:N]",
    "resource-limit[:N]",
    "kill-checkpoint-write",
    "rule-finds-issues",
    "loader-delay-ms:N",
    contract.FAULT_VANISHING_GRADIENT,
    "duplicate-events",
)
# duplicate-events: EventBridge delivers each event a second time, this many seconds later (drawn for each
# event): the copies arrive late and out of order with the events after them, as at-least-once delivery,
# SageMaker's several events per state change and Lambda's retries of an asynchronous invocation do.
REDELIVERY_SECONDS: Final = (0.5, 4.0)
# A planted slow loader (the container sleeps this long per batch, and at least 4x the longest of its
# last steps, so data wait is most of every step on any machine): the rule check's CPUBottleneck rule
# (data wait > 50% of step time) fires. `rule-finds-issues:MS` sets another delay.
RULE_FINDS_ISSUES_DELAY_MS: Final = 1000
# The system rules wait for 1,000 data points, as the managed ones do; a short emulated run has ~100
# steps, so a run with a planted loader delay lowers the stack's SystemRulePatience to let them conclude.
RULE_FINDS_ISSUES_PATIENCE: Final = 5
PATIENCE_PARAMETER: Final = "SystemRulePatience"
WORKERS_HYPERPARAMETER: Final = contract.HP_NUM_WORKERS
LOADER_DELAY_HYPERPARAMETER: Final = contract.HP_INJECT_LOADER_DELAY_MS
TRAINING_FAULT_HYPERPARAMETER: Final = contract.HP_INJECT_FAULT


class FaultSpecError(ValueError):
    """A --fault value this runtime does not know."""


@dataclass(frozen=True)
class Faults:
    """Faults to inject. Counts say how many times the fault fires before the service behaves again."""

    import_fails: bool = False
    training_job_error_code: str | None = None
    training_job_error_count: int = 0
    kill_checkpoint_write: bool = False
    loader_delay_ms: int = 0
    training_fault: str = ""  # a contract.TRAINING_FAULTS value the container plants in itself
    duplicate_events: bool = False
    _fired: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @classmethod
    def parse(cls, specs: list[str] | tuple[str, ...]) -> Faults:
        """Build from ``--fault`` values, e.g. ``["throttle:2", "import-fails"]``."""
        values: dict[str, Any] = {}
        for raw in specs:
            name, _, arg = raw.strip().partition(":")
            try:
                if name == "import-fails":
                    values["import_fails"] = True
                elif name in CREATE_TRAINING_JOB_ERRORS:
                    values["training_job_error_code"] = CREATE_TRAINING_JOB_ERRORS[name]
                    values["training_job_error_count"] = int(arg or 1)
                elif name == "kill-checkpoint-write":
                    values["kill_checkpoint_write"] = True
                elif name == "rule-finds-issues":
                    values["loader_delay_ms"] = int(arg or RULE_FINDS_ISSUES_DELAY_MS)
                elif name == "loader-delay-ms":
                    values["loader_delay_ms"] = int(arg)
                elif name == contract.FAULT_VANISHING_GRADIENT and not arg:
                    values["training_fault"] = name
                elif name == "duplicate-events" and not arg:
                    values["duplicate_events"] = True
                else:
                    raise FaultSpecError(f"unknown fault {raw!r}; use one of: {', '.join(FAULT_NAMES)}")
            except ValueError as exc:
                if isinstance(exc, FaultSpecError):
                    raise
                raise FaultSpecError(f"fault {raw!r} needs a whole number after ':' (e.g. {name}:2)") from exc
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Faults:
        return cls(**{k: v for k, v in data.items() if not k.startswith("_")})

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Faults:
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else cls()

    def parameter_overrides(self) -> dict[str, str]:
        """Stack parameters a fault needs to be observable in a short run."""
        return {PATIENCE_PARAMETER: str(RULE_FINDS_ISSUES_PATIENCE)} if self.loader_delay_ms > 0 else {}

    def _fire(self, key: str, limit: int) -> bool:
        with self._lock:
            fired = self._fired.get(key, 0)
            if fired >= limit:
                return False
            self._fired[key] = fired + 1
            return True

    def redelivery_delay(self) -> float:
        """Seconds until the second delivery of an event (the emulated EventBridge's hook); counted."""
        with self._lock:
            self._fired["redelivered"] = self._fired.get("redelivered", 0) + 1
        return random.uniform(*REDELIVERY_SECONDS)

    @property
    def redelivered(self) -> int:
        """Events delivered a second time so far."""
        with self._lock:
            return self._fired.get("redelivered", 0)

    # The SageMaker emulator's hooks (retrain.embedded.sagemaker.spot.SageMakerFaults).
    def create_training_job_error(self, job_name: str) -> str | None:
        if self.training_job_error_code and self._fire("create", self.training_job_error_count):
            return self.training_job_error_code
        return None

    def kill_during_checkpoint_write(self, job_name: str) -> bool:
        return self.kill_checkpoint_write and self._fire("kill", 1)

    # The FSx emulation's hook.
    def import_task_fails(self, file_system_id: str) -> bool:
        return self.import_fails and self._fire("import", 1)

    def training_request(self, action: str, request: dict[str, Any]) -> dict[str, Any]:
        """A CreateTrainingJob / CreateHyperParameterTuningJob request with the container's fault knobs set,
        so the container really runs slow (or really does not learn) and the rule check really finds it."""
        knob: dict[str, str] = {}
        if self.loader_delay_ms:
            # In-process loading: with loader workers prefetching, the delay would overlap the compute.
            knob = {LOADER_DELAY_HYPERPARAMETER: str(self.loader_delay_ms), WORKERS_HYPERPARAMETER: "0"}
        if self.training_fault:
            knob[TRAINING_FAULT_HYPERPARAMETER] = self.training_fault
        if not knob:
            return request
        out = dict(request)
        if action == "create_training_job":
            out["HyperParameters"] = {**(request.get("HyperParameters") or {}), **knob}
        elif action == "create_hyper_parameter_tuning_job":
            definitions = [
                request.get("TrainingJobDefinition"),
                *(request.get("TrainingJobDefinitions") or []),
            ]
            for definition in filter(None, definitions):
                definition["StaticHyperParameters"] = {
                    **(definition.get("StaticHyperParameters") or {}),
                    **knob,
                }
        return out


class FaultingSageMaker:
    """The SageMaker service the state machine reaches, with the loader-delay fault applied to requests."""

    def __init__(self, service: Any, faults: Faults) -> None:
        self._service, self._faults = service, faults

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._service, name)
        if name not in ("create_training_job", "create_hyper_parameter_tuning_job"):
            return method

        def call(**request: Any) -> Any:
            return method(**self._faults.training_request(name, request))

        return call
