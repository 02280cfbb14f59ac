"""Nested stacks (``AWS::CloudFormation::Stack`` with a local ``TemplateURL``), created in place.

On AWS, ``sam deploy`` uploads the nested template and CloudFormation makes it a stack of its own when the
resource's Condition holds. The embedded stack has one stack: the nested template's resources are put into
the parent with the parent resource's Condition, its parameters replaced by the values the parent passes
(a ``Fn::Sub`` string's ``${Param}`` through Fn::Sub's own variable map), and every
``Fn::GetAtt [<stack>, Outputs.<name>]`` of the parent replaced by that output's value. What is created is
what AWS creates; the nested stack's own record (DescribeStacks of the child) is not emulated.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

NESTED_STACK: Final = "AWS::CloudFormation::Stack"
_SUB_VARIABLE: Final = re.compile(r"\$\{([^}!.]+)\}")


class NestedStackError(RuntimeError):
    """A nested stack the embedded stack cannot create in place; the message says what."""


def _walk(value: Any, visit: Callable[[Any], Any | None]) -> Any:
    """`value` with every node `visit` returns a replacement for replaced (depth first, top down)."""
    replaced = visit(value)
    if replaced is not None:
        return replaced
    if isinstance(value, dict):
        return {k: _walk(v, visit) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, visit) for v in value]
    return value


def _parameter_values(logical_id: str, child: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The value each of the child's parameters gets: the parent's expression, or the child's Default."""
    values: dict[str, Any] = {}
    for name, spec in child.get("Parameters", {}).items():
        if name in given:
            value = given[name]
            if spec.get("Type") == "CommaDelimitedList":
                joined = value.get("Fn::Join") if isinstance(value, dict) else None
                # the list the parent joined to pass it, else the string split as CloudFormation does
                value = joined[1] if joined and joined[0] == "," else {"Fn::Split": [",", value]}
            values[name] = value
        elif "Default" in spec:
            values[name] = spec["Default"]
        else:
            raise NestedStackError(f"{logical_id}: the nested template's parameter {name} is not given")
    unknown = set(given) - set(values)
    if unknown:
        raise NestedStackError(f"{logical_id}: the nested template has no parameter {sorted(unknown)}")
    return values


def _with_parameters(value: Any, parameters: dict[str, Any]) -> Any:
    def visit(node: Any) -> Any | None:
        if isinstance(node, dict) and set(node) == {"Ref"} and node["Ref"] in parameters:
            return copy.deepcopy(parameters[node["Ref"]])
        if isinstance(node, dict) and set(node) == {"Fn::Sub"}:
            text, variables = (node["Fn::Sub"], {}) if isinstance(node["Fn::Sub"], str) else node["Fn::Sub"]
            used = {n: copy.deepcopy(parameters[n]) for n in _SUB_VARIABLE.findall(text) if n in parameters}
            inner = {k: _with_parameters(v, parameters) for k, v in variables.items()}
            return {"Fn::Sub": [text, {**used, **inner}]} if used or inner else {"Fn::Sub": text}
        return None

    return _walk(value, visit)


def inline_nested_stacks(template: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """`template` with each nested stack's resources in place of the stack (see the module)."""
    out = copy.deepcopy(template)
    outputs: dict[tuple[str, str], Any] = {}
    for logical_id, resource in list(out["Resources"].items()):
        if resource.get("Type") != NESTED_STACK:
            continue
        props = resource.get("Properties", {})
        url = props.get("TemplateURL")
        if not isinstance(url, str) or "://" in url:
            raise NestedStackError(f"{logical_id}: TemplateURL must be a file next to the template")
        from retrain.embedded.provisioning.sam import load_template

        child = load_template((base_dir / url).resolve())
        parameters = _parameter_values(logical_id, child, props.get("Parameters", {}))
        del out["Resources"][logical_id]
        for child_id, child_resource in child["Resources"].items():
            if child_id in out["Resources"]:
                raise NestedStackError(f"{logical_id}: its resource {child_id} is one of the parent's too")
            if "Condition" in child_resource:
                raise NestedStackError(f"{logical_id}: {child_id} has a Condition of its own")
            placed = _with_parameters(child_resource, parameters)
            if "Condition" in resource:
                placed["Condition"] = resource["Condition"]
            out["Resources"][child_id] = placed
        for name, output in child.get("Outputs", {}).items():
            outputs[(logical_id, f"Outputs.{name}")] = _with_parameters(output["Value"], parameters)

    def visit(node: Any) -> Any | None:
        if isinstance(node, dict) and set(node) == {"Fn::GetAtt"}:
            target = tuple(node["Fn::GetAtt"])
            if target in outputs:
                return copy.deepcopy(outputs[target])
            if target[0] in {stack for stack, _ in outputs}:
                raise NestedStackError(f"{target[0]} has no output {target[1]}")
        return None

    return dict(_walk(out, visit))
