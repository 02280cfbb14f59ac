"""The emulated account's quotas: Service Quotas for the services the stack meets, and Lambda's
GetAccountSettings (moto 5.2.5's Service Quotas knows only ``vpc``; its Lambda has no GetAccountSettings).

Each quota has AWS's default for the request's region (:mod:`retrain.quotas`): Lambda's concurrent
executions, EventBridge's invocations per second, FSx for Lustre Persistent_2 storage, and SageMaker's
training instances of every type botocore's model allows (spot and on-demand). :class:`AccountQuotas`
holds the account's applied values where they differ (a new account's lower Lambda concurrency, an
increase granted). The answers have AWS's response shapes; GetAccountSettings reports the applied Lambda
concurrency, less what the account's functions reserve.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from retrain import quotas

# Lambda's code storage limits as GetAccountSettings reports them, in bytes (75 GB per region, 250 MB
# unzipped and 50 MB zipped per function: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
LAMBDA_TOTAL_CODE_SIZE: Final = 80_530_636_800
LAMBDA_CODE_SIZE_UNZIPPED: Final = 262_144_000
LAMBDA_CODE_SIZE_ZIPPED: Final = 52_428_800
PAGE_SIZE: Final = 100  # ListServiceQuotas' page when the request sets no MaxResults
ACCOUNT_SETTINGS_PATH: Final = r"{0}/(?P<api_version>[^/]+)/account-settings/?$"


@dataclass(frozen=True)
class QuotaSpec:
    """One quota as Service Quotas describes it; `default` gives AWS's default value in a region."""

    service_code: str
    service_name: str
    code: str
    name: str
    default: Callable[[str], float]
    adjustable: bool = True
    unit: str = "None"


def _emulated_code(name: str) -> str:
    """A quota code for a quota whose AWS code this project does not record (SageMaker's per-type
    quotas): the emulation's own, stable per name. A preflight looks quotas up by name."""
    return "L-" + hashlib.sha256(name.encode()).hexdigest()[:8].upper()


def _training_instance_types() -> list[str]:
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    shape: Any = model.shape_for("TrainingInstanceType")
    return [str(kind) for kind in shape.enum]


@functools.cache
def specs() -> tuple[QuotaSpec, ...]:
    """Every quota the emulation answers."""
    found = [
        QuotaSpec(
            quotas.LAMBDA_SERVICE_CODE,
            "AWS Lambda",
            quotas.LAMBDA_CONCURRENCY_CODE,
            quotas.LAMBDA_CONCURRENCY_QUOTA,
            lambda region: float(quotas.LAMBDA_CONCURRENCY),
        ),
        QuotaSpec(
            quotas.EVENTBRIDGE_SERVICE_CODE,
            "Amazon EventBridge (CloudWatch Events)",
            quotas.EVENTBRIDGE_INVOCATIONS_CODE,
            quotas.EVENTBRIDGE_INVOCATIONS_QUOTA,
            lambda region: float(quotas.eventbridge_invocations(region)),
        ),
        QuotaSpec(
            quotas.FSX_SERVICE_CODE,
            "Amazon FSx",
            quotas.FSX_PERSISTENT_2_STORAGE_CODE,
            quotas.FSX_PERSISTENT_2_STORAGE_QUOTA,
            lambda region: float(quotas.FSX_PERSISTENT_2_STORAGE_GIB),
        ),
    ]
    for instance_type in _training_instance_types():
        for spot in (True, False):
            name = quotas.sagemaker_training_quota(instance_type, spot=spot)
            found.append(
                QuotaSpec(
                    quotas.SAGEMAKER_SERVICE_CODE,
                    "Amazon SageMaker",
                    _emulated_code(name),
                    name,
                    lambda region: float(quotas.SAGEMAKER_TRAINING_INSTANCES_NEW_ACCOUNT),
                )
            )
    return tuple(found)


def service_codes() -> frozenset[str]:
    return frozenset(spec.service_code for spec in specs())


class UnknownQuotaError(KeyError):
    """No quota of that service has that code (or name)."""


class AccountQuotas:
    """The emulated account's applied quota values per region: AWS's default unless one was applied."""

    def __init__(self) -> None:
        self._applied: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()

    @staticmethod
    def find(service_code: str, *, code: str | None = None, name: str | None = None) -> QuotaSpec:
        for spec in specs():
            if spec.service_code == service_code and (spec.code == code or spec.name == name):
                return spec
        raise UnknownQuotaError(f"service {service_code!r} has no quota {code or name!r} in the emulation")

    def apply(self, region: str, service_code: str, quota_name: str, value: float) -> None:
        """Set the account's applied value of a quota (by its name) in `region`."""
        if value < 0:
            raise ValueError(f"quota {quota_name!r}: the value must be 0 or more, not {value}")
        spec = self.find(service_code, name=quota_name)
        with self._lock:
            self._applied[(region, spec.service_code, spec.code)] = float(value)

    def value(self, region: str, spec: QuotaSpec, *, applied: bool = True) -> float:
        with self._lock:
            found = self._applied.get((region, spec.service_code, spec.code)) if applied else None
        return spec.default(region) if found is None else found

    def describe(self, region: str, account: str, spec: QuotaSpec, *, applied: bool) -> dict[str, Any]:
        """The quota in Service Quotas' shape: the applied value (ARN with the account) or the default."""
        return {
            "ServiceCode": spec.service_code,
            "ServiceName": spec.service_name,
            "QuotaArn": f"arn:aws:servicequotas:{region}:{account if applied else ''}:"
            f"{spec.service_code}/{spec.code}",
            "QuotaCode": spec.code,
            "QuotaName": spec.name,
            "Value": self.value(region, spec, applied=applied),
            "Unit": spec.unit,
            "Adjustable": spec.adjustable,
            "GlobalQuota": False,
        }


def _page(items: list[dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
    start = int(request.get("NextToken") or 0)
    size = int(request.get("MaxResults") or PAGE_SIZE)
    page: dict[str, Any] = {"Quotas": items[start : start + size]}
    if start + size < len(items):
        page["NextToken"] = str(start + size)
    return page


def _no_such_quota(error: UnknownQuotaError) -> Exception:
    from moto.core.exceptions import JsonRESTError

    return JsonRESTError("NoSuchResourceException", str(error.args[0]))


@contextmanager
def installed(account: AccountQuotas) -> Iterator[None]:
    """Service Quotas and Lambda's GetAccountSettings answer from `account` while the context lasts.

    The Lambda route is added to moto's URL map: install before the server serves its first Lambda
    request (the server builds each service's routes once)."""
    from moto.awslambda import urls as lambda_urls
    from moto.awslambda.models import lambda_backends
    from moto.awslambda.responses import LambdaResponse
    from moto.core.responses import ActionResult
    from moto.servicequotas.responses import ServiceQuotasResponse

    quota_class: Any = ServiceQuotasResponse
    lambda_class: Any = LambdaResponse
    # moto's own services (vpc) keep moto's answers: its defaults, which an account that changed none applies.
    moto_listing = quota_class.__dict__["list_aws_default_service_quotas"]
    moto_single = quota_class.__dict__["get_service_quota"]

    def listing(applied: bool) -> Callable[[Any], str]:
        def handler(self: Any) -> str:
            request = json.loads(self.body or "{}")
            service = str(request.get("ServiceCode"))
            if service not in service_codes():
                return str(moto_listing(self))
            wanted = request.get("QuotaCode")
            items = [
                account.describe(self.region, self.current_account, spec, applied=applied)
                for spec in specs()
                if spec.service_code == service and wanted in (None, spec.code)
            ]
            return json.dumps(_page(items, request))

        return handler

    def single(applied: bool) -> Callable[[Any], str]:
        def handler(self: Any) -> str:
            request = json.loads(self.body or "{}")
            service, code = str(request.get("ServiceCode")), str(request.get("QuotaCode"))
            if service not in service_codes():
                return str(moto_single(self))
            try:
                spec = account.find(service, code=code)
            except UnknownQuotaError as error:
                raise _no_such_quota(error) from None
            described = account.describe(self.region, self.current_account, spec, applied=applied)
            return json.dumps({"Quota": described})

        return handler

    def get_account_settings(self: Any) -> Any:
        functions = list(lambda_backends[self.current_account][self.region].list_functions())
        concurrency = account.find(quotas.LAMBDA_SERVICE_CODE, name=quotas.LAMBDA_CONCURRENCY_QUOTA)
        limit = int(account.value(self.region, concurrency))
        reserved = sum(int(f.reserved_concurrency or 0) for f in functions)
        return ActionResult(
            {
                "AccountLimit": {
                    "TotalCodeSize": LAMBDA_TOTAL_CODE_SIZE,
                    "CodeSizeUnzipped": LAMBDA_CODE_SIZE_UNZIPPED,
                    "CodeSizeZipped": LAMBDA_CODE_SIZE_ZIPPED,
                    "ConcurrentExecutions": limit,
                    "UnreservedConcurrentExecutions": max(limit - reserved, 0),
                },
                "AccountUsage": {
                    "TotalCodeSize": sum(int(f.code_size or 0) for f in functions),
                    "FunctionCount": len(functions),
                },
            }
        )

    methods: dict[str, Any] = {
        "list_service_quotas": listing(applied=True),
        "list_aws_default_service_quotas": listing(applied=False),
        "get_service_quota": single(applied=True),
        "get_aws_default_service_quota": single(applied=False),
    }
    replaced = {name: quota_class.__dict__.get(name) for name in methods}
    had_route = ACCOUNT_SETTINGS_PATH in lambda_urls.url_paths
    for name, method in methods.items():
        setattr(quota_class, name, method)
    lambda_class.get_account_settings = get_account_settings
    lambda_urls.url_paths[ACCOUNT_SETTINGS_PATH] = LambdaResponse.dispatch
    try:
        yield
    finally:
        for name, before in replaced.items():
            if before is None:
                delattr(quota_class, name)
            else:
                setattr(quota_class, name, before)
        del lambda_class.get_account_settings
        if not had_route:
            del lambda_urls.url_paths[ACCOUNT_SETTINGS_PATH]
