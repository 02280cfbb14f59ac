"""Which resource types the stack creates for each documented parameter combination, and which of them
CloudFormation does not offer in a region where the stack claims to deploy.

The template is translated as the SAM transform translates it (aws-sam-translator, through
:mod:`retrain.embedded.provisioning.sam`), so a SAM type counts as what it becomes: a function is an
``AWS::Lambda::Function`` and its ``AWS::IAM::Role``, its events ``AWS::Events::Rule`` and
``AWS::Lambda::Permission`` or ``AWS::Lambda::EventSourceMapping``, a layer an
``AWS::Lambda::LayerVersion``, a state machine an ``AWS::StepFunctions::StateMachine`` and its role.
SAM copies a resource's ``Condition`` onto everything it generates from it, so a resource exists where its
Condition holds for the parameter values and the region (the template's Conditions and Mappings,
evaluated here without AWS).

The types a region offers are cfn-lint's resource provider schema list of that region
(``cfnlint/data/schemas/providers/<region>.json``, with ``sam.json``), read as cfn-lint reads it: a region
without a file of its own gets us-east-1's. The schemas project writes no list of their own for the
isolated-partition and sovereign-cloud regions either (us-iso*, eu-isoe-west-1,
eusc-de-east-1): it copies us-east-1's there. :func:`has_own_type_list` tells those regions
apart; for them the data cannot show a missing type.

The regions the stack claims are every region that offers SageMaker (botocore's endpoint data,
:func:`retrain.managed_debugger.sagemaker_regions`), and the combinations are the values docs/parameters.md's
Configuration table documents for every parameter a resource's Condition reads (:data:`COMBINATIONS`).

``python -m retrain.dev.regions [--template T] [--check]`` prints, per combination, the missing types with
their regions and the template Rules that refuse the combination there; ``--check`` exits 1 when a region
that misses a type is not refused.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from retrain.embedded.account import ACCOUNT_ID
from retrain.embedded.provisioning.intrinsics import Intrinsics
from retrain.embedded.provisioning.parameters import parameter_values
from retrain.embedded.provisioning.sam import embedded_parameters, load_template, package, translate
from retrain.managed_debugger import sagemaker_regions

REPO: Final = Path(__file__).resolve().parents[2]
TEMPLATE: Final = REPO / "template.yaml"
STACK: Final = "retrain"
# The region the template is translated in: the types SAM generates do not depend on it.
TRANSLATION_REGION: Final = "us-east-1"

# --- the documented parameter combinations -------------------------------------------------------------

FILE_SYSTEM_ID: Final = "fs-0123456789abcdef0"
MLFLOW_APP_ARN: Final = f"arn:aws:sagemaker:us-east-1:{ACCOUNT_ID}:mlflow-app/app-0123456789ab"
MLFLOW_SERVER_ARN: Final = f"arn:aws:sagemaker:us-east-1:{ACCOUNT_ID}:mlflow-tracking-server/retrain"


@dataclass(frozen=True)
class Choice:
    """One documented setting of one or more parameters, e.g. an existing file system (its id and mount)."""

    label: str
    values: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Combination:
    """Parameter values docs/parameters.md documents together; every other parameter keeps its Default."""

    choices: tuple[Choice, ...]

    @property
    def label(self) -> str:
        return " ".join(choice.label for choice in self.choices)

    @property
    def parameters(self) -> dict[str, str]:
        return {name: value for choice in self.choices for name, value in choice.values}


# Per parameter a resource's Condition reads (docs/parameters.md), the values it documents; the defaults
# first. FileSystemId comes with its FileSystemMountName (the deploy refuses one without the other) and
# matters with DataSource fsx only.
DOCUMENTED: Final[tuple[tuple[Choice, ...], ...]] = (
    (
        Choice("DataSource=fsx FileSystemId=''", (("DataSource", "fsx"), ("FileSystemId", ""))),
        Choice(
            f"DataSource=fsx FileSystemId={FILE_SYSTEM_ID}",
            (("DataSource", "fsx"), ("FileSystemId", FILE_SYSTEM_ID), ("FileSystemMountName", "abcdefgh")),
        ),
        Choice("DataSource=s3", (("DataSource", "s3"),)),
    ),
    (
        Choice("NotificationEmail=''", (("NotificationEmail", ""),)),
        Choice("NotificationEmail=ops@example.com", (("NotificationEmail", "ops@example.com"),)),
    ),
    (
        Choice("MlflowTracking=''", (("MlflowTracking", ""),)),
        Choice("MlflowTracking=create", (("MlflowTracking", "create"),)),
        Choice("MlflowTracking=<mlflow-app ARN>", (("MlflowTracking", MLFLOW_APP_ARN),)),
        Choice("MlflowTracking=<mlflow-tracking-server ARN>", (("MlflowTracking", MLFLOW_SERVER_ARN),)),
    ),
)
COMBINATIONS: Final = tuple(Combination(choices) for choices in itertools.product(*DOCUMENTED))
DEFAULTS: Final = COMBINATIONS[0]


def claimed_regions() -> list[str]:
    """The regions docs/deploy.md (Regions) says the stack deploys in: every region that offers SageMaker."""
    return sagemaker_regions()


# --- the template, translated ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StackTemplate:
    """A template as written (its Parameters, Rules, Mappings) and as the SAM transform translates it."""

    source: dict[str, Any]
    translated: dict[str, Any]


class _NoUpload:
    def put_object(self, **request: Any) -> None:
        """``sam package`` uploads the code; nothing here reads it."""


def stack_template(template: Path = TEMPLATE) -> StackTemplate:
    """`template` loaded and translated (cached while the file is unchanged). The code folders it names are
    the repository's, so a copy of the template elsewhere translates the same."""
    stat = template.stat()
    return _stack_template(template.resolve(), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _stack_template(template: Path, _mtime_ns: int, _size: int) -> StackTemplate:
    source = load_template(template)
    values = _values(source, {}, TRANSLATION_REGION)
    packaged = package(source, REPO, _NoUpload())
    plain = {k: v for k, v in values.items() if isinstance(v, str)}
    return StackTemplate(source, translate(packaged, plain, TRANSLATION_REGION))


def _values(source: Mapping[str, Any], parameters: Mapping[str, str], region: str) -> dict[str, Any]:
    """Ref values of a deploy in `region`: pseudo parameters, the Defaults, stand-ins for the parameters
    without one (the image, the VPC), then `parameters`."""
    declared = source.get("Parameters", {})
    given = {k: str(v["Default"]) for k, v in declared.items() if "Default" in v}
    given.update({k: v for k, v in embedded_parameters(region).items() if k in declared and k not in given})
    given.update(parameters)
    return {
        "AWS::Region": region,
        "AWS::AccountId": ACCOUNT_ID,
        "AWS::Partition": _partition(region),
        "AWS::StackName": STACK,
        "AWS::URLSuffix": "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com",
        **parameter_values(dict(source), given),
    }


@functools.cache
def _partition(region: str) -> str:
    """The region's partition (botocore's partition data)."""
    return str(_botocore().get_partition_for_region(region))


@functools.cache
def _botocore() -> Any:
    import botocore.session

    return botocore.session.get_session()


def _intrinsics(stack: StackTemplate, parameters: Mapping[str, str], region: str) -> Intrinsics:
    return Intrinsics(
        _values(stack.source, parameters, region),
        {},
        conditions=stack.translated.get("Conditions"),
        mappings=stack.translated.get("Mappings"),
    )


def created_types(
    parameters: Mapping[str, str], region: str, template: Path = TEMPLATE
) -> dict[str, list[str]]:
    """Resource type -> the logical ids of that type the stack creates with `parameters` in `region`
    (types as the SAM transform generates them)."""
    stack = stack_template(template)
    intrinsics = _intrinsics(stack, parameters, region)
    found: dict[str, list[str]] = {}
    for logical_id, resource in stack.translated["Resources"].items():
        condition = resource.get("Condition")
        if condition is None or intrinsics.condition(str(condition)):
            found.setdefault(str(resource["Type"]), []).append(logical_id)
    return dict(sorted(found.items()))


def deciding_parameters(logical_ids: Iterable[str], template: Path = TEMPLATE) -> set[str]:
    """The parameters whose values decide whether these resources exist (what their Conditions read)."""
    stack = stack_template(template)
    resources = stack.translated["Resources"]
    conditions = stack.translated.get("Conditions", {})
    declared = set(stack.source.get("Parameters", {}))
    names = {str(resources[i]["Condition"]) for i in logical_ids if "Condition" in resources[i]}
    return {ref for ref in _condition_refs(conditions, names) if ref in declared}


def condition_parameters(template: Path = TEMPLATE) -> set[str]:
    """Every parameter a resource's Condition reads: the parameters that change which resources exist."""
    stack = stack_template(template)
    return deciding_parameters(stack.translated["Resources"], template)


def _condition_refs(conditions: Mapping[str, Any], names: Iterable[str]) -> set[str]:
    """The Ref targets the named Conditions read, through the Conditions they use."""
    refs: set[str] = set()
    seen: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for key, value in _nodes(conditions[name]):
            if key == "Ref":
                refs.add(str(value))
            elif key == "Condition":
                pending.append(str(value))
    return refs


def _nodes(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) of every mapping in `node`."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key), value
            yield from _nodes(value)
    elif isinstance(node, list):
        for item in node:
            yield from _nodes(item)


# --- the types a region offers (cfn-lint's provider schema lists) ----------------------------------------


def providers_dir() -> Path:
    """cfn-lint's bundled provider schema lists, one file per region."""
    from cfnlint.data import schemas

    return Path(next(iter(schemas.__path__))) / "providers"


def cfn_lint_version() -> str:
    return importlib.metadata.version("cfn-lint")


def schema_date(providers: Path | None = None) -> str:
    """When the schemas project built the bundled lists (its version.json)."""
    version = (providers or providers_dir()).parent / "version.json"
    try:
        return str(json.loads(version.read_text(encoding="utf-8")).get("schema_date", ""))
    except FileNotFoundError:
        return ""


def type_list_file(region: str, providers: Path | None = None) -> Path:
    """The list cfn-lint reads for `region`: its own file, else us-east-1's."""
    directory = providers or providers_dir()
    own = directory / f"{region}.json"
    return own if own.exists() else directory / "us-east-1.json"


@functools.cache
def _read(path: Path) -> frozenset[str]:
    return frozenset(json.loads(path.read_text(encoding="utf-8")))


def offered_types(region: str, providers: Path | None = None) -> frozenset[str]:
    """The resource types cfn-lint's schemas say CloudFormation offers in `region` (SAM's included)."""
    directory = providers or providers_dir()
    sam = directory / "sam.json"
    return _read(type_list_file(region, directory)) | (_read(sam) if sam.exists() else frozenset())


def type_schema(kind: str, region: str, providers: Path | None = None) -> str | None:
    """The resource provider schema (JSON text) cfn-lint ships for `kind` as `region` offers it, or None
    where the region's list has no such type. (SAM's types are a transform's, with no provider schema.)"""
    directory = providers or providers_dir()
    digests = json.loads(type_list_file(region, directory).read_text(encoding="utf-8"))
    digest = digests.get(kind)
    if digest is None:
        return None
    return (directory.parent / "resources" / f"{digest}.json").read_text(encoding="utf-8")


def has_own_type_list(region: str, providers: Path | None = None) -> bool:
    """Whether `region`'s list is its own: not absent (cfn-lint then reads us-east-1's) and not a copy of
    us-east-1's (what the schemas project writes for the isolated and sovereign regions)."""
    directory = providers or providers_dir()
    own = directory / f"{region}.json"
    if not own.exists():
        return False
    return region == "us-east-1" or _read(own) != _read(directory / "us-east-1.json")


def missing_types(
    parameters: Mapping[str, str],
    region: str,
    template: Path = TEMPLATE,
    providers: Path | None = None,
) -> dict[str, list[str]]:
    """Type -> logical ids, of the types the stack creates with `parameters` that `region` does not offer."""
    offered = offered_types(region, providers)
    return {
        kind: ids for kind, ids in created_types(parameters, region, template).items() if kind not in offered
    }


# --- the template's Rules ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """A Rules assertion that fails: the deploy stops before anything is created, with its description."""

    rule: str
    description: str
    reads: frozenset[str]  # the parameters and pseudo parameters the rule reads (RuleCondition, Assert)
    literals: frozenset[str]  # the strings its Assert names (e.g. the regions of a region list)


def refusals(parameters: Mapping[str, str], region: str, template: Path = TEMPLATE) -> list[Refusal]:
    """The template's Rules assertions that fail for `parameters` in `region`, as CloudFormation checks them
    before it creates anything (a rule whose RuleCondition holds must have every assertion hold)."""
    stack = stack_template(template)
    intrinsics = Intrinsics(_values(stack.source, parameters, region), {})
    failed = []
    for name, rule in (stack.source.get("Rules") or {}).items():
        condition = rule.get("RuleCondition")
        if condition is not None and not intrinsics.resolve(condition):
            continue
        for assertion in rule.get("Assertions", []):
            if not intrinsics.resolve(assertion["Assert"]):
                reads = {str(v) for k, v in _nodes([condition, assertion["Assert"]]) if k == "Ref"}
                failed.append(
                    Refusal(
                        rule=str(name),
                        description=" ".join(str(assertion.get("AssertDescription", "")).split()),
                        reads=frozenset(reads),
                        literals=frozenset(_literals(assertion["Assert"])),
                    )
                )
    return failed


def _literals(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from _literals(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key != "Ref":
                yield from _literals(value)


def names_the_refusal(refusal: Refusal, kind: str, parameters: Iterable[str], region: str) -> bool:
    """Whether `refusal` is the one for `kind` missing in `region`: it reads the region and the deciding
    parameters, names the region in its assertion, and its description names the type and the parameters."""
    wanted = set(parameters)
    return (
        "AWS::Region" in refusal.reads
        and region in refusal.literals
        and wanted <= refusal.reads
        and kind in refusal.description
        and all(name in refusal.description for name in wanted)
    )


# --- the report ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One combination in one region: the types missing there and what the Rules say."""

    combination: Combination
    region: str
    missing: dict[str, list[str]]
    refused_by: tuple[Refusal, ...]

    def unrefused(self, template: Path = TEMPLATE) -> list[str]:
        """The missing types no failing Rules assertion names (with their parameters and this region)."""
        return [
            kind
            for kind, ids in self.missing.items()
            if not any(
                names_the_refusal(r, kind, deciding_parameters(ids, template), self.region)
                for r in self.refused_by
            )
        ]


def findings(
    template: Path = TEMPLATE,
    regions: Sequence[str] | None = None,
    combinations: Sequence[Combination] = COMBINATIONS,
) -> list[Finding]:
    """Every documented combination in every claimed region."""
    return [
        Finding(
            combination,
            region,
            missing_types(combination.parameters, region, template),
            tuple(refusals(combination.parameters, region, template)),
        )
        for combination in combinations
        for region in (claimed_regions() if regions is None else regions)
    ]


def report(template: Path = TEMPLATE, regions: Sequence[str] | None = None) -> tuple[list[str], int]:
    """The report's lines, and how many (combination, region, type) are missing but not refused."""
    claimed = claimed_regions() if regions is None else list(regions)
    borrowed = [r for r in claimed if not has_own_type_list(r)]
    providers = providers_dir()
    lines = [
        f"cfn-lint {cfn_lint_version()}: provider schema lists in {providers} "
        f"(schema_date {schema_date(providers) or 'unknown'})",
        f"{len(claimed)} regions claimed (every region botocore lists for SageMaker); "
        f"{len(borrowed)} without a type list of their own (us-east-1's is read): {', '.join(borrowed)}",
    ]
    all_findings = findings(template, claimed)
    resources = stack_template(template).translated["Resources"]
    lines += ["", "Types missing somewhere, over every combination:"]
    for kind in sorted({kind for f in all_findings for kind in f.missing}):
        anywhere = sorted({f.region for f in all_findings if kind in f.missing})
        ids = sorted({i for f in all_findings for i in f.missing.get(kind, [])})
        conditions = sorted({str(resources[i].get("Condition", "(none: always created)")) for i in ids})
        lines.append(
            f"  {kind} ({', '.join(ids)}; Condition {', '.join(conditions)}; decided by "
            f"{', '.join(sorted(deciding_parameters(ids, template))) or 'no parameter'}): "
            f"{len(anywhere)} region(s): {', '.join(anywhere)}"
        )
    unrefused = 0
    for combination in COMBINATIONS:
        rows = [f for f in all_findings if f.combination == combination]
        short = [f.region for f in rows if f.missing]
        default = " (the defaults)" if combination == DEFAULTS else ""
        lines += ["", f"{combination.label}{default}"]
        lines.append(f"  every type offered in {len(claimed) - len(short)} of {len(claimed)} regions")
        kinds = sorted({kind for f in rows for kind in f.missing})
        for kind in kinds:
            where = [f for f in rows if kind in f.missing]
            ids = sorted({i for f in where for i in f.missing[kind]})
            open_regions = [f.region for f in where if kind in f.unrefused(template)]
            unrefused += len(open_regions)
            deciding = deciding_parameters(ids, template)
            named = (r for f in where for r in f.refused_by if names_the_refusal(r, kind, deciding, f.region))
            rules = sorted({r.rule for r in named})
            lines.append(
                f"  missing {kind} ({', '.join(ids)}) in {len(where)} region(s): "
                + ", ".join(f.region for f in where)
            )
            lines.append(
                f"    refused by {', '.join(rules)}"
                if not open_regions
                else f"    NOT refused by a Rule in: {', '.join(open_regions)}"
            )
    return lines, unrefused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m retrain.dev.regions", description=(__doc__ or "").split("\n\n", 1)[0]
    )
    parser.add_argument("--template", type=Path, default=TEMPLATE)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a region that misses a type is not refused"
    )
    args = parser.parse_args(argv)
    lines, unrefused = report(args.template)
    print("\n".join(lines))
    return 1 if args.check and unrefused else 0


if __name__ == "__main__":
    raise SystemExit(main())
