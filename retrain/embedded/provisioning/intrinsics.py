"""CloudFormation's intrinsic functions, evaluated before moto's CloudFormation runs: ``Ref``, ``Fn::GetAtt``,
``Fn::Sub`` and the condition and rule functions, for the resources created outside moto."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.provisioning.sam import ProvisioningError


def substitute(node: Any, values: dict[str, str], attributes: dict[tuple[str, str], str]) -> Any:
    """Replace Ref/GetAtt/${} of resources created outside moto's CloudFormation by their real values."""
    if isinstance(node, list):
        return [substitute(item, values, attributes) for item in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Ref"} and node["Ref"] in values:
        return values[node["Ref"]]
    if set(node) == {"Fn::GetAtt"}:
        target = node["Fn::GetAtt"]
        parts = target.split(".", 1) if isinstance(target, str) else target
        if (parts[0], parts[1]) in attributes:
            return attributes[(parts[0], parts[1])]
    if set(node) == {"Fn::Sub"}:
        sub = node["Fn::Sub"]
        text, variables = (sub, {}) if isinstance(sub, str) else (sub[0], sub[1])

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in values and name not in variables:
                return values[name]
            logical, _, attr = name.partition(".")
            if attr and (logical, attr) in attributes:
                return attributes[(logical, attr)]
            return match.group(0)

        text = re.sub(r"\$\{([^!}][^}]*)\}", replace, text)
        variables = substitute(variables, values, attributes)
        return {"Fn::Sub": [text, variables] if variables else text}
    return {key: substitute(value, values, attributes) for key, value in node.items()}


def _no_value(value: Any, item: Any) -> bool:
    """An intrinsic that resolved to nothing (AWS::NoValue)."""
    return value is None and isinstance(item, dict) and len(item) == 1 and next(iter(item)) in _FUNCTIONS


class Intrinsics:
    """Evaluates CloudFormation intrinsics to plain values, for the resources created outside moto."""

    def __init__(
        self,
        values: dict[str, Any],
        attributes: dict[tuple[str, str], str],
        *,
        conditions: dict[str, Any] | None = None,
        mappings: dict[str, Any] | None = None,
    ) -> None:
        self.values, self.attributes = values, attributes
        self._conditions = conditions or {}
        self._mappings = mappings or {}
        self._evaluated: dict[str, bool] = {}

    def condition(self, name: str) -> bool:
        if name not in self._evaluated:
            if name not in self._conditions:
                raise ProvisioningError(f"condition {name!r} is not declared in the template's Conditions")
            self._evaluated[name] = bool(self.resolve(self._conditions[name]))
        return self._evaluated[name]

    def resolve(self, node: Any) -> Any:
        """`node` with its intrinsics resolved; an item or property that resolves to AWS::NoValue (an
        intrinsic giving None, e.g. !If [cond, x, !Ref AWS::NoValue]) is left out, as CloudFormation does."""
        if isinstance(node, list):
            return [
                value for value, item in ((self.resolve(i), i) for i in node) if not _no_value(value, item)
            ]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            function = _FUNCTIONS.get(key)
            if function is not None:
                return function(self, arg)
        resolved = ((key, self.resolve(value), value) for key, value in node.items())
        return {key: value for key, value, item in resolved if not _no_value(value, item)}

    def _ref(self, arg: Any) -> Any:
        if arg not in self.values:
            raise ProvisioningError(f"cannot resolve Ref {arg!r} before the stack exists")
        return self.values[arg]

    def _get_att(self, arg: Any) -> Any:
        parts = arg.split(".", 1) if isinstance(arg, str) else arg
        if (parts[0], parts[1]) not in self.attributes:
            raise ProvisioningError(f"cannot resolve GetAtt {parts!r} before the stack exists")
        return self.attributes[(parts[0], parts[1])]

    def _sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                return str(variables[name])
            if "." in name:
                return str(self._get_att(name.split(".", 1)))
            return str(self._ref(name))

        return re.sub(r"\$\{([^!}][^}]*)\}", replace, text)

    def _find_in_map(self, arg: Any) -> Any:
        name, top, second = (self.resolve(a) for a in arg)
        return self._mappings[name][top][second]

    def _equals(self, arg: Any) -> bool:
        left, right = self.resolve(arg)
        return str(left) == str(right)

    def _contains(self, arg: Any) -> bool:
        values, value = self.resolve(arg)
        return str(value) in [str(v) for v in values]

    def _each_member_equals(self, arg: Any) -> bool:
        values, value = self.resolve(arg)
        return all(str(v) == str(value) for v in values)

    def _each_member_in(self, arg: Any) -> bool:
        values, allowed = self.resolve(arg)
        return all(str(v) in [str(a) for a in allowed] for v in values)


# The intrinsic (or condition) function of a one-key node -> how Intrinsics evaluates its argument.
_FUNCTIONS: Final[dict[str, Callable[[Intrinsics, Any], Any]]] = {
    "Ref": Intrinsics._ref,
    "Fn::GetAtt": Intrinsics._get_att,
    "Fn::Sub": Intrinsics._sub,
    "Fn::Join": lambda self, arg: str(arg[0]).join(str(v) for v in self.resolve(arg[1])),
    "Fn::Select": lambda self, arg: self.resolve(arg[1])[int(self.resolve(arg[0]))],
    "Fn::Split": lambda self, arg: str(self.resolve(arg[1])).split(arg[0]),
    "Fn::If": lambda self, arg: self.resolve(arg[1] if self.condition(arg[0]) else arg[2]),
    "Fn::FindInMap": Intrinsics._find_in_map,
    "Fn::Equals": Intrinsics._equals,
    "Fn::Contains": Intrinsics._contains,
    "Fn::EachMemberEquals": Intrinsics._each_member_equals,
    "Fn::EachMemberIn": Intrinsics._each_member_in,
    "Fn::And": lambda self, arg: all(self.resolve(a) for a in arg),
    "Fn::Or": lambda self, arg: any(self.resolve(a) for a in arg),
    "Fn::Not": lambda self, arg: not self.resolve(arg[0]),
    "Condition": lambda self, arg: self.condition(arg),
}


NO_VALUE: Final = {"Ref": "AWS::NoValue"}


def without_no_value(
    template: dict[str, Any], parameters: dict[str, Any], *, region: str = REGION
) -> dict[str, Any]:
    """The template with every list item and property whose Fn::If picks AWS::NoValue left out.

    CloudFormation removes them; moto's CloudFormation keeps a null (a policy with a null statement,
    which no IAM evaluator reads). The conditions are evaluated from the parameters (defaults filled in),
    the pseudo parameters of the stack's region and account, and the template's Mappings."""
    declared = template.get("Parameters", {})
    values: dict[str, Any] = {
        "AWS::Region": region,
        "AWS::AccountId": ACCOUNT_ID,
        "AWS::Partition": "aws-cn" if region.startswith("cn-") else "aws",
        "AWS::URLSuffix": "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com",
    }
    values.update({k: str(v["Default"]) for k, v in declared.items() if "Default" in v})
    values.update({k: v for k, v in parameters.items()})
    intrinsics = Intrinsics(
        values, {}, conditions=template.get("Conditions"), mappings=template.get("Mappings")
    )

    def picks_no_value(node: Any) -> bool:
        if not (isinstance(node, dict) and list(node) == ["Fn::If"]):
            return False
        condition, when_true, when_false = node["Fn::If"]
        return bool((when_true if intrinsics.condition(str(condition)) else when_false) == NO_VALUE)

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node if not picks_no_value(item)]
        if isinstance(node, dict):
            return {key: walk(value) for key, value in node.items() if not picks_no_value(value)}
        return node

    return {**template, "Resources": walk(template["Resources"])}
