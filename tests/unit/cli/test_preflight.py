"""`retrain preflight`: the decisions (pure, many inputs) and the command against the embedded emulation's
account (the gated moto server with its Service Quotas, GetAccountSettings and DescribeType)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from retrain import preflight, quotas
from retrain.cli import app
from retrain.dev import regions
from retrain.embedded import servicequotas
from retrain.embedded.account import ACCOUNT_ID
from retrain.errors import PreflightBindsError, UsageError
from tests.unit.embedded.emulated_account import emulated_account

SPOT = "ml.g5.xlarge for spot training job usage"

# --- the decisions ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "unreserved", "ingest", "status", "ask"),
    [
        (50, 50, 100, "binds", "'Concurrent executions' ≥ 111 in eu-west-2"),  # a new account
        (1000, 1000, 100, "ok", ""),
        (1000, 100, 100, "binds", "≥ 1,011 in eu-west-2"),  # 900 reserved by other functions
        (1000, 111, 100, "ok", ""),
        (1000, 110, 100, "binds", "≥ 1,001"),
        (200, 200, 500, "binds", "≥ 511"),
        (None, None, 100, "unknown", "get-account-settings"),
    ],
)
def test_lambda_concurrency_against_what_the_stack_runs(
    limit: int | None, unreserved: int | None, ingest: int, status: str, ask: str
) -> None:
    check = preflight.lambda_concurrency(
        limit,
        unreserved,
        ingest_max_concurrency=ingest,
        other_functions=11,
        region="eu-west-2",
        source="GetAccountSettings",
        max_receive_count=5,
    )

    assert check.status == status
    assert ask in check.ask
    if status == "binds":
        assert "maxReceiveCount 5" in check.note


@pytest.mark.parametrize(
    ("unreserved", "suggested"), [(50, "IngestMaxConcurrency=39"), (12, None), (13, "=2")]
)
def test_a_binding_lambda_check_suggests_a_concurrency_that_fits(
    unreserved: int, suggested: str | None
) -> None:
    check = preflight.lambda_concurrency(
        unreserved, unreserved, ingest_max_concurrency=100, other_functions=11, region="r", source="s"
    )

    assert check.status == "binds"
    if suggested is None:
        assert "IngestMaxConcurrency" not in check.ask
    else:
        assert suggested in check.ask


@pytest.mark.parametrize(
    ("uploads", "invocations", "stack_rate", "hours"),
    [
        (10**6, 18_750, 3_581, 10**6 / 3_581 / 3600),
        (10**7, 18_750, 3_581, 10**7 / 3_581 / 3600),
        (10**6, 750, 3_581, 10**6 / 750 / 3600),
        (10**7, 750, 3_581, 10**7 / 750 / 3600),
        (10**7, 2_250, 10_000, 10**7 / 2_250 / 3600),
        (3600, 1, 1_000, 1.0),
    ],
)
def test_first_load_goes_at_the_slower_of_eventbridge_and_the_stack(
    uploads: int, invocations: float, stack_rate: float, hours: float
) -> None:
    assert preflight.first_load_hours(uploads, invocations, stack_rate) == pytest.approx(hours)


def test_regions_of_18750_and_750_invocations_give_different_first_loads() -> None:
    rate = preflight.recording_rate(100)
    fast = preflight.first_load_hours(10**7, quotas.eventbridge_invocations("us-east-1"), rate)
    slow = preflight.first_load_hours(10**7, quotas.eventbridge_invocations("af-south-1"), rate)

    assert rate == pytest.approx(100 * preflight.INGEST_UPLOADS_PER_S_PER_FUNCTION)
    assert fast == pytest.approx(10**7 / rate / 3600, abs=0.001)
    assert slow == pytest.approx(3.704, abs=0.001)


@pytest.mark.parametrize(
    ("name", "args"),
    [("uploads", (0, 10, 10)), ("invocations_per_s", (1, 0, 10)), ("stack_rate", (1, 10, -1))],
)
def test_first_load_names_a_bad_input(name: str, args: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError, match=name):
        preflight.first_load_hours(*args)


@pytest.mark.parametrize(
    ("invocations", "status", "pace"),
    [
        (18_750, "ok", "3,581/s"),
        (4_500, "ok", "3,581/s"),
        (2_250, "binds", "2,250/s"),
        (750, "binds", "750/s"),
    ],
)
def test_eventbridge_binds_below_the_rate_the_stack_records(invocations: int, status: str, pace: str) -> None:
    quota = preflight.Quota(invocations, "Service Quotas", quotas.EVENTBRIDGE_INVOCATIONS_CODE)

    check = preflight.eventbridge_invocations(quota, stack_rate=3_581, region="eu-west-2")

    assert check.status == status
    assert f"goes at {pace}" in check.figure
    assert ("≥ 3,581 in eu-west-2" in check.ask) == (status == "binds")


def test_eventbridge_falls_back_to_the_regions_default_with_its_page() -> None:
    found = preflight.Quota(99, "applied", "L-5540C5E3")

    assert preflight.eventbridge_quota(found, "", region="eu-west-2") is found
    fallback = preflight.eventbridge_quota(None, "AccessDeniedException: no", region="eu-west-2")
    assert fallback.value == 2_250
    assert quotas.EVENTBRIDGE_QUOTA_PAGE in fallback.source
    assert "AccessDeniedException" in fallback.source
    assert preflight.fsx_quota(None, "refused").value == quotas.FSX_PERSISTENT_2_STORAGE_GIB


@pytest.mark.parametrize(
    ("value", "count", "parallel", "status", "words"),
    [
        (0, 1, 2, "binds", "no training job can start"),
        (1, 1, 2, "binds", "at most 1 trials at once"),
        (2, 1, 2, "ok", ""),
        (8, 1, 2, "ok", ""),
        (1, 2, 2, "binds", "no training job can start"),
        (3, 2, 2, "binds", "at most 1 trials"),
        (4, 2, 2, "ok", ""),
    ],
)
def test_training_instances_bind_below_a_runs_trials(
    value: float, count: int, parallel: int, status: str, words: str
) -> None:
    check = preflight.training_instances(
        preflight.Quota(value, "applied", "L-X"),
        instance_type="ml.g5.xlarge",
        spot=True,
        instance_count=count,
        parallel_jobs=parallel,
        region="eu-west-2",
    )

    assert check.status == status
    assert words in check.figure
    if status == "binds":
        assert check.ask.startswith(f"Service Quotas: request '{SPOT}' ≥ {count * parallel} in eu-west-2")


def test_an_unanswered_training_quota_is_unknown_and_on_demand_names_its_own_quota() -> None:
    check = preflight.training_instances(
        None,
        instance_type="ml.p3.2xlarge",
        spot=False,
        instance_count=1,
        parallel_jobs=2,
        region="us-east-1",
        reason="AccessDeniedException",
    )

    assert check.status == "unknown"
    assert "'ml.p3.2xlarge for training job usage'" in check.figure
    assert "AccessDeniedException" in check.source


@pytest.mark.parametrize(
    ("quota", "in_use", "new", "status"),
    [
        (100_800, 0, 1_200, "ok"),
        (100_800, 99_600, 1_200, "ok"),
        (100_800, 100_000, 1_200, "binds"),
        (1_000, 0, 1_200, "binds"),
    ],
)
def test_fsx_storage_counts_what_is_in_use_and_what_the_stack_makes(
    quota: int, in_use: int, new: int, status: str
) -> None:
    check = preflight.fsx_storage(preflight.Quota(quota, "s"), in_use_gib=in_use, new_gib=new, region="r")

    assert check.status == status
    assert (f"≥ {in_use + new:,} in r" in check.ask) == (status == "binds")


@pytest.mark.parametrize(
    ("mlflow", "region", "status"),
    [
        ("create", "af-south-1", "binds"),
        ("", "af-south-1", "ok"),
        (regions.MLFLOW_APP_ARN, "af-south-1", "ok"),
        ("create", "us-east-1", "ok"),
        ("", "us-east-1", "ok"),
    ],
)
def test_a_region_without_mlflow_app_binds_only_when_the_stack_creates_one(
    mlflow: str, region: str, status: str
) -> None:
    kind = "AWS::SageMaker::MlflowApp"
    created = kind in regions.created_types({"MlflowTracking": mlflow}, region)

    check = preflight.resource_type(
        kind,
        created=created,
        offered=kind in regions.offered_types(region),
        source="cfn-lint",
        region=region,
        deciding=["MlflowTracking"],
    )

    assert check.status == status
    assert ("MlflowTracking" in check.ask) == (status == "binds")


def test_an_unknown_offer_of_a_created_type_is_unknown() -> None:
    check = preflight.resource_type(
        "AWS::FSx::FileSystem", created=True, offered=None, source="s", region="us-isob-west-1"
    )

    assert check.status == "unknown"
    assert "describe-type" in check.ask


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("IngestMaxConcurrency", "many", "IngestMaxConcurrency='many' is not a whole number"),
        ("IngestMaxConcurrency", "0", "IngestMaxConcurrency=0 is below its minimum 1"),
        ("DataSource", "efs", "DataSource='efs' is not one of fsx, s3"),
        ("UseSpotInstances", "yes", "UseSpotInstances='yes'"),
        ("TrainingInstanceType", "g5.xlarge", "TrainingInstanceType 'g5.xlarge'"),
        ("MaxParallelTuningJobs", "", "MaxParallelTuningJobs=''"),
    ],
)
def test_settings_name_the_bad_parameter(name: str, value: str, words: str) -> None:
    parameters = preflight.template_defaults(regions.TEMPLATE) | {name: value}

    with pytest.raises(UsageError, match=words.replace("(", r"\(")):
        preflight.settings(parameters)


@pytest.mark.parametrize("region", [None, "", "Europe", "eu_west_2"])
def test_a_missing_or_malformed_region_is_refused(region: str | None) -> None:
    with pytest.raises(UsageError, match="region"):
        preflight.check_region(region)


# --- the command against the emulated account ------------------------------------------------------------


@pytest.fixture(scope="module")
def account() -> servicequotas.AccountQuotas:
    return servicequotas.AccountQuotas()


@pytest.fixture(scope="module")
def endpoint(account: servicequotas.AccountQuotas) -> Iterator[str]:
    with emulated_account(account) as url:
        yield url


@pytest.fixture
def aws(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The CLI's boto3 calls go to the emulated account."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    return endpoint


def _invoke(*args: str) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(app, ["preflight", *args, "--json"])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    first = result.stdout.splitlines()[0] if result.stdout else "{}"
    return result.exit_code, json.loads(first), result.stderr


def _stack_functions(parameters: dict[str, str], region: str) -> int:
    return len(regions.created_types(parameters, region).get("AWS::Lambda::Function", []))


def test_a_new_accounts_lambda_concurrency_binds_and_the_answer_says_what_to_ask(
    aws: str, account: servicequotas.AccountQuotas
) -> None:
    account.apply("eu-west-2", "lambda", quotas.LAMBDA_CONCURRENCY_QUOTA, 50)
    account.apply("eu-west-2", "sagemaker", SPOT, 4)

    code, answer, stderr = _invoke("--region", "eu-west-2")

    need = 100 + _stack_functions({}, "eu-west-2") - 1  # IngestMaxConcurrency + one of each other function
    assert code == PreflightBindsError.exit_code
    assert answer["binds"] == ["Lambda concurrency"]
    (lam,) = [c for c in answer["checks"] if c["name"] == "Lambda concurrency"]
    assert lam["ask"].startswith(f"Service Quotas: request 'Concurrent executions' ≥ {need} in eu-west-2")
    assert "GetAccountSettings" in lam["source"]
    assert "Lambda concurrency" in stderr and "will bind in eu-west-2" in stderr
    statuses = {c["name"]: c["status"] for c in answer["checks"]}
    assert statuses["EventBridge invocations"] == "ok"  # 2,250/s against 50 functions' pace
    assert statuses["SageMaker spot training instances"] == "ok"


def test_a_slow_region_and_a_type_it_lacks_bind_with_mlflow_create(aws: str) -> None:
    code, answer, _ = _invoke("--region", "af-south-1", "-p", "MlflowTracking=create")
    _, without, _ = _invoke("--region", "af-south-1")

    assert code == PreflightBindsError.exit_code
    assert "CloudFormation AWS::SageMaker::MlflowApp" in answer["binds"]
    assert "EventBridge invocations" in answer["binds"]
    assert "SageMaker spot training instances" in answer["binds"]  # a new account's 0
    assert "CloudFormation AWS::SageMaker::MlflowApp" not in without["binds"]
    hours = answer["first_load"]["hours"]
    assert hours["10000000"] == pytest.approx(10**7 / 750 / 3600, abs=0.001)
    (mlflow,) = [c for c in answer["checks"] if c["name"] == "CloudFormation AWS::SageMaker::MlflowApp"]
    assert "DescribeType" in mlflow["source"]
    assert "Rules refuse the deploy" in mlflow["note"]


def test_a_deployed_stacks_parameters_decide(aws: str, account: servicequotas.AccountQuotas) -> None:
    account.apply("us-west-2", "sagemaker", SPOT, 2)
    declared = {"Type": "String"}
    template = {
        "Parameters": {name: declared for name in ("IngestMaxConcurrency", "DataSource", "FileSystemId")},
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
    }
    boto3.client("cloudformation", region_name="us-west-2", endpoint_url=aws).create_stack(
        StackName="retrain-deployed",
        TemplateBody=json.dumps(template),
        Parameters=[
            {"ParameterKey": "IngestMaxConcurrency", "ParameterValue": "990"},
            {"ParameterKey": "DataSource", "ParameterValue": "fsx"},
            {"ParameterKey": "FileSystemId", "ParameterValue": "fs-0123456789abcdef0"},
        ],
    )

    code, answer, _ = _invoke("--region", "us-west-2", "--stack", "retrain-deployed")

    assert code == PreflightBindsError.exit_code
    assert answer["stack"] == "retrain-deployed"
    assert answer["parameters"]["IngestMaxConcurrency"] == "990"
    # 990 functions record ~35,000 uploads/s: more than us-west-2's 18,750 invocations/s.
    assert answer["binds"] == ["Lambda concurrency", "EventBridge invocations"]
    statuses = {c["name"]: c for c in answer["checks"]}
    assert "fs-0123456789abcdef0" in statuses["FSx for Lustre storage"]["figure"]
    assert statuses["CloudFormation AWS::FSx::FileSystem"]["status"] == "ok"


def test_nothing_binds_in_an_account_with_room(aws: str, account: servicequotas.AccountQuotas) -> None:
    account.apply("us-east-2", "sagemaker", SPOT, 2)

    result = CliRunner().invoke(app, ["preflight", "--region", "us-east-2"])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert (
        lines[0]
        == f"preflight: account {ACCOUNT_ID}, us-east-2, before a deploy (template.yaml and --parameter)"
    )
    assert all(not line.startswith(("binds", "unknown")) for line in lines)
    assert any(line.startswith("ok      EventBridge invocations: 4,500 invocations/s") for line in lines)
    rate = math.floor(preflight.recording_rate(100))
    assert f"the stack records {rate:,} uploads/s" in result.stdout


def test_bad_input_is_named(aws: str) -> None:
    runner = CliRunner()

    unknown = runner.invoke(app, ["preflight", "--region", "us-east-1", "-p", "IngestMaxConcurency=5"])
    bad = runner.invoke(app, ["preflight", "--region", "us-east-1", "--instance-type", "g5"])
    both = runner.invoke(app, ["preflight", "--stack", "s", "--local"])

    assert unknown.exit_code == 2 and "IngestMaxConcurency" in unknown.stderr
    assert bad.exit_code == 2 and "TrainingInstanceType 'g5'" in bad.stderr
    assert both.exit_code == 2 and "--stack and --local" in both.stderr


def test_local_without_a_running_embedded_stack_says_how_to_start_one(aws: str, tmp_path: Any) -> None:
    result = CliRunner().invoke(app, ["preflight", "--local", "--state-dir", str(tmp_path)])

    assert result.exit_code == 7
    assert "retrain local up" in result.stderr
