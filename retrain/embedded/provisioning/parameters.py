"""The template's parameters: the values the embedded stack gives them, and their constraints and Rules,
checked as CloudFormation checks them before it creates anything."""

from __future__ import annotations

import re
from typing import Any

from retrain.embedded.account import ACCOUNT_ID
from retrain.embedded.provisioning.intrinsics import Intrinsics
from retrain.embedded.provisioning.sam import ProvisioningError, embedded_parameters


def stack_parameters(
    template: dict[str, Any],
    overrides: dict[str, str],
    *,
    fault_overrides: dict[str, str],
    template_name: str,
    region: str,
) -> dict[str, str]:
    """The stack's parameter values: the template's Defaults, embedded values for those without one,
    then the faults' and the caller's overrides (an override of no declared parameter is refused)."""
    declared = template.get("Parameters", {})
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        raise ProvisioningError(
            f"parameter override(s) {unknown} are not parameters of {template_name}; "
            f"it declares {sorted(declared)}"
        )
    values = {k: str(v["Default"]) for k, v in declared.items() if "Default" in v}
    # Parameters without a Default (the image, the VPC): values AWS would accept; the emulation runs
    # training_image/ itself and needs no network.
    values.update({k: v for k, v in embedded_parameters(region).items() if k in declared and k not in values})
    values.update(fault_overrides)
    values.update({k: str(v) for k, v in overrides.items()})
    return values


def check_parameters(template: dict[str, Any], parameters: dict[str, str]) -> None:
    """Refuse parameter values as CloudFormation does before it creates anything: AllowedValues,
    AllowedPattern (the whole value), lengths, numbers and their range; the ConstraintDescription
    is the message when the template gives one."""
    problems = []
    for name, declared in template.get("Parameters", {}).items():
        value = parameters.get(name)
        if value is None:
            problems.append(f"Parameter '{name}' has no value: it has no Default, so give one")
            continue
        broken = _parameter_problem(declared, value)
        if broken:
            described = declared.get("ConstraintDescription")
            problems.append(
                f"Parameter '{name}' failed to satisfy constraint: {described}"
                if described
                else f"Parameter '{name}' {broken}"
            )
    if problems:
        raise ProvisioningError("; ".join(problems))


def _parameter_problem(declared: dict[str, Any], value: str) -> str | None:
    kind = str(declared.get("Type", "String"))
    items = [v.strip() for v in value.split(",")] if "List" in kind else [value]
    for item in items:
        problem = _text_problem(declared, item) or (
            _number_problem(declared, item) if kind == "Number" else None
        )
        if problem:
            return problem
    return None


def _text_problem(declared: dict[str, Any], item: str) -> str | None:
    """AllowedValues, AllowedPattern (the whole value) and the length limits of one value."""
    allowed = declared.get("AllowedValues")
    if allowed is not None and item not in [str(a) for a in allowed]:
        return f"must be one of {[str(a) for a in allowed]}, not {item!r}"
    pattern = declared.get("AllowedPattern")
    if pattern is not None and re.fullmatch(str(pattern), item) is None:
        return f"must match pattern {pattern}, not {item!r}"
    if "MinLength" in declared and len(item) < int(declared["MinLength"]):
        return f"must be at least {declared['MinLength']} characters"
    if "MaxLength" in declared and len(item) > int(declared["MaxLength"]):
        return f"must be at most {declared['MaxLength']} characters"
    return None


def _number_problem(declared: dict[str, Any], item: str) -> str | None:
    """A Number parameter's value: a number, within MinValue and MaxValue."""
    try:
        number = float(item)
    except ValueError:
        return f"must be a number, not {item!r}"
    if "MinValue" in declared and number < float(declared["MinValue"]):
        return f"must be at least {declared['MinValue']}"
    if "MaxValue" in declared and number > float(declared["MaxValue"]):
        return f"must be at most {declared['MaxValue']}"
    return None


def check_rules(
    template: dict[str, Any], parameters: dict[str, str], *, region: str, stack_name: str
) -> None:
    """The template's Rules, as CloudFormation checks them before it creates anything: every assertion of
    a rule whose RuleCondition holds must hold, else the AssertDescription is the error."""
    values: dict[str, Any] = {
        "AWS::Region": region,
        "AWS::AccountId": ACCOUNT_ID,
        "AWS::Partition": "aws-cn" if region.startswith("cn-") else "aws",
        "AWS::StackName": stack_name,
        **parameter_values(template, parameters),
    }
    intrinsics = Intrinsics(values, {}, conditions=template.get("Conditions"))
    failed = []
    for name, rule in (template.get("Rules") or {}).items():
        if "RuleCondition" in rule and not intrinsics.resolve(rule["RuleCondition"]):
            continue
        for assertion in rule.get("Assertions", []):
            if not intrinsics.resolve(assertion["Assert"]):
                failed.append(f"{name}: {assertion.get('AssertDescription', 'an assertion failed')}")
    if failed:
        raise ProvisioningError("Template rule(s) failed: " + "; ".join(failed))


def parameter_values(template: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    """Ref values of the parameters: list parameters as lists, the rest as given."""
    declared = template.get("Parameters", {})
    return {
        name: [v.strip() for v in value.split(",")]
        if "List" in str(declared.get(name, {}).get("Type", ""))
        else value
        for name, value in parameters.items()
    }
