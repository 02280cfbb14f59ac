"""The state machine's first step: validate the run request, hold the data set's lock, freeze the manifest.

The execution input is a run request (controller/run_request.py has its schema and an example).
The execution name becomes the run id. The result is the run context every later state reads ($.run).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3

from controller import balance, datasets, ledger, names, runs
from controller.config import Config, get_config
from controller.errors import ConfigurationError, DatasetBusyError, InvalidRunInputError, NotEnoughDataError
from controller.observability import logger, tracer
from controller.run_request import parse_request
from retrain_contract import container

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

MIN_LABELS = 2
MAX_IMPORT_PATHS = 100  # CreateDataRepositoryTask's limit on Paths


def job_names(dataset: str, execution_arn: str) -> dict[str, str]:
    """SageMaker job names of a run: unique per execution, within SageMaker's limits (tuning: 32)."""
    stem = f"rt-{names.digest(execution_arn)}-{names.sagemaker_safe(dataset)[:18]}".rstrip("-")
    return {
        "tuning": stem,
        "training": f"{stem}-train",
        "rules": f"{stem}-rules",
        "challenger": f"{stem}-eval-new",
        "champion": f"{stem}-eval-champion",
    }


def _settings(config: Config, overrides: dict[str, Any]) -> dict[str, Any]:
    return {**config.settings, **overrides}  # the schema admits no null override


def _split(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value if str(v)]
    return [part.strip() for part in str(value or "").split(",") if part.strip()]


def optimizers(settings: dict[str, Any]) -> list[str]:
    """The optimizer values the tuning job chooses among (stack parameter Optimizers, or an override)."""
    chosen = list(dict.fromkeys(_split(settings.get("optimizers", ",".join(container.OPTIMIZERS)))))
    unknown = [o for o in chosen if o not in container.OPTIMIZERS]
    if unknown or not chosen:
        raise ConfigurationError(
            f"stack parameter Optimizers is {settings.get('optimizers')!r}: give one or more of "
            f"{', '.join(container.OPTIMIZERS)}, comma-separated"
        )
    return chosen


def parameter_ranges(settings: dict[str, Any]) -> dict[str, Any]:
    """Tuning's ParameterRanges over the contract's tuned hyperparameters (stack parameters or overrides)."""

    def log_range(name: str, low: str, high: str) -> dict[str, str]:
        return {"Name": name, "MinValue": low, "MaxValue": high, "ScalingType": "Logarithmic"}

    return {
        "ContinuousParameterRanges": [
            log_range(
                container.HP_LR, str(settings.get("lr_min", "0.0001")), str(settings.get("lr_max", "0.1"))
            ),
            log_range(
                container.HP_WEIGHT_DECAY,
                str(settings.get("weight_decay_min", "0.00001")),
                str(settings.get("weight_decay_max", "0.001")),
            ),
        ],
        "CategoricalParameterRanges": [{"Name": container.HP_OPTIMIZER, "Values": optimizers(settings)}],
    }


def balance_policy(settings: dict[str, Any], hyperparameters: dict[str, str]) -> balance.Policy:
    """The run's manifest policy from the stack's parameters (RUN_SETTINGS) and the request's overrides."""
    return balance.Policy(
        mode=str(settings.get("class_balance", "none")),
        ratio=float(settings.get("class_balance_ratio", 0.5)),
        cap=int(settings.get("class_balance_cap", 1000)),
        min_images=int(settings.get("min_images_per_label", 1)),
        small_labels=str(settings.get("small_labels", "exclude")),
        val_fraction=float(hyperparameters.get(container.HP_VAL_FRACTION, container.VAL_FRACTION_DEFAULT)),
    )


def freeze_manifest(
    dataset: str,
    run_id: str,
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    s3: S3Client,
    policy: balance.Policy | None = None,
) -> dict[str, Any]:
    """Write the exact images of this run (manifest channel) and their ledger identities; return a summary."""
    frozen: list[dict[str, Any]] = []
    rejected: dict[str, int] = {}  # uploads refused and still in the bucket, by problem
    for row in ledger.rows(dataset, table_name=config.ledger_table, client=dynamodb):
        if row.get("state") in names.FROZEN_STATES:
            frozen.append(row)
        elif row.get("state") == names.STATE_REJECTED:
            problem = str(row.get("problem", names.PROBLEM_LAYOUT))
            rejected[problem] = rejected.get(problem, 0) + 1
    prefix = names.dataset_prefix(dataset)
    planned = balance.plan(
        ((str(row[names.LEDGER_SK])[len(prefix) :], str(row["label"])) for row in frozen),
        policy or balance.Policy(),
    )
    labels = sorted(planned.counts)
    if len(labels) < MIN_LABELS:
        excluded = "".join(f"; {label}: {why}" for label, why in planned.excluded.items())
        folders = len(labels) + len(planned.excluded)
        raise NotEnoughDataError(
            f"data set {dataset!r} has {len(frozen)} accepted images in {folders} label folder(s), "
            f"{len(labels)} of them trainable {labels}{excluded}; a classifier needs at least {MIN_LABELS}. "
            f"Upload images to s3://{config.data_bucket}/{prefix}<label>/<image>."
        )
    manifest = "".join(
        json.dumps(
            {
                container.MANIFEST_PATH_KEY: path,
                container.MANIFEST_LABEL_KEY: label,
                container.MANIFEST_SPLIT_KEY: split,
            }
        )
        + "\n"
        for path, label, split in planned.lines
    )
    objects = "".join(
        json.dumps(
            {
                "key": row[names.LEDGER_SK],
                "label": row["label"],
                "sequencer": row["sequencer"],
                "version_id": row.get("version_id", ""),
                "etag": row.get("etag", ""),
                "size": row.get("size", 0),
                "new": row.get("state") == names.STATE_PENDING,
                "held": str(row["label"]) in planned.excluded,
            }
        )
        + "\n"
        for row in frozen
    )
    manifest_key = names.manifest_prefix(dataset, run_id) + container.MANIFEST_FILE
    s3.put_object(Bucket=config.artifact_bucket, Key=manifest_key, Body=manifest.encode())
    s3.put_object(
        Bucket=config.artifact_bucket, Key=names.objects_key(dataset, run_id), Body=objects.encode()
    )
    trained = [row for row in frozen if str(row["label"]) in planned.counts]
    new_labels = sorted({str(row["label"]) for row in trained if row.get("state") == names.STATE_PENDING})
    return {
        "size": len(trained),
        "new": sum(1 for row in trained if row.get("state") == names.STATE_PENDING),
        "labels": labels,
        "new_labels": new_labels,
        "rejected_uploads": dict(sorted(rejected.items())),
        **planned.record(),
    }


def prepare(
    event: dict[str, Any],
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    s3: S3Client,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The run context: names, channels, limits and flags every later state reads."""
    execution_name = str(event.get("execution_name", ""))
    execution_arn = str(event.get("execution_arn", execution_name))
    request = parse_request(event.get("input"))
    if request.run_id is not None and request.run_id != execution_name:
        raise InvalidRunInputError(
            f"run_id {request.run_id!r} differs from the execution name {execution_name!r}; "
            "leave run_id out of a manual start (the execution name is the run id)"
        )
    run_id = execution_name
    dataset = request.dataset
    at = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    state = datasets.get(dataset, table_name=config.datasets_table, client=dynamodb)
    holder = state.get(names.LOCK_ATTRIBUTE)
    if holder and holder != run_id:
        raise DatasetBusyError(
            f"run {holder} of data set {dataset!r} is active; runs of a data set never overlap. "
            "Start this one after it finishes (its uploads wait for the next run)."
        )
    if (
        not holder
        and datasets.acquire(dataset, run_id, at, table_name=config.datasets_table, client=dynamodb) is None
    ):
        raise DatasetBusyError(f"another run of data set {dataset!r} took its lock first; start again later")

    record: runs.RunRecord = {
        "dataset": dataset,
        "run_id": run_id,
        "status": "RUNNING",
        "trigger": request.trigger,
        "created_at": at,
    }
    if not runs.put_run(record, table_name=config.runs_table, client=dynamodb):
        runs.update_run(dataset, run_id, {"status": "RUNNING"}, table_name=config.runs_table, client=dynamodb)

    settings = _settings(config, request.overrides)
    vpc = {
        "Subnets": _split(settings.get("subnets")),
        "SecurityGroupIds": _split(settings.get("security_groups")),
    }
    if not vpc["Subnets"] or not vpc["SecurityGroupIds"]:
        raise ConfigurationError(
            "the stack has no SubnetIds or SecurityGroupIds; SageMaker jobs (and FSx) run in a VPC. "
            "Update the stack with both parameters."
        )
    fixed = request.overrides.get("hyperparameters")  # given: train once with them, no tuning
    fixed_hyperparameters = {k: _hp(v) for k, v in (fixed or {}).items()}
    policy = balance_policy(settings, fixed_hyperparameters)
    summary = freeze_manifest(dataset, run_id, config=config, dynamodb=dynamodb, s3=s3, policy=policy)
    jobs = job_names(dataset, execution_arn)
    artifact = f"s3://{config.artifact_bucket}/"
    data_source = str(settings.get("data_source", "s3"))
    data_prefix = f"s3://{config.data_bucket}/{names.dataset_prefix(dataset)}"
    spot = bool(settings.get("spot", False))
    max_runtime = int(settings.get("max_runtime_seconds", 3600))
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": max_runtime}
    if spot:
        stopping["MaxWaitTimeInSeconds"] = max(
            int(settings.get("max_wait_seconds", max_runtime)), max_runtime
        )

    if data_source == "fsx":
        mount = str(settings.get("file_system_mount_name", ""))
        train_source: dict[str, Any] = {
            "FileSystemDataSource": {
                "FileSystemId": settings.get("file_system_id", ""),
                "FileSystemType": "FSxLustre",
                "FileSystemAccessMode": "ro",
                "DirectoryPath": f"/{mount}/{names.dataset_prefix(dataset)}".replace("//", "/").rstrip("/"),
            }
        }
        input_mode = "File"
    else:
        train_source = {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": data_prefix,
                "S3DataDistributionType": "FullyReplicated",
            }
        }
        input_mode = "FastFile"

    static = {
        container.HP_MODEL: str(settings.get("model", "resnet18")),
        container.HP_EPOCHS: str(settings.get("epochs", 3)),
        container.HP_IMAGE_SIZE: str(settings.get("image_size", 224)),
        container.HP_BATCH_SIZE: str(settings.get("batch_size", 32)),
        container.HP_CHECKPOINT_EVERY: str(settings.get("checkpoint_every_steps", 50)),
        container.HP_CROP_SCALE_MIN: str(settings.get("crop_scale_min", 0.08)),
    }
    hyperparameters = {**static, **fixed_hyperparameters}
    champion = state.get("champion") or {}
    parent = state.get("last_tuning_job")

    run: dict[str, Any] = {
        "dataset": dataset,
        "run_id": run_id,
        "trigger": request.trigger,
        "jobs": jobs,
        "labels": summary["labels"],
        "manifest_size": summary["size"],
        "new_images": summary["new"],
        "data_source": data_source,
        "import_needed": data_source == "fsx" and summary["new"] > 0,
        "file_system_id": settings.get("file_system_id", ""),
        "import_paths": import_paths(data_prefix, summary["new_labels"]),
        "import_token": names.import_token(execution_arn),
        "import_report_path": f"s3://{config.data_bucket}/{names.fsx_report_prefix(dataset, run_id)}",
        "import_poll_seconds": int(settings.get("import_poll_seconds", 30)),
        "import_max_polls": int(settings.get("import_max_polls", 120)),
        "train_data_source": train_source,
        "train_input_mode": input_mode,
        "data_s3_uri": data_prefix,
        "manifest_s3_uri": f"{artifact}{names.manifest_prefix(dataset, run_id)}",
        "output_s3_uri": f"{artifact}{names.output_prefix(dataset, run_id)}",
        "checkpoint_s3_uri": f"{artifact}{names.checkpoint_prefix(dataset, run_id)}",
        "rules_s3_uri": f"{artifact}{names.rules_prefix(dataset, run_id)}",
        "challenger_s3_uri": f"{artifact}{names.evaluation_prefix(dataset, run_id, 'challenger')}",
        "champion_s3_uri": f"{artifact}{names.evaluation_prefix(dataset, run_id, 'champion')}",
        "training_image": str(settings.get("training_image", "")),
        "instance_type": str(settings.get("instance_type", "ml.m5.xlarge")),
        "instance_count": int(settings.get("instance_count", 1)),
        "volume_size_gb": int(settings.get("volume_size_gb", 30)),
        "evaluation_instance_type": str(settings.get("evaluation_instance_type", "ml.m5.xlarge")),
        "spot": spot,
        "stopping_condition": stopping,
        "tuning_strategy": str(settings.get("tuning_strategy", "Bayesian")),
        "max_jobs": int(settings.get("max_jobs", 4)),
        "parallel_jobs": int(settings.get("parallel_jobs", 1)),
        "parameter_ranges": parameter_ranges(settings),
        "container": container.state_machine_spec(
            system_rule_patience=int(settings.get("system_rule_patience", 1000))
        ),
        "static_hyperparameters": static,
        "hyperparameters": hyperparameters,
        "fixed_hyperparameters": fixed is not None,
        "final_training": fixed is not None or bool(settings.get("final_training", True)),
        "warm_start": bool(parent),
        "warm_start_parent": str(parent or ""),
        "debugger_mode": str(settings.get("debugger_mode", "open")),
        "has_champion": bool(champion.get("model_data")),
        "champion_model_data": str(champion.get("model_data", "")),
        "champion_model_package_arn": str(champion.get("model_package_arn", "")),
        "vpc": vpc,
        "tags": [{"Key": names.TAG_DATASET, "Value": dataset}, {"Key": names.TAG_RUN_ID, "Value": run_id}],
    }
    runs.update_run(
        dataset,
        run_id,
        {
            "execution_arn": execution_arn,
            "updated_at": at,
            "manifest_uri": run["manifest_s3_uri"] + container.MANIFEST_FILE,
            "manifest_size": summary["size"],
            "new_images": summary["new"],
            "labels": summary["labels"],
            "data_source": data_source,
            "class_balance": policy.record(),
            "class_counts": summary["class_counts"],
            "excluded_labels": summary["excluded_labels"],
            "rejected_uploads": summary["rejected_uploads"],
        },
        table_name=config.runs_table,
        client=dynamodb,
    )
    logger.info("run prepared", extra={"dataset": dataset, "run_id": run_id, "images": summary["size"]})
    # `import` exists from the start, so later states can read it whether or not FSx imported anything;
    # `api_retry` counts the state machine's retries of transient SageMaker API errors.
    return {"run": run, "import": {"task_id": "", "polls": 0}, "api_retry": {"count": 0, "wait": 0}}


def import_paths(data_prefix: str, new_labels: list[str]) -> list[str]:
    """The label prefixes that received images (FSx takes at most 100 paths; beyond, the data set)."""
    if len(new_labels) > MAX_IMPORT_PATHS:
        return [data_prefix]
    return [f"{data_prefix}{label}/" for label in new_labels]


def _hp(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return prepare(event, config=get_config(), dynamodb=boto3.client("dynamodb"), s3=boto3.client("s3"))
