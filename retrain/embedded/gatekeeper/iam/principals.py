"""Who makes each request in the embedded stack: the stack's IAM roles, and the credentials that name them.

Every role the template declares (after SAM's translation) becomes a principal with its policies: the
inline ones as moto's CloudFormation created them (intrinsics resolved to the stack's real names) and
the AWS managed ones the template attaches, from ``aws_managed_policies.json`` (AWS's documents, as
moto ships them; a test keeps the two equal). A principal acts through temporary credentials minted
here (an ``ASIA...`` access key per role): Lambda workers, the SQS pollers, the state machine's calls
and the SageMaker jobs sign with their role's key, and the gatekeeper maps the key back to the role.
Any other key is the operator's (the CLI, the stack's own set-up): its requests are validated against
the APIs' contracts but not authorised, as an administrator's would be.
"""

from __future__ import annotations

import ast
import hashlib
import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from retrain.embedded.gatekeeper.iam.evaluator import Policy

MANAGED_POLICIES_FILE: Final = Path(__file__).with_name("aws_managed_policies.json")
SECRET: Final = "retrain-embedded-role-secret"


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str = SECRET


@dataclass(frozen=True)
class Principal:
    """An IAM role acting through a session, as AWS names it in an AccessDenied message."""

    role_arn: str
    policies: tuple[Policy, ...]
    session: str = "retrain-embedded"

    @property
    def name(self) -> str:
        return self.role_arn.rsplit("/", 1)[-1]

    @property
    def session_arn(self) -> str:
        partition, account = self.role_arn.split(":")[1], self.role_arn.split(":")[4]
        return f"arn:{partition}:sts::{account}:assumed-role/{self.name}/{self.session}"


class UnknownRoleError(LookupError):
    """A request names a role the stack does not have."""


def access_key_for(role_arn: str) -> str:
    """The access key id of a role's session: stable, so restarted workers keep their identity."""
    return "ASIA" + hashlib.sha1(role_arn.encode(), usedforsecurity=False).hexdigest()[:16].upper()


def managed_policy_documents() -> dict[str, Mapping[str, Any]]:
    documents: dict[str, Mapping[str, Any]] = json.loads(MANAGED_POLICIES_FILE.read_text(encoding="utf-8"))
    return documents


def managed_policy(arn: str) -> Mapping[str, Any]:
    """The document of an AWS managed policy, in any partition (arn:<partition>:iam::aws:policy/...)."""
    path = arn.split(":", 5)[-1]
    for known, document in managed_policy_documents().items():
        # SAM names some by ARN (arn:<partition>:iam::aws:policy/<path><name>), some by name only.
        if known.split(":", 5)[-1] == path or known.rsplit("/", 1)[-1] == arn:
            return document
    raise UnknownRoleError(
        f"the template attaches the managed policy {arn!r}, which the embedded stack does not hold; "
        f"add its document to {MANAGED_POLICIES_FILE.name}"
    )


def _document(raw: Any) -> Mapping[str, Any]:
    """A policy document as moto keeps it: a dict, JSON text, or (from CloudFormation) a dict's repr."""
    if isinstance(raw, Mapping):
        return _without_no_value(raw)
    text = str(raw)
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError:
        loaded = ast.literal_eval(text)
    if not isinstance(loaded, Mapping):
        raise ValueError(f"not a policy document: {text[:80]!r}")
    return _without_no_value(loaded)


def _without_no_value(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """moto's CloudFormation keeps a statement that resolved to AWS::NoValue (!If [cond, s, !Ref
    AWS::NoValue]) as null; CloudFormation leaves it out, and the evaluator cannot read a null one."""
    statements = document.get("Statement")
    if not isinstance(statements, list) or all(s is not None for s in statements):
        return document
    return {**document, "Statement": [s for s in statements if s is not None]}


class Principals:
    """The stack's roles by ARN and by access key; thread-safe."""

    def __init__(self) -> None:
        self._roles: dict[str, Principal] = {}
        self._keys: dict[str, str] = {}
        self._lock = threading.Lock()

    def add(self, role_arn: str, policies: Iterable[Policy]) -> Credentials:
        principal = Principal(role_arn, tuple(policies))
        key = access_key_for(role_arn)
        with self._lock:
            self._roles[role_arn] = principal
            self._keys[key] = role_arn
        return Credentials(key)

    def credentials(self, role_arn: str) -> Credentials:
        self.role(role_arn)
        return Credentials(access_key_for(role_arn))

    def role(self, role_arn: str) -> Principal:
        with self._lock:
            found = self._roles.get(role_arn)
        if found is None:
            known = ", ".join(sorted(self._roles))
            raise UnknownRoleError(f"role {role_arn} is not a role of the embedded stack (known: {known})")
        return found

    def for_access_key(self, access_key_id: str) -> Principal | None:
        """The role a request's key names, or None for the operator."""
        with self._lock:
            arn = self._keys.get(access_key_id)
            return self._roles[arn] if arn is not None else None

    def roles(self) -> list[str]:
        with self._lock:
            return sorted(self._roles)

    def load_stack_roles(
        self,
        translated: Mapping[str, Any],
        physical: Mapping[str, str],
        *,
        account: str,
        region: str,
    ) -> list[str]:
        """Register every AWS::IAM::Role of the provisioned stack; their ARNs.

        Inline policies come from moto's IAM (as its CloudFormation created them, names resolved); the
        managed policy ARNs from the translated template, their documents from the vendored file."""
        from moto.iam.models import iam_backends

        backend = iam_backends[account]["global"]
        arns = []
        for logical_id, resource in translated["Resources"].items():
            if resource.get("Type") != "AWS::IAM::Role" or logical_id not in physical:
                continue
            role = backend.get_role(physical[logical_id])
            policies = [Policy(name, _document(doc)) for name, doc in sorted(role.policies.items())]
            for arn in resource.get("Properties", {}).get("ManagedPolicyArns", []):
                policies.append(Policy(str(arn).rsplit("/", 1)[-1], managed_policy(str(arn))))
            self.add(role.arn, policies)
            arns.append(str(role.arn))
        return arns
