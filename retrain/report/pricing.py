"""SageMaker training instance prices, for the report's cost table.

Source: the "Training" tab of https://aws.amazon.com/sagemaker/pricing/ (On-Demand, US East (N. Virginia),
USD per instance-hour), as that page listed them in 2025. They were not re-checked when this table was
written (the build machine has no web access): check the page before budgeting. Prices change and differ
by region, so the report prints this source, region and date under every cost table, and an instance
missing here shows "price unknown" instead of a guess. Managed spot training is billed for
BillableTimeInSeconds at these rates; the spot saving SageMaker reports is 1 - billable / training seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICE_SOURCE = "https://aws.amazon.com/sagemaker/pricing/ (Training, On-Demand)"
PRICE_REGION = "us-east-1"
PRICE_DATE = "2025 (not re-checked since)"

TRAINING_USD_PER_HOUR: dict[str, float] = {
    "ml.m5.large": 0.115,
    "ml.m5.xlarge": 0.23,
    "ml.m5.2xlarge": 0.461,
    "ml.m5.4xlarge": 0.922,
    "ml.c5.xlarge": 0.204,
    "ml.c5.2xlarge": 0.408,
    "ml.g4dn.xlarge": 0.7364,
    "ml.g4dn.2xlarge": 0.94,
    "ml.g5.xlarge": 1.408,
    "ml.g5.2xlarge": 1.515,
    "ml.p3.2xlarge": 3.825,
    "ml.p3.8xlarge": 14.688,
    "ml.p3.16xlarge": 28.152,
    "ml.p4d.24xlarge": 37.688,
}


@dataclass(frozen=True)
class JobCost:
    instance_type: str
    instance_count: int
    training_seconds: int
    billable_seconds: int
    usd_per_hour: float | None

    @property
    def on_demand_usd(self) -> float | None:
        """What the job would have cost on on-demand capacity (all training seconds billed)."""
        if self.usd_per_hour is None:
            return None
        return self.training_seconds * self.instance_count * self.usd_per_hour / 3600.0

    @property
    def billed_usd(self) -> float | None:
        if self.usd_per_hour is None:
            return None
        return self.billable_seconds * self.instance_count * self.usd_per_hour / 3600.0


def job_cost(
    instance_type: str, instance_count: int, training_seconds: int, billable_seconds: int
) -> JobCost:
    return JobCost(
        instance_type=instance_type,
        instance_count=instance_count,
        training_seconds=training_seconds,
        billable_seconds=billable_seconds,
        usd_per_hour=TRAINING_USD_PER_HOUR.get(instance_type),
    )


def spot_savings_pct(training_seconds: int, billable_seconds: int) -> float | None:
    """SageMaker's managed spot saving: (1 - billable / training) x 100; None before any training."""
    if training_seconds <= 0:
        return None
    return round(100.0 * (1.0 - billable_seconds / training_seconds), 1)
