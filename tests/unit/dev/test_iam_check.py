"""The static IAM check: template.yaml's roles against what the code and the state machine call."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from retrain.dev import iam_check
from retrain.dev.template_model import REPO, load
from retrain.embedded.gatekeeper.iam.evaluator import PolicyEvaluator

TEMPLATE = REPO / "template.yaml"


@pytest.fixture(scope="module")
def evaluator() -> Iterator[PolicyEvaluator]:
    with PolicyEvaluator() as found:
        yield found


def _copy(tmp_path: Path, old: str, new: str, *, asl: tuple[str, str] | None = None) -> Path:
    """template.yaml (and the state machine) with one change, next to the code it deploys."""
    text = TEMPLATE.read_text()
    assert old in text, old
    (tmp_path / "template.yaml").write_text(text.replace(old, new))
    for name in ("functions", "contract", "layers"):
        (tmp_path / name).symlink_to(REPO / name)
    shutil.copytree(REPO / "nested", tmp_path / "nested")  # a copy: a test may change a nested stack
    machine = (REPO / "statemachine" / "training.asl.json").read_text()
    if asl is not None:
        assert asl[0] in machine, asl[0]
        machine = machine.replace(*asl)
    (tmp_path / "statemachine").mkdir()
    (tmp_path / "statemachine" / "training.asl.json").write_text(machine)
    return tmp_path / "template.yaml"


def _findings(template: Path, evaluator: PolicyEvaluator) -> list[str]:
    checker = iam_check.Checker(load(template, iam_check.CHECKED_PARAMETERS), evaluator)
    return [str(f) for f in iam_check.findings(checker)]


def test_every_role_allows_what_its_code_and_state_machine_call(evaluator: PolicyEvaluator) -> None:
    assert _findings(TEMPLATE, evaluator) == []


def test_a_function_role_without_a_table_its_code_updates_is_found(
    tmp_path: Path, evaluator: PolicyEvaluator
) -> None:
    # GIVEN the best-candidate function without its grant on the data set table (the defect the review found)
    template = _copy(
        tmp_path,
        "        - DynamoDBCrudPolicy: {TableName: !Ref RunsTable}\n"
        "        - DynamoDBCrudPolicy: {TableName: !Ref DatasetsTable}\n",
        "        - DynamoDBCrudPolicy: {TableName: !Ref RunsTable}\n",
    )
    # THEN the check names the function, the action, the table and the line of code
    [finding] = _findings(template, evaluator)
    assert finding.startswith(
        "PickBestCandidateFunction (role PickBestCandidateFunctionRole): dynamodb:UpdateItem"
    )
    assert "table/retrain-DatasetsTable" in finding and "best_candidate.py" in finding


def test_a_function_role_without_a_read_its_code_makes_is_found(
    tmp_path: Path, evaluator: PolicyEvaluator
) -> None:
    # GIVEN the finalize function without sagemaker:DescribeTrainingJob (the default FinalTraining path)
    template = _copy(
        tmp_path,
        """stateMachine:${AWS::StackName}-training"
            - Effect: Allow
              Action: sagemaker:DescribeTrainingJob
""",
        """stateMachine:${AWS::StackName}-training"
            - Effect: Allow
              Action: sagemaker:ListTrainingJobs
""",
    )
    [finding] = _findings(template, evaluator)
    assert finding.startswith(
        "FinalizeRunFunction (role FinalizeRunFunctionRole): sagemaker:DescribeTrainingJob"
    )


def test_an_ingest_role_that_cannot_read_the_uploads_it_checks_is_found(
    tmp_path: Path, evaluator: PolicyEvaluator
) -> None:
    # GIVEN ingest allowed GetObject but not GetObjectVersion (the data bucket is versioned, and ingest
    # reads the version its notice names)
    template = _copy(tmp_path, "Action: [s3:GetObject, s3:GetObjectVersion]", "Action: [s3:GetObject]")
    found = _findings(template, evaluator)
    assert found and all(
        f.startswith("IngestFunction (role IngestFunctionRole): s3:GetObjectVersion") for f in found
    )
    assert all("content.py" in f for f in found)


def test_a_state_machine_role_without_log_delivery_is_found(
    tmp_path: Path, evaluator: PolicyEvaluator
) -> None:
    template = _copy(tmp_path, "                - logs:CreateLogDelivery\n", "")
    [finding] = _findings(template, evaluator)
    assert (
        "TrainingStateMachineRole): logs:CreateLogDelivery on *" in finding
        and "LoggingConfiguration" in finding
    )


def test_a_state_machine_role_without_what_sync_does_behind_the_task_is_found(
    tmp_path: Path, evaluator: PolicyEvaluator
) -> None:
    template = _copy(
        tmp_path,
        "            - Effect: Allow\n              Action: sagemaker:ListTags\n"
        '              Resource: "*"\n',
        "",
    )
    findings = _findings(template, evaluator)
    assert findings and all("sagemaker:ListTags" in f for f in findings)
    assert any("state 'Tune hyperparameters'" in f for f in findings)


def test_a_task_parameter_the_api_refuses_is_found(tmp_path: Path, evaluator: PolicyEvaluator) -> None:
    template = _copy(tmp_path, "", "", asl=('"TrainingInputMode": "File"', '"TrainingInputMode": "Files"'))
    findings = _findings(template, evaluator)
    assert findings and all("Member must satisfy enum value set" in f for f in findings)
    assert any("trainingJobDefinition.algorithmSpecification.trainingInputMode" in f for f in findings)


def test_a_sagemaker_role_that_cannot_write_checkpoints_is_found(
    tmp_path: Path, evaluator: PolicyEvaluator
) -> None:
    template = _copy(
        tmp_path,
        "                Action: [s3:GetObject, s3:PutObject, s3:DeleteObject, s3:ListBucket]",
        "                Action: [s3:GetObject, s3:DeleteObject, s3:ListBucket]",
    )
    findings = _findings(template, evaluator)
    assert findings and all(
        "SageMaker jobs (role SageMakerExecutionRole): s3:PutObject" in f for f in findings
    )


def test_the_command_exits_1_and_lists_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = _copy(tmp_path, "                - logs:CreateLogDelivery\n", "")
    assert iam_check.main([str(template)]) == 1
    assert "logs:CreateLogDelivery" in capsys.readouterr().out


def test_a_sagemaker_role_that_cannot_pull_the_serving_image_is_found(
    tmp_path: Path, evaluator: PolicyEvaluator
) -> None:
    # GIVEN the SageMaker role without its grant on the PyTorch inference repository
    template = _copy(
        tmp_path,
        ':${Account}:repository/pytorch-inference"',
        ':${Account}:repository/other"',
    )
    # WHEN checked THEN an endpoint of a registered package could not pull its image
    found = _findings(template, evaluator)
    assert any(
        "SageMaker endpoints" in f and "ecr:BatchGetImage" in f and "pytorch-inference" in f for f in found
    )


def test_a_tracking_role_without_its_mlflow_app_or_the_artifact_store_is_found(
    tmp_path: Path, evaluator: PolicyEvaluator
) -> None:
    # GIVEN the tracking function allowed only a tracking server's actions, and the MLflow app's role
    # without the artifact store (MLflow's client is no boto3 call: the check knows what it needs)
    template = _copy(
        tmp_path,
        "                - sagemaker:CallMlflowAppApi\n",
        "",
    )
    app = template.parent / "nested" / "mlflow-app.yaml"  # the app and its role are a nested stack
    app.write_text(
        app.read_text().replace(
            "                Action: [s3:GetObject, s3:PutObject, s3:DeleteObject]\n",
            "                Action: [s3:GetObject, s3:DeleteObject]\n",
        )
    )
    found = _findings(template, evaluator)
    # THEN both are named, with the app's ARN and the store's key
    assert len(found) == 2, found
    assert found[0].startswith(
        "MlflowApp (role MlflowAppRole): s3:PutObject on arn:aws:s3:::retrain-artifactbucket/mlflow/"
    )
    assert found[1].startswith("TrackingFunction (role TrackingFunctionRole): sagemaker:CallMlflowAppApi on ")
    assert ":mlflow-app/" in found[1]


def test_a_stack_tracking_in_an_existing_tracking_server_allows_its_mlflow_calls(
    evaluator: PolicyEvaluator,
) -> None:
    # GIVEN the template deployed with the ARN of a tracking server the team already has
    server = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/team-mlflow"
    checker = iam_check.Checker(load(TEMPLATE, {"MlflowTracking": server}), evaluator)
    # THEN the tracking function may call each MLflow operation it uses on that server
    assert [str(f) for f in iam_check.findings(checker)] == []


def test_a_tracking_role_without_one_of_a_tracking_servers_operations_is_found(
    tmp_path: Path, evaluator: PolicyEvaluator
) -> None:
    # GIVEN the template deployed with a tracking server's ARN, its tracking role missing one operation
    server = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/team-mlflow"
    template = _copy(tmp_path, "                - sagemaker-mlflow:DeleteRun\n", "")
    checker = iam_check.Checker(load(template, {"MlflowTracking": server}), evaluator)
    # WHEN checked THEN exactly that operation on that server is named, for the tracking function
    found = [str(f) for f in iam_check.findings(checker)]
    assert len(found) == 1, found
    assert found[0].startswith(
        f"TrackingFunction (role TrackingFunctionRole): sagemaker-mlflow:DeleteRun on {server}"
    )
