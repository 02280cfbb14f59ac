"""The state machine's first step: validate the run request, hold the data set's lock, plan the run.

The execution input is a run request (controller/run_request.py has its schema and an example).
The execution name becomes the run id. The result is the run context every later state reads ($.run).
Prepare's work does not grow with the data set: it fixes the run's cut (uploads recorded before it are
the run's), and the next state, a SageMaker Processing job (training_image/retrain_training/freeze.py),
freezes the manifest from the ledger; `frozen.py` then reads its summary into the run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from controller import arrivals, clients, datasets, deadline, ledger, names, runs
from controller.config import Config, get_config
from controller.errors import ConfigurationError, DatasetBusyError, InvalidRunInputError
from controller.observability import logger, tracer
from controller.run_request import parse_request
from retrain_contract import balance, container
from retrain_contract.ledger import RECORD_FENCE_SECONDS
from retrain_contract.run import (
    START_CHAMPION,
    START_IMAGENET,
    START_PRETRAINED,
    START_SCRATCH,
    CheckpointConfig,
    Jobs,
    PrepareResult,
    Run,
    RunSettings,
    Start,
    Vpc,
    parse_settings,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client


def job_names(dataset: str, execution_arn: str) -> Jobs:
    """SageMaker job names of a run: unique per execution, within SageMaker's limits (tuning: 32)."""
    stem = f"rt-{names.digest(execution_arn)}-{names.sagemaker_safe(dataset)[:18]}".rstrip("-")
    return {
        "tuning": stem,
        "training": f"{stem}-train",
        "rules": f"{stem}-rules",
        "challenger": f"{stem}-eval-new",
        "champion": f"{stem}-eval-champion",
        "freeze": f"{stem}-freeze",
        "arrivals": f"{stem}-eval-arrivals",
    }


def run_settings(config: Config, overrides: dict[str, Any]) -> RunSettings:
    """The stack's RUN_SETTINGS with the request's overrides (the schema admits no null override)."""
    merged: dict[str, Any] = {**config.settings}
    for key, value in overrides.items():
        if key in merged:
            merged[key] = ",".join(value) if isinstance(value, list) else value
    return parse_settings(merged, source="the run's settings")


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def optimizers(settings: Mapping[str, Any]) -> list[str]:
    """The optimizer values the tuning job chooses among (stack parameter Optimizers, or an override)."""
    given = settings["optimizers"]
    chosen = list(dict.fromkeys(given if isinstance(given, list) else _split(str(given))))
    unknown = [o for o in chosen if o not in container.OPTIMIZERS]
    if unknown or not chosen:
        raise ConfigurationError(
            f"stack parameter Optimizers is {given!r}: give one or more of "
            f"{', '.join(container.OPTIMIZERS)}, comma-separated"
        )
    return chosen


def parameter_ranges(settings: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Tuning's ParameterRanges over the contract's tuned hyperparameters."""

    def log_range(name: str, low: str, high: str) -> dict[str, Any]:
        return {"Name": name, "MinValue": low, "MaxValue": high, "ScalingType": "Logarithmic"}

    return {
        "ContinuousParameterRanges": [
            log_range(container.HP_LR, str(settings["lr_min"]), str(settings["lr_max"])),
            log_range(
                container.HP_WEIGHT_DECAY,
                str(settings["weight_decay_min"]),
                str(settings["weight_decay_max"]),
            ),
        ],
        "CategoricalParameterRanges": [{"Name": container.HP_OPTIMIZER, "Values": optimizers(settings)}],
    }


def balance_policy(settings: RunSettings, hyperparameters: dict[str, str]) -> balance.Policy:
    """The run's manifest policy from the stack's parameters and the request's overrides."""
    return balance.Policy(
        mode=settings["class_balance"],
        ratio=settings["class_balance_ratio"],
        cap=settings["class_balance_cap"],
        min_images=settings["min_images_per_label"],
        small_labels=settings["small_labels"],
        val_fraction=float(hyperparameters.get(container.HP_VAL_FRACTION, container.VAL_FRACTION_DEFAULT)),
    )


def take_lock(
    dataset: str, run_id: str, at: str, *, config: Config, dynamodb: DynamoDBClient
) -> dict[str, Any]:
    """Hold the data set's lock for this run (runs of a data set never overlap); its state."""
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
    return state


def open_record(
    dataset: str, run_id: str, trigger: str, at: str, *, config: Config, dynamodb: DynamoDBClient
) -> None:
    record: runs.RunRecord = {
        "dataset": dataset,
        "run_id": run_id,
        "status": "RUNNING",
        "trigger": trigger,
        "created_at": at,
    }
    if not runs.put_run(record, table_name=config.runs_table, client=dynamodb):
        runs.update_run(dataset, run_id, {"status": "RUNNING"}, table_name=config.runs_table, client=dynamodb)


def vpc_of(settings: RunSettings) -> Vpc:
    vpc: Vpc = {
        "Subnets": _split(settings["subnets"]),
        "SecurityGroupIds": _split(settings["security_groups"]),
    }
    if not vpc["Subnets"] or not vpc["SecurityGroupIds"]:
        raise ConfigurationError(
            "the stack has no SubnetIds or SecurityGroupIds; SageMaker jobs (and FSx) run in a VPC. "
            "Update the stack with both parameters."
        )
    return vpc


def stopping_condition(settings: RunSettings) -> dict[str, int]:
    """MaxRuntimeInSeconds, and with spot MaxWaitTimeInSeconds (never below the runtime)."""
    max_runtime = settings["max_runtime_seconds"]
    stopping = {"MaxRuntimeInSeconds": max_runtime}
    if settings["spot"]:
        stopping["MaxWaitTimeInSeconds"] = max(settings["max_wait_seconds"], max_runtime)
    return stopping


def train_channel(settings: RunSettings, data_prefix: str, dataset: str) -> tuple[dict[str, Any], str]:
    """The train channel's DataSource and InputMode: FSx for Lustre (read-only) or S3 (FastFile)."""
    if settings["data_source"] == "fsx":
        directory = f"/{settings['file_system_mount_name']}/{names.dataset_prefix(dataset)}"
        source = {
            "FileSystemDataSource": {
                "FileSystemId": settings["file_system_id"],
                "FileSystemType": "FSxLustre",
                "FileSystemAccessMode": "ro",
                "DirectoryPath": directory.replace("//", "/").rstrip("/"),
            }
        }
        return source, "File"
    source = {
        "S3DataSource": {
            "S3DataType": "S3Prefix",
            "S3Uri": data_prefix,
            "S3DataDistributionType": "FullyReplicated",
        }
    }
    return source, "FastFile"


def start_of(settings: RunSettings, requested: str | None, state: dict[str, Any], model: str) -> Start:
    """What the run starts from: by default the data set's champion (of this architecture), else the
    stack's PretrainedModelUri, else the training image's ImageNet weights of the architecture, else
    random weights; the request may ask for one of them."""
    champion = state.get("champion") or {}
    champion_uri = str(champion.get("model_data", ""))
    champion_model = str(champion.get("model", "") or model)  # records before lineage kept no model
    pretrained = settings["pretrained_model_uri"]

    def start(kind: str, uri: str, reason: str) -> Start:
        arn = str(champion.get("model_package_arn", "")) if kind == START_CHAMPION else ""
        return {"kind": kind, "uri": uri, "model_package_arn": arn, "reason": reason}

    if requested == START_SCRATCH:
        return start(START_SCRATCH, "", "the request asked for random weights")
    if requested in (START_PRETRAINED, START_IMAGENET):
        return _requested_weights(requested, pretrained, model, start)
    if champion_uri and champion_model == model:
        return start(
            START_CHAMPION, champion_uri, f"the data set's champion (run {champion.get('run_id', '?')})"
        )
    if requested == START_CHAMPION:
        why = (
            "has no champion yet"
            if not champion_uri
            else f"has a champion of {champion_model}, not of {model}"
        )
        raise InvalidRunInputError(
            f'start_from "champion": the data set {why}; start from "pretrained", "imagenet" or "scratch"'
        )
    passed = f"; the champion is of {champion_model}, this run trains {model}" if champion_uri else ""
    if pretrained:
        return start(START_PRETRAINED, pretrained, f"the stack's PretrainedModelUri{passed}")
    if model in container.IMAGENET_MODELS:
        why = f"no champion and no PretrainedModelUri{passed}"
        return start(START_IMAGENET, "", f"{why}: {imagenet_described(model)}")
    return start(
        START_SCRATCH,
        "",
        f"no champion, no PretrainedModelUri, and the training image has no ImageNet weights of {model}"
        f"{passed}",
    )


def imagenet_described(model: str) -> str:
    """The ImageNet weights of `model` the training image installs, in words (for the lineage)."""
    return f"the training image's ImageNet {model} ({container.IMAGENET_WEIGHTS_PACKAGE})"


def _requested_weights(
    requested: str, pretrained: str, model: str, start: Callable[[str, str, str], Start]
) -> Start:
    """The start a request asked for by name: the stack's (or its own) weights, or ImageNet's."""
    if requested == START_PRETRAINED:
        if not pretrained:
            raise InvalidRunInputError(
                'start_from "pretrained" needs weights: give overrides.pretrained_model_uri '
                "(s3://bucket/key of a .pth/.pt state_dict or a model.tar.gz) "
                "or set the stack's PretrainedModelUri"
            )
        return start(START_PRETRAINED, pretrained, "the request named pretrained weights")
    if model not in container.IMAGENET_MODELS:
        raise InvalidRunInputError(
            f'start_from "imagenet": the training image has ImageNet weights of '
            f"{', '.join(container.IMAGENET_MODELS)} only, not {model}; give overrides.model "
            f"{container.IMAGENET_MODELS[0]}, or start from other weights"
        )
    return start(START_IMAGENET, "", f"the request asked for {imagenet_described(model)}")


def check_start_weights(start: Start, s3: S3Client) -> None:
    """Fail the run here, naming its weights, when they cannot be read: later every trial would fail on
    its `pretrained` channel and the run would only say that all trials failed."""
    if not start["uri"]:
        return
    bucket, _, key = start["uri"].removeprefix("s3://").partition("/")
    if not start["uri"].startswith("s3://") or not bucket or not key:
        raise InvalidRunInputError(f"the weights {start['uri']!r} are not s3://bucket/key of one file")
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        source = "the data set's champion" if start["kind"] == START_CHAMPION else start["reason"]
        if code in ("404", "NoSuchKey", "NotFound"):
            raise InvalidRunInputError(
                f"the weights {start['uri']} ({source}) do not exist: upload them there (e.g. `retrain "
                'pretrained upload`), name others, or start with "start_from": "scratch"'
            ) from None
        if code in ("403", "AccessDenied", "Forbidden"):
            raise InvalidRunInputError(
                f"the stack cannot read the weights {start['uri']} ({source}): put them in the stack's "
                "artifact bucket, or deploy with PretrainedModelUri naming them"
            ) from None
        raise


def input_data_config(
    train_source: dict[str, Any], input_mode: str, manifest_uri: str, start: Start
) -> list[dict[str, Any]]:
    """The training jobs' channels: the data, the frozen manifest and, unless from scratch, the weights."""

    def s3_channel(name: str, uri: str) -> dict[str, Any]:
        source = {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}
        return {"ChannelName": name, "InputMode": "File", "DataSource": {"S3DataSource": source}}

    channels = [
        {"ChannelName": container.CHANNEL_TRAIN, "DataSource": train_source, "InputMode": input_mode},
        s3_channel(container.CHANNEL_MANIFEST, manifest_uri),
    ]
    if start["uri"]:
        channels.append(s3_channel(container.CHANNEL_PRETRAINED, start["uri"]))
    return channels


def static_hyperparameters(settings: RunSettings) -> dict[str, str]:
    """The hyperparameters every job of the run gets from the stack's parameters (or overrides)."""
    return {
        container.HP_MODEL: settings["model"],
        container.HP_EPOCHS: str(settings["epochs"]),
        container.HP_IMAGE_SIZE: str(settings["image_size"]),
        container.HP_BATCH_SIZE: str(settings["batch_size"]),
        container.HP_CHECKPOINT_EVERY: str(settings["checkpoint_every_steps"]),
        container.HP_CROP_SCALE_MIN: str(settings["crop_scale_min"]),
        container.HP_MIN_STEPS: str(settings["min_training_steps"]),
    }


FINE_TUNING_HYPERPARAMETERS = (
    container.HP_PRETRAINED,
    container.HP_BACKBONE_LR_FACTOR,
    container.HP_FREEZE_BACKBONE_EPOCHS,
    container.HP_BATCHNORM,
)


@dataclass(frozen=True)
class FineTuningRange:
    """A fine-tuning hyperparameter a run from weights fixes (min == max) or tunes within [min, max]."""

    name: str
    kind: str  # a ParameterRanges kind: Continuous | Integer
    setting: str  # RunSettings' stem: <setting>_min, <setting>_max
    parameters: str  # the stack parameters' stem: <parameters>Min, <parameters>Max

    def bounds(self, settings: Mapping[str, Any]) -> tuple[float, float]:
        low, high = settings[f"{self.setting}_min"], settings[f"{self.setting}_max"]
        if low > high:
            raise ConfigurationError(
                f"stack parameters {self.parameters}Min ({low}) and {self.parameters}Max ({high}): Min must "
                f"not exceed Max; give them equal to fix {self.name}, or Min < Max to tune it"
            )
        return low, high

    def range(self, low: float, high: float) -> dict[str, Any]:
        scaling = "Logarithmic" if self.kind == "Continuous" and low > 0 else "Linear"
        return {"Name": self.name, "MinValue": str(low), "MaxValue": str(high), "ScalingType": scaling}


FINE_TUNING_RANGES = (
    FineTuningRange(
        container.HP_BACKBONE_LR_FACTOR, "Continuous", "backbone_lr_factor", "FineTuneBackboneLrFactor"
    ),
    FineTuningRange(
        container.HP_FREEZE_BACKBONE_EPOCHS, "Integer", "freeze_backbone_epochs", "FineTuneFreezeEpochs"
    ),
)


@dataclass(frozen=True)
class FineTuning:
    """How a run treats its starting weights: hyperparameters fixed for every trial, ranges tuning
    chooses within, and the value a run without tuning takes for each tuned one (its range's Min)."""

    static: dict[str, str]
    ranges: dict[str, list[dict[str, Any]]]
    untuned: dict[str, str]


def fine_tuning(settings: Mapping[str, Any], start: Start) -> FineTuning:
    """The weights (a file the channel holds, by the URI's last part, or the image's ImageNet weights),
    the backbone's share of the learning rate and the epochs it stays frozen, each fixed or tuned as the
    stack says, and its BatchNorm statistics. A run from scratch names them too, at the container's
    defaults (no weights, the whole model at lr, nothing frozen, statistics trained): SageMaker refuses a
    warm start whose job has more or fewer static plus tunable hyperparameters than its parent, and a
    data set's runs start from scratch, weights or its champion in turn. Moving one between static and
    tunable is allowed."""
    bounds = [(r, *r.bounds(settings)) for r in FINE_TUNING_RANGES]  # a bad pair fails every run alike
    if start["kind"] == START_SCRATCH:
        defaults = {
            name: str(container.HYPERPARAMETER_DEFAULTS[name]) for name in FINE_TUNING_HYPERPARAMETERS
        }
        return FineTuning(defaults, {}, {})
    weights = start["uri"].rsplit("/", 1)[-1] if start["uri"] else container.PRETRAINED_IMAGENET
    static = {container.HP_PRETRAINED: weights, container.HP_BATCHNORM: settings["fine_tune_batchnorm"]}
    ranges: dict[str, list[dict[str, Any]]] = {}
    untuned: dict[str, str] = {}
    for spec, low, high in bounds:
        value = _hp(int(low) if spec.kind == "Integer" else low)
        if low == high:
            static[spec.name] = value
        else:
            ranges.setdefault(f"{spec.kind}ParameterRanges", []).append(spec.range(low, high))
            untuned[spec.name] = value
    return FineTuning(static, ranges, untuned)


def artifact_uris(bucket: str, dataset: str, run_id: str) -> dict[str, str]:
    """The run's S3 locations in the artifact bucket, by the run key that holds each."""
    artifact = f"s3://{bucket}/"
    return {
        "manifest_s3_uri": artifact + names.manifest_prefix(dataset, run_id),
        "output_s3_uri": artifact + names.output_prefix(dataset, run_id),
        "checkpoint_s3_uri": artifact + names.checkpoint_prefix(dataset, run_id),
        "rules_s3_uri": artifact + names.rules_prefix(dataset, run_id),
        "challenger_s3_uri": artifact + names.evaluation_prefix(dataset, run_id, "challenger"),
        "champion_s3_uri": artifact + names.evaluation_prefix(dataset, run_id, "champion"),
        "frozen_s3_uri": artifact + names.frozen_prefix(dataset, run_id),
    }


def final_checkpoint(bucket: str, dataset: str, run_id: str, training_job: str) -> CheckpointConfig:
    """The final job's CheckpointConfig: a prefix of its own (a trial's checkpoints never reach it)."""
    return {
        "S3Uri": f"s3://{bucket}/{names.job_checkpoint_prefix(dataset, run_id, training_job)}",
        "LocalPath": container.job_checkpoint_local_path(training_job),
    }


@dataclass(frozen=True)
class Context:
    """What a run is built from: the request, the stack's settings, the data set's state, the manifest."""

    dataset: str
    run_id: str
    execution_arn: str
    trigger: str
    settings: RunSettings
    fixed: dict[str, str] | None  # fixed hyperparameters: train once with them, no tuning
    start_from: str | None  # what the request asked the run to start from
    state: dict[str, Any]  # the data set's row (champion, last tuning job, watermark)
    cut: str  # uploads recorded before it are the run's
    policy: balance.Policy
    region: str


def warm_start_parent(state: Mapping[str, Any], static: Mapping[str, str], ranges: Mapping[str, Any]) -> str:
    """The data set's last tuning job, when this run tunes with the same hyperparameter names: SageMaker
    refuses a warm start whose parent had another number of static plus tunable hyperparameters (a stack
    update that adds one, or a parent recorded before the names were kept), so such a run starts cold."""
    parent = str(state.get(names.LAST_TUNING_JOB) or "")
    if not parent:
        return ""
    kept = state.get(names.LAST_TUNING_HYPERPARAMETERS)
    if kept != names.tuning_hyperparameter_names(static, ranges):
        logger.info(
            "no warm start: the hyperparameters differ from the last tuning job's", extra={"parent": parent}
        )
        return ""
    return parent


def build_run(ctx: Context, config: Config) -> Run:
    """The run context every later state reads ($.run)."""
    settings, dataset, run_id = ctx.settings, ctx.dataset, ctx.run_id
    data_prefix = f"s3://{config.data_bucket}/{names.dataset_prefix(dataset)}"
    uris = artifact_uris(config.artifact_bucket, dataset, run_id)
    train_source, input_mode = train_channel(settings, data_prefix, dataset)
    static = static_hyperparameters(settings)
    start = start_of(
        settings, ctx.start_from, ctx.state, (ctx.fixed or {}).get(container.HP_MODEL, settings["model"])
    )
    tuning = fine_tuning(settings, start)
    static.update(tuning.static)
    ranges = parameter_ranges(settings)
    for kind, items in tuning.ranges.items():
        ranges[kind] = ranges.get(kind, []) + items
    champion = ctx.state.get("champion") or {}
    parent = warm_start_parent(ctx.state, static, ranges)
    jobs = job_names(dataset, ctx.execution_arn)
    return {
        "dataset": dataset,
        "run_id": run_id,
        "trigger": ctx.trigger,
        "jobs": jobs,
        # the manifest's figures: the freezing job's summary fills them in (frozen.py)
        "cut": ctx.cut,
        "trained_through": str(ctx.state.get(names.TRAINED_THROUGH, "")),
        "freeze_arguments": freeze_arguments(ctx, config),
        "frozen_s3_uri": uris["frozen_s3_uri"],
        "label_count": 0,
        "validation_manifest_uri": uris["frozen_s3_uri"] + container.VALIDATION_MANIFEST_FILE,
        "validation_lines_uri": f"{uris['frozen_s3_uri']}{container.VALIDATION_LINES_DIR}/",
        "evaluation_volume_gb": container.EVALUATION_VOLUME_BASE_GB,
        "manifest_size": 0,
        "new_images": 0,
        "data_source": settings["data_source"],
        "import_needed": False,
        "file_system_id": settings["file_system_id"],
        "import_paths": [],
        "import_token": names.import_token(ctx.execution_arn),
        "import_report_path": f"s3://{config.data_bucket}/{names.fsx_report_prefix(dataset, run_id)}",
        "import_poll_seconds": settings["import_poll_seconds"],
        "import_max_polls": settings["import_max_polls"],
        "train_data_source": train_source,
        "train_input_mode": input_mode,
        "input_data_config": input_data_config(train_source, input_mode, uris["manifest_s3_uri"], start),
        "start": start,
        "data_s3_uri": data_prefix,
        "manifest_s3_uri": uris["manifest_s3_uri"],
        "output_s3_uri": uris["output_s3_uri"],
        "checkpoint_s3_uri": uris["checkpoint_s3_uri"],
        "final_checkpoint": final_checkpoint(config.artifact_bucket, dataset, run_id, jobs["training"]),
        "rules_s3_uri": uris["rules_s3_uri"],
        "challenger_s3_uri": uris["challenger_s3_uri"],
        "champion_s3_uri": uris["champion_s3_uri"],
        "training_image": settings["training_image"],
        "instance_type": settings["instance_type"],
        "instance_count": settings["instance_count"],
        "volume_size_gb": settings["volume_size_gb"],
        "evaluation_instance_type": settings["evaluation_instance_type"],
        "spot": settings["spot"],
        "stopping_condition": stopping_condition(settings),
        "vpc": vpc_of(settings),
        "tags": [{"Key": names.TAG_DATASET, "Value": dataset}, {"Key": names.TAG_RUN_ID, "Value": run_id}],
        "tuning_strategy": settings["tuning_strategy"],
        "max_jobs": settings["max_jobs"],
        "parallel_jobs": settings["parallel_jobs"],
        "parameter_ranges": ranges,
        "container": container.state_machine_spec(system_rule_patience=settings["system_rule_patience"]),
        "static_hyperparameters": static,
        "hyperparameters": {**static, **tuning.untuned, **(ctx.fixed or {})},
        "fixed_hyperparameters": ctx.fixed is not None,
        "final_training": ctx.fixed is not None or settings["final_training"],
        "warm_start": bool(parent),
        "warm_start_parent": parent,
        "debugger_mode": settings["debugger_mode"],
        "has_champion": bool(champion.get("model_data")),
        "champion_model_data": str(champion.get("model_data", "")),
        "champion_model_package_arn": str(champion.get("model_package_arn", "")),
        "arrivals": arrivals.plan(
            settings,
            bucket=config.artifact_bucket,
            dataset=dataset,
            run_id=run_id,
            frozen_s3_uri=uris["frozen_s3_uri"],
            manifest_s3_uri=uris["manifest_s3_uri"],
        ),
    }


def freeze_arguments(ctx: Context, config: Config) -> list[str]:
    """The freezing job's arguments (training_image/retrain_training/freeze.py)."""
    arguments = [
        "--table",
        config.ledger_table,
        "--dataset",
        ctx.dataset,
        "--shards",
        str(datasets.partitions_in(ctx.dataset, ctx.state).shards),
        "--cut",
        ctx.cut,
        "--trained-through",
        str(ctx.state.get(names.TRAINED_THROUGH, "")),
        "--policy",
        json.dumps(asdict(ctx.policy), sort_keys=True),
        "--data-uri",
        f"s3://{config.data_bucket}/{names.dataset_prefix(ctx.dataset)}",
    ]
    return arguments + (["--region", ctx.region] if ctx.region else [])


def record_prepared(run: Run, ctx: Context, at: str, *, config: Config, dynamodb: DynamoDBClient) -> None:
    runs.update_run(
        ctx.dataset,
        ctx.run_id,
        {
            "execution_arn": ctx.execution_arn,
            "updated_at": at,
            "cut": ctx.cut,
            "data_source": run["data_source"],
            "class_balance": ctx.policy.record(),
            "started_from": dict(run["start"]),
            "deadline": deadline.deadline(
                run,
                datetime.fromisoformat(at.replace("Z", "+00:00")),
                margin_seconds=config.stuck_run_seconds,
            ).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
        table_name=config.runs_table,
        client=dynamodb,
    )


def prepare(
    event: dict[str, Any],
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    s3: S3Client,
    now: datetime | None = None,
) -> PrepareResult:
    """Check the request, hold the lock, open the run record, fix the cut: the run context."""
    execution_name = str(event.get("execution_name", ""))
    execution_arn = str(event.get("execution_arn", execution_name))
    request = parse_request(event.get("input"))
    if request.run_id is not None and request.run_id != execution_name:
        raise InvalidRunInputError(
            f"run_id {request.run_id!r} differs from the execution name {execution_name!r}; "
            "leave run_id out of a manual start (the execution name is the run id)"
        )
    run_id, dataset = execution_name, request.dataset
    moment = now or datetime.now(UTC)
    at = ledger.iso(moment)
    cut = ledger.iso(cut_of(moment, request.trigger, config.policy.quiet_period_seconds))
    state = take_lock(dataset, run_id, at, config=config, dynamodb=dynamodb)
    open_record(dataset, run_id, request.trigger, at, config=config, dynamodb=dynamodb)

    settings = run_settings(config, request.overrides)
    vpc_of(settings)  # before the manifest: a stack without a VPC fails at once
    given = request.overrides.get("hyperparameters")
    fixed = {k: _hp(v) for k, v in given.items()} if given is not None else None
    policy = balance_policy(settings, fixed or {})
    # naming weights in the request means starting from them
    named = START_PRETRAINED if request.overrides.get("pretrained_model_uri") else None
    start_from = request.overrides.get("start_from", named)
    region = os.environ.get("AWS_REGION", "")
    ctx = Context(
        dataset,
        run_id,
        execution_arn,
        request.trigger,
        settings,
        fixed,
        start_from,
        state,
        cut,
        policy,
        region,
    )
    run = build_run(ctx, config)
    check_start_weights(run["start"], s3)
    record_prepared(run, ctx, at, config=config, dynamodb=dynamodb)
    logger.info("run prepared", extra={"dataset": dataset, "run_id": run_id, "cut": cut})
    return {"run": run, "import": {"task_id": "", "polls": 0}, "api_retry": {"count": 0, "wait": 0}}


def cut_of(now: datetime, trigger: str, quiet_period_seconds: int) -> datetime:
    """The run's cut: uploads recorded before it are the run's.

    A row recorded before `now` may still be in flight for RECORD_FENCE_SECONDS, so the freezing
    job reads no earlier than that after the cut. A run the dispatcher started after a quiet period at
    least that long has its cut put that far in the past instead: every row before it is readable now
    (the job need not wait) and none of the uploads that made the run due is after it (they are older
    than the quiet period). A manual run trains what was recorded until it started, and its job waits.
    """
    if trigger != "manual" and quiet_period_seconds >= RECORD_FENCE_SECONDS:
        return now - timedelta(seconds=RECORD_FENCE_SECONDS)
    return now


def _hp(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> PrepareResult:
    return prepare(event, config=get_config(), dynamodb=clients.dynamodb(), s3=clients.s3())
