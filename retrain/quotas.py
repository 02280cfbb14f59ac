"""AWS's default quotas that bound the stack, per region, as AWS's quota pages give them.

One source for the first-load projection (bench/ingest_scale.py), `retrain preflight` (which reads an
account's own values from Service Quotas and falls back to these) and the docs' per-region table.
Defaults only: an account's applied values differ where it asked for an increase, or where it is new.
"""

from __future__ import annotations

from typing import Final

# EventBridge "Invocations throttle limit in transactions per second": an event matched to a rule and sent
# to its target is one invocation; above the limit invocations are delayed, not dropped. Per account and
# region, shared by every rule of the account. Adjustable (Service Quotas).
EVENTBRIDGE_QUOTA_PAGE: Final = "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html"
EVENTBRIDGE_INVOCATIONS_QUOTA: Final = "Invocations throttle limit in transactions per second"
EVENTBRIDGE_INVOCATIONS: Final[dict[str, int]] = {
    "us-east-1": 18_750,
    "us-west-2": 18_750,
    "eu-west-1": 18_750,
    "us-east-2": 4_500,
    "eu-central-1": 4_500,
    "us-west-1": 2_250,
    "ap-northeast-1": 2_250,
    "ap-southeast-1": 2_250,
    "ap-southeast-2": 2_250,
    "eu-west-2": 2_250,
    "af-south-1": 750,
    "ap-northeast-3": 750,
    "ap-southeast-3": 750,
    "eu-south-1": 750,
}
EVENTBRIDGE_INVOCATIONS_ELSEWHERE: Final = 1_100  # "each other supported Region"

# Lambda "Concurrent executions": 1,000 per region by default; new accounts get less, raised with use
# (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
LAMBDA_QUOTA_PAGE: Final = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
LAMBDA_CONCURRENCY: Final = 1_000


def eventbridge_invocations(region: str) -> int:
    """The default EventBridge invocations/s of `region` (its quota page's figure)."""
    return EVENTBRIDGE_INVOCATIONS.get(region, EVENTBRIDGE_INVOCATIONS_ELSEWHERE)


# --- Service Quotas: where `retrain preflight` reads each quota (service code, name, code) --------------
# Codes as Service Quotas lists them; a quota increase request (RequestServiceQuotaIncrease) names the code.

LAMBDA_SERVICE_CODE: Final = "lambda"
LAMBDA_CONCURRENCY_QUOTA: Final = "Concurrent executions"
LAMBDA_CONCURRENCY_CODE: Final = "L-B99A9384"

EVENTBRIDGE_SERVICE_CODE: Final = "events"
EVENTBRIDGE_INVOCATIONS_CODE: Final = "L-5540C5E3"

# FSx for Lustre: the template's file system is PERSISTENT_2 (SSD); its quota is the total storage of the
# account's Persistent_2 file systems in the region, in GiB. Adjustable.
FSX_SERVICE_CODE: Final = "fsx"
FSX_QUOTA_PAGE: Final = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/limits.html"
FSX_PERSISTENT_2_STORAGE_QUOTA: Final = "Lustre Persistent_2 storage capacity"
FSX_PERSISTENT_2_STORAGE_CODE: Final = "L-8F1B9C74"
FSX_PERSISTENT_2_STORAGE_GIB: Final = 100_800

# SageMaker: one quota per instance type and purpose, counted in instances the account's training jobs hold
# at once ("ml.g5.xlarge for spot training job usage"; on-demand jobs: "... for training job usage").
# AWS publishes no per-type default that holds for every account: new accounts commonly have 0 for GPU
# types (CreateTrainingJob then fails with ResourceLimitExceeded "... is 0 Instances"). A preflight trusts
# only the account's answer; the embedded emulation answers this value, a new account's.
SAGEMAKER_SERVICE_CODE: Final = "sagemaker"
SAGEMAKER_QUOTA_PAGE: Final = "https://docs.aws.amazon.com/general/latest/gr/sagemaker.html"
SAGEMAKER_TRAINING_INSTANCES_NEW_ACCOUNT: Final = 0


def sagemaker_training_quota(instance_type: str, *, spot: bool) -> str:
    """The Service Quotas name of the training instances of `instance_type` (spot or on-demand)."""
    return f"{instance_type} for {'spot ' if spot else ''}training job usage"
