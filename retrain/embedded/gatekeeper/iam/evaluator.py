"""Allow or deny an AWS request the way AWS's documented policy evaluation logic does.

The embedded stack asks this module, for every request, whether the calling principal's identity-based
policies (and the resource's resource-based policy, if any) allow the action on the resource. The logic is
not reimplemented here: it is delegated to ``@cloud-copilot/iam-simulate``, a maintained evaluator of AWS's
evaluation logic (explicit deny, implicit deny, wildcards, NotAction/NotResource, condition operators,
resource policies, cross-account rules) that validates each request against iam-data's catalogue of
actions, resource types and condition keys. It is a Node library, so it runs as one long-lived sidecar
process (``simulate.mjs``) that this module talks to over stdin/stdout JSON lines: one start (about
0.15 s), then about half a millisecond per evaluation.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from retrain.embedded.account import ACCOUNT_ID

SCRIPT: Final = Path(__file__).with_name("simulate.mjs")
SETUP_HINT: Final = "the embedded stack's IAM check needs Node.js and `npm ci` (make setup does both)"

# iam-simulate's error codes (`errors.message` of a result with resultType "error"), for people.
_ERRORS: Final[dict[str, str]] = {
    "invalid.service": "iam-data knows no such service prefix; check the action's spelling",
    "invalid.action": "iam-data knows no such action; check its spelling against the Service "
    "Authorization Reference",
    "no.resource.types": "the resource fits none of the action's resource types; pass the ARN of a "
    "resource the action acts on",
    "multiple.resource.types": "the resource fits more than one of the action's resource types",
    "must.use.wildcard": "the action has no resource types; pass the resource '*'",
    "invalid.principal": "the principal is not an ARN or a service principal",
}


@dataclass(frozen=True)
class Policy:
    """An IAM policy document attached to the principal, by name."""

    name: str
    document: Mapping[str, Any]


@dataclass(frozen=True)
class AuthzRequest:
    """One request to authorise: who does what on which resource, with its condition keys."""

    principal: str
    action: str
    resource: str
    context: Mapping[str, str | Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """The outcome: ``result`` is iam-simulate's word, ``reason`` AWS's wording of why."""

    allowed: bool
    result: str
    reason: str
    # Context keys iam-simulate dropped before evaluating because iam-data does not list them for this
    # action and resource type: a condition on one of them sees the key as absent.
    ignored_context_keys: tuple[str, ...] = ()


class EvaluatorError(RuntimeError):
    """The simulation could not be run (bad input, or no Node.js/iam-simulate)."""


class PolicyEvaluator:
    """One Node sidecar, started on first use; thread-safe (calls are serialised)."""

    def __init__(self, *, node: str = "node", script: Path = SCRIPT, account: str = ACCOUNT_ID) -> None:
        self.node = node
        self.script = script
        self.account = account
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self._ids = itertools.count(1)
        atexit.register(self.close)

    def __enter__(self) -> PolicyEvaluator:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def evaluate(
        self,
        request: AuthzRequest,
        identity_policies: Sequence[Policy],
        resource_policy: Mapping[str, Any] | None = None,
        *,
        any_match: bool = False,
    ) -> Decision:
        """Whether the request is allowed. With ``any_match`` the request stands for requests not known in
        full yet (a static check's): a '*' in the resource is "some matching resource", and a condition on
        a context key the request does not give is taken as met (iam-simulate's Discovery mode)."""
        simulation: dict[str, Any] = {
            "request": {
                "principal": request.principal,
                "action": request.action,
                "resource": {"resource": request.resource, "accountId": self._account_of(request.resource)},
                "contextVariables": {
                    key: value if isinstance(value, str) else list(value)
                    for key, value in request.context.items()
                },
            },
            "identityPolicies": [{"name": p.name, "policy": p.document} for p in identity_policies],
            "serviceControlPolicies": [],
            "resourceControlPolicies": [],
        }
        if resource_policy is not None:
            simulation["resourcePolicy"] = resource_policy
        options = {"simulationMode": "Discovery"} if any_match else {}
        return self._decide(
            request,
            self._run(simulation, options),
            has_resource_policy=resource_policy is not None,
            any_match=any_match,
        )

    def close(self) -> None:
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            _stop(process)

    def _account_of(self, resource: str) -> str:
        parts = resource.split(":", 5)
        # S3 ARNs (arn:aws:s3:::bucket/key) and "*" carry no account: the resource is the stack's.
        return parts[4] if len(parts) == 6 and parts[4] else self.account

    def _run(
        self, simulation: Mapping[str, Any], options: Mapping[str, Any] | None = None
    ) -> Mapping[str, Any]:
        with self._lock:
            for attempt in (1, 2):
                process = self._process if self._process is not None else self._start()
                request_id = next(self._ids)
                try:
                    assert process.stdin is not None and process.stdout is not None
                    # default=dict: policy documents may be any Mapping (a MappingProxyType, say).
                    message = json.dumps(
                        {"id": request_id, "simulation": simulation, "options": options or {}}, default=dict
                    )
                    process.stdin.write(message + "\n")
                    process.stdin.flush()
                    line = process.stdout.readline()
                except (BrokenPipeError, OSError):
                    line = ""
                if line:
                    break
                # The sidecar died (killed, or crashed on this request): start a new one and retry once.
                self._process = None
                _stop(process)
                if attempt == 2:
                    raise EvaluatorError(
                        f"the IAM evaluator's Node sidecar ({self.script}) exited twice while evaluating "
                        f"{simulation['request']['action']}; see its error output above"
                    )
        answer: dict[str, Any] = json.loads(line)
        if answer.get("id") != request_id or "error" in answer:
            raise EvaluatorError(f"the IAM evaluator's sidecar failed: {answer.get('error', answer)}")
        result: Mapping[str, Any] = answer["result"]
        return result

    def _start(self) -> subprocess.Popen[str]:
        if shutil.which(self.node) is None:
            raise EvaluatorError(f"{self.node!r} is not on PATH: {SETUP_HINT}")
        # stderr is inherited: Node's own errors show up in the stack's log.
        process = subprocess.Popen(
            [self.node, str(self.script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        assert process.stdout is not None
        line = process.stdout.readline()
        ready: dict[str, Any] = json.loads(line) if line.strip() else {"fatal": "it exited without a word"}
        if ready.get("ready") is not True:
            _stop(process)
            raise EvaluatorError(
                f"the IAM evaluator's sidecar did not start ({ready.get('fatal')}): {SETUP_HINT}"
            )
        self._process = process
        return process

    @staticmethod
    def _decide(
        request: AuthzRequest,
        result: Mapping[str, Any],
        *,
        has_resource_policy: bool,
        any_match: bool = False,
    ) -> Decision:
        where = f"cannot evaluate {request.action} on {request.resource!r}"
        if result["resultType"] == "error":
            errors = result["errors"]
            code = errors["message"]
            if code == "policy.errors":
                raise EvaluatorError(f"{where}: invalid policy: {_policy_errors(errors)}")
            raise EvaluatorError(f"{where}: {_ERRORS.get(code, f'iam-simulate could not run it ({code})')}")
        if result["resultType"] == "wildcard" and any_match:
            outcome_any: str = result["overallResult"]
            return Decision(
                allowed=outcome_any == "Allowed",
                result=outcome_any,
                reason=f"because no identity-based policy allows the {request.action} action on any "
                f"resource matching {request.resource}",
            )
        if result["resultType"] != "single":
            # A '*' in the resource of an action that has resource types makes iam-simulate answer "is any
            # matching resource allowed?" (resultType "wildcard"), which is not a request's question.
            raise EvaluatorError(
                f"{where}: the resource contains '*' but the action acts on resource types; "
                "pass the ARN of the one resource the request is about"
            )
        outcome: str = result["overallResult"]
        return Decision(
            allowed=outcome == "Allowed",
            result=outcome,
            reason=_reason(request, outcome, result["result"]["analysis"], has_resource_policy),
            ignored_context_keys=tuple(result["result"].get("ignoredContextKeys", ())),
        )


def _reason(
    request: AuthzRequest, outcome: str, analysis: Mapping[str, Any], has_resource_policy: bool
) -> str:
    """Why, in the words of AWS's AccessDenied messages; only identity and resource policies are simulated."""
    identity = analysis.get("identityAnalysis", {}).get("result")
    policy = "an identity-based policy" if identity == outcome else "a resource-based policy"
    if outcome == "Allowed":
        return f"allowed by {policy}"
    if outcome == "ExplicitlyDenied":
        return f"with an explicit deny in {policy}"
    # A service principal (events.amazonaws.com) has no identity policies: only a resource policy can grant.
    service_principal = has_resource_policy and not request.principal.startswith("arn:")
    kind = "resource-based" if identity == "Allowed" or service_principal else "identity-based"
    return f"because no {kind} policy allows the {request.action} action"


def _policy_errors(errors: Mapping[str, Any]) -> str:
    found: list[str] = []
    for key, value in errors.items():
        if key == "resourcePolicyErrors":
            found += [f"resource policy: {e['path']}: {e['message']}" for e in value]
        elif key.endswith("Errors"):
            for name, problems in value.items():
                found += [f"{name}: {e['path']}: {e['message']}" for e in problems]
    return "; ".join(found) or "see iam-simulate's validation"


def _stop(process: subprocess.Popen[str]) -> None:
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        process.wait(timeout=5)  # the sidecar exits when its stdin closes
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
