"""`retrain preflight`: what will bind in an account and region, before or after a deploy, in plain words.

It reads what AWS says (Lambda GetAccountSettings, Service Quotas, CloudFormation DescribeType, FSx) for
the stack's parameters (a deployed stack's, or template.yaml's defaults, with overrides) and decides per
check: ok, binds or unknown, with the figure, where the figure came from (the account's applied value, or
AWS's default with its page) and what to ask for. The decisions are pure functions of the figures; the
reading is :class:`Reader`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import botocore.exceptions

from retrain import quotas
from retrain.errors import UsageError

Status = Literal["ok", "binds", "unknown"]
OK: Final = "ok"
BINDS: Final = "binds"
UNKNOWN: Final = "unknown"

# Uploads one ingest function records per second on AWS: BENCHMARKS.md, "A catalogue's first load"
# (bench/ingest_scale.py's projection, 16 records at once: 3,524/s at IngestMaxConcurrency 100).
INGEST_UPLOADS_PER_S_PER_FUNCTION: Final = 35.24
FIRST_LOADS: Final = (1_000_000, 10_000_000)
# The resource types CloudFormation does not offer in every region, and the parameters that create them.
REGIONAL_TYPES: Final = ("AWS::SageMaker::MlflowApp", "AWS::FSx::FileSystem")
INGEST_FUNCTION: Final = "IngestFunction"
INGEST_QUEUE: Final = "IngestQueue"
_REGION: Final = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_INSTANCE_TYPE: Final = re.compile(r"^ml\.[a-z0-9]+\.[a-z0-9]+$")


@dataclass(frozen=True)
class Check:
    """One thing that may bind: its status, the figure, where it came from, what to ask for."""

    name: str
    status: Status
    figure: str
    source: str
    ask: str = ""
    note: str = ""


@dataclass(frozen=True)
class Quota:
    """A quota's value as read, and where from."""

    value: float
    source: str
    code: str = ""


# --- the decisions (pure) --------------------------------------------------------------------------------


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be more than 0, not {value}")


def recording_rate(concurrency: int, per_function: float = INGEST_UPLOADS_PER_S_PER_FUNCTION) -> float:
    """Uploads/s the stack records with `concurrency` ingest functions at once."""
    _positive("concurrency", concurrency)
    _positive("per_function", per_function)
    return concurrency * per_function


def first_load_hours(uploads: int, invocations_per_s: float, stack_rate: float) -> float:
    """Hours to record a first load of `uploads`: each upload is one EventBridge invocation, so the load
    goes at the slower of EventBridge's invocations/s and the rate the stack records."""
    _positive("uploads", uploads)
    _positive("invocations_per_s", invocations_per_s)
    _positive("stack_rate", stack_rate)
    return uploads / min(invocations_per_s, stack_rate) / 3600


def _request(name: str, value: float, region: str, service: str, code: str) -> str:
    where = f" ({service} {code})" if code else f" ({service})"
    return f"Service Quotas: request '{name}' ≥ {math.ceil(value):,} in {region}{where}"


def lambda_concurrency(
    limit: int | None,
    unreserved: int | None,
    *,
    ingest_max_concurrency: int,
    other_functions: int,
    region: str,
    source: str,
    max_receive_count: int | None = None,
) -> Check:
    """The account's Lambda concurrency against what the stack's functions run at once: the ingest
    functions (IngestMaxConcurrency) and one of each other function."""
    need = ingest_max_concurrency + other_functions
    wants = (
        f"the stack runs up to {need:,} at once (IngestMaxConcurrency {ingest_max_concurrency:,} "
        f"+ {other_functions} other functions)"
    )
    returns = f" {max_receive_count}" if max_receive_count is not None else ""
    note = (
        "the upload queue's event source mapping does not look at the account's concurrency: throttled "
        f"batches go back to the queue, and each return counts toward the dead-letter queue's maxReceiveCount"
        f"{returns}"
    )
    name = "Lambda concurrency"
    if limit is None or unreserved is None:
        return Check(
            name,
            UNKNOWN,
            f"{wants}; AWS's default is {quotas.LAMBDA_CONCURRENCY:,}, new accounts get less",
            source,
            f"check: aws lambda get-account-settings --region {region}",
            note,
        )
    figure = f"{unreserved:,} unreserved of {limit:,} concurrent executions; {wants}"
    if unreserved >= need:
        return Check(name, OK, figure, source)
    ask = _request(
        quotas.LAMBDA_CONCURRENCY_QUOTA,
        limit - unreserved + need,
        region,
        quotas.LAMBDA_SERVICE_CODE,
        quotas.LAMBDA_CONCURRENCY_CODE,
    )
    fits = unreserved - other_functions
    if fits >= 2:  # IngestMaxConcurrency's MinValue
        ask += f", or deploy with IngestMaxConcurrency={fits}"
    return Check(name, BINDS, figure, source, ask, note)


def eventbridge_quota(found: Quota | None, why: str, *, region: str) -> Quota:
    """The quota Service Quotas gave, else AWS's default for the region (retrain.quotas' table)."""
    if found is not None:
        return found
    return Quota(
        float(quotas.eventbridge_invocations(region)),
        f"AWS's default for {region}, {quotas.EVENTBRIDGE_QUOTA_PAGE} (Service Quotas: {why})",
    )


def fsx_quota(found: Quota | None, why: str) -> Quota:
    """The quota Service Quotas gave, else AWS's default (the same in every region)."""
    if found is not None:
        return found
    return Quota(
        float(quotas.FSX_PERSISTENT_2_STORAGE_GIB),
        f"AWS's default, {quotas.FSX_QUOTA_PAGE} (Service Quotas: {why})",
    )


def eventbridge_invocations(invocations: Quota, *, stack_rate: float, region: str) -> Check:
    """EventBridge's invocations/s against the rate the stack records, and the first loads they make."""
    pace = min(invocations.value, stack_rate)
    hours = ", ".join(
        f"10^{round(math.log10(n))} in {first_load_hours(n, invocations.value, stack_rate):.2f} h"
        for n in FIRST_LOADS
    )
    figure = (
        f"{invocations.value:,.0f} invocations/s; the stack records {stack_rate:,.0f} uploads/s; "
        f"a first load goes at {pace:,.0f}/s: {hours}"
    )
    name = "EventBridge invocations"
    if invocations.value >= stack_rate:
        return Check(name, OK, figure, invocations.source)
    ask = _request(
        quotas.EVENTBRIDGE_INVOCATIONS_QUOTA,
        stack_rate,
        region,
        quotas.EVENTBRIDGE_SERVICE_CODE,
        invocations.code or quotas.EVENTBRIDGE_INVOCATIONS_CODE,
    )
    note = "above the quota EventBridge delays invocations (it does not drop them): uploads wait"
    return Check(name, BINDS, figure, invocations.source, ask, note)


def training_instances(
    quota: Quota | None,
    *,
    instance_type: str,
    spot: bool,
    instance_count: int,
    parallel_jobs: int,
    region: str,
    reason: str = "",
) -> Check:
    """SageMaker's training instances of the type against a run's tuning trials at once."""
    quota_name = quotas.sagemaker_training_quota(instance_type, spot=spot)
    need = instance_count * parallel_jobs
    wants = (
        f"a run needs {need} ({parallel_jobs} trials at once x {instance_count} instance"
        f"{'s' if instance_count > 1 else ''})"
    )
    name = f"SageMaker {'spot ' if spot else ''}training instances"
    if quota is None:
        return Check(
            name,
            UNKNOWN,
            f"'{quota_name}': {wants}",
            f"Service Quotas did not answer ({reason}); {quotas.SAGEMAKER_QUOTA_PAGE}",
            f"check '{quota_name}' in Service Quotas ({region}): new accounts often have 0",
        )
    figure = f"'{quota_name}' is {quota.value:g}; {wants}"
    if quota.value >= need:
        return Check(name, OK, figure, quota.source)
    if quota.value < instance_count:
        figure += ": no training job can start (CreateTrainingJob fails with ResourceLimitExceeded)"
    else:
        figure += f": at most {int(quota.value // instance_count)} trials at once"
    ask = _request(quota_name, need, region, quotas.SAGEMAKER_SERVICE_CODE, quota.code)
    return Check(name, BINDS, figure, quota.source, ask)


def fsx_storage(quota: Quota, *, in_use_gib: int, new_gib: int, region: str, in_use_note: str = "") -> Check:
    """FSx for Lustre Persistent_2 storage: what the account has plus the stack's new file system."""
    need = in_use_gib + new_gib
    figure = (
        f"{quota.value:,.0f} GiB; {in_use_gib:,} GiB in use{in_use_note} + {new_gib:,} GiB the stack makes "
        f"= {need:,} GiB"
    )
    name = "FSx for Lustre storage"
    if quota.value >= need:
        return Check(name, OK, figure, quota.source)
    ask = _request(
        quotas.FSX_PERSISTENT_2_STORAGE_QUOTA,
        need,
        region,
        quotas.FSX_SERVICE_CODE,
        quota.code or quotas.FSX_PERSISTENT_2_STORAGE_CODE,
    )
    return Check(name, BINDS, figure, quota.source, ask + ", or a smaller FileSystemStorageCapacity")


def resource_type(
    kind: str,
    *,
    created: bool,
    offered: bool | None,
    source: str,
    region: str,
    deciding: Sequence[str] = (),
    refusal: str = "",
) -> Check:
    """A resource type the stack creates with these parameters against what CloudFormation offers."""
    name = f"CloudFormation {kind}"
    decided_by = ", ".join(deciding) or "the parameters"
    if not created:
        return Check(name, OK, f"not created with these parameters ({decided_by})", source)
    if offered is None:
        return Check(
            name,
            UNKNOWN,
            f"created ({decided_by}); whether {region} offers it is not known",
            source,
            f"check: aws cloudformation describe-type --type RESOURCE --type-name {kind} --region {region}",
        )
    if offered:
        return Check(name, OK, f"offered in {region}", source)
    return Check(
        name,
        BINDS,
        f"the stack creates it ({decided_by}) and {region} does not offer it",
        source,
        f"deploy with other {decided_by}, or in another region",
        refusal,
    )


# --- the stack's parameters ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The parameters that decide what binds, checked."""

    ingest_max_concurrency: int
    data_source: str
    file_system_id: str
    storage_capacity_gib: int
    mlflow_tracking: str
    instance_type: str
    instance_count: int
    parallel_jobs: int
    spot: bool


def _integer(parameters: Mapping[str, str], name: str, minimum: int) -> int:
    raw = parameters.get(name, "")
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"parameter {name}={raw!r} is not a whole number") from None
    if value < minimum:
        raise UsageError(f"parameter {name}={value} is below its minimum {minimum}")
    return value


def _choice(parameters: Mapping[str, str], name: str, allowed: Sequence[str]) -> str:
    value = parameters.get(name, "")
    if value not in allowed:
        raise UsageError(f"parameter {name}={value!r} is not one of {', '.join(allowed)}")
    return value


def settings(parameters: Mapping[str, str]) -> Settings:
    """The deciding parameters, checked; a bad value is a UsageError naming the parameter."""
    instance_type = parameters.get("TrainingInstanceType", "")
    if not _INSTANCE_TYPE.match(instance_type):
        raise UsageError(
            f"TrainingInstanceType {instance_type!r} is not an instance type such as ml.g5.xlarge"
        )
    return Settings(
        ingest_max_concurrency=_integer(parameters, "IngestMaxConcurrency", 1),
        data_source=_choice(parameters, "DataSource", ("fsx", "s3")),
        file_system_id=parameters.get("FileSystemId", ""),
        storage_capacity_gib=_integer(parameters, "FileSystemStorageCapacity", 1),
        mlflow_tracking=parameters.get("MlflowTracking", ""),
        instance_type=instance_type,
        instance_count=_integer(parameters, "TrainingInstanceCount", 1),
        parallel_jobs=_integer(parameters, "MaxParallelTuningJobs", 1),
        spot=_choice(parameters, "UseSpotInstances", ("true", "false")) == "true",
    )


def check_region(region: str | None) -> str:
    if not region:
        raise UsageError("no AWS region: pass --region (e.g. --region eu-west-2) or set AWS_DEFAULT_REGION")
    if not _REGION.match(region):
        raise UsageError(f"--region {region!r} is not a region name such as eu-west-2")
    return region


def template_defaults(template: Path) -> dict[str, str]:
    """template.yaml's parameter Defaults, as strings (as CloudFormation passes them)."""
    from retrain.dev import regions

    if not template.exists():
        raise UsageError(f"no template at {template}: run retrain preflight from the repository root")
    declared = regions.stack_template(template).source.get("Parameters", {})
    return {name: str(spec["Default"]) for name, spec in declared.items() if "Default" in spec}


def parameters_for(
    template: Path, deployed: Mapping[str, str], overrides: Mapping[str, str]
) -> dict[str, str]:
    """The template's defaults, then the deployed stack's values, then the overrides (names checked)."""
    from retrain.dev import regions

    defaults = template_defaults(template)
    declared = set(regions.stack_template(template).source.get("Parameters", {}))
    unknown = sorted(set(overrides) - declared)
    if unknown:
        raise UsageError(f"--parameter {', '.join(unknown)}: template.yaml declares no such parameter")
    return {**defaults, **deployed, **overrides}


# --- reading what AWS says ------------------------------------------------------------------------------


def _reason(error: botocore.exceptions.ClientError) -> str:
    found = error.response.get("Error", {})
    return f"{found.get('Code', 'error')}: {found.get('Message', '')}".strip().rstrip(":")


class Reader:
    """What the account says in one region, each read once; a refusal is a reason, not a failure."""

    def __init__(self, client: Callable[[str], Any], region: str) -> None:
        self._make = client
        self.region = region
        self._clients: dict[str, Any] = {}
        self._listings: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._make(service)
        return self._clients[service]

    def _listing(self, operation: str, service_code: str) -> list[dict[str, Any]]:
        key = (operation, service_code)
        if key not in self._listings:
            paginator = self.client("service-quotas").get_paginator(operation)
            self._listings[key] = [
                q for page in paginator.paginate(ServiceCode=service_code) for q in page.get("Quotas", [])
            ]
        return self._listings[key]

    def quota(self, service_code: str, name: str) -> tuple[Quota | None, str]:
        """The account's applied value of the quota named `name`, else AWS's default; (None, why)."""
        reasons = []
        for operation, described in (
            ("list_service_quotas", "the account's applied value"),
            ("list_aws_default_service_quotas", "AWS's default"),
        ):
            try:
                found = [q for q in self._listing(operation, service_code) if q.get("QuotaName") == name]
            except botocore.exceptions.ClientError as error:
                reasons.append(_reason(error))
                continue
            if found:
                code = str(found[0].get("QuotaCode", ""))
                source = f"{described} (Service Quotas, {service_code} {code}, {self.region})"
                return Quota(float(found[0]["Value"]), source, code), ""
            reasons.append(f"no quota named '{name}' in {service_code}")
        return None, "; ".join(dict.fromkeys(reasons))

    def lambda_settings(self) -> tuple[int | None, int | None, str]:
        """(ConcurrentExecutions, UnreservedConcurrentExecutions, source or why not)."""
        try:
            limit = self.client("lambda").get_account_settings()["AccountLimit"]
        except botocore.exceptions.ClientError as error:
            why = f"lambda GetAccountSettings did not answer ({_reason(error)}); {quotas.LAMBDA_QUOTA_PAGE}"
            return None, None, why
        return (
            int(limit["ConcurrentExecutions"]),
            int(limit["UnreservedConcurrentExecutions"]),
            f"the account's value (lambda GetAccountSettings, {self.region})",
        )

    def type_offered(self, kind: str) -> tuple[bool | None, str]:
        """Whether CloudFormation offers `kind` here: DescribeType, else cfn-lint's list for the region."""
        from retrain.dev import regions

        own_list = regions.has_own_type_list(self.region)
        listed = (kind in regions.offered_types(self.region)) if own_list else None
        lint = (
            f"cfn-lint {regions.cfn_lint_version()}'s type list for {self.region} "
            f"(schema_date {regions.schema_date()})"
        )
        try:
            self.client("cloudformation").describe_type(Type="RESOURCE", TypeName=kind)
            offered: bool | None = True
        except botocore.exceptions.ClientError as error:
            if error.response.get("Error", {}).get("Code") != "TypeNotFoundException":
                return listed, f"{lint} (DescribeType did not answer: {_reason(error)})"
            offered = False
        source = f"CloudFormation DescribeType in {self.region}"
        if listed is not None and listed != offered:
            source += f"; {lint} says otherwise"
        return offered, source

    def lustre_in_use_gib(self) -> tuple[int, str]:
        """GiB of the account's Persistent_2 Lustre file systems here (0 and why, where it cannot read)."""
        try:
            pages = self.client("fsx").get_paginator("describe_file_systems").paginate()
            systems = [s for page in pages for s in page.get("FileSystems", [])]
        except botocore.exceptions.ClientError as error:
            return 0, f" (unknown: {_reason(error)}; counted 0)"
        return (
            sum(
                int(s.get("StorageCapacity", 0))
                for s in systems
                if s.get("FileSystemType") == "LUSTRE"
                and s.get("LustreConfiguration", {}).get("DeploymentType") == "PERSISTENT_2"
            ),
            "",
        )

    def account(self) -> str | None:
        try:
            return str(self.client("sts").get_caller_identity()["Account"])
        except botocore.exceptions.ClientError:
            return None


# --- the report ------------------------------------------------------------------------------------------


@dataclass
class Report:
    region: str
    account: str | None
    stack: str | None
    parameters: dict[str, str]
    checks: list[Check]
    first_load: dict[str, Any] = field(default_factory=dict)

    @property
    def binding(self) -> list[Check]:
        return [c for c in self.checks if c.status == BINDS]

    def to_json(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "account": self.account,
            "stack": self.stack,
            "parameters": self.parameters,
            "binds": [c.name for c in self.binding],
            "checks": [asdict(c) for c in self.checks],
            "first_load": self.first_load,
        }


DECIDING: Final = (
    "IngestMaxConcurrency",
    "DataSource",
    "FileSystemId",
    "FileSystemStorageCapacity",
    "MlflowTracking",
    "TrainingInstanceType",
    "TrainingInstanceCount",
    "MaxParallelTuningJobs",
    "UseSpotInstances",
)


def _max_receive_count(source: Mapping[str, Any]) -> int | None:
    queue = source.get("Resources", {}).get(INGEST_QUEUE, {})
    value = queue.get("Properties", {}).get("RedrivePolicy", {}).get("maxReceiveCount")
    return int(value) if isinstance(value, int | str) and str(value).isdigit() else None


def run(
    reader: Reader,
    parameters: Mapping[str, str],
    *,
    template: Path,
    deployed: bool,
    stack: str | None = None,
    stack_rate: float | None = None,
) -> Report:
    """Every check for `parameters` in the reader's account and region."""
    from retrain.dev import regions

    chosen = settings(parameters)
    region = reader.region
    created = regions.created_types(parameters, region, template)
    functions = created.get("AWS::Lambda::Function", [])
    other_functions = len([f for f in functions if f != INGEST_FUNCTION])
    limit, unreserved, lambda_source = reader.lambda_settings()
    checks = [
        lambda_concurrency(
            limit,
            unreserved,
            ingest_max_concurrency=chosen.ingest_max_concurrency,
            other_functions=other_functions,
            region=region,
            source=lambda_source,
            max_receive_count=_max_receive_count(regions.stack_template(template).source),
        )
    ]
    concurrency = chosen.ingest_max_concurrency
    if unreserved is not None:
        concurrency = max(1, min(concurrency, unreserved - other_functions))
    rate = stack_rate if stack_rate is not None else recording_rate(concurrency)
    invocations = eventbridge_quota(
        *reader.quota(quotas.EVENTBRIDGE_SERVICE_CODE, quotas.EVENTBRIDGE_INVOCATIONS_QUOTA), region=region
    )
    checks.append(eventbridge_invocations(invocations, stack_rate=rate, region=region))
    training, why = reader.quota(
        quotas.SAGEMAKER_SERVICE_CODE, quotas.sagemaker_training_quota(chosen.instance_type, spot=chosen.spot)
    )
    checks.append(
        training_instances(
            training,
            instance_type=chosen.instance_type,
            spot=chosen.spot,
            instance_count=chosen.instance_count,
            parallel_jobs=chosen.parallel_jobs,
            region=region,
            reason=why,
        )
    )
    if chosen.data_source == "fsx":
        checks.append(_fsx(reader, chosen, deployed=deployed))
    checks += list(_types(reader, parameters, created, template))
    return Report(
        region=region,
        account=reader.account(),
        stack=stack,
        parameters={k: parameters[k] for k in DECIDING if k in parameters},
        checks=checks,
        first_load={
            "stack_rate_per_s": round(rate, 1),
            "invocations_per_s": invocations.value,
            "hours": {str(n): round(first_load_hours(n, invocations.value, rate), 3) for n in FIRST_LOADS},
        },
    )


def _fsx(reader: Reader, chosen: Settings, *, deployed: bool) -> Check:
    if chosen.file_system_id:
        return Check(
            "FSx for Lustre storage",
            OK,
            f"the stack uses the existing file system {chosen.file_system_id}: no new storage",
            "the parameters (FileSystemId)",
        )
    quota = fsx_quota(*reader.quota(quotas.FSX_SERVICE_CODE, quotas.FSX_PERSISTENT_2_STORAGE_QUOTA))
    in_use, note = reader.lustre_in_use_gib()
    # A deployed stack's own file system is in use already.
    new = 0 if deployed else chosen.storage_capacity_gib
    return fsx_storage(quota, in_use_gib=in_use, new_gib=new, region=reader.region, in_use_note=note)


def _types(
    reader: Reader, parameters: Mapping[str, str], created: Mapping[str, list[str]], template: Path
) -> Iterator[Check]:
    from retrain.dev import regions

    resources = regions.stack_template(template).translated["Resources"]
    refusals = regions.refusals(parameters, reader.region, template)
    for kind in REGIONAL_TYPES:
        ids = created.get(kind) or [i for i, r in resources.items() if r["Type"] == kind]
        deciding = sorted(regions.deciding_parameters(ids, template))
        if kind not in created:
            yield resource_type(
                kind,
                created=False,
                offered=None,
                source="template.yaml",
                region=reader.region,
                deciding=deciding,
            )
            continue
        offered, source = reader.type_offered(kind)
        named = (r for r in refusals if regions.names_the_refusal(r, kind, deciding, reader.region))
        refusal = next((r.description for r in named), "")
        yield resource_type(
            kind,
            created=True,
            offered=offered,
            source=source,
            region=reader.region,
            deciding=deciding,
            refusal=f"the template's Rules refuse the deploy: {refusal}" if refusal else "",
        )


# --- output ----------------------------------------------------------------------------------------------

STYLES: Final = {OK: "green", BINDS: "bold red", UNKNOWN: "yellow"}


def header(report: Report) -> str:
    where = f"stack {report.stack}" if report.stack else "before a deploy (template.yaml and --parameter)"
    return f"preflight: account {report.account or 'unknown'}, {report.region}, {where}"


def table(report: Report) -> Any:
    from rich.table import Table

    grid = Table(title=header(report), title_justify="left", header_style="bold", show_lines=True)
    for column in ("check", "status", "figure", "source", "ask for"):
        grid.add_column(column)
    for check in report.checks:
        figure = check.figure + (f"\n({check.note})" if check.note else "")
        status = f"[{STYLES[check.status]}]{check.status}[/]"
        grid.add_row(check.name, status, figure, check.source, check.ask or "-")
    return grid


def lines(report: Report) -> list[str]:
    """The report as plain lines (one per check, then its ask and note), for pipes and logs."""
    out = [header(report)]
    for check in report.checks:
        out.append(f"{check.status:<7} {check.name}: {check.figure} [source: {check.source}]")
        if check.ask:
            out.append(f"        ask: {check.ask}")
        if check.note:
            out.append(f"        note: {check.note}")
    return out


# --- the command -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """`retrain preflight`'s options."""

    region: str | None = None
    stack: str | None = None
    local: bool = False
    overrides: Mapping[str, str] = field(default_factory=dict)
    instance_type: str | None = None
    stack_rate: float | None = None
    json_output: bool = False
    state_dir: Path = Path(".retrain")
    template: Path | None = None  # default: the repository's template.yaml


def _stack_parameters(cloudformation: Any, stack: str) -> dict[str, str]:
    described = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    return {
        str(p["ParameterKey"]): str(p.get("ResolvedValue", p.get("ParameterValue", "")))
        for p in described.get("Parameters", [])
    }


def report_for(options: Options) -> Report:
    """Read the account (and the stack, with --stack or --local) and check every quota."""
    import boto3

    from retrain import local
    from retrain.deployment import connect
    from retrain.errors import EmbeddedRuntimeError

    if options.stack and options.local:
        raise UsageError("--stack and --local name two stacks: pass one")
    deployed: dict[str, str] = {}
    stack_name: str | None = None
    endpoint_url: str | None = None
    if options.local:
        deployment = local.background(options.state_dir)
        if deployment is None:
            raise EmbeddedRuntimeError("no embedded stack is running: start it with `retrain local up`")
        session: Any = deployment.session
        endpoint_url, stack_name = deployment.endpoint_url, deployment.stack_name
        deployed = _stack_parameters(deployment.client("cloudformation"), stack_name)
        region = check_region(options.region or local.LOCAL_REGION)
    else:
        session = boto3.session.Session(region_name=options.region)
        region = check_region(options.region or session.region_name)
        if options.stack:
            deployment = connect(options.stack, session=session)
            stack_name = options.stack
            deployed = _stack_parameters(deployment.client("cloudformation"), options.stack)
    overrides = dict(options.overrides)
    if options.instance_type:
        overrides["TrainingInstanceType"] = options.instance_type
    from retrain.dev import regions

    template = options.template or regions.TEMPLATE
    parameters = parameters_for(template, deployed, overrides)

    def client(service: str) -> Any:
        return session.client(service, region_name=region, endpoint_url=endpoint_url)

    return run(
        Reader(client, region),
        parameters,
        template=template,
        deployed=stack_name is not None,
        stack=stack_name,
        stack_rate=options.stack_rate,
    )


def command(options: Options) -> None:
    """Print the report (a table on a terminal, lines otherwise, or JSON); fail when something binds."""
    import json

    import typer
    from rich.console import Console

    from retrain.errors import PreflightBindsError

    report = report_for(options)
    console = Console(highlight=False)
    if options.json_output:
        typer.echo(json.dumps(report.to_json()))
    elif console.is_terminal:
        console.print(table(report))
    else:
        typer.echo("\n".join(lines(report)))
    if report.binding:
        raise PreflightBindsError(
            f"{len(report.binding)} check(s) will bind in {report.region}: "
            + "; ".join(f"{c.name} ({c.ask})" for c in report.binding)
        )
