"""Every control-plane name that crosses a boundary, defined once.

The Lambdas, the state machine's inputs, the CLI and the embedded runtime read S3 layouts, table keys,
environment variable names and stack output keys from here (template.yaml and the ASL keep copies
that tests compare to this module).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from retrain_contract import container, ledger

# --- Uploads: s3://<DataBucket>/data/<dataset>/<label>/<image> -------------------------------------
DATA_PREFIX: Final = "data/"
IMAGE_EXTENSIONS: Final = container.IMAGE_EXTENSIONS
NAME_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9_-]*"
DATASET_RE: Final = re.compile(rf"^{NAME_PATTERN}$")
LABEL_RE: Final = DATASET_RE
MAX_DATASET_LENGTH: Final = 40
MAX_LABEL_LENGTH: Final = 64
MAX_FILENAME_LENGTH: Final = 255
MAX_IMAGE_BYTES: Final = 50 * 1024 * 1024
# One weights file in S3 (template.yaml's PretrainedModelUri has the same AllowedPattern, tested).
PRETRAINED_URI_PATTERN: Final = r"^$|^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/.*[^/]$"


def upload_key(dataset: str, label: str, filename: str) -> str:
    return f"{DATA_PREFIX}{dataset}/{label}/{filename}"


def dataset_prefix(dataset: str) -> str:
    """The S3 prefix that holds one data set (the train channel's root)."""
    return f"{DATA_PREFIX}{dataset}/"


# --- Artifacts: s3://<ArtifactBucket>/runs/<dataset>/<run_id>/... -------------------------------------
RUNS_PREFIX: Final = "runs/"
PRETRAINED_PREFIX: Final = "pretrained/"  # weights `retrain pretrained upload` puts in the artifact bucket
CHECKPOINTS_PREFIX: Final = "checkpoints/"
# Checkpoints copied for evaluation: out of reach of the trainer's pruning, which SageMaker mirrors to
# CHECKPOINTS_PREFIX ("Use checkpoints in Amazon SageMaker"); outside it, so a copy starts no evaluation.
CHECKPOINT_COPIES_PREFIX: Final = "checkpoint-copies/"
MANIFEST_DIR: Final = "manifest"
FROZEN_DIR: Final = "frozen"  # what the freezing job says of a run's manifest (summary, labels, counts)
# FSx writes an import task's completion report inside the file system's linked data repository
# (s3://<DataBucket>/data/), so reports live under a prefix no data set name can take ('_' first).
FSX_REPORTS_PREFIX: Final = f"{DATA_PREFIX}_fsx-reports/"


def fsx_report_prefix(dataset: str, run_id: str) -> str:
    """Report.Path of a run's FSx import task, in the data bucket."""
    return f"{FSX_REPORTS_PREFIX}{dataset}/{run_id}"


def is_fsx_report(key: str) -> bool:
    """An object FSx wrote (a completion report), not an upload."""
    return key.startswith(FSX_REPORTS_PREFIX)


REPORT_DIR: Final = "report/"
REPORT_FILE: Final = "report.md"


def run_prefix(dataset: str, run_id: str) -> str:
    return f"{RUNS_PREFIX}{dataset}/{run_id}/"


def report_uri(bucket: str, dataset: str, run_id: str) -> str:
    """Where `retrain report RUN` publishes a run's report (report.md and its charts) on AWS."""
    return f"s3://{bucket}/{run_prefix(dataset, run_id)}{REPORT_DIR}{REPORT_FILE}"


def manifest_prefix(dataset: str, run_id: str) -> str:
    """The manifest channel's S3 prefix (the container reads <prefix>manifest.jsonl)."""
    return f"{run_prefix(dataset, run_id)}{MANIFEST_DIR}/"


def frozen_prefix(dataset: str, run_id: str) -> str:
    """Where the freezing job writes summary.json, labels.json and class_counts.json."""
    return f"{run_prefix(dataset, run_id)}{FROZEN_DIR}/"


def output_prefix(dataset: str, run_id: str) -> str:
    """Where training, tuning and processing jobs of a run write their outputs."""
    return f"{run_prefix(dataset, run_id)}output/"


def evaluation_prefix(dataset: str, run_id: str, name: str) -> str:
    return f"{run_prefix(dataset, run_id)}evaluation/{name}/"


def rules_prefix(dataset: str, run_id: str) -> str:
    return f"{run_prefix(dataset, run_id)}rules/"


def checkpoint_prefix(dataset: str, run_id: str) -> str:
    """CheckpointConfig.S3Uri of a run's tuning trials, which one tuning job cannot give prefixes of their
    own: each trial writes /opt/ml/checkpoints/<job>/<host>/, so objects land at
    <prefix><job>/<host>/ckpt-<step>.pt."""
    return f"{CHECKPOINTS_PREFIX}{dataset}/{run_id}/"


def job_checkpoint_prefix(dataset: str, run_id: str, training_job: str) -> str:
    """One training job's checkpoints: the final job's own CheckpointConfig.S3Uri (LocalPath
    /opt/ml/checkpoints/<job>, so its keys have the trials' layout), what is dropped when a job ends."""
    return f"{checkpoint_prefix(dataset, run_id)}{training_job}/"


def checkpoint_copy_key(dataset: str, run_id: str, training_job: str, step: int) -> str:
    """The copy of one checkpoint that its evaluation reads (it outlives the trainer's pruning)."""
    return (
        f"{CHECKPOINT_COPIES_PREFIX}{dataset}/{run_id}/{training_job}/{step:09d}/"
        f"{container.checkpoint_name(step)}"
    )


def checkpoint_eval_prefix(dataset: str, run_id: str, training_job: str, step: int) -> str:
    """Where the evaluation of one trial's checkpoint lands (trials of a run reach the same steps)."""
    return f"{run_prefix(dataset, run_id)}checkpoint-evaluation/{training_job}/{step:09d}/"


CHECKPOINT_KEY_RE: Final = re.compile(
    rf"^{CHECKPOINTS_PREFIX}(?P<dataset>{NAME_PATTERN})/(?P<run_id>[A-Za-z0-9_-]+)/"
    r"(?P<job>[^/]+)/(?P<host>[^/]+)/ckpt-(?P<step>\d{9})\.pt$"
)

# --- DynamoDB --------------------------------------------------------------------------------------
# Ledger: one row per uploaded object (retrain_contract.ledger, which the freezing job reads too).
LEDGER_PK: Final = ledger.PK
LEDGER_SK: Final = ledger.SK
# The sparse index of accepted rows by the time ingest recorded them; rows from the data set's watermark
# on are pending. Its names predate the watermark and stay: a changed key schema replaces an index.
LEDGER_PENDING_INDEX: Final = "pending-by-upload-time"
LEDGER_PENDING_PK: Final = "pending_dataset"
LEDGER_PENDING_SK: Final = "uploaded_at"  # holds the row's recorded_at

STATE_ACCEPTED: Final = ledger.STATE_ACCEPTED
STATE_REJECTED: Final = ledger.STATE_REJECTED
STATE_REMOVED: Final = ledger.STATE_REMOVED
# The data set's watermark: the cut of its last completed run (uploads recorded from it on are new).
TRAINED_THROUGH: Final = "trained_through"

# Why an upload was rejected (rows carry it as "problem"; the report and `retrain status` group by it).
PROBLEM_LAYOUT: Final = "layout"  # key, label or extension
PROBLEM_CONTENT: Final = "content"  # the bytes: not an image, wrong format, too small or large, truncated
PROBLEM_DUPLICATE: Final = "duplicate"  # the same bytes under the same label, already uploaded
PROBLEM_CONFLICT: Final = "conflict"  # the same bytes under another label

# Claim rows in the ledger: which key first brought a content (ETag and size) into a data set. Their sort
# key starts with '#', which no upload key does (those start with data/).
LEDGER_CONTENT_PREFIX: Final = ledger.CONTENT_PREFIX


def content_claim_key(etag: str, size: int) -> str:
    """The claim row of a content: S3's ETag (the MD5 of a single-part upload) and its size."""
    return f"{LEDGER_CONTENT_PREFIX}{etag.strip(chr(34))}/{size}"


# Runs: one row per run. PK dataset, SK run_id.
RUNS_PK: Final = "dataset"
RUNS_SK: Final = "run_id"

# Datasets: one row per data set: the run lock, the run counter, the last tuning job and champion.
DATASETS_PK: Final = "dataset"
LOCK_ATTRIBUTE: Final = "active_run"
LAST_TUNING_JOB: Final = "last_tuning_job"
# The names of the hyperparameters (static and tuned) the last tuning job ran with: a later run
# warm-starts from it only with the same names (SageMaker refuses a parent with another number of them).
LAST_TUNING_HYPERPARAMETERS: Final = "last_tuning_hyperparameters"


def tuning_hyperparameter_names(static: Mapping[str, Any], ranges: Mapping[str, Any]) -> list[str]:
    """The static and tuned hyperparameter names of a tuning job, sorted."""
    tuned = {str(r["Name"]) for kind in ranges.values() for r in kind}
    return sorted(set(static) | tuned)


# --- Environment variables of the Lambdas ---------------------------------------------------------
ENV_DATA_BUCKET: Final = "DATA_BUCKET"
ENV_ARTIFACT_BUCKET: Final = "ARTIFACT_BUCKET"
ENV_LEDGER_TABLE: Final = "LEDGER_TABLE"
ENV_RUNS_TABLE: Final = "RUNS_TABLE"
ENV_DATASETS_TABLE: Final = "DATASETS_TABLE"
ENV_STATE_MACHINE_ARN: Final = "STATE_MACHINE_ARN"
ENV_INGEST_QUEUE_URL: Final = "INGEST_QUEUE_URL"  # ingest puts back a notice a throttle kept it from
ENV_TOPIC_ARN: Final = "TOPIC_ARN"
ENV_MIN_NEW_IMAGES: Final = "MIN_NEW_IMAGES"
ENV_QUIET_PERIOD_SECONDS: Final = "QUIET_PERIOD_SECONDS"
ENV_MAX_WAIT_SECONDS: Final = "MAX_WAIT_SECONDS"
ENV_SETTINGS: Final = "RUN_SETTINGS"  # JSON: the template's training/tuning defaults (config.RunSettings)
ENV_SAGEMAKER_ROLE_ARN: Final = "SAGEMAKER_ROLE_ARN"
# The serving image of registered model packages (register only; empty where the region has none).
ENV_INFERENCE_IMAGE_URI: Final = "INFERENCE_IMAGE_URI"
ENV_CHECKPOINT_EVAL_EVERY: Final = "CHECKPOINT_EVAL_EVERY"
ENV_CHECKPOINT_EVAL_MAX: Final = "CHECKPOINT_EVAL_MAX_PER_RUN"
ENV_MIN_IMPROVEMENT: Final = "MIN_IMPROVEMENT"
ENV_MIN_ACCURACY: Final = "MIN_ACCURACY"
ENV_BLOCKING_RULES: Final = "BLOCKING_RULES"
ENV_MODEL_APPROVAL_STATUS: Final = "MODEL_APPROVAL_STATUS"
ENV_MODEL_PACKAGE_GROUP_PREFIX: Final = "MODEL_PACKAGE_GROUP_PREFIX"
ENV_STUCK_RUN_SECONDS: Final = "STUCK_RUN_SECONDS"
ENV_MIN_IMAGE_SIDE: Final = "MIN_IMAGE_SIDE"
ENV_MAX_IMAGE_PIXELS: Final = "MAX_IMAGE_PIXELS"
ENV_FAILURE_BACKOFF_SECONDS: Final = "FAILURE_BACKOFF_SECONDS"
# The run record's field set once the tracking of a run's end is done (tracked, or warned about).
RUN_TRACKING_DONE_AT: Final = "tracking_done_at"
# Read by MLflow's client itself: the MLflow app's or tracking server's ARN (tracking.py), and how long
# it tries a request (template.yaml's TrackingFunction sets them within the function's timeout).
ENV_MLFLOW_TRACKING_URI: Final = "MLFLOW_TRACKING_URI"
ENV_MLFLOW_HTTP_REQUEST_MAX_RETRIES: Final = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"
ENV_MLFLOW_HTTP_REQUEST_TIMEOUT: Final = "MLFLOW_HTTP_REQUEST_TIMEOUT"
ENV_MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR: Final = "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"
ENV_MLFLOW_DISABLE_TELEMETRY: Final = "MLFLOW_DISABLE_TELEMETRY"
ENV_MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT: Final = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"

# --- CloudFormation outputs the CLI reads (template.yaml Outputs; a test compares) --------------
STACK_OUTPUTS: Final = {
    "data_bucket": "DataBucketName",
    "artifact_bucket": "ArtifactBucketName",
    "state_machine": "StateMachineArn",
    "ledger_table": "LedgerTableName",
    "runs_table": "RunsTableName",
    "datasets_table": "DatasetsTableName",
    "topic": "NotificationTopicArn",
    "ingest_queue": "IngestQueueUrl",
    "ingest_dlq": "IngestDeadLetterQueueUrl",
    "sagemaker_role": "SageMakerRoleArn",
    "dashboard": "DashboardName",
    "model_package_group_prefix": "ModelPackageGroupPrefix",
    "mlflow": "MlflowTrackingArn",  # only with MlflowTracking set
}

# --- Names of AWS resources a run creates, within each API's pattern and length ---------------------
# SageMaker names (jobs, model package groups): ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$ and shorter limits
# for some (tuning jobs 32). Step Functions idempotency tokens (FSx ClientRequestToken): 63 of [A-Za-z0-9_.-].
SAGEMAKER_NAME_RE: Final = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
MAX_TUNING_JOB_NAME: Final = 32
MAX_SAGEMAKER_NAME: Final = 63
MAX_CLIENT_REQUEST_TOKEN: Final = 63
MAX_EXECUTION_NAME: Final = 80


def digest(text: str, length: int = 8) -> str:
    """A short, stable fingerprint of `text` (keeps derived names unique when they are shortened)."""
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:length]


def sagemaker_safe(text: str) -> str:
    """`text` with every character SageMaker names refuse as '-', without leading/trailing '-'."""
    return re.sub(r"[^a-zA-Z0-9-]", "-", text).strip("-")


def import_token(execution_arn: str) -> str:
    """ClientRequestToken of a run's FSx import: stable per execution, so a retried call is idempotent."""
    name = execution_arn.rsplit(":", 1)[-1]
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", name)[: MAX_CLIENT_REQUEST_TOKEN - 9]
    return f"{stem}-{digest(execution_arn)}"


# Model registry: one package group per data set.
MAX_MODEL_PACKAGE_GROUP_PREFIX: Final = 16  # 16 + a 40-character data set + "-" + 6 hex digits = 63


def model_package_group(prefix: str, dataset: str) -> str:
    """The data set's model package group: <prefix><dataset>, or, when the data set name holds characters
    SageMaker refuses ('_'), <prefix><dataset with '-'>-<digest>, so 'a_b' and 'a-b' stay apart."""
    plain = f"{prefix}{dataset}"
    if SAGEMAKER_NAME_RE.fullmatch(plain):
        return plain
    return f"{prefix}{sagemaker_safe(dataset)}-{digest(dataset, 6)}"


# Metric namespace and names the Lambdas emit (dashboard and alarms read them).
METRICS_NAMESPACE: Final = "Retrain"
METRIC_ACCEPTED: Final = "AcceptedImages"
METRIC_REJECTED: Final = "RejectedImages"
METRIC_DUPLICATES: Final = "DuplicateDeliveries"
METRIC_REMOVED: Final = "RemovedImages"
METRIC_REQUEUED: Final = "ThrottledNoticesRequeued"
METRIC_RUNS_STARTED: Final = "RunsStarted"
METRIC_RUNS_SUCCEEDED: Final = "RunsSucceeded"
METRIC_RUNS_REJECTED: Final = "RunsRejected"
METRIC_RUNS_NOT_NEEDED: Final = "RunsNotNeeded"  # TrainWhen=drift: the champion did as well
METRIC_CHAMPION_NEW_TOP1: Final = "ChampionTop1OnNewUploads"
METRIC_CHAMPION_DRIFT: Final = "ChampionDrift"  # its validation top-1 minus its top-1 on the new uploads
METRIC_SUSPECTED_LABELS: Final = "SuspectedLabelErrors"
METRIC_RUNS_FAILED: Final = "RunsFailed"
METRIC_CHECKPOINT_EVALS: Final = "CheckpointEvaluationsStarted"
METRIC_STUCK_RUNS: Final = "StuckRuns"

# Tags on checkpoint evaluation Processing jobs: how their completion event finds its run. SageMaker's
# processing-job events carry no tags (unlike its training and tuning ones): the handler reads them with
# ListTags on the job's ARN, and the template's EvaluationsDone rule matches the jobs by this name prefix.
CHECKPOINT_EVAL_JOB_PREFIX: Final = "rt-ckpt-"
TAG_DATASET: Final = "retrain:dataset"
TAG_RUN_ID: Final = "retrain:run-id"
TAG_CHECKPOINT_STEP: Final = "retrain:checkpoint-step"
TAG_TRAINING_JOB: Final = "retrain:training-job"
