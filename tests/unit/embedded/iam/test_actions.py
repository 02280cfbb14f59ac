"""What each API request needs from IAM, checked against iam-data's actions and resource types."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.gatekeeper.iam.actions import Access, UnknownOperationError, accesses, sync_accesses
from retrain.embedded.gatekeeper.iam.evaluator import AuthzRequest, Policy, PolicyEvaluator

ACCOUNT = ACCOUNT_ID
ROLE = f"arn:aws:iam::{ACCOUNT}:role/sm"
ALLOW_ALL = Policy(
    "all", {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
)

# Every operation the project's code, state machine and SageMaker jobs call, with realistic parameters.
CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("dynamodb", "GetItem", {"TableName": "runs"}),
    ("dynamodb", "PutItem", {"TableName": "runs"}),
    ("dynamodb", "UpdateItem", {"TableName": "datasets"}),
    ("dynamodb", "Query", {"TableName": "ledger", "IndexName": "pending-by-upload-time"}),
    ("dynamodb", "Scan", {"TableName": "datasets"}),
    ("s3", "GetObject", {"Bucket": "b", "Key": "runs/x/manifest.jsonl"}),
    ("s3", "GetObject", {"Bucket": "b", "Key": "k", "VersionId": "v1"}),
    ("s3", "HeadObject", {"Bucket": "b", "Key": "k"}),
    ("s3", "PutObject", {"Bucket": "b", "Key": "k"}),
    ("s3", "CreateMultipartUpload", {"Bucket": "b", "Key": "k"}),
    ("s3", "ListObjectsV2", {"Bucket": "b", "Prefix": "data/flowers/"}),
    ("s3", "ListObjectVersions", {"Bucket": "b"}),
    ("s3", "DeleteObject", {"Bucket": "b", "Key": "k"}),
    ("s3", "CopyObject", {"Bucket": "b", "Key": "k2", "CopySource": {"Bucket": "a", "Key": "k1"}}),
    ("sagemaker", "CreateTrainingJob", {"TrainingJobName": "Job-1", "RoleArn": ROLE, "Tags": [{"Key": "a"}]}),
    ("sagemaker", "DescribeTrainingJob", {"TrainingJobName": "job-1"}),
    ("sagemaker", "CreateProcessingJob", {"ProcessingJobName": "p", "RoleArn": ROLE}),
    ("sagemaker", "DescribeProcessingJob", {"ProcessingJobName": "p"}),
    (
        "sagemaker",
        "CreateHyperParameterTuningJob",
        {"HyperParameterTuningJobName": "t", "TrainingJobDefinition": {"RoleArn": ROLE}},
    ),
    ("sagemaker", "DescribeHyperParameterTuningJob", {"HyperParameterTuningJobName": "t"}),
    ("sagemaker", "ListTrainingJobsForHyperParameterTuningJob", {"HyperParameterTuningJobName": "t"}),
    ("sagemaker", "ListTrainingJobs", {"StatusEquals": "Failed"}),
    ("sagemaker", "ListProcessingJobs", {"NameContains": "eval"}),
    ("sagemaker", "ListHyperParameterTuningJobs", {}),
    ("sagemaker", "ListModelPackageGroups", {"CrossAccountFilterOption": "SameAccount"}),
    ("sagemaker", "CreateModelPackageGroup", {"ModelPackageGroupName": "retrain-flowers"}),
    ("sagemaker", "DescribeModelPackageGroup", {"ModelPackageGroupName": "retrain-flowers"}),
    ("sagemaker", "CreateModelPackage", {"ModelPackageGroupName": "retrain-flowers"}),
    ("sagemaker", "ListTags", {"ResourceArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/job-1"}),
    (
        "stepfunctions",
        "StartExecution",
        {"stateMachineArn": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:m"},
    ),
    (
        "stepfunctions",
        "DescribeExecution",
        {"executionArn": f"arn:aws:states:{REGION}:{ACCOUNT}:execution:m:e"},
    ),
    ("sns", "Publish", {"TopicArn": f"arn:aws:sns:{REGION}:{ACCOUNT}:topic"}),
    ("sqs", "ReceiveMessage", {"QueueUrl": f"http://127.0.0.1:5000/{ACCOUNT}/ingest"}),
    ("sqs", "DeleteMessageBatch", {"QueueUrl": f"http://127.0.0.1:5000/{ACCOUNT}/ingest"}),
    ("lambda", "Invoke", {"FunctionName": "prepare"}),
    ("lambda", "Invoke", {"FunctionName": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:prepare:$LATEST"}),
    ("events", "PutEvents", {"Entries": [{"Source": "aws.sagemaker"}]}),
    ("logs", "CreateLogStream", {"logGroupName": "/aws/sagemaker/TrainingJobs", "logStreamName": "j/algo-1"}),
    ("logs", "PutLogEvents", {"logGroupName": "/aws/sagemaker/TrainingJobs", "logStreamName": "j/algo-1"}),
    ("logs", "GetLogEvents", {"logGroupName": "/aws/sagemaker/TrainingJobs", "logStreamName": "j/algo-1"}),
    ("fsx", "CreateDataRepositoryTask", {"FileSystemId": "fs-0123456789abcdef0"}),
    ("fsx", "DescribeDataRepositoryTasks", {}),
    ("ecr", "BatchGetImage", {"repositoryName": "retrain-training"}),
]


@pytest.fixture(scope="module")
def evaluator() -> Iterator[PolicyEvaluator]:
    with PolicyEvaluator(account=ACCOUNT) as found:
        yield found


@pytest.mark.parametrize(("service", "operation", "params"), CALLS, ids=[f"{s}:{o}" for s, o, _ in CALLS])
def test_every_access_names_an_action_and_resource_type_iam_knows(
    evaluator: PolicyEvaluator, service: str, operation: str, params: dict[str, Any]
) -> None:
    # GIVEN a request the project makes
    needed = accesses(service, operation, params, region=REGION, account=ACCOUNT)
    assert needed
    for access in needed:
        # WHEN IAM evaluates each access against an allow-all policy
        decision = evaluator.evaluate(
            AuthzRequest(ROLE, access.action, access.resource, access.context), [ALLOW_ALL]
        )
        # THEN iam-simulate finds the action and a resource type the ARN fits (it raises otherwise)
        assert decision.allowed, access


def test_s3_names_list_and_head_by_their_iam_actions_with_the_prefix_as_a_condition_key() -> None:
    assert accesses(
        "s3", "ListObjectsV2", {"Bucket": "b", "Prefix": "data/"}, region=REGION, account=ACCOUNT
    ) == [Access("s3:ListBucket", "arn:aws:s3:::b", {"s3:prefix": "data/"})]
    assert accesses("s3", "HeadObject", {"Bucket": "b", "Key": "k"}, region=REGION, account=ACCOUNT) == [
        Access("s3:GetObject", "arn:aws:s3:::b/k")
    ]


@pytest.mark.parametrize(
    "operation",
    ["ListTrainingJobs", "ListProcessingJobs", "ListHyperParameterTuningJobs", "ListModelPackageGroups"],
)
def test_sagemaker_lists_without_a_resource_type_are_authorised_on_every_resource(operation: str) -> None:
    # GIVEN a SageMaker list call whose action has no resource type in the Service Authorization Reference
    # WHEN its accesses are asked for, filters and all
    needed = accesses("sagemaker", operation, {"NameContains": "eval"}, region=REGION, account=ACCOUNT)
    # THEN it is the action of the same name on "*"
    assert needed == [Access(f"sagemaker:{operation}", "*")]


def test_a_model_package_group_named_by_its_arn_is_authorised_on_that_arn() -> None:
    # GIVEN DescribeModelPackageGroup naming the group by its ARN (its ModelPackageGroupName takes either)
    group = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package-group/flowers"
    # WHEN its accesses are asked for THEN the action is on that ARN
    assert accesses(
        "sagemaker",
        "DescribeModelPackageGroup",
        {"ModelPackageGroupName": group},
        region=REGION,
        account=ACCOUNT,
    ) == [Access("sagemaker:DescribeModelPackageGroup", group)]


def test_a_sagemaker_create_also_passes_its_role_and_tags_the_job() -> None:
    # GIVEN CreateTrainingJob with a role and tags
    needed = accesses(
        "sagemaker",
        "CreateTrainingJob",
        {"TrainingJobName": "Rt-Job", "RoleArn": ROLE, "Tags": [{"Key": "a", "Value": "b"}]},
        region=REGION,
        account=ACCOUNT,
    )
    # THEN it needs the create on the lower-cased job ARN, iam:PassRole to SageMaker, and AddTags
    job = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/rt-job"
    assert needed == [
        Access("sagemaker:CreateTrainingJob", job),
        Access("iam:PassRole", ROLE, {"iam:PassedToService": "sagemaker.amazonaws.com"}),
        Access("sagemaker:AddTags", job),
    ]


def test_a_sync_task_needs_what_step_functions_does_behind_it() -> None:
    needed = sync_accesses("CreateProcessingJob", {"ProcessingJobName": "p"}, region=REGION, account=ACCOUNT)
    rule = f"arn:aws:events:{REGION}:{ACCOUNT}:rule/StepFunctionsGetEventsForSageMakerProcessingJobsRule"
    assert {a.action for a in needed} == {
        "sagemaker:DescribeProcessingJob",
        "sagemaker:StopProcessingJob",
        "sagemaker:AddTags",
        "sagemaker:ListTags",
        "events:PutTargets",
        "events:PutRule",
        "events:DescribeRule",
    }
    assert {a.resource for a in needed if a.action.startswith("events:")} == {rule}


def test_an_operation_without_a_mapping_is_refused_rather_than_let_through() -> None:
    with pytest.raises(UnknownOperationError, match="sagemaker:DeleteDomain"):
        accesses("sagemaker", "DeleteDomain", {}, region=REGION, account=ACCOUNT)
    with pytest.raises(UnknownOperationError, match="kinesis:PutRecord"):
        accesses("kinesis", "PutRecord", {}, region=REGION, account=ACCOUNT)
