"""The embedded stack's gate: every request is held against the API's contract and the caller's IAM policies.

``Gatekeeper.check(principal, service, operation, params)`` is what AWS does before serving a request:
the parameters must fit botocore's model of the operation (lengths, patterns, enums included,
:mod:`retrain.embedded.gatekeeper.contracts`), and every action the request needs (:mod:`.actions`) must be
allowed by the principal's policies, evaluated by iam-simulate (:mod:`.evaluator`). A refusal raises
:class:`RequestRefusedError` with the code and message AWS would answer with; the server turns it into an
HTTP error of the service's protocol, the in-process integrations into a ClientError.

Every decision is logged in ``decisions`` (bounded), so tests can see what was authorised for whom.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from botocore.exceptions import ClientError

from retrain.embedded.gatekeeper import contracts
from retrain.embedded.gatekeeper.iam.actions import Access, UnknownOperationError, accesses, sync_accesses
from retrain.embedded.gatekeeper.iam.evaluator import AuthzRequest, Decision, EvaluatorError, PolicyEvaluator
from retrain.embedded.gatekeeper.iam.principals import Principal, Principals, UnknownRoleError

LOG = logging.getLogger(__name__)

# The error code each service answers a denied request with, and its HTTP status.
ACCESS_DENIED: Final[Mapping[str, tuple[str, int]]] = {
    "s3": ("AccessDenied", 403),
    "sns": ("AuthorizationError", 403),
    "sqs": ("AccessDenied", 403),
    "sts": ("AccessDenied", 403),
    "lambda": ("AccessDeniedException", 403),
}
DEFAULT_ACCESS_DENIED: Final = ("AccessDeniedException", 400)
MAX_DECISIONS: Final = 5000
MAX_CACHED: Final = 50_000


class RequestRefusedError(Exception):
    """What AWS answers instead of serving the request."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status

    def client_error(self, operation: str) -> ClientError:
        response: Any = {
            "Error": {"Code": self.code, "Message": self.message},
            "ResponseMetadata": {"HTTPStatusCode": self.status},
        }
        return ClientError(response, operation)


@dataclass(frozen=True)
class Decided:
    """One authorisation, for tests and post-mortems."""

    principal: str
    action: str
    resource: str
    allowed: bool


def access_denied_message(principal: Principal, access: Access, decision: Decision) -> str:
    return (
        f"User: {principal.session_arn} is not authorized to perform: {access.action} on resource: "
        f"{access.resource} {decision.reason}"
    )


class Gatekeeper:
    """Contracts for everyone, IAM for the stack's roles."""

    def __init__(
        self,
        principals: Principals,
        evaluator: PolicyEvaluator,
        *,
        region: str,
        account: str,
    ) -> None:
        self.principals = principals
        self.evaluator = evaluator
        self.region, self.account = region, account
        self.decisions: collections.deque[Decided] = collections.deque(maxlen=MAX_DECISIONS)
        self.roles_seen: set[str] = set()  # every role a request was authorised for (or refused to)
        self._refused: collections.deque[Decided] = collections.deque(maxlen=MAX_DECISIONS)
        self._cache: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], Decision] = {}
        self._lock = threading.Lock()

    def check(
        self,
        principal: Principal | None,
        service: str,
        operation: str,
        params: Mapping[str, Any],
        *,
        extra: Iterable[Access] = (),
    ) -> None:
        """Refuse the request as AWS would (contract first, then IAM); return when it may be served."""
        try:
            contracts.check(service, operation, params)
        except contracts.ContractError as error:
            raise RequestRefusedError(error.code, error.message) from None
        if principal is None:
            return
        try:
            needed = accesses(service, operation, params, region=self.region, account=self.account)
        except UnknownOperationError:
            raise RequestRefusedError(
                "AccessDeniedException",
                f"the embedded stack cannot authorise {service}:{operation} for {principal.session_arn}: "
                "add the operation to retrain/embedded/gatekeeper/iam/actions.py",
            ) from None
        self.authorize(principal, [*needed, *extra], service=service)

    def check_task(
        self, role_arn: str, service: str, operation: str, params: dict[str, Any], *, sync: bool
    ) -> None:
        """A Task state's request, served in-process, as the state machine's role."""
        try:
            principal = self.principals.role(role_arn)
        except UnknownRoleError as error:
            raise RequestRefusedError("AccessDeniedException", str(error)) from None
        extra = sync_accesses(operation, params, region=self.region, account=self.account) if sync else []
        self.check(principal, service, operation, params, extra=extra)

    def credentials(self, role_arn: str) -> tuple[str, str]:
        """The access key pair a role's session signs with."""
        found = self.principals.credentials(role_arn)
        return found.access_key_id, found.secret_access_key

    def _decide(
        self, principal: Principal, access: Access, resource_policy: Mapping[str, Any] | None = None
    ) -> Decision:
        """iam-simulate's decision; the same request of the same role is decided once (a role's policies
        do not change while the stack runs, and a run asks the same of the same tables again and again)."""
        context = tuple(sorted(access.context.items()))
        policy = json.dumps(resource_policy, sort_keys=True) if resource_policy is not None else ""
        key = (principal.role_arn, access.action, access.resource, (*context, ("resource-policy", policy)))
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        decision = self.evaluator.evaluate(
            AuthzRequest(principal.role_arn, access.action, access.resource, access.context),
            principal.policies,
            resource_policy,
        )
        with self._lock:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def authorize(
        self,
        principal: Principal,
        needed: Iterable[Access],
        *,
        service: str,
        resource_policy: Mapping[str, Any] | None = None,
    ) -> None:
        """Every access must be allowed (with `resource_policy`, the resource's own policy, as another
        account's resource needs); the first denied one is refused with AWS's message."""
        for access in needed:
            try:
                decision = self._decide(principal, access, resource_policy)
            except EvaluatorError as error:
                # A mapping that does not fit IAM's model of the action is the emulation's bug: say so.
                raise RequestRefusedError(
                    "InternalFailure", f"the embedded stack could not authorise the request: {error}", 500
                ) from None
            with self._lock:
                self.decisions.append(
                    Decided(principal.role_arn, access.action, access.resource, decision.allowed)
                )
                self.roles_seen.add(principal.role_arn)
            if not decision.allowed:
                with self._lock:
                    self._refused.append(Decided(principal.role_arn, access.action, access.resource, False))
                code, status = ACCESS_DENIED.get(service, DEFAULT_ACCESS_DENIED)
                message = access_denied_message(principal, access, decision)
                LOG.warning("denied: %s", message)
                raise RequestRefusedError(code, message, status)

    def denied(self) -> list[Decided]:
        """The refusals among the last decisions (tests assert a healthy run has none)."""
        with self._lock:
            return list(self._refused)
