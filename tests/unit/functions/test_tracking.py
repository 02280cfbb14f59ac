"""MLflow tracking of a run (controller.tracking), read back with MLflow's own client from a real store."""

from __future__ import annotations

import contextlib
import functools
import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.data_classes.event_bridge_event import EventBridgeEvent
from mlflow import MlflowClient

from controller import names, runs, tracking
from retrain_contract import container
from tests.unit.functions.support import training_job_ended

DATASET, RUN = "flowers", "run-0001"
_job_ended = functools.partial(training_job_ended, dataset=DATASET, run_id=RUN)
PACKAGE = "arn:aws:sagemaker:us-east-1:123456789012:model-package/retrain-flowers/1"
STARTED = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)


@pytest.fixture
def mlflow_client(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    monkeypatch.chdir(tmp_path)  # the store's default artifact root (./mlruns) lands there
    return MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")


class _SageMaker:
    """DescribeTrainingJob's answers for the run's jobs (moto's SageMaker keeps no metrics or times)."""

    def __init__(self, jobs: dict[str, dict[str, Any]]) -> None:
        self.jobs = jobs

    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]:  # noqa: N803 - boto3's name
        return self.jobs[TrainingJobName]


def _job(name: str, *, trial: bool, accuracy: float, status: str = "Completed") -> dict[str, Any]:
    return {
        "TrainingJobName": name,
        "TrainingJobStatus": status,
        "HyperParameters": {"learning-rate": "0.001", "optimizer": "adamw", "_tuning_objective_metric": "x"},
        "TuningJobArn": "arn:aws:sagemaker:us-east-1:123456789012:hyper-parameter-tuning-job/tune"
        if trial
        else None,
        "TrainingStartTime": STARTED,
        "TrainingEndTime": STARTED.replace(minute=10),
        "TrainingTimeInSeconds": 600,
        "BillableTimeInSeconds": 200,
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1},
        "FinalMetricDataList": [
            {"MetricName": container.METRIC_TRAIN_LOSS, "Value": 0.2, "Timestamp": STARTED},
            {"MetricName": container.METRIC_VAL_ACCURACY, "Value": accuracy, "Timestamp": STARTED},
        ],
    }


def _log_job(logs: Any, job: str, accuracies: list[float]) -> None:
    """The job's stdout as SageMaker logs it: train-loss every few steps, validation at each epoch end."""
    group = tracking.TRAINING_LOG_GROUP
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=group)
    stream = f"{job}/algo-1-1795000000"
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    lines: list[str] = []
    for epoch, accuracy in enumerate(accuracies):
        step = (epoch + 1) * 20
        lines += [
            container.format_metric(container.METRIC_TRAIN_LOSS, 1.0 / (s + 1), epoch=epoch, step=s)
            for s in range(step - 20, step, 10)
        ]
        lines.append(container.format_metric(container.METRIC_VAL_ACCURACY, accuracy, epoch=epoch, step=step))
        lines.append(container.format_metric(container.METRIC_VAL_LOSS, 1 - accuracy, epoch=epoch, step=step))
    at = int(STARTED.timestamp() * 1000)
    logs.put_log_events(
        logGroupName=group,
        logStreamName=stream,
        logEvents=[{"timestamp": at + i, "message": line} for i, line in enumerate(lines)],
    )


def _execution_ended(status: str = "SUCCEEDED") -> EventBridgeEvent:
    return EventBridgeEvent(
        {
            "source": "aws.states",
            "detail-type": "Step Functions Execution Status Change",
            "detail": {
                "name": RUN,
                "status": status,
                "executionArn": f"arn:aws:states:us-east-1:123456789012:execution:retrain-training:{RUN}",
                "input": json.dumps({"dataset": DATASET}),
                "stopDate": int(STARTED.replace(hour=11).timestamp() * 1000),
            },
        }
    )


def _finished_run(aws: Any) -> None:
    report = f"s3://{aws.artifact_bucket}/runs/{DATASET}/{RUN}/evaluation/challenger/evaluation.json"
    aws.s3.put_object(
        Bucket=aws.artifact_bucket,
        Key=report.split("/", 3)[3],
        Body=json.dumps({"top1": 0.91, "per_class": {"rose": {"top1": 0.95}, "tulip": {"top1": 0.87}}}),
    )
    runs.put_run(
        {
            "dataset": DATASET,
            "run_id": RUN,
            "status": "SUCCEEDED",
            "trigger": "upload",
            "created_at": "2026-11-26T10:00:00.000000Z",
            "manifest_uri": f"s3://{aws.artifact_bucket}/runs/{DATASET}/{RUN}/manifest.jsonl",
            "manifest_size": 1200,
            "new_images": 200,
            "label_count": 2,
            "started_from": {"kind": "champion", "uri": "s3://a/model.tar.gz", "model_package_arn": PACKAGE},
            "gate": {"decision": "accepted", "reason": "top-1 0.910 beats the champion's 0.880"},
            "challenger": {"top1": 0.91, "top3": 1.0, "report_uri": report},
            "champion": {"top1": 0.88},
            "rule_results": [{"rule": "LossNotDecreasing", "status": "NoIssuesFound"}],
            "checkpoint_evaluations": [{"step": 20, "top1": 0.7}, {"step": 40, "top1": 0.85}],
            "model_package_arn": PACKAGE.replace("/1", "/2"),
        },
        table_name=aws.runs_table,
        client=aws.dynamodb,
    )


def _track_job(
    event: EventBridgeEvent, aws: Any, config: Any, client: MlflowClient, jobs: Any
) -> dict[str, Any]:
    return tracking.on_training_job_ended(
        event,
        client=client,
        config=config,
        dynamodb=aws.dynamodb,
        sagemaker=jobs,
        logs=boto3.client("logs", region_name="us-east-1"),
    )


def _track_outcome(event: EventBridgeEvent, aws: Any, config: Any, client: MlflowClient) -> dict[str, Any]:
    return tracking.on_execution_ended(event, client=client, config=config, dynamodb=aws.dynamodb, s3=aws.s3)


def test_a_run_is_a_parent_with_a_child_per_training_job_and_its_outcome(aws, config, mlflow_client):
    # GIVEN a finished run, two trials and a final job with their logs
    _finished_run(aws)
    logs = boto3.client("logs", region_name="us-east-1")
    jobs = _SageMaker(
        {
            "tune-001": _job("tune-001", trial=True, accuracy=0.8),
            "tune-002": _job("tune-002", trial=True, accuracy=0.9, status="Stopped"),
            "final": _job("final", trial=False, accuracy=0.91),
        }
    )
    _log_job(logs, "tune-001", [0.5, 0.7, 0.8])
    _log_job(logs, "tune-002", [0.6, 0.9])
    _log_job(logs, "final", [0.6, 0.85, 0.91])
    # WHEN the jobs' end events come (one twice: EventBridge delivers at least once), then the execution's
    for job in ("tune-001", "tune-002", "tune-001", "final"):
        assert _track_job(_job_ended(job), aws, config, mlflow_client, jobs)["action"] == "tracked"
    assert _track_outcome(_execution_ended(), aws, config, mlflow_client)["action"] == "tracked"
    # THEN the data set's experiment holds one parent run, named by the run record
    experiment = mlflow_client.get_experiment_by_name(f"retrain/{DATASET}")
    assert experiment is not None
    every = mlflow_client.search_runs([experiment.experiment_id])
    record = runs.get_run(DATASET, RUN, table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None and "tracking_warnings" not in record
    assert names.RUN_TRACKING_DONE_AT in record  # what the demo waits for before it stops the stack
    parents = [r for r in every if tracking.TAG_PARENT not in r.data.tags]
    assert [p.info.run_id for p in parents] == [record["mlflow_run_id"]]
    parent = parents[0]
    # AND one child per job (tune-001's second event made none), nested under it, with its role,
    # hyperparameters and per-epoch history
    per_job = Counter(r.data.tags[tracking.TAG_JOB] for r in every if r.data.tags.get(tracking.TAG_PARENT))
    assert per_job == {"final": 1, "tune-001": 1, "tune-002": 1}
    children = {r.data.tags[tracking.TAG_JOB]: r for r in every if r.data.tags.get(tracking.TAG_PARENT)}
    assert {r.data.tags[tracking.TAG_PARENT] for r in children.values()} == {parent.info.run_id}
    assert [children[j].data.tags[tracking.TAG_ROLE] for j in ("tune-001", "final")] == ["trial", "final"]
    assert children["tune-001"].data.params == {"learning-rate": "0.001", "optimizer": "adamw"}
    assert (children["tune-001"].info.status, children["tune-002"].info.status) == ("FINISHED", "KILLED")
    history = mlflow_client.get_metric_history(
        children["tune-001"].info.run_id, container.METRIC_VAL_ACCURACY
    )
    assert [(m.step, m.value) for m in history] == [(20, 0.5), (40, 0.7), (60, 0.8)]
    # the train-loss lines are not read (epoch ends only); the job's last train-loss comes from SageMaker
    loss = mlflow_client.get_metric_history(children["tune-001"].info.run_id, container.METRIC_TRAIN_LOSS)
    assert [(m.step, m.value) for m in loss] == [(60, 0.2)]
    assert children["final"].data.metrics["billable-seconds"] == 200
    # AND the parent holds the lineage, the gate, the rules, the evaluation table and the package
    assert parent.info.status == "FINISHED"
    assert parent.data.params["started_from"] == "champion"
    assert parent.data.params["started_from_model_package"] == PACKAGE
    assert (parent.data.params["manifest_size"], parent.data.params["new_images"]) == ("1200", "200")
    assert parent.data.tags["retrain.gate.decision"] == "accepted"
    assert parent.data.tags["retrain.rule.LossNotDecreasing"] == "NoIssuesFound"
    assert parent.data.tags[tracking.TAG_PACKAGE] == PACKAGE.replace("/1", "/2")
    assert parent.data.metrics["challenger.top1"] == 0.91
    curve = mlflow_client.get_metric_history(parent.info.run_id, "checkpoint.top1")
    assert [(m.step, m.value) for m in curve] == [(20, 0.7), (40, 0.85)]
    path = mlflow_client.download_artifacts(parent.info.run_id, tracking.EVALUATION_ARTIFACT)
    with open(path) as handle:
        assert json.load(handle)["per_class"]["tulip"] == {"top1": 0.87}


def test_two_events_racing_for_the_parent_leave_one(aws, config, mlflow_client, monkeypatch):
    # GIVEN a run, and a parent another event records while this one makes its own
    _finished_run(aws)
    real_set_once = runs.set_once
    theirs: list[str] = []

    def racing_set_once(*args: Any, **kwargs: Any) -> bool:
        experiment = tracking.experiment_id(mlflow_client, DATASET)
        theirs.append(mlflow_client.create_run(experiment, run_name="theirs").info.run_id)
        assert real_set_once(
            DATASET, RUN, "mlflow_run_id", theirs[0], table_name=aws.runs_table, client=aws.dynamodb
        )
        return real_set_once(*args, **kwargs)

    monkeypatch.setattr(runs, "set_once", racing_set_once)
    # WHEN this event asks for the parent
    parent = tracking.parent_run(mlflow_client, DATASET, RUN, config=config, dynamodb=aws.dynamodb)
    # THEN it takes the recorded one, and its own run is deleted
    assert parent == theirs[0]
    experiment = mlflow_client.get_experiment_by_name(f"retrain/{DATASET}")
    assert [r.info.run_id for r in mlflow_client.search_runs([experiment.experiment_id])] == theirs


def _one_ended_trial(aws: Any) -> _SageMaker:
    """A finished run whose one trial, tune-001, logged two epochs and ended."""
    _finished_run(aws)
    _log_job(boto3.client("logs", region_name="us-east-1"), "tune-001", [0.5, 0.7])
    return _SageMaker({"tune-001": _job("tune-001", trial=True, accuracy=0.7)})


def _children_of_the_trial(mlflow_client: MlflowClient) -> list[Any]:
    """Every active MLflow run tagged with tune-001."""
    experiment = tracking.experiment_id(mlflow_client, DATASET)
    return list(
        mlflow_client.search_runs([experiment], filter_string=f"tags.`{tracking.TAG_JOB}` = 'tune-001'")
    )


def _assert_the_trials_one_child_is(mlflow_client: MlflowClient, run_id: str) -> None:
    """tune-001 has one child, `run_id`, logged and ended."""
    found = _children_of_the_trial(mlflow_client)
    assert [r.info.run_id for r in found] == [run_id]
    assert found[0].info.status == "FINISHED"


def test_two_deliveries_of_a_jobs_end_at_once_leave_one_child(aws, config, mlflow_client, monkeypatch):
    # GIVEN a trial's end event delivered twice (EventBridge delivers at least once), the second copy
    # handled entirely while the first is between looking for the job's child and making one
    jobs = _one_ended_trial(aws)
    real_create_run = mlflow_client.create_run
    copies: list[dict[str, Any]] = []
    delivered = []

    def create_run(experiment_id: str, *args: Any, **kwargs: Any) -> Any:
        if (kwargs.get("tags") or {}).get(tracking.TAG_JOB) == "tune-001" and not delivered:
            delivered.append(True)
            copies.append(_track_job(_job_ended("tune-001"), aws, config, mlflow_client, jobs))
        return real_create_run(experiment_id, *args, **kwargs)

    monkeypatch.setattr(mlflow_client, "create_run", create_run)
    # WHEN the first copy goes on
    first = _track_job(_job_ended("tune-001"), aws, config, mlflow_client, jobs)
    # THEN both name the same child, the only one the job has, logged and ended
    assert first["action"] == copies[0]["action"] == "tracked"
    assert first["mlflow_run_id"] == copies[0]["mlflow_run_id"]
    _assert_the_trials_one_child_is(mlflow_client, first["mlflow_run_id"])


def test_a_copy_that_records_the_child_another_made_keeps_it(aws, config, mlflow_client, monkeypatch):
    # GIVEN a trial's end event delivered twice, the second copy handled entirely after the first made the
    # job's child and before it records it: the second finds that child and records it first
    jobs = _one_ended_trial(aws)
    real_set_key_once = runs.set_key_once
    copies: list[dict[str, Any]] = []
    made: list[str] = []  # the child the first copy made, before the second copy runs

    def set_key_once(*args: Any, **kwargs: Any) -> bool:
        if not copies:
            copies.append({})
            made.extend(r.info.run_id for r in _children_of_the_trial(mlflow_client))
            copies[0] = _track_job(_job_ended("tune-001"), aws, config, mlflow_client, jobs)
        return real_set_key_once(*args, **kwargs)

    monkeypatch.setattr(runs, "set_key_once", set_key_once)
    # WHEN the first copy goes on and loses the record to the second
    first = _track_job(_job_ended("tune-001"), aws, config, mlflow_client, jobs)
    # THEN the child both name is the one it made (the second adopted it), and it is still there, logged
    # and ended
    assert first["action"] == copies[0]["action"] == "tracked"
    assert len(made) == 1 and first["mlflow_run_id"] == copies[0]["mlflow_run_id"] == made[0]
    _assert_the_trials_one_child_is(mlflow_client, first["mlflow_run_id"])


def test_a_create_run_sent_twice_by_the_client_leaves_one_child(aws, config, mlflow_client, monkeypatch):
    # GIVEN an MLflow client whose create-run of the job's child reaches the server twice (its first
    # answer lost to a read timeout, the POST sent again: MLflow's client retries every method)
    jobs = _one_ended_trial(aws)
    real_create_run = mlflow_client.create_run
    lost: list[str] = []

    def create_run(experiment_id: str, *args: Any, **kwargs: Any) -> Any:
        if (kwargs.get("tags") or {}).get(tracking.TAG_JOB) == "tune-001" and not lost:
            lost.append(real_create_run(experiment_id, *args, **kwargs).info.run_id)
        return real_create_run(experiment_id, *args, **kwargs)

    monkeypatch.setattr(mlflow_client, "create_run", create_run)
    # WHEN the job's end is tracked
    tracked = _track_job(_job_ended("tune-001"), aws, config, mlflow_client, jobs)
    # THEN the job has one child, the one it logged into; the lost answer's run is gone
    found = _children_of_the_trial(mlflow_client)
    assert lost and [r.info.run_id for r in found] == [tracked["mlflow_run_id"]] != lost
    assert found[0].info.status == "FINISHED"


def test_an_unreachable_tracker_is_a_warning_in_the_run_record_not_an_error(aws, config, monkeypatch):
    # GIVEN a run and an MLflow endpoint nobody serves
    _finished_run(aws)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = MlflowClient(tracking_uri=f"http://127.0.0.1:{port}")
    # WHEN the run's outcome is tracked, twelve times
    results = [
        _track_outcome(_execution_ended(), aws, config, client) for _ in range(tracking.MAX_WARNINGS + 2)
    ]
    # THEN nothing is raised; the record keeps the first warnings, naming what failed
    assert {r["action"] for r in results} == {"warned"}
    record = runs.get_run(DATASET, RUN, table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None
    assert names.RUN_TRACKING_DONE_AT in record  # done, with warnings: nobody waits for it in vain
    warnings = record["tracking_warnings"]
    assert len(warnings) == tracking.MAX_WARNINGS
    assert warnings[0].startswith("MLflow tracking of the run's outcome failed: ")


def test_the_tracking_rules_match_a_runs_ended_jobs_and_executions():
    from retrain.dev.template_model import REPO, load_template

    template = load_template(REPO / "template.yaml")
    events = template["Resources"]["TrackingFunction"]["Properties"]["Events"]
    jobs = events["TrainingJobsEnded"]["Properties"]["Pattern"]
    executions = events["ExecutionsEnded"]["Properties"]["Pattern"]
    assert jobs["detail"]["TrainingJobStatus"] == sorted(tracking.JOB_STATUS)
    assert sorted(executions["detail"]["status"]) == sorted(tracking.EXECUTION_STATUS)
    assert jobs["detail"]["Tags"] == {names.TAG_RUN_ID: [{"exists": True}]}


def test_the_parent_ends_at_the_executions_stop_even_when_part_of_the_outcome_fails(
    aws, config, mlflow_client
):
    # GIVEN a finished run whose evaluation table is gone from S3
    _finished_run(aws)
    record = runs.get_run(DATASET, RUN, table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None
    bucket, key = record["challenger"]["report_uri"].removeprefix("s3://").split("/", 1)
    aws.s3.delete_object(Bucket=bucket, Key=key)
    # WHEN the execution's end is tracked (its stopDate is epoch milliseconds, as Step Functions sends)
    event = _execution_ended()
    result = _track_outcome(event, aws, config, mlflow_client)
    # THEN the missing table is a warning, and the parent ended all the same, at the execution's stop
    assert result["action"] == "warned" and "evaluation" in result["warning"]
    record = runs.get_run(DATASET, RUN, table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None
    parent = mlflow_client.get_run(record["mlflow_run_id"])
    assert parent.info.status == "FINISHED"
    assert parent.info.end_time == event.detail["stopDate"]
    assert parent.data.tags["retrain.execution_status"] == "SUCCEEDED"


def test_a_child_left_running_by_a_failed_event_is_completed_by_the_next(aws, config, mlflow_client):
    # GIVEN a trial whose first end event made its child run and failed before logging into it
    _finished_run(aws)
    logs = boto3.client("logs", region_name="us-east-1")
    _log_job(logs, "tune-001", [0.5, 0.7])
    jobs = _SageMaker({"tune-001": _job("tune-001", trial=True, accuracy=0.7)})
    parent = tracking.parent_run(mlflow_client, DATASET, RUN, config=config, dynamodb=aws.dynamodb)
    experiment = tracking.experiment_id(mlflow_client, DATASET)
    left = mlflow_client.create_run(
        experiment, tags={tracking.TAG_PARENT: parent, tracking.TAG_JOB: "tune-001"}, run_name="tune-001"
    ).info.run_id
    # WHEN the event comes again (EventBridge delivers at least once)
    result = _track_job(_job_ended("tune-001"), aws, config, mlflow_client, jobs)
    # THEN that child is logged and ended, and no second one is made
    assert result["mlflow_run_id"] == left
    child = mlflow_client.get_run(left)
    assert child.info.status == "FINISHED" and child.data.params["optimizer"] == "adamw"
    found = mlflow_client.search_runs([experiment], filter_string=f"tags.`{tracking.TAG_JOB}` = 'tune-001'")
    assert [r.info.run_id for r in found] == [left]


def test_an_execution_that_made_no_run_is_ignored(aws, config, mlflow_client):
    # GIVEN no run record (a manual start whose input Prepare refused ends FAILED without one)
    # WHEN its end is tracked
    result = _track_outcome(_execution_ended("FAILED"), aws, config, mlflow_client)
    # THEN nothing is made or recorded, and nothing fails
    assert result["action"] == "ignored"
    assert mlflow_client.get_experiment_by_name(f"retrain/{DATASET}") is None


SUSPECTS = {
    "method": "confident learning",
    "images_checked": 180,
    "suspect_count": 2,
    "suspects": [
        {
            "key": "rose/a.jpg",
            "given": "rose",
            "suggested": "tulip",
            "confidence": 0.97,
            "given_probability": 0.01,
        },
        {
            "key": "tulip/b.jpg",
            "given": "tulip",
            "suggested": "rose",
            "confidence": 0.9,
            "given_probability": 0.05,
        },
    ],
    "per_label": {"rose": {"images": 100, "suspects": 1, "rate": 0.01}},
}


def _checked_arrivals(aws: Any, *, suspects: bool = True) -> None:
    """The finished run as TrainWhen=drift leaves it when the champion does as well on the new uploads:
    NOT_NEEDED, with the check's section on the record and its suspects.json (unless `suspects` is off)."""
    _finished_run(aws)
    prefix = f"runs/{DATASET}/{RUN}/evaluation/arrivals/"
    if suspects:
        aws.s3.put_object(Bucket=aws.artifact_bucket, Key=prefix + "suspects.json", Body=json.dumps(SUSPECTS))
    reason = "no retraining needed: the champion's top-1 on 180 new uploads is 0.8900 (95% CI 0.83-0.93)"
    section = {
        "job": f"{DATASET}-{RUN}-arrivals", "status": "Completed", "train_when": "drift",
        "suspect_labels": "hold", "decision": "not_needed", "reason": reason, "new_images": 200,
        "checked": 180, "sampled": True, "top1": 0.89, "top1_interval": [0.83, 0.93], "top3": 0.98,
        "validation_top1": 0.9, "validation_interval": [0.86, 0.93], "validation_images": 300,
        "drift": 0.01, "labels_the_model_lacks": [], "suspect_count": 2, "suspect_rate": 2 / 180,
        "per_label": {"rose": {"images": 100, "top1": 0.9, "suspects": 1}}, "held": 2,
        "report_uri": f"s3://{aws.artifact_bucket}/{prefix}arrivals.json",
        "suspects_uri": f"s3://{aws.artifact_bucket}/{prefix}suspects.json",
    }  # fmt: skip
    runs.update_run(
        DATASET,
        RUN,
        {"status": "NOT_NEEDED", "arrivals": section, "gate": {"decision": "not_needed", "reason": reason}},
        table_name=aws.runs_table,
        client=aws.dynamodb,
    )


def test_the_champions_check_on_the_new_uploads_is_on_the_parent(aws, config, mlflow_client):
    # GIVEN a run that ended NOT_NEEDED (its execution SUCCEEDED) after the champion's check
    _checked_arrivals(aws)
    # WHEN its end is tracked
    assert _track_outcome(_execution_ended(), aws, config, mlflow_client)["action"] == "tracked"
    record = runs.get_run(DATASET, RUN, table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None and "tracking_warnings" not in record
    parent = mlflow_client.get_run(record["mlflow_run_id"])
    # THEN the parent has the check's figures as metrics, TrainWhen's decision and reason as tags
    arrivals = {k: v for k, v in parent.data.metrics.items() if k.startswith("arrivals.")}
    assert arrivals == {
        "arrivals.top1": 0.89,
        "arrivals.top3": 0.98,
        "arrivals.validation_top1": 0.9,
        "arrivals.drift": 0.01,
        "arrivals.suspect_count": 2,
        "arrivals.suspect_rate": pytest.approx(2 / 180),
        "arrivals.held": 2,
    }
    assert parent.data.tags["retrain.arrivals.decision"] == "not_needed"
    assert parent.data.tags["retrain.arrivals.reason"].startswith("no retraining needed: the champion's")
    assert parent.data.tags["retrain.status"] == "NOT_NEEDED" and parent.info.status == "FINISHED"
    # AND the suspected label errors are an artifact, as suspects.json has them
    path = mlflow_client.download_artifacts(parent.info.run_id, tracking.SUSPECTS_ARTIFACT)
    with open(path) as handle:
        assert json.load(handle) == SUSPECTS


def test_a_missing_suspects_list_is_a_warning_and_the_rest_is_logged(aws, config, mlflow_client):
    # GIVEN a checked run whose suspects.json is gone
    _checked_arrivals(aws, suspects=False)
    # WHEN its end is tracked
    result = _track_outcome(_execution_ended(), aws, config, mlflow_client)
    # THEN the missing list is the run's warning; the figures and the evaluation table are logged all the
    # same, and the parent ended
    assert result["action"] == "warned" and "suspected label errors" in result["warning"]
    record = runs.get_run(DATASET, RUN, table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None and record["tracking_warnings"] == [result["warning"]]
    parent = mlflow_client.get_run(record["mlflow_run_id"])
    assert parent.info.status == "FINISHED" and parent.data.metrics["arrivals.top1"] == 0.89
    artifacts = {a.path for a in mlflow_client.list_artifacts(parent.info.run_id, "evaluation")}
    assert artifacts == {tracking.EVALUATION_ARTIFACT}


def test_a_run_without_the_check_has_no_arrivals_on_its_parent():
    # GIVEN a run of a data set without a champion (no `arrivals` on its record)
    record = {"status": "SUCCEEDED", "challenger": {"top1": 0.9}}
    # THEN no arrivals metric nor tag is made (empty tags are left out by log_batch)
    assert not [m for m in tracking.outcome_metrics(record, 0) if m.key.startswith("arrivals.")]
    tags = tracking.outcome_tags(record)
    assert not any(tags[k] for k in ("retrain.arrivals.decision", "retrain.arrivals.reason"))
