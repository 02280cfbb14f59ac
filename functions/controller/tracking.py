"""Every run in MLflow: one experiment per data set, a parent run per retrain run, a child per training job.

Two events drive it (template.yaml, TrackingFunction), neither of them a state of the flow, so tracking
never holds up or fails a run:
- a run's training job ended (a tuning trial or the final job): a child run of the run's parent with the
  job's hyperparameters, its per-epoch validation metrics (the lines the metric regexes read, from the
  job's log stream, filtered to the epoch ends: O(epochs), never O(steps)), its final metrics, times and
  status;
- the run's execution ended: the parent gets the run's lineage (started from, manifest, new images,
  labels), the gate's decision, the rule findings, the evaluation table (an artifact), the champion's
  figures on the run's new uploads with TrainWhen's decision and the suspected label errors (an
  artifact), and the registered model package's ARN (a tag), and ends FINISHED, FAILED or KILLED.

The parent run is made by whichever event comes first, and named by the run record (`mlflow_run_id`,
written once under a condition): two events racing make one parent, the loser's run is deleted.

MLflow is reached with MLflow's own client: `MLFLOW_TRACKING_URI` is the ARN of a SageMaker MLflow app or
tracking server (the sagemaker-mlflow plugin signs each request with the function's role) or an MLflow
server's URL. Tracking never fails a run: whatever goes wrong is a warning in the run record
(`tracking_warnings`, which `retrain report` shows) and the function's log.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools.utilities.data_classes.event_bridge_event import EventBridgeEvent
from aws_lambda_powertools.utilities.data_classes.event_source import event_source
from botocore.exceptions import BotoCoreError, ClientError
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from controller import clients, names, runs, s3io
from controller.config import Config, get_config
from controller.execution_events import dataset_of
from controller.job_ended import event_tags
from controller.observability import logger, tracer
from retrain_contract import container

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_logs import CloudWatchLogsClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sagemaker import SageMakerClient

TRAINING_LOG_GROUP: Final = "/aws/sagemaker/TrainingJobs"
# The epoch-end lines only: every validation metric's name starts so (train-loss lines come every few
# steps, and a job's last train-loss is in its FinalMetricDataList).
EPOCH_END_FILTER: Final = '"val-"'
# MLflow's LogBatch limits: 1,000 metrics, 100 params and 100 tags a request (MLflow REST API).
MAX_METRICS: Final = 1000
MAX_PARAMS: Final = 100
MAX_TAGS: Final = 100
MAX_PARAM_CHARS: Final = 6000
MAX_KEY_CHARS: Final = 250  # MLflow's limit on a param, metric or tag key
MAX_STREAMS: Final = 100  # FilterLogEvents' logStreamNames
MAX_WARNINGS: Final = 10  # a run record keeps its first warnings; the function's log has all
JOB_STATUS: Final = {"Completed": "FINISHED", "Failed": "FAILED", "Stopped": "KILLED"}
EXECUTION_STATUS: Final = {
    "SUCCEEDED": "FINISHED",
    "FAILED": "FAILED",
    "TIMED_OUT": "FAILED",
    "ABORTED": "KILLED",
}
# Tags the runs carry (MLflow's own mlflow.parentRunId nests a child under its parent in the UI).
TAG_PARENT: Final = "mlflow.parentRunId"
TAG_DATASET: Final = "retrain.dataset"
TAG_RUN: Final = "retrain.run_id"
TAG_JOB: Final = "retrain.training_job"
TAG_ROLE: Final = "retrain.role"  # trial | final
TAG_PACKAGE: Final = "retrain.model_package_arn"
EVALUATION_ARTIFACT: Final = "evaluation/challenger.json"
SUSPECTS_ARTIFACT: Final = "arrivals/suspects.json"  # the suspected label errors among the new uploads
# The champion on the run's new uploads (the record's `arrivals`): the parent's metrics `arrivals.<key>`.
ARRIVALS_METRICS: Final = (
    "top1",
    "top3",
    "validation_top1",
    "drift",
    "suspect_count",
    "suspect_rate",
    "held",
)


def experiment_name(dataset: str) -> str:
    return f"retrain/{dataset}"


def _millis(value: Any) -> int | None:
    """Epoch milliseconds of a datetime (boto3), an ISO 8601 string (records) or a number (events)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, str) and value:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    return None


def experiment_id(client: MlflowClient, dataset: str) -> str:
    """The data set's experiment, made on first use (a concurrent maker's is taken)."""
    name = experiment_name(dataset)
    found = client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    try:
        return str(client.create_experiment(name, tags={TAG_DATASET: dataset}))
    except MlflowException:
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)


def parent_run(
    client: MlflowClient, dataset: str, run_id: str, *, config: Config, dynamodb: DynamoDBClient
) -> str:
    """The MLflow run of retrain run `run_id`: the one its record names, else a new one recorded there."""
    record = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb)
    if record is None:
        raise LookupError(f"run {run_id} of data set {dataset} has no record")
    if record.get("mlflow_run_id"):
        return str(record["mlflow_run_id"])
    created = client.create_run(
        experiment_id(client, dataset),
        start_time=_millis(record.get("created_at")),
        tags={TAG_DATASET: dataset, TAG_RUN: run_id},
        run_name=run_id,
    ).info.run_id
    if runs.set_once(
        dataset, run_id, "mlflow_run_id", created, table_name=config.runs_table, client=dynamodb
    ):
        return str(created)
    client.delete_run(created)  # another event made the parent first
    record = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb) or record
    return str(record["mlflow_run_id"])


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def log_batch(
    client: MlflowClient,
    run_id: str,
    *,
    metrics: Sequence[Metric] = (),
    params: Mapping[str, Any] | None = None,
    tags: Mapping[str, Any] | None = None,
) -> None:
    """Log any number of metrics, params and tags within LogBatch's limits."""
    param_list = [
        Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in (params or {}).items() if v not in (None, "")
    ]
    tag_list = [RunTag(k, str(v)) for k, v in (tags or {}).items() if v not in (None, "")]
    for chunk in _chunks(list(metrics), MAX_METRICS):
        client.log_batch(run_id, metrics=list(chunk))
    for chunk in _chunks(param_list, MAX_PARAMS):
        client.log_batch(run_id, params=list(chunk))
    for chunk in _chunks(tag_list, MAX_TAGS):
        client.log_batch(run_id, tags=list(chunk))


def job_streams(logs: CloudWatchLogsClient, job_name: str) -> list[str]:
    """The job's log streams: `<job>/algo-<n>-<time>`, one per host and (re)start."""
    streams: list[str] = []
    request: dict[str, Any] = {"logGroupName": TRAINING_LOG_GROUP, "logStreamNamePrefix": f"{job_name}/"}
    while True:
        page = logs.describe_log_streams(**request)
        streams += [str(s["logStreamName"]) for s in page.get("logStreams", [])]
        if not page.get("nextToken"):
            return streams
        request["nextToken"] = page["nextToken"]


def epoch_metrics(logs: CloudWatchLogsClient, job_name: str) -> list[Metric]:
    """The job's per-epoch validation metrics as MLflow metrics (step: the training step), from its
    log streams' epoch-end lines; a step printed twice (a spot resume) keeps its last value.

    The streams are named (FilterLogEvents takes at most 100 names a call), not given by prefix: moto
    5.2.5's FilterLogEvents ignores logStreamNamePrefix and would answer with every job's lines."""
    points: dict[tuple[str, int], Metric] = {}
    try:
        streams = job_streams(logs, job_name)
    except logs.exceptions.ResourceNotFoundException:
        return []
    for start in range(0, len(streams), MAX_STREAMS):
        request: dict[str, Any] = {
            "logGroupName": TRAINING_LOG_GROUP,
            "logStreamNames": streams[start : start + MAX_STREAMS],
            "filterPattern": EPOCH_END_FILTER,
        }
        while True:
            page = logs.filter_log_events(**request)
            for event in page.get("events", []):
                at = int(event["timestamp"])
                for name, found in container.parse_metric_lines([str(event.get("message", ""))]).items():
                    points.update({(name, p.step): Metric(name, p.value, at, p.step) for p in found})
            if not page.get("nextToken"):
                break
            request["nextToken"] = page["nextToken"]
    return sorted(points.values(), key=lambda m: (m.key, m.step))


CHILDREN = "mlflow_children"  # the run record's map (runs.RunRecord's): training job -> its child run


def child_run(
    client: MlflowClient,
    *,
    experiment: str,
    parent: str,
    job: Mapping[str, Any],
    config: Config,
    dynamodb: DynamoDBClient,
    run: tuple[str, str],
) -> str:
    """The child run of one ended training job of `run` (dataset, run id): the one the run record names,
    else one made now (or left by an earlier delivery that failed before recording it) and recorded there
    under a condition. Two deliveries of the job's end event at once both make one; once one is recorded
    every other run of the job is deleted, so the job has one child however often its event comes."""
    dataset, run_id = run
    name = str(job["TrainingJobName"])
    recorded = _children(dataset, run_id, config=config, dynamodb=dynamodb).get(name)
    if recorded:
        return recorded
    left = client.search_runs([experiment], filter_string=f"tags.`{TAG_JOB}` = '{name}'", max_results=1)
    candidate = (
        str(left[0].info.run_id)
        if left
        else client.create_run(
            experiment,
            start_time=_millis(job.get("TrainingStartTime") or job.get("CreationTime")),
            tags={
                TAG_PARENT: parent,
                TAG_JOB: name,
                TAG_ROLE: "trial" if job.get("TuningJobArn") else "final",
            },
            run_name=name,
        ).info.run_id
    )
    if runs.set_key_once(
        dataset, run_id, CHILDREN, name, candidate, table_name=config.runs_table, client=dynamodb
    ):
        recorded = candidate
    else:
        recorded = _children(dataset, run_id, config=config, dynamodb=dynamodb)[name]
    # Every other run of the job goes: a losing delivery's own (one that found the recorded run by its
    # search and recorded it keeps it), and a second run that MLflow's client made by sending a
    # create-run again after a read timeout (it retries every method, POST included).
    for other in client.search_runs([experiment], filter_string=f"tags.`{TAG_JOB}` = '{name}'"):
        if other.info.run_id != recorded:
            with contextlib.suppress(MlflowException):  # its own delivery deleted it meanwhile
                client.delete_run(other.info.run_id)
    return recorded


def _children(dataset: str, run_id: str, *, config: Config, dynamodb: DynamoDBClient) -> dict[str, str]:
    record = runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb)
    children = record.get("mlflow_children") if record is not None else None
    return {str(job): str(child) for job, child in (children or {}).items()}


def log_training_job(
    client: MlflowClient,
    child: str,
    *,
    job: Mapping[str, Any],
    history: Sequence[Metric],
) -> str:
    """Log one ended training job into its child run and end it; nothing when it has ended already (a
    later delivery of the job's event). A child left running (an earlier delivery's logging failed part
    way) is logged again: the values are the same, and MLflow keeps each metric point once."""
    if client.get_run(child).info.status != "RUNNING":
        return child
    last_step = max((m.step for m in history), default=0)
    ended = _millis(job.get("TrainingEndTime") or job.get("LastModifiedTime")) or int(time.time() * 1000)
    seen = {m.key for m in history}
    final = [
        Metric(str(m["MetricName"]), float(m["Value"]), _millis(m.get("Timestamp")) or ended, last_step)
        for m in job.get("FinalMetricDataList", [])
        if str(m["MetricName"]) not in seen
    ]
    totals = [
        Metric(key, float(job[field]), ended, last_step)
        for key, field in (
            ("training-seconds", "TrainingTimeInSeconds"),
            ("billable-seconds", "BillableTimeInSeconds"),
        )
        if job.get(field) is not None
    ]
    hyperparameters = {k: v for k, v in (job.get("HyperParameters") or {}).items() if not k.startswith("_")}
    resources = job.get("ResourceConfig") or {}
    log_batch(
        client,
        child,
        metrics=[*history, *final, *totals],
        params=hyperparameters,
        tags={
            "retrain.instance_type": resources.get("InstanceType"),
            "retrain.instance_count": resources.get("InstanceCount"),
            "retrain.tuning_job": str(job.get("TuningJobArn") or "").rsplit("/", 1)[-1],
            "retrain.spot": job.get("EnableManagedSpotTraining"),
            "retrain.failure_reason": job.get("FailureReason"),
            "retrain.model_data": (job.get("ModelArtifacts") or {}).get("S3ModelArtifacts"),
        },
    )
    client.set_terminated(
        child, status=JOB_STATUS.get(str(job["TrainingJobStatus"]), "FAILED"), end_time=ended
    )
    return str(child)


def lineage(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the run started from and trained on, as MLflow params."""
    started = record.get("started_from") or {}
    params: dict[str, Any] = {
        "started_from": started.get("kind"),
        "started_from_uri": started.get("uri"),
        "started_from_model_package": started.get("model_package_arn"),
        "started_from_reason": started.get("reason"),
        "trigger": record.get("trigger"),
        "manifest_uri": record.get("manifest_uri"),
        "manifest_size": record.get("manifest_size"),
        "new_images": record.get("new_images"),
        "label_count": record.get("label_count"),
        "labels_uri": record.get("labels_uri"),
        "validation_images": record.get("validation_images"),
        "data_source": record.get("data_source"),
        "excluded_label_count": record.get("excluded_label_count"),
        "tuning_job": record.get("tuning_job"),
        "best_training_job": record.get("best_training_job"),
        "final_training_job": record.get("final_training_job"),
        "model_data": record.get("model_data"),
    }
    params.update({f"class_balance.{k}": v for k, v in (record.get("class_balance") or {}).items()})
    return params


def outcome_metrics(record: Mapping[str, Any], at: int) -> list[Metric]:
    metrics: list[Metric] = []
    for side in ("challenger", "champion"):
        for key in ("top1", "top3"):
            value = (record.get(side) or {}).get(key)
            if value is not None:
                metrics.append(Metric(f"{side}.{key}", float(value), at, 0))
    for key in ("best_objective", "training_seconds", "billable_seconds", "spot_saving"):
        if record.get(key) is not None:
            metrics.append(Metric(key, float(record[key]), at, 0))
    for point in record.get("checkpoint_evaluations") or []:
        if point.get("top1") is not None and point.get("step") is not None:
            metrics.append(Metric("checkpoint.top1", float(point["top1"]), at, int(point["step"])))
    arrivals = record.get("arrivals") or {}
    for key in ARRIVALS_METRICS:
        if arrivals.get(key) is not None:
            metrics.append(Metric(f"arrivals.{key}", float(arrivals[key]), at, 0))
    return metrics


def outcome_tags(record: Mapping[str, Any]) -> dict[str, Any]:
    gate = record.get("gate") or {}
    failure = record.get("failure") or {}
    tags: dict[str, Any] = {
        "retrain.status": record.get("status"),
        "retrain.gate.decision": gate.get("decision"),
        "retrain.gate.reason": gate.get("reason"),
        TAG_PACKAGE: record.get("model_package_arn"),
        "retrain.failure.error": failure.get("error"),
        "retrain.failure.cause": str(failure.get("cause") or "")[:5000],
        "retrain.rules_blocked": record.get("rules_blocked"),
        # the champion on the new uploads: TrainWhen's decision (train | not_needed) and why
        "retrain.arrivals.decision": (record.get("arrivals") or {}).get("decision"),
        "retrain.arrivals.reason": str((record.get("arrivals") or {}).get("reason") or "")[:5000],
    }
    for result in record.get("rule_results") or []:
        tags[f"retrain.rule.{result['rule']}"[:MAX_KEY_CHARS]] = result.get("status")
    return tags


def evaluation_table(s3: S3Client, record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The challenger's evaluation.json (per-class accuracy, confusions): one object per run."""
    uri = (record.get("challenger") or {}).get("report_uri")
    if not uri:
        return None
    document = s3io.read_json(str(uri), s3=s3, what="the challenger's evaluation")
    return document if isinstance(document, dict) else None


def suspects_list(s3: S3Client, record: Mapping[str, Any]) -> dict[str, Any] | None:
    """suspects.json of the champion's check on the new uploads (ranked, at most SUSPECTS_MAX of them)."""
    uri = (record.get("arrivals") or {}).get("suspects_uri")
    if not uri:
        return None
    document = s3io.read_json(str(uri), s3=s3, what="the suspected label errors among the new uploads")
    return document if isinstance(document, dict) else None


# --- the events --------------------------------------------------------------------------------------
def on_training_job_ended(
    event: EventBridgeEvent,
    *,
    client: MlflowClient,
    config: Config,
    dynamodb: DynamoDBClient,
    sagemaker: SageMakerClient,
    logs: CloudWatchLogsClient,
) -> dict[str, Any]:
    tags = event_tags(event)
    dataset, run_id = tags.get(names.TAG_DATASET), tags.get(names.TAG_RUN_ID)
    name = str(event.detail.get("TrainingJobName", ""))
    if not dataset or not run_id or not name or event.detail.get("TrainingJobStatus") not in JOB_STATUS:
        return {"action": "ignored", "reason": "not an ended training job of a run"}
    with _Warned(dataset, run_id, f"training job {name}", config=config, dynamodb=dynamodb) as result:
        parent = parent_run(client, dataset, run_id, config=config, dynamodb=dynamodb)
        job = dict(sagemaker.describe_training_job(TrainingJobName=name))
        child = child_run(
            client,
            experiment=experiment_id(client, dataset),
            parent=parent,
            job=job,
            config=config,
            dynamodb=dynamodb,
            run=(dataset, run_id),
        )
        log_training_job(client, child, job=job, history=epoch_metrics(logs, name))
        result.update(action="tracked", mlflow_run_id=child, parent=parent)
    return result


def log_artifacts(client: MlflowClient, parent: str, s3: S3Client, record: Mapping[str, Any]) -> None:
    """The run's JSON documents as the parent's artifacts, each tried: what fails is raised once the rest
    are logged (the first failure; the run's warning names it)."""
    failed: Exception | None = None
    for read, path in ((evaluation_table, EVALUATION_ARTIFACT), (suspects_list, SUSPECTS_ARTIFACT)):
        try:
            document = read(s3, record)
            if document is not None:
                client.log_dict(parent, document, path)
        except Exception as error:  # any failure is the run's tracking warning
            failed = failed or error
    if failed is not None:
        raise failed


def on_execution_ended(
    event: EventBridgeEvent,
    *,
    client: MlflowClient,
    config: Config,
    dynamodb: DynamoDBClient,
    s3: S3Client,
) -> dict[str, Any]:
    status, run_id = str(event.detail.get("status", "")), str(event.detail.get("name", ""))
    dataset = dataset_of(event.detail)
    if not names.DATASET_RE.fullmatch(dataset) or status not in EXECUTION_STATUS:
        return {"action": "ignored", "reason": "not an ended execution of a run"}
    if runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb) is None:
        return {"action": "ignored", "reason": "the execution made no run (its input was refused)"}
    with _Warned(dataset, run_id, "the run's outcome", config=config, dynamodb=dynamodb) as result:
        parent = parent_run(client, dataset, run_id, config=config, dynamodb=dynamodb)
        record: Mapping[str, Any] = (
            runs.get_run(dataset, run_id, table_name=config.runs_table, client=dynamodb) or {}
        )
        ended = (
            _millis(event.detail.get("stopDate"))
            or _millis(record.get("finished_at"))
            or int(time.time() * 1000)
        )
        try:
            log_batch(
                client,
                parent,
                metrics=outcome_metrics(record, ended),
                params=lineage(record),
                tags={
                    **outcome_tags(record),
                    # the event's word: an execution stopped or timed out may end before its record does
                    "retrain.execution_status": status,
                    "retrain.execution_arn": event.detail.get("executionArn"),
                },
            )
            log_artifacts(client, parent, s3, record)
        except Exception:  # the parent ends all the same; the warning says what was not logged
            with contextlib.suppress(Exception):
                client.set_terminated(parent, status=EXECUTION_STATUS[status], end_time=ended)
            raise
        client.set_terminated(parent, status=EXECUTION_STATUS[status], end_time=ended)
        result.update(action="tracked", mlflow_run_id=parent)
    # done, tracked or warned: what a caller that reads the run's tracking waits for (the demo)
    runs.update_run(
        dataset,
        run_id,
        {names.RUN_TRACKING_DONE_AT: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
        table_name=config.runs_table,
        client=dynamodb,
    )
    return result


class _Warned:
    """Runs the tracking; what fails is a warning in the run record and the log, never an error."""

    def __init__(
        self, dataset: str, run_id: str, what: str, *, config: Config, dynamodb: DynamoDBClient
    ) -> None:
        self.dataset, self.run_id, self.what = dataset, run_id, what
        self.config, self.dynamodb = config, dynamodb
        self.result: dict[str, Any] = {"run_id": run_id}

    def __enter__(self) -> dict[str, Any]:
        return self.result

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> bool:
        if error is None or not isinstance(error, Exception):
            return False
        message = f"MLflow tracking of {self.what} failed: {type(error).__name__}: {str(error)[:500]}"
        logger.warning(message, extra={"dataset": self.dataset, "run_id": self.run_id})
        try:
            runs.add_warning(
                self.dataset,
                self.run_id,
                "tracking_warnings",
                message,
                limit=MAX_WARNINGS,
                table_name=self.config.runs_table,
                client=self.dynamodb,
            )
        except (BotoCoreError, ClientError) as failed:
            logger.warning("the tracking warning was not recorded", extra={"error": str(failed)})
        self.result.update(action="warned", warning=message)
        return True


@tracer.capture_lambda_handler
@logger.inject_lambda_context
@event_source(data_class=EventBridgeEvent)
def handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    client = MlflowClient()  # MLFLOW_TRACKING_URI: the app's or tracking server's ARN, or a URL
    if event.source == "aws.states":
        return on_execution_ended(
            event, client=client, config=get_config(), dynamodb=clients.dynamodb(), s3=clients.s3()
        )
    return on_training_job_ended(
        event,
        client=client,
        config=get_config(),
        dynamodb=clients.dynamodb(),
        sagemaker=clients.sagemaker(),
        logs=clients.logs(),
    )
