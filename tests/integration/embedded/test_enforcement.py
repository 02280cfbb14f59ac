"""The embedded stack refuses what AWS refuses: a template copy that lacks one permission fails its run
with AccessDeniedException naming that action and role, for each kind of role (a Lambda's, the state
machine's, the SageMaker jobs'), exactly where AWS would fail. And when "Record the failure" itself
fails, the execution-ended rule still closes the run, releases the lock and tells the subscribers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from controller import datasets, names, prepare, runs
from controller.ledger import rows as ledger_rows
from retrain.demo import data as demo_data
from retrain.demo.flow import DEMO_PARAMETERS
from retrain.embedded.faults import Faults
from retrain.embedded.stack import REPO_ROOT, EmbeddedStack, EmbeddedStackError
from tests.integration.embedded.flow import outputs_of

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DATASET = "flowers"
# No upload starts a run here: the tests start one by hand once the uploads are in the ledger.
# Six digits, about one per label: each label counts (MinImagesPerLabel 1); the subject is the roles.
PARAMETERS = {
    **DEMO_PARAMETERS,
    "MinNewImages": "1000",
    "QuietPeriodSeconds": "3600",
    "MinImagesPerLabel": "1",
}
FIXED = {"hyperparameters": {"lr": 0.05}}  # no tuning: the final training job is the first job


def mutated_template(tmp_path: Path, old: str, new: str) -> Path:
    """template.yaml with one change, beside the code and state machine it deploys."""
    text = (REPO_ROOT / "template.yaml").read_text(encoding="utf-8")
    assert text.count(old) == 1, f"the change must name one place in template.yaml: {old!r}"
    folder = tmp_path / "template"
    folder.mkdir()
    (folder / "template.yaml").write_text(text.replace(old, new), encoding="utf-8")
    for name in ("functions", "contract", "statemachine", "layers", "nested"):
        (folder / name).symlink_to(REPO_ROOT / name)
    return folder / "template.yaml"


@contextmanager
def stack_with_uploads(
    tmp_path: Path, template: Path, faults: Faults | None = None
) -> Iterator[EmbeddedStack]:
    with EmbeddedStack(
        tmp_path / "state", parameter_overrides=PARAMETERS, faults=faults or Faults(), template=template
    ) as stack:
        outputs = outputs_of(stack)
        bucket, ledger = (
            outputs[names.STACK_OUTPUTS["data_bucket"]],
            outputs[names.STACK_OUTPUTS["ledger_table"]],
        )
        files = demo_data.write_digits(tmp_path / "images", limit=6).files
        s3 = stack.client("s3")
        for path in files:
            s3.put_object(
                Bucket=bucket,
                Key=names.upload_key(DATASET, path.parent.name, path.name),
                Body=path.read_bytes(),
            )
        dynamodb = stack.client("dynamodb")
        table = outputs[names.STACK_OUTPUTS["datasets_table"]]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            parts = datasets.partitions(DATASET, table_name=table, client=dynamodb)
            count = len(list(ledger_rows(parts, table_name=ledger, client=dynamodb)))  # claims left out
            if count == len(files):
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the uploads did not reach the ledger")
        yield stack


def run(stack: EmbeddedStack, name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Start a run by hand (StartExecution with the documented input); its execution once it ended."""
    sfn = stack.client("stepfunctions")
    arn = sfn.start_execution(
        stateMachineArn=outputs_of(stack)[names.STACK_OUTPUTS["state_machine"]],
        name=name,
        input=json.dumps({"dataset": DATASET, "overrides": overrides or {}}),
    )["executionArn"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        described: dict[str, Any] = sfn.describe_execution(executionArn=arn)
        if described["status"] != "RUNNING":
            return described
        time.sleep(0.5)
    raise AssertionError(f"execution {name} did not end")


def test_a_lambda_role_without_a_table_its_code_reads_fails_the_run_there(tmp_path: Path) -> None:
    # GIVEN the prepare function's role without its data set table
    template = mutated_template(
        tmp_path,
        "        - DynamoDBCrudPolicy: {TableName: !Ref DatasetsTable}\n"
        "        - DynamoDBCrudPolicy: {TableName: !Ref RunsTable}\n"
        "        - S3CrudPolicy: {BucketName: !Ref ArtifactBucket}\n",
        "        - DynamoDBCrudPolicy: {TableName: !Ref RunsTable}\n"
        "        - S3CrudPolicy: {BucketName: !Ref ArtifactBucket}\n",
    )
    with stack_with_uploads(tmp_path, template) as stack:
        # WHEN a run starts
        execution = run(stack, "lambda-role")
    # THEN the first state fails as AWS would: AccessDeniedException on that table, for that role
    assert execution["status"] == "FAILED"
    cause = execution["cause"]
    assert "AccessDeniedException" in cause and "dynamodb:GetItem" in cause
    assert "assumed-role/retrain-PrepareRunFunctionRole-" in cause and "DatasetsTable" in cause


def test_a_state_machine_role_without_the_import_fails_the_run_at_the_import(tmp_path: Path) -> None:
    # GIVEN the state machine's role without its FSx statement
    template = mutated_template(
        tmp_path,
        "            - Effect: Allow\n"
        "              Action: [fsx:CreateDataRepositoryTask, fsx:DescribeDataRepositoryTasks, "
        "fsx:DescribeFileSystems]\n"
        '              Resource: "*"\n',
        "",
    )
    with stack_with_uploads(tmp_path, template) as stack:
        # WHEN a run starts under the longest execution name Step Functions takes (80 characters; its
        # import token must still fit FSx's 63)
        name = "m" * 80
        execution = run(stack, name)
        record = runs.get_run(
            DATASET,
            name,
            table_name=outputs_of(stack)[names.STACK_OUTPUTS["runs_table"]],
            client=stack.client("dynamodb"),
        )
    # THEN "Import new images" fails with FSx's AccessDeniedException for the state machine's role
    assert execution["status"] == "FAILED"
    assert record is not None and record["status"] == "FAILED"
    assert record["failure"]["error"] == "FSx.AccessDeniedException", record["failure"]
    cause = record["failure"]["cause"]
    assert (
        "fsx:CreateDataRepositoryTask" in cause and "assumed-role/retrain-TrainingStateMachineRole-" in cause
    )
    assert execution["cause"] == cause


# the role's pull from the account's own repositories (another statement pulls AWS's inference image)
OWN_REPOSITORIES = (
    '                Resource: !Sub "arn:${AWS::Partition}:ecr:${AWS::Region}:'
    '${AWS::AccountId}:repository/*"\n'
)


@pytest.mark.parametrize(
    ("old", "new", "words", "first"),
    [
        (
            "                Action: [s3:GetObject, s3:PutObject, s3:DeleteObject, s3:ListBucket]\n",
            "                Action: [s3:PutObject, s3:DeleteObject]\n",
            ["AccessDenied", "s3:ListBucket", "assumed-role/retrain-SageMakerExecutionRole-"],
            "training",  # the freezing job reads DynamoDB and writes S3: training is the first to read
        ),
        (
            "                Action: [ecr:BatchGetImage, ecr:GetDownloadUrlForLayer, "
            "ecr:BatchCheckLayerAvailability]\n" + OWN_REPOSITORIES,
            "                Action: [ecr:BatchCheckLayerAvailability]\n" + OWN_REPOSITORIES,
            [
                "ecr:BatchGetImage",
                "repository/retrain-training",
                "assumed-role/retrain-SageMakerExecutionRole-",
            ],
            "freeze",  # every job pulls the image: the run's first, the freezing job, fails
        ),
    ],
    ids=["s3-channels", "ecr-image"],
)
def test_a_sagemaker_role_without_what_its_job_reads_fails_the_job(
    tmp_path: Path, old: str, new: str, words: list[str], first: str
) -> None:
    # GIVEN the SageMaker execution role without one of the accesses its jobs need
    template = mutated_template(tmp_path, old, new)
    with stack_with_uploads(tmp_path, template) as stack:
        # WHEN a run with fixed hyperparameters starts (its jobs: the freezing job, the final training job)
        execution = run(stack, "sagemaker-role", FIXED)
        record = runs.get_run(
            DATASET,
            "sagemaker-role",
            table_name=outputs_of(stack)[names.STACK_OUTPUTS["runs_table"]],
            client=stack.client("dynamodb"),
        )
        assert record is not None
        name = prepare.job_names(DATASET, execution["executionArn"])[first]  # type: ignore[literal-required]
        sagemaker = stack.client("sagemaker")
        if first == "freeze":
            job = sagemaker.describe_processing_job(ProcessingJobName=name)
            status = job["ProcessingJobStatus"]
        else:
            job = sagemaker.describe_training_job(TrainingJobName=name)
            status = job["TrainingJobStatus"]
    # THEN the job fails as SageMaker's would, naming the action and the role, and so does the run
    assert execution["status"] == "FAILED" and status == "Failed"
    assert all(word in job["FailureReason"] for word in words), job["FailureReason"]
    assert all(word in record["failure"]["cause"] for word in words[1:])


def test_when_recording_a_failure_fails_the_execution_ended_rule_closes_the_run(tmp_path: Path) -> None:
    # GIVEN a "Record the failure" function that cannot write the run table, and an import that fails
    template = mutated_template(
        tmp_path,
        "      Description: Records why a run failed and releases the data set lock.\n"
        "      Policies:\n"
        "        - DynamoDBCrudPolicy: {TableName: !Ref DatasetsTable}\n"
        "        - DynamoDBCrudPolicy: {TableName: !Ref RunsTable}\n",
        "      Description: Records why a run failed and releases the data set lock.\n"
        "      Policies:\n"
        "        - DynamoDBCrudPolicy: {TableName: !Ref DatasetsTable}\n",
    )
    with stack_with_uploads(tmp_path, template, Faults.parse(["import-fails"])) as stack:
        outputs = outputs_of(stack)
        sqs, sns = stack.client("sqs"), stack.client("sns")
        queue = sqs.create_queue(QueueName="subscriber")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        sns.subscribe(TopicArn=outputs[names.STACK_OUTPUTS["topic"]], Protocol="sqs", Endpoint=queue_arn)
        # WHEN a run fails
        execution = run(stack, "unrecorded")
        # THEN the execution still carries the run's own error in its cause
        assert execution["status"] == "FAILED" and execution["error"] == "RunFailed"
        assert execution["cause"].startswith("ImportFailedError: ")
        assert "the failure could not be recorded" in execution["cause"]
        # AND the execution-ended rule marks the run FAILED, releases the lock and tells the subscribers
        table, dynamodb = outputs[names.STACK_OUTPUTS["runs_table"]], stack.client("dynamodb")
        # (two writes, the run's record then the lock: wait for both, as a reader on AWS would)
        deadline = time.monotonic() + 60
        record: dict[str, Any] | None = None
        lock: dict[str, Any] = {}
        while time.monotonic() < deadline:
            record = runs.get_run(DATASET, "unrecorded", table_name=table, client=dynamodb)
            lock = dynamodb.get_item(
                TableName=outputs[names.STACK_OUTPUTS["datasets_table"]],
                Key={names.DATASETS_PK: {"S": DATASET}},
                ConsistentRead=True,
            )["Item"]
            if record is not None and record["status"] == "FAILED" and names.LOCK_ATTRIBUTE not in lock:
                break
            time.sleep(0.5)
        assert record is not None and record["status"] == "FAILED", record
        assert "ImportFailedError" in record["failure"]["cause"]
        assert names.LOCK_ATTRIBUTE not in lock, lock
        messages = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=5).get(
            "Messages", []
        )
        assert any("unrecorded" in json.loads(m["Body"])["Message"] for m in messages)


def test_a_state_machine_role_that_cannot_deliver_its_logs_fails_the_deploy(tmp_path: Path) -> None:
    # GIVEN the state machine's role without the log delivery permissions its Logging configuration needs
    template = mutated_template(tmp_path, "                - logs:CreateLogDelivery\n", "")
    # WHEN the stack is created THEN it fails there, as CreateStateMachine refuses the configuration
    stack = EmbeddedStack(tmp_path / "state", parameter_overrides=PARAMETERS, template=template)
    with pytest.raises(EmbeddedStackError, match=r"InvalidLoggingConfiguration.*logs:CreateLogDelivery"):
        stack.start()
