"""The emulated account's quotas (Service Quotas, Lambda's GetAccountSettings) and CloudFormation's
DescribeType, answered through the gated moto server as the embedded stack serves them."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from retrain import quotas
from retrain.embedded import servicequotas
from retrain.embedded.account import ACCOUNT_ID
from tests.unit.embedded.emulated_account import emulated_account

Client = Callable[[str, str], Any]


@pytest.fixture(scope="module")
def account() -> servicequotas.AccountQuotas:
    return servicequotas.AccountQuotas()


@pytest.fixture(scope="module")
def client(account: servicequotas.AccountQuotas) -> Iterator[Client]:
    with emulated_account(account) as endpoint:

        def make(service: str, region: str) -> Any:
            return boto3.client(
                service,
                region_name=region,
                endpoint_url=endpoint,
                aws_access_key_id="operator",
                aws_secret_access_key="operator",
                config=Config(retries={"max_attempts": 1}),
            )

        yield make


def _named(quotas_listed: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [q for q in quotas_listed if q["QuotaName"] == name]
    return found


@pytest.mark.parametrize(
    ("region", "expected"), [("us-east-1", 18_750), ("eu-west-2", 2_250), ("af-south-1", 750)]
)
def test_eventbridge_invocations_default_to_the_regions_figure(
    client: Client, region: str, expected: int
) -> None:
    listed = client("service-quotas", region).list_aws_default_service_quotas(ServiceCode="events")["Quotas"]

    quota = _named(listed, quotas.EVENTBRIDGE_INVOCATIONS_QUOTA)
    assert quota["Value"] == expected == quotas.eventbridge_invocations(region)
    assert (quota["ServiceCode"], quota["QuotaCode"], quota["Adjustable"], quota["GlobalQuota"]) == (
        "events",
        quotas.EVENTBRIDGE_INVOCATIONS_CODE,
        True,
        False,
    )


def test_an_applied_value_is_the_accounts_and_the_default_stays_aws(
    client: Client, account: servicequotas.AccountQuotas
) -> None:
    account.apply("ap-south-1", "lambda", quotas.LAMBDA_CONCURRENCY_QUOTA, 50)
    sq = client("service-quotas", "ap-south-1")

    applied = sq.get_service_quota(ServiceCode="lambda", QuotaCode=quotas.LAMBDA_CONCURRENCY_CODE)["Quota"]
    default = sq.get_aws_default_service_quota(ServiceCode="lambda", QuotaCode=quotas.LAMBDA_CONCURRENCY_CODE)

    assert applied["Value"] == 50
    assert applied["QuotaArn"] == f"arn:aws:servicequotas:ap-south-1:{ACCOUNT_ID}:lambda/L-B99A9384"
    assert default["Quota"]["Value"] == quotas.LAMBDA_CONCURRENCY
    settings = client("lambda", "ap-south-1").get_account_settings()["AccountLimit"]
    assert (settings["ConcurrentExecutions"], settings["UnreservedConcurrentExecutions"]) == (50, 50)
    other_region = client("lambda", "ap-south-2").get_account_settings()["AccountLimit"]
    assert other_region["ConcurrentExecutions"] == quotas.LAMBDA_CONCURRENCY


def test_sagemaker_lists_every_training_instance_type_spot_and_on_demand_over_pages(client: Client) -> None:
    paginator = client("service-quotas", "us-east-1").get_paginator("list_service_quotas")
    pages = list(paginator.paginate(ServiceCode="sagemaker"))
    listed = [q for page in pages for q in page["Quotas"]]

    model: Any = botocore.session.get_session().get_service_model("sagemaker")
    types = model.shape_for("TrainingInstanceType").enum
    assert len(pages) > 1
    assert len(listed) == 2 * len(types)
    assert _named(listed, "ml.g5.xlarge for spot training job usage")["Value"] == 0
    assert _named(listed, "ml.g5.xlarge for training job usage")["Value"] == 0


def test_an_unknown_quota_is_no_such_resource_and_a_bad_code_breaks_the_contract(client: Client) -> None:
    sq = client("service-quotas", "us-east-1")

    with pytest.raises(ClientError) as unknown:
        sq.get_service_quota(ServiceCode="lambda", QuotaCode="L-00000000")
    with pytest.raises(ClientError) as malformed:
        sq.get_service_quota(ServiceCode="lambda", QuotaCode="1-bad")

    assert unknown.value.response["Error"]["Code"] == "NoSuchResourceException"
    assert malformed.value.response["Error"]["Code"] == "ValidationException"  # the gate's contract check
    assert "quotaCode" in malformed.value.response["Error"]["Message"]


def test_moto_s_own_vpc_quotas_still_answer(client: Client) -> None:
    listed = client("service-quotas", "us-east-1").list_service_quotas(ServiceCode="vpc")["Quotas"]

    assert listed and all(q["ServiceCode"] == "vpc" for q in listed)


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return event\n")
    return buffer.getvalue()


def test_get_account_settings_subtracts_what_functions_reserve(client: Client) -> None:
    region = "eu-north-1"
    role = client("iam", region).create_role(
        RoleName="quota-test",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    lam = client("lambda", region)
    lam.create_function(
        FunctionName="reserved",
        Runtime="python3.13",
        Role=role,
        Handler="handler.handler",
        Code={"ZipFile": _zip()},
    )
    lam.put_function_concurrency(FunctionName="reserved", ReservedConcurrentExecutions=300)

    settings = lam.get_account_settings()

    assert settings["AccountLimit"]["ConcurrentExecutions"] == 1000
    assert settings["AccountLimit"]["UnreservedConcurrentExecutions"] == 700
    assert settings["AccountUsage"]["FunctionCount"] == 1


def test_describe_type_answers_where_the_region_offers_the_type(client: Client) -> None:
    offered = client("cloudformation", "us-east-1").describe_type(
        Type="RESOURCE", TypeName="AWS::SageMaker::MlflowApp"
    )
    legacy = client("cloudformation", "af-south-1").describe_type(
        Type="RESOURCE", TypeName="AWS::FSx::FileSystem"
    )
    with pytest.raises(ClientError) as missing:
        client("cloudformation", "af-south-1").describe_type(
            Type="RESOURCE", TypeName="AWS::SageMaker::MlflowApp"
        )

    assert offered["Arn"] == "arn:aws:cloudformation:us-east-1::type/resource/AWS-SageMaker-MlflowApp"
    assert json.loads(offered["Schema"])["typeName"] == "AWS::SageMaker::MlflowApp"
    assert offered["ProvisioningType"] == "FULLY_MUTABLE"
    assert legacy["ProvisioningType"] == "NON_PROVISIONABLE"
    assert missing.value.response["Error"]["Code"] == "TypeNotFoundException"


def test_applying_a_value_checks_the_quota_and_the_value() -> None:
    account = servicequotas.AccountQuotas()

    with pytest.raises(servicequotas.UnknownQuotaError, match="Concurrent executionz"):
        account.apply("us-east-1", "lambda", "Concurrent executionz", 10)
    with pytest.raises(ValueError, match="0 or more"):
        account.apply("us-east-1", "lambda", quotas.LAMBDA_CONCURRENCY_QUOTA, -1)
