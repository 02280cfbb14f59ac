"""The IAM evaluator against AWS's documented policy evaluation logic, for what a SAM template's policies use:
default deny, Allow, explicit Deny, wildcards, NotAction/NotResource, condition operators, resource policies
granting service principals, and the errors for requests that cannot be simulated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from retrain.embedded.account import ACCOUNT_ID
from retrain.embedded.gatekeeper.iam.evaluator import (
    AuthzRequest,
    Decision,
    EvaluatorError,
    Policy,
    PolicyEvaluator,
)

ACCOUNT = ACCOUNT_ID
ROLE = f"arn:aws:iam::{ACCOUNT}:role/IngestFunctionRole"
TABLE = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/Datasets"
OTHER_TABLE = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/Runs"
QUEUE = f"arn:aws:sqs:us-east-1:{ACCOUNT}:retrain-dlq"
RULE = f"arn:aws:events:us-east-1:{ACCOUNT}:rule/retrain-on-upload"
SAGEMAKER_ROLE = f"arn:aws:iam::{ACCOUNT}:role/SageMakerExecutionRole"


@pytest.fixture(scope="module")
def evaluator() -> Iterator[PolicyEvaluator]:
    with PolicyEvaluator(account=ACCOUNT) as shared:
        yield shared


def statement(
    effect: str, action: str | list[str], resource: str | list[str], **extra: Any
) -> dict[str, Any]:
    return {"Effect": effect, "Action": action, "Resource": resource, **extra}


def policy(*statements: dict[str, Any], name: str = "IngestFunctionRolePolicy0") -> Policy:
    return Policy(name, {"Version": "2012-10-17", "Statement": list(statements)})


def check(
    evaluator: PolicyEvaluator,
    action: str,
    resource: str,
    *policies: Policy,
    context: dict[str, str | list[str]] | None = None,
    principal: str = ROLE,
    resource_policy: dict[str, Any] | None = None,
) -> Decision:
    request = AuthzRequest(principal, action, resource, context or {})
    return evaluator.evaluate(request, policies, resource_policy)


# Default deny, Allow, explicit Deny


def test_a_request_no_policy_allows_is_implicitly_denied(evaluator: PolicyEvaluator) -> None:
    # GIVEN a role without policies  WHEN it updates an item
    decision = check(evaluator, "dynamodb:UpdateItem", TABLE)

    # THEN it is denied by default
    assert (decision.allowed, decision.result) == (False, "ImplicitlyDenied")


def test_an_implicit_deny_names_the_action_as_aws_does(evaluator: PolicyEvaluator) -> None:
    # GIVEN a policy for another action  WHEN the role updates an item
    decision = check(
        evaluator, "dynamodb:UpdateItem", TABLE, policy(statement("Allow", "dynamodb:GetItem", TABLE))
    )

    # THEN the reason is AWS's wording, naming the action
    assert decision.reason == "because no identity-based policy allows the dynamodb:UpdateItem action"


def test_an_allow_statement_grants_the_action(evaluator: PolicyEvaluator) -> None:
    # GIVEN a policy allowing UpdateItem on the table
    allow = policy(statement("Allow", "dynamodb:UpdateItem", TABLE))

    # WHEN the role updates an item in it
    decision = check(evaluator, "dynamodb:UpdateItem", TABLE, allow)

    # THEN it is allowed
    assert (decision.allowed, decision.result) == (True, "Allowed")
    assert decision.reason == "allowed by an identity-based policy"


def test_an_explicit_deny_overrides_an_allow_in_the_same_policy(evaluator: PolicyEvaluator) -> None:
    # GIVEN a policy that allows all of DynamoDB but denies UpdateItem on the table
    both = policy(statement("Allow", "dynamodb:*", "*"), statement("Deny", "dynamodb:UpdateItem", TABLE))

    # WHEN the role updates an item
    decision = check(evaluator, "dynamodb:UpdateItem", TABLE, both)

    # THEN the deny wins
    assert (decision.allowed, decision.result) == (False, "ExplicitlyDenied")


def test_an_explicit_deny_in_another_policy_overrides_an_allow(evaluator: PolicyEvaluator) -> None:
    # GIVEN an allowing policy and a separate, denying one
    allow = policy(statement("Allow", "dynamodb:UpdateItem", TABLE), name="Allow")
    deny = policy(statement("Deny", "dynamodb:*", "*"), name="DenyAll")

    # WHEN the role updates an item
    decision = check(evaluator, "dynamodb:UpdateItem", TABLE, allow, deny)

    # THEN the deny wins, in AWS's words
    assert decision.result == "ExplicitlyDenied"
    assert decision.reason == "with an explicit deny in an identity-based policy"


# Action and resource matching


@pytest.mark.parametrize(("action", "allowed"), [("s3:GetObject", True), ("s3:PutObject", False)])
def test_an_action_wildcard_matches_actions_with_its_prefix(
    evaluator: PolicyEvaluator, action: str, allowed: bool
) -> None:
    # GIVEN a policy allowing s3:Get* on the bucket's objects
    reads = policy(statement("Allow", "s3:Get*", "arn:aws:s3:::datasets/*"))

    # WHEN the role calls the action on an object
    decision = check(evaluator, action, "arn:aws:s3:::datasets/raw/cat.png", reads)

    # THEN only the Get actions are allowed
    assert decision.allowed is allowed


def test_action_names_match_case_insensitively(evaluator: PolicyEvaluator) -> None:
    # GIVEN a policy naming the action in odd case
    odd_case = policy(statement("Allow", "DynamoDB:updateitem", TABLE))

    # WHEN the role calls it in the usual case
    decision = check(evaluator, "dynamodb:UpdateItem", TABLE, odd_case)

    # THEN it matches
    assert decision.allowed


def test_a_star_resource_matches_any_resource(evaluator: PolicyEvaluator) -> None:
    # GIVEN a policy allowing UpdateItem on every resource
    anywhere = policy(statement("Allow", "dynamodb:UpdateItem", "*"))

    # WHEN the role updates items in two tables  THEN both are allowed
    assert check(evaluator, "dynamodb:UpdateItem", TABLE, anywhere).allowed
    assert check(evaluator, "dynamodb:UpdateItem", OTHER_TABLE, anywhere).allowed


@pytest.mark.parametrize(("key", "allowed"), [("raw/cat1.png", True), ("raw/cat12.png", False)])
def test_a_question_mark_in_a_resource_matches_exactly_one_character(
    evaluator: PolicyEvaluator, key: str, allowed: bool
) -> None:
    # GIVEN a policy allowing reads of raw/cat?.png
    one_char = policy(statement("Allow", "s3:GetObject", "arn:aws:s3:::datasets/raw/cat?.png"))

    # WHEN the role reads an object
    decision = check(evaluator, "s3:GetObject", f"arn:aws:s3:::datasets/{key}", one_char)

    # THEN only a one-character suffix matches
    assert decision.allowed is allowed


def test_the_arn_of_another_table_does_not_match(evaluator: PolicyEvaluator) -> None:
    # GIVEN a policy for the Datasets table
    datasets = policy(statement("Allow", "dynamodb:UpdateItem", TABLE))

    # WHEN the role updates the Runs table
    decision = check(evaluator, "dynamodb:UpdateItem", OTHER_TABLE, datasets)

    # THEN it is denied
    assert decision.result == "ImplicitlyDenied"


@pytest.mark.parametrize(
    ("action", "allowed"), [("dynamodb:UpdateItem", True), ("dynamodb:DeleteItem", False)]
)
def test_not_action_allows_every_action_but_the_listed_ones(
    evaluator: PolicyEvaluator, action: str, allowed: bool
) -> None:
    # GIVEN a policy allowing everything but deletes
    no_deletes = policy({"Effect": "Allow", "NotAction": "dynamodb:Delete*", "Resource": "*"})

    # WHEN the role calls the action
    decision = check(evaluator, action, TABLE, no_deletes)

    # THEN only the listed actions are left out
    assert decision.allowed is allowed


@pytest.mark.parametrize(("resource", "allowed"), [(OTHER_TABLE, True), (TABLE, False)])
def test_not_resource_allows_every_resource_but_the_listed_ones(
    evaluator: PolicyEvaluator, resource: str, allowed: bool
) -> None:
    # GIVEN a policy allowing UpdateItem on every table but Datasets
    not_datasets = policy({"Effect": "Allow", "Action": "dynamodb:UpdateItem", "NotResource": TABLE})

    # WHEN the role updates an item in a table
    decision = check(evaluator, "dynamodb:UpdateItem", resource, not_datasets)

    # THEN only the listed resource is left out
    assert decision.allowed is allowed


# Conditions


@pytest.mark.parametrize(
    ("context", "allowed"),
    [
        ({"iam:PassedToService": "sagemaker.amazonaws.com"}, True),
        ({"iam:PassedToService": "lambda.amazonaws.com"}, False),
        ({}, False),
    ],
    ids=["match", "mismatch", "key-absent"],
)
def test_string_equals_on_passed_to_service_needs_the_key_with_that_value(
    evaluator: PolicyEvaluator, context: dict[str, str | list[str]], allowed: bool
) -> None:
    # GIVEN a policy allowing the role to be passed to SageMaker only
    pass_role = policy(
        statement(
            "Allow",
            "iam:PassRole",
            SAGEMAKER_ROLE,
            Condition={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
        )
    )

    # WHEN the role passes it
    decision = check(evaluator, "iam:PassRole", SAGEMAKER_ROLE, pass_role, context=context)

    # THEN only a request carrying the matching key is allowed
    assert decision.allowed is allowed


@pytest.mark.parametrize(("prefix", "allowed"), [("raw/2024/", True), ("models/", False)])
def test_string_like_matches_a_wildcard_pattern(
    evaluator: PolicyEvaluator, prefix: str, allowed: bool
) -> None:
    # GIVEN a policy allowing listing under raw/ only
    list_raw = policy(
        statement(
            "Allow",
            "s3:ListBucket",
            "arn:aws:s3:::datasets",
            Condition={"StringLike": {"s3:prefix": "raw/*"}},
        )
    )

    # WHEN the role lists with a prefix
    decision = check(
        evaluator, "s3:ListBucket", "arn:aws:s3:::datasets", list_raw, context={"s3:prefix": prefix}
    )

    # THEN only prefixes matching the pattern are allowed
    assert decision.allowed is allowed


@pytest.mark.parametrize(
    ("operator", "pattern", "source", "allowed"),
    [
        ("ArnLike", f"arn:aws:events:*:{ACCOUNT}:rule/retrain-*", RULE, True),
        ("ArnLike", f"arn:aws:events:*:{ACCOUNT}:rule/retrain-*", RULE.replace("retrain-", "other-"), False),
        ("ArnEquals", RULE, RULE, True),
        ("ArnEquals", RULE, RULE + "-2", False),
    ],
)
def test_arn_operators_on_source_arn(
    evaluator: PolicyEvaluator, operator: str, pattern: str, source: str, allowed: bool
) -> None:
    # GIVEN a policy allowing SendMessage from matching source ARNs
    send = policy(
        statement("Allow", "sqs:SendMessage", QUEUE, Condition={operator: {"aws:SourceArn": pattern}})
    )

    # WHEN the role sends with a source ARN
    decision = check(evaluator, "sqs:SendMessage", QUEUE, send, context={"aws:SourceArn": source})

    # THEN the ARN operator decides
    assert decision.allowed is allowed


@pytest.mark.parametrize(
    ("context", "result"),
    [({"aws:SecureTransport": "true"}, "Allowed"), ({"aws:SecureTransport": "false"}, "ExplicitlyDenied")],
)
def test_bool_secure_transport_denies_plain_http(
    evaluator: PolicyEvaluator, context: dict[str, str | list[str]], result: str
) -> None:
    # GIVEN the usual pair: allow reads, deny any request not made over TLS
    tls_only = policy(
        statement("Allow", "s3:GetObject", "arn:aws:s3:::datasets/*"),
        statement("Deny", "s3:*", "*", Condition={"Bool": {"aws:SecureTransport": "false"}}),
    )

    # WHEN the role reads over HTTPS or HTTP
    decision = check(evaluator, "s3:GetObject", "arn:aws:s3:::datasets/a.png", tls_only, context=context)

    # THEN plain HTTP is explicitly denied
    assert decision.result == result


@pytest.mark.parametrize(
    ("context", "allowed"),
    [({}, True), ({"aws:RequestedRegion": "us-east-1"}, True), ({"aws:RequestedRegion": "eu-west-1"}, False)],
    ids=["absent", "match", "mismatch"],
)
def test_an_if_exists_operator_matches_when_the_key_is_absent(
    evaluator: PolicyEvaluator, context: dict[str, str | list[str]], allowed: bool
) -> None:
    # GIVEN a policy with StringEqualsIfExists on the requested region
    regional = policy(
        statement(
            "Allow",
            "dynamodb:GetItem",
            TABLE,
            Condition={"StringEqualsIfExists": {"aws:RequestedRegion": "us-east-1"}},
        )
    )

    # WHEN the role reads with or without the key
    decision = check(evaluator, "dynamodb:GetItem", TABLE, regional, context=context)

    # THEN an absent key matches, a present one must have the value
    assert decision.allowed is allowed


def test_a_context_key_the_action_does_not_have_is_ignored_and_reported(evaluator: PolicyEvaluator) -> None:
    # GIVEN a condition on a key that DynamoDB's GetItem never carries
    odd = policy(
        statement(
            "Allow", "dynamodb:GetItem", TABLE, Condition={"StringEquals": {"iam:PassedToService": "x"}}
        )
    )

    # WHEN the request supplies that key anyway
    decision = check(evaluator, "dynamodb:GetItem", TABLE, odd, context={"iam:PassedToService": "x"})

    # THEN iam-simulate drops it (the condition sees no key) and says so
    assert not decision.allowed
    assert decision.ignored_context_keys == ("iam:PassedToService",)


# Resource-based policies


def queue_policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


EVENTS_MAY_SEND = queue_policy(
    statement(
        "Allow",
        "sqs:SendMessage",
        QUEUE,
        Principal={"Service": "events.amazonaws.com"},
        Condition={"ArnEquals": {"aws:SourceArn": RULE}},
    )
)


@pytest.mark.parametrize(
    ("principal", "context", "allowed"),
    [
        ("events.amazonaws.com", {"aws:SourceArn": RULE}, True),
        ("events.amazonaws.com", {"aws:SourceArn": RULE + "-other"}, False),
        ("events.amazonaws.com", {}, False),
        ("sns.amazonaws.com", {"aws:SourceArn": RULE}, False),
        (ROLE, {"aws:SourceArn": RULE}, False),
    ],
    ids=["events-from-rule", "events-from-other-rule", "events-no-source", "other-service", "role"],
)
def test_a_queue_policy_grants_a_service_principal_from_one_source(
    evaluator: PolicyEvaluator, principal: str, context: dict[str, str | list[str]], allowed: bool
) -> None:
    # GIVEN a queue policy letting EventBridge send from one rule; no identity policies
    # WHEN a principal sends a message
    decision = check(
        evaluator,
        "sqs:SendMessage",
        QUEUE,
        context=context,
        principal=principal,
        resource_policy=EVENTS_MAY_SEND,
    )

    # THEN only the service principal, from that rule, is allowed
    assert decision.allowed is allowed


def test_a_service_principal_denied_by_a_resource_policy_is_told_so(evaluator: PolicyEvaluator) -> None:
    # GIVEN the queue policy  WHEN EventBridge sends from another rule
    decision = check(
        evaluator,
        "sqs:SendMessage",
        QUEUE,
        context={"aws:SourceArn": RULE + "-other"},
        principal="events.amazonaws.com",
        resource_policy=EVENTS_MAY_SEND,
    )

    # THEN the reason points at the resource-based policy
    assert decision.reason == "because no resource-based policy allows the sqs:SendMessage action"


def test_an_explicit_deny_in_a_resource_policy_overrides_an_identity_allow(
    evaluator: PolicyEvaluator,
) -> None:
    # GIVEN a role allowed all of SQS and a queue policy denying everyone
    allow = policy(statement("Allow", "sqs:*", "*"))
    deny_all = queue_policy(statement("Deny", "sqs:*", QUEUE, Principal="*"))

    # WHEN the role sends a message
    decision = check(evaluator, "sqs:SendMessage", QUEUE, allow, resource_policy=deny_all)

    # THEN the resource policy's deny wins
    assert decision.result == "ExplicitlyDenied"
    assert decision.reason == "with an explicit deny in a resource-based policy"


# Requests that cannot be simulated


def test_an_arn_of_the_wrong_resource_type_is_an_error(evaluator: PolicyEvaluator) -> None:
    # GIVEN DescribeTrainingJob, which acts on training jobs
    processing_job = f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:processing-job/evaluate-1"

    # WHEN it is asked about a processing job  THEN the error names the action, the ARN and the problem
    with pytest.raises(
        EvaluatorError, match=r"DescribeTrainingJob on .*processing-job/evaluate-1.*resource types"
    ):
        check(
            evaluator, "sagemaker:DescribeTrainingJob", processing_job, policy(statement("Allow", "*", "*"))
        )


def test_an_unknown_action_is_an_error(evaluator: PolicyEvaluator) -> None:
    # GIVEN an action DynamoDB does not have  WHEN it is evaluated  THEN the error names it
    with pytest.raises(EvaluatorError, match=r"dynamodb:UpdateItems .*no such action"):
        check(evaluator, "dynamodb:UpdateItems", TABLE, policy(statement("Allow", "*", "*")))


def test_an_invalid_policy_is_an_error_naming_it(evaluator: PolicyEvaluator) -> None:
    # GIVEN a policy with a misspelt Effect
    broken = policy(statement("Alow", "dynamodb:GetItem", TABLE), name="Broken")

    # WHEN it is evaluated  THEN the error names the policy and the field
    with pytest.raises(EvaluatorError, match=r"invalid policy: Broken: Statement\[0\]\.Effect"):
        check(evaluator, "dynamodb:GetItem", TABLE, broken)


def test_a_missing_node_is_an_error_saying_how_to_set_up() -> None:
    # GIVEN an evaluator pointed at a Node.js that does not exist
    missing = PolicyEvaluator(node="no-such-node-binary")

    # WHEN it evaluates  THEN the error says what to install
    with pytest.raises(EvaluatorError, match=r"needs Node.js and `npm ci`"):
        missing.evaluate(AuthzRequest(ROLE, "dynamodb:GetItem", TABLE), [])


# The sidecar


def test_a_dead_sidecar_is_restarted() -> None:
    # GIVEN an evaluator whose sidecar was killed after its first answer
    allow = policy(statement("Allow", "dynamodb:GetItem", TABLE))
    with PolicyEvaluator() as own:
        own.evaluate(AuthzRequest(ROLE, "dynamodb:GetItem", TABLE), [allow])
        assert own._process is not None
        own._process.kill()
        own._process.wait()

        # WHEN it evaluates again
        decision = own.evaluate(AuthzRequest(ROLE, "dynamodb:GetItem", TABLE), [allow])

    # THEN a new sidecar answers
    assert decision.allowed
