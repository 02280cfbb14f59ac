"""The run: the stack's run settings (RUN_SETTINGS) and the run context Prepare hands the state machine.

`RunSettings` is what template.yaml's RUN_SETTINGS holds, key for key, with no defaults here: the
template's parameters are the one source. `Run` is `$.run`, the execution's context that Prepare
builds and the state machine, the Lambdas, the CLI and the report read; a test holds every JSONPath the
ASL reads against it (tests/unit/test_run_context.py).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from typing import Any, TypedDict

from retrain_contract.container import StateMachineSpec


class RunSettings(TypedDict):
    """The template's training and tuning parameters, as RUN_SETTINGS renders them."""

    training_image: str
    instance_type: str
    instance_count: int
    evaluation_instance_type: str
    volume_size_gb: int
    model: str
    epochs: int
    image_size: int
    batch_size: int
    crop_scale_min: float
    checkpoint_every_steps: int
    spot: bool
    max_runtime_seconds: int
    max_wait_seconds: int
    final_training: bool
    tuning_strategy: str
    max_jobs: int
    parallel_jobs: int
    lr_min: str
    lr_max: str
    weight_decay_min: str
    weight_decay_max: str
    optimizers: str
    data_source: str
    file_system_id: str
    file_system_mount_name: str
    subnets: str
    security_groups: str
    import_poll_seconds: int
    import_max_polls: int
    debugger_mode: str
    class_balance: str
    class_balance_ratio: float
    class_balance_cap: int
    min_images_per_label: int
    small_labels: str
    system_rule_patience: int
    pretrained_model_uri: str  # weights a data set's first run starts from; empty: none
    # a run from weights: the backbone's share of the learning rate and the epochs that train only the
    # head, each fixed (min == max) or tuned within [min, max], and its BatchNorm statistics
    backbone_lr_factor_min: float
    backbone_lr_factor_max: float
    freeze_backbone_epochs_min: int
    freeze_backbone_epochs_max: int
    fine_tune_batchnorm: str
    min_training_steps: int  # every training job takes at least this many optimizer steps
    train_when: str  # one of TRAIN_WHEN
    suspect_labels: str  # one of SUSPECT_LABELS


class SettingsError(ValueError):
    """RUN_SETTINGS lacks a key or holds a value of the wrong type."""


_JSON_TYPES: dict[Any, tuple[type, ...]] = {str: (str,), int: (int,), float: (int, float), bool: (bool,)}


def parse_settings(raw: str | Mapping[str, Any], *, source: str = "RUN_SETTINGS") -> RunSettings:
    """RUN_SETTINGS checked key by key against `RunSettings`: every key present, each of its type."""
    values = json.loads(raw) if isinstance(raw, str) else dict(raw)
    if not isinstance(values, dict):
        raise SettingsError(f"{source} must be a JSON object; deploy with template.yaml")
    hints = typing.get_type_hints(RunSettings)
    missing = sorted(set(hints) - set(values))
    if missing:
        raise SettingsError(f"{source} lacks {', '.join(missing)}; deploy with template.yaml")
    wrong = [
        f"{key}={values[key]!r} (expected {kind.__name__})"
        for key, kind in hints.items()
        if not isinstance(values[key], _JSON_TYPES[kind])
        or (kind is not bool and isinstance(values[key], bool))
    ]
    if wrong:
        raise SettingsError(f"{source} has {'; '.join(wrong)}; fix the stack parameters")
    return typing.cast(RunSettings, {key: values[key] for key in hints})


class Jobs(TypedDict):
    """The SageMaker job names of a run."""

    tuning: str
    training: str
    rules: str
    challenger: str
    champion: str
    freeze: str
    arrivals: str  # the champion on the run's new uploads


class Vpc(TypedDict):
    Subnets: list[str]
    SecurityGroupIds: list[str]


class CheckpointConfig(TypedDict):
    """A training job's CheckpointConfig (SageMaker's field names)."""

    S3Uri: str
    LocalPath: str


class Tag(TypedDict):
    Key: str
    Value: str


# TrainWhen: always - every run trains; drift - a run whose champion does as well on its new uploads as on
# its validation split ends as NOT_NEEDED. SuspectLabels: keep - suspected label errors train as given;
# hold - they stay out of this run's training (and are listed).
TRAIN_ALWAYS, TRAIN_ON_DRIFT = "always", "drift"
TRAIN_WHEN = (TRAIN_ALWAYS, TRAIN_ON_DRIFT)
SUSPECTS_KEEP, SUSPECTS_HOLD = "keep", "hold"
SUSPECT_LABELS = (SUSPECTS_KEEP, SUSPECTS_HOLD)


class Arrivals(TypedDict):
    """`$.run.arrivals`: the champion evaluated on the run's new uploads (controller/arrivals.py)."""

    check: bool  # the job runs: the data set has a champion and the run new images of trained labels
    before_training: bool  # TrainWhen drift or SuspectLabels hold: its result decides, so training waits
    train_when: str
    suspect_labels: str
    arguments: list[str]  # evaluate.py's (container.arrivals_arguments)
    s3_uri: str  # the job's output prefix: arrivals.json, suspects.json
    manifest_uri: str  # a ManifestFile of the images it reads
    lines_uri: str  # their manifest lines (split new or validation)
    run_manifest_uri: str  # the run's manifest channel, read under hold
    held_s3_uri: str  # under hold: the run's manifest without the suspects
    images: int  # new uploads it checks (at most container.ARRIVALS_NEW_MAX)
    volume_gb: int


START_SCRATCH = "scratch"
START_PRETRAINED = "pretrained"
START_CHAMPION = "champion"
START_IMAGENET = "imagenet"  # the training image's own ImageNet weights (container.IMAGENET_MODELS)
STARTS = (START_CHAMPION, START_PRETRAINED, START_IMAGENET, START_SCRATCH)


class Start(TypedDict):
    """What a run's training starts from (its lineage): the weights, and why those."""

    kind: str  # one of STARTS
    uri: str  # the weights file the pretrained channel holds; empty from scratch and from ImageNet
    model_package_arn: str  # the champion's, when kind is champion
    reason: str  # why this start, in words


class Run(TypedDict):
    """`$.run`: built once by Prepare, read by every later state."""

    dataset: str
    run_id: str
    trigger: str
    jobs: Jobs
    # the manifest: uploads recorded before `cut` (new from `trained_through` on), frozen by a job whose
    # summary (in frozen_s3_uri, with labels.json and class_counts.json) fills in the figures
    cut: str
    trained_through: str
    freeze_arguments: list[str]
    frozen_s3_uri: str
    label_count: int
    # what an evaluation downloads: the validation split's images (a ManifestFile) and its manifest lines
    validation_manifest_uri: str
    validation_lines_uri: str
    evaluation_volume_gb: int
    manifest_size: int
    new_images: int
    # FSx for Lustre: whether and what to import before training
    data_source: str
    import_needed: bool
    file_system_id: str
    import_paths: list[str]
    import_token: str
    import_report_path: str
    import_poll_seconds: int
    import_max_polls: int
    # where the jobs read and write
    train_data_source: dict[str, Any]  # the train channel's DataSource (S3DataSource | FileSystemDataSource)
    train_input_mode: str
    input_data_config: list[dict[str, Any]]  # the training jobs' channels: train, manifest[, pretrained]
    start: Start
    data_s3_uri: str
    manifest_s3_uri: str
    output_s3_uri: str
    checkpoint_s3_uri: str  # the tuning trials' (one per tuning job); each writes under its job name
    final_checkpoint: CheckpointConfig  # the final training job's own
    rules_s3_uri: str
    challenger_s3_uri: str
    champion_s3_uri: str
    # the jobs' resources and limits
    training_image: str
    instance_type: str
    instance_count: int
    volume_size_gb: int
    evaluation_instance_type: str
    spot: bool
    stopping_condition: dict[str, int]
    vpc: Vpc
    tags: list[Tag]
    # tuning and training
    tuning_strategy: str
    max_jobs: int
    parallel_jobs: int
    parameter_ranges: dict[str, list[dict[str, Any]]]  # tuning's ParameterRanges
    container: StateMachineSpec
    static_hyperparameters: dict[str, str]
    hyperparameters: dict[str, str]
    fixed_hyperparameters: bool
    final_training: bool
    warm_start: bool
    warm_start_parent: str
    debugger_mode: str
    # the champion the challenger must beat
    has_champion: bool
    champion_model_data: str
    champion_model_package_arn: str
    arrivals: Arrivals


# Prepare's result, the execution's state: the run, and the counters later states update. `import`
# (the FSx import task) exists from the start so later states read it whether or not FSx imported
# anything; `api_retry` counts the state machine's retries of transient SageMaker API errors.
PrepareResult = TypedDict(
    "PrepareResult", {"run": Run, "import": dict[str, Any], "api_retry": dict[str, int]}
)
