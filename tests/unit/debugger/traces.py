"""A job's saved tensors replayed as an smdebug trial, for the rules: from a real train.py job's trace
(bench/rules.py writes them into fixtures/) or from a series written in a test."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from smdebug.core.modes import ModeKeys
from smdebug.exceptions import TensorUnavailableForStep

FIXTURES = Path(__file__).parent / "fixtures"
LOSS = "loss"
LOSS_SCALE = "loss_scale"


class Replay:
    """Per global step, what the hook saved (bench.rules.trace's shape: mode T or E, its mode step, the
    loss, the loss scale, each gradient's mean |g| and each weight's L2 norm), read through the calls
    the rules make on an smdebug trial."""

    def __init__(self, saves: list[dict[str, Any]]) -> None:
        self.saves = {int(s["step"]): s for s in saves}
        self.logger = logging.getLogger(__name__)
        self.dynamic_refresh = False  # smdebug's Rule.invoke sets it around each step

    def wait_for_steps(self, steps: list[int], mode: object = None) -> None:
        """Every step is saved already: nothing to wait for (smdebug's Rule.invoke asks)."""

    def _names(self, key: str) -> list[str]:
        return sorted({name for s in self.saves.values() for name in s.get(key, {})})

    def tensor_names(self, collection: str | None = None, regex: object = None) -> list[str]:
        if collection == "losses":
            return [LOSS] if any(LOSS in s for s in self.saves.values()) else []
        if collection == LOSS_SCALE:
            return [LOSS_SCALE] if any(LOSS_SCALE in s for s in self.saves.values()) else []
        if collection in ("gradients", "weights"):
            return self._names(collection)
        if collection is None and regex is None:
            return [*self.tensor_names("losses"), *self._names("gradients"), *self._names("weights")]
        return []

    def tensor(self, name: str) -> ReplayedTensor:
        return ReplayedTensor(self, name)

    def steps(self) -> list[int]:
        return sorted(self.saves)

    def mode(self, step: int) -> ModeKeys:
        return ModeKeys.TRAIN if self.saves[step]["mode"] == "T" else ModeKeys.EVAL

    def mode_step(self, step: int) -> int:
        return int(self.saves[step]["mode_step"])


class ReplayedTensor:
    def __init__(self, trial: Replay, name: str) -> None:
        self.trial, self.name = trial, name

    def _value(self, step: int) -> float | None:
        save = self.trial.saves.get(step, {})
        if self.name in (LOSS, LOSS_SCALE):
            value = save.get(self.name)
            return None if value is None else float(value)
        for key in ("gradients", "weights"):
            if self.name in save.get(key, {}):
                return float(save[key][self.name])
        return None

    def steps(self) -> list[int]:
        return [step for step in self.trial.steps() if self._value(step) is not None]

    def value(self, step: int) -> float:
        value = self._value(step)
        if value is None:
            raise TensorUnavailableForStep(self.name, step)
        return value

    def reduction_value(self, step: int, reduction: str, abs: bool = False) -> float:
        return self.value(step)


def fixture(name: str) -> tuple[Replay, dict[str, Any]]:
    """A real job's replay and its training facts, from fixtures/<name> (bench/rules.py --fixtures)."""
    saved = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return Replay(saved["saves"]), dict(saved.get("facts") or {})


def training(
    losses: list[float],
    *,
    every: int = 5,
    gradients: list[float] | None = None,
    weights_move: bool = True,
    loss_scale: float | None = None,
) -> Replay:
    """A training job that saved `losses` every `every` steps and, at its first and last save (or at
    every save, given `gradients`), one gradient's mean |g| and one weight's L2 norm, which changes
    between them unless `weights_move` is False."""
    saves: list[dict[str, Any]] = []
    last = len(losses) - 1
    for index, loss in enumerate(losses):
        save: dict[str, Any] = {"step": index * every, "mode": "T", "mode_step": index * every, LOSS: loss}
        if gradients is not None:
            save["gradients"] = {"gradient/Net_first.weight": gradients[index]}
        if index in (0, last) or gradients is not None:
            norm = 1.0 + (0.01 * index if weights_move else 0.0)
            save["weights"] = {"Net_first.weight": norm}
            save.setdefault("gradients", {"gradient/Net_first.weight": 1e-3})
        if loss_scale is not None and "gradients" in save:
            save[LOSS_SCALE] = loss_scale
        saves.append(save)
    return Replay(saves)
