"""Debugger rules for every account: smdebug `Rule` subclasses evaluated over one job's tensors and
profile, each giving NoIssuesFound, IssuesFound (with the step and the numbers) or Error."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from retrain_contract import container as contract
from retrain_contract import rules as contract_rules
from retrain_training.profiler import read_profile
from retrain_training.rules.system import (
    SYSTEM_RULES,
    CPUBottleneck,
    IOBottleneck,
    LowGPUUtilization,
    StepOutlier,
    SystemRule,
)
from retrain_training.rules.tensors import (
    TENSOR_RULES,
    DetailedRule,
    ExplodingTensor,
    LossNotDecreasing,
    Overfit,
    VanishingGradient,
)

NO_ISSUES = contract_rules.NO_ISSUES
ISSUES = contract_rules.ISSUES
ERROR = contract_rules.ERROR
INSUFFICIENT_DATA = contract_rules.INSUFFICIENT_DATA
SUSPECTED = contract_rules.SUSPECTED
RULE_NAMES = contract_rules.RULE_NAMES
if (*TENSOR_RULES, *SYSTEM_RULES) != RULE_NAMES:
    raise ImportError(
        f"the rules {[*TENSOR_RULES, *SYSTEM_RULES]} are not retrain_contract.rules' {RULE_NAMES}"
    )
# Collections a tensor rule needs; a rule whose collection is absent cannot say anything.
_NEEDS = {"VanishingGradient": "gradients", "LossNotDecreasing": "losses", "Overfit": "losses"}


@dataclass(frozen=True)
class RuleResult:
    rule: str
    status: str
    step: int | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge(rule: DetailedRule, points: list[int], name: str) -> RuleResult:
    """`rule` invoked at each of `points` in order: its verdict, the first issue found ending it."""
    from smdebug.exceptions import (
        RuleEvaluationConditionMet,
        StepUnavailable,
        TensorUnavailable,
        TensorUnavailableForStep,
    )

    for point in points:
        try:
            rule.invoke(point)
        except (StepUnavailable, TensorUnavailable, TensorUnavailableForStep):
            continue
        except RuleEvaluationConditionMet as met:
            return RuleResult(name, ISSUES, int(met.step), rule.detail)
    if rule.suspected:
        return RuleResult(name, SUSPECTED, rule.suspected_step, rule.suspected)
    missing = rule.missing_verdict()
    if missing:
        return RuleResult(name, INSUFFICIENT_DATA, None, missing)
    return RuleResult(name, NO_ISSUES, None, rule.detail or f"{rule.checked} data points checked")


def _has_tensors(tensors_dir: Path) -> bool:
    return tensors_dir.is_dir() and any(tensors_dir.glob("events/*/*.tfevents"))


def read_training_facts(tensors_dir: Path) -> dict[str, Any]:
    """The job's contract.TRAINING_FACTS_FILE beside its tensors; empty for a job that wrote none (a
    managed DebugHookConfig's, or one from before the file existed)."""
    path = tensors_dir.parent / contract.TRAINING_FACTS_FILE
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return facts if isinstance(facts, dict) else {}


def with_facts(
    parameters: Mapping[str, Mapping[str, Any]], facts: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """`parameters` with what the job's facts tell the rules, where the parameters do not say it."""
    merged = {name: dict(values) for name, values in parameters.items()}
    if facts.get("validation_images"):
        merged.setdefault("Overfit", {}).setdefault("validation_images", int(facts["validation_images"]))
    if facts.get("labels"):
        merged.setdefault("LossNotDecreasing", {}).setdefault("labels", int(facts["labels"]))
    return merged


def evaluate_tensor_rules(
    tensors_dir: Path,
    parameters: Mapping[str, Mapping[str, Any]],
    names: tuple[str, ...] = tuple(TENSOR_RULES),
) -> list[RuleResult]:
    if not _has_tensors(tensors_dir):
        why = (
            "does not exist" if not tensors_dir.exists() else "holds no saved steps (no events/*/*.tfevents)"
        )
        detail = (
            f"no Debugger tensors: {tensors_dir} {why}; train with debug-hook true and a debug-interval "
            "no larger than the number of steps"
        )
        return [RuleResult(name, ERROR, None, detail) for name in names]
    from smdebug.trials import create_trial

    # The files are complete and local when a Processing job runs: no wait for late S3 writes.
    os.environ.setdefault("SMDEBUG_TRAINING_END_DELAY_REFRESH", "0")
    trial = create_trial(str(tensors_dir))
    steps = sorted(trial.steps())
    parameters = with_facts(parameters, read_training_facts(tensors_dir))
    results = []
    for name in names:
        needed = _NEEDS.get(name)
        if needed and not trial.tensor_names(collection=needed):
            detail = (
                f"no tensors in the '{needed}' collection under {tensors_dir}; the hook must save {needed}"
            )
            results.append(RuleResult(name, ERROR, None, detail))
            continue
        try:
            rule = TENSOR_RULES[name](trial, **dict(parameters.get(name, {})))
            results.append(judge(rule, steps, name))
        except Exception as error:  # one rule's failure must not hide the others' results
            results.append(RuleResult(name, ERROR, None, f"{type(error).__name__}: {error}"))
    return results


def evaluate_system_rules(
    profile_dir: Path,
    parameters: Mapping[str, Mapping[str, Any]],
    names: tuple[str, ...] = tuple(SYSTEM_RULES),
) -> list[RuleResult]:
    profile = read_profile(profile_dir)
    if not profile.steps and not profile.system:
        detail = f"no system profile: {profile_dir} holds no samples or step timings"
        return [RuleResult(name, ERROR, None, detail) for name in names]
    results = []
    for name in names:
        try:
            rule: SystemRule = SYSTEM_RULES[name](profile, **dict(parameters.get(name, {})))
            results.append(judge(rule, list(rule.datapoints()), name))
        except Exception as error:
            results.append(RuleResult(name, ERROR, None, f"{type(error).__name__}: {error}"))
    return results


def evaluate(
    tensors_dir: Path,
    profile_dir: Path,
    parameters: Mapping[str, Mapping[str, Any]] | None = None,
    names: tuple[str, ...] = RULE_NAMES,
) -> list[RuleResult]:
    """Every named rule, in the order given; unknown names are refused before anything runs."""
    unknown = [n for n in names if n not in RULE_NAMES]
    if unknown:
        raise ValueError(f"unknown rules {unknown}; known rules are {list(RULE_NAMES)}")
    params = parameters or {}
    unknown = [n for n in params if n not in RULE_NAMES]
    if unknown:
        raise ValueError(f"parameters for unknown rules {unknown}; known rules are {list(RULE_NAMES)}")
    by_name: dict[str, RuleResult] = {}
    tensor_names = tuple(n for n in names if n in TENSOR_RULES)
    system_names = tuple(n for n in names if n in SYSTEM_RULES)
    if tensor_names:
        by_name.update({r.rule: r for r in evaluate_tensor_rules(tensors_dir, params, tensor_names)})
    if system_names:
        by_name.update({r.rule: r for r in evaluate_system_rules(profile_dir, params, system_names)})
    return [by_name[n] for n in names]


__all__ = [
    "ERROR",
    "INSUFFICIENT_DATA",
    "ISSUES",
    "NO_ISSUES",
    "RULE_NAMES",
    "SUSPECTED",
    "CPUBottleneck",
    "ExplodingTensor",
    "IOBottleneck",
    "LossNotDecreasing",
    "LowGPUUtilization",
    "Overfit",
    "RuleResult",
    "StepOutlier",
    "VanishingGradient",
    "evaluate",
    "judge",
]
