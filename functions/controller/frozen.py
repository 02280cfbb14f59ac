"""After the freezing job: read its summary into the run, record the manifest, refuse too little data.

The job (training_image/retrain_training/freeze.py) wrote the manifest and, in the run's frozen prefix,
summary.json (bounded: counts, up to 100 new labels, a sample of labels set aside), labels.json and
class_counts.json. This step reads the summary only, so its time and memory do not grow with the images
or the labels; the run record points at the two files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from controller import arrivals, clients, names, runs
from controller.config import Config, get_config
from controller.errors import NotEnoughDataError
from controller.observability import logger, tracer
from controller.s3io import read_json
from retrain_contract import container
from retrain_contract.run import PrepareResult, Run

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

MIN_LABELS = 2


def import_paths(data_prefix: str, new_labels: list[str] | None) -> list[str]:
    """The label prefixes that received images; the data set's prefix when the summary lists none
    because there are more than CreateDataRepositoryTask's 100 Paths."""
    if new_labels is None:
        return [data_prefix]
    return [f"{data_prefix}{label}/" for label in new_labels]


def check_enough(run: Run, summary: dict[str, Any], *, config: Config) -> None:
    labels = int(summary["label_count"])
    if labels >= MIN_LABELS:
        return
    excluded = "".join(f"; {label}: {why}" for label, why in summary["excluded_labels"].items())
    dataset = run["dataset"]
    raise NotEnoughDataError(
        f"data set {dataset!r} has {summary['accepted']} accepted images in {summary['label_folders']} "
        f"label folder(s), {labels} of them trainable {summary['labels_sample']}{excluded}; a classifier "
        f"needs at least {MIN_LABELS}. Upload images to "
        f"s3://{config.data_bucket}/{names.dataset_prefix(dataset)}<label>/<image>."
    )


def apply_summary(run: Run, summary: dict[str, Any]) -> Run:
    """The run with the manifest's figures."""
    new = int(summary["new"])
    return cast(
        "Run",
        {
            **run,
            "arrivals": arrivals.after_freeze(run, summary),
            "label_count": int(summary["label_count"]),
            "manifest_size": int(summary["size"]),
            "new_images": new,
            "import_needed": run["data_source"] == "fsx" and new > 0,
            "import_paths": import_paths(run["data_s3_uri"], summary["new_labels"]),
            "evaluation_volume_gb": container.evaluation_volume_gb(int(summary["validation_bytes"])),
        },
    )


def record_manifest(run: Run, summary: dict[str, Any], *, config: Config, dynamodb: DynamoDBClient) -> None:
    frozen = run["frozen_s3_uri"]
    runs.update_run(
        run["dataset"],
        run["run_id"],
        {
            "manifest_uri": run["manifest_s3_uri"] + container.MANIFEST_FILE,
            "manifest_size": run["manifest_size"],
            "new_images": run["new_images"],
            "accepted_uploads": int(summary["accepted"]),
            "label_count": run["label_count"],
            "labels_uri": frozen + container.FROZEN_LABELS_FILE,
            "class_counts_uri": frozen + container.FROZEN_CLASS_COUNTS_FILE,
            "excluded_label_count": int(summary["excluded_label_count"]),
            "excluded_labels": dict(summary["excluded_labels"]),
            "rejected_uploads": dict(summary["rejected_uploads"]),
            "validation_images": int(summary["validation_images"]),
            "evaluation_volume_gb": run["evaluation_volume_gb"],
        },
        table_name=config.runs_table,
        client=dynamodb,
    )


def read_frozen(
    event: dict[str, Any], *, config: Config, dynamodb: DynamoDBClient, s3: S3Client
) -> PrepareResult:
    run = cast("Run", event["run"])
    uri = run["frozen_s3_uri"] + container.FROZEN_SUMMARY_FILE
    summary = dict(read_json(uri, s3=s3, what=f"the summary of freezing job {run['jobs']['freeze']}"))
    run = apply_summary(run, summary)
    record_manifest(run, summary, config=config, dynamodb=dynamodb)
    check_enough(run, summary, config=config)
    logger.info(
        "manifest frozen",
        extra={"run_id": run["run_id"], "images": run["manifest_size"], "new": run["new_images"]},
    )
    return {"run": run, "import": dict(event.get("import") or {}), "api_retry": dict(event["api_retry"])}


@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> PrepareResult:
    return read_frozen(event, config=get_config(), dynamodb=clients.dynamodb(), s3=clients.s3())
