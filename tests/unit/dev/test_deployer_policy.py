"""The deployer's IAM policy, derived from the resource provider schemas of the template's resource types."""

from __future__ import annotations

import pytest

from retrain.dev import deployer_policy


def test_the_policy_covers_every_resource_type_of_the_template() -> None:
    # GIVEN the translated template's resource types (an unknown type raises SchemaNotFoundError)
    actions = set(deployer_policy.policy()["Statement"][0]["Action"])
    # THEN what CloudFormation does for each, and what sam deploy does itself, is allowed
    for action in (
        "cloudformation:CreateChangeSet",
        "iam:CreateRole",
        "iam:PassRole",
        "lambda:CreateFunction",
        "lambda:CreateEventSourceMapping",
        "states:CreateStateMachine",
        "fsx:CreateFileSystem",
        "fsx:CreateDataRepositoryAssociation",
        "dynamodb:CreateTable",
        "sqs:CreateQueue",
        "events:PutRule",
        "sns:CreateTopic",
        "cloudwatch:PutMetricAlarm",
        "logs:CreateLogGroup",
    ):
        assert action in actions, action


def test_a_type_without_listed_permissions_is_refused_rather_than_left_out() -> None:
    with pytest.raises(deployer_policy.SchemaNotFoundError, match="AWS::No::Such"):
        deployer_policy.resource_permissions(["AWS::No::Such"])
