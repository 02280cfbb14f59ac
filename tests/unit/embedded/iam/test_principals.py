"""The stack's roles as principals: the vendored AWS managed policies and the credentials that name a role."""

from __future__ import annotations

import json

from moto.iam.aws_managed_policies import aws_managed_policies_data

from retrain.dev.template_model import load
from retrain.embedded.gatekeeper.iam.evaluator import Policy
from retrain.embedded.gatekeeper.iam.principals import (
    Principals,
    _document,
    access_key_for,
    managed_policy_documents,
)


def test_the_vendored_managed_policies_are_awss_documents() -> None:
    # GIVEN AWS's managed policy documents as moto ships them
    published = json.loads(aws_managed_policies_data)
    # THEN every vendored document is the published one
    for arn, document in managed_policy_documents().items():
        assert document == published[arn.rsplit("/", 1)[-1]]["Document"], arn


def test_every_managed_policy_the_template_attaches_is_vendored() -> None:
    # GIVEN the roles SAM generates from template.yaml (it attaches managed policies to function roles)
    roles = load().roles
    attached = {p.name for role in roles.values() for p in role.policies if p.name.startswith("AWS")}
    # THEN each resolved to its document (load() raises on an unknown ARN), basic execution among them
    assert "AWSLambdaBasicExecutionRole" in attached
    assert attached <= {arn.rsplit("/", 1)[-1] for arn in managed_policy_documents()}


def test_a_roles_access_key_names_it_and_any_other_key_is_the_operator() -> None:
    principals = Principals()
    role = "arn:aws:iam::123456789012:role/retrain-IngestFunctionRole-ABC"
    credentials = principals.add(role, [Policy("p", {"Version": "2012-10-17", "Statement": []})])
    assert credentials.access_key_id == access_key_for(role) and credentials.access_key_id.startswith("ASIA")
    found = principals.for_access_key(credentials.access_key_id)
    assert found is not None and found.session_arn == (
        "arn:aws:sts::123456789012:assumed-role/retrain-IngestFunctionRole-ABC/retrain-embedded"
    )
    assert principals.for_access_key("retrain-local") is None


def test_a_statement_moto_kept_as_null_for_no_value_is_left_out() -> None:
    # GIVEN an inline policy as moto's CloudFormation stores it when an !If gave AWS::NoValue
    kept = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}
    for raw in ({"Version": "2012-10-17", "Statement": [kept, None]}, repr({"Statement": [None, kept]})):
        # THEN the document the evaluator gets has the real statements only
        assert _document(raw)["Statement"] == [kept]
