from __future__ import annotations

import time

import boto3

from retrain.report.job_logs import TRAINING_LOG_GROUP, job_curves, parse_metric_lines
from retrain_contract import container as contract


def test_metric_lines_are_parsed_with_the_contract_regexes():
    # GIVEN container output: metric lines among other lines, two metrics that share a prefix
    lines = [
        "Downloading data",
        contract.format_metric(contract.METRIC_VAL_ACCURACY, 0.5, epoch=0, step=10),
        contract.format_metric(contract.METRIC_VAL_TOP3, 0.9, epoch=0, step=10),
        "epoch=0 step=10 not-a-metric: 3",
    ]
    # WHEN parsed
    curves = parse_metric_lines(lines)
    # THEN each metric gets its own value and nothing else is read
    assert [(p.step, p.value) for p in curves[contract.METRIC_VAL_ACCURACY]] == [(10, 0.5)]
    assert [(p.step, p.value) for p in curves[contract.METRIC_VAL_TOP3]] == [(10, 0.9)]
    assert set(curves) == {contract.METRIC_VAL_ACCURACY, contract.METRIC_VAL_TOP3}


def test_a_step_rerun_after_a_resume_keeps_its_last_value():
    # GIVEN a job that logged step 20, was interrupted, resumed from step 10 and logged step 20 again
    lines = [contract.format_metric(contract.METRIC_TRAIN_LOSS, v, epoch=1, step=s) for s, v in
             ((10, 1.0), (20, 0.9), (20, 0.8), (30, 0.7))]  # fmt: skip
    # THEN the curve has one point per step, the rerun's value for step 20
    points = parse_metric_lines(lines)[contract.METRIC_TRAIN_LOSS]
    assert [(p.step, p.value) for p in points] == [(10, 1.0), (20, 0.8), (30, 0.7)]


def test_curves_are_read_from_every_stream_of_the_job(aws):
    # GIVEN a job whose logs span two streams (a spot restart) and another job's stream
    logs = boto3.client("logs")
    logs.create_log_group(logGroupName=TRAINING_LOG_GROUP)
    now = int(time.time() * 1000)
    for stream, step in (("job-a/algo-1-100", 10), ("job-a/algo-1-200", 20), ("job-ab/algo-1-100", 99)):
        logs.create_log_stream(logGroupName=TRAINING_LOG_GROUP, logStreamName=stream)
        line = contract.format_metric(contract.METRIC_TRAIN_LOSS, 1.0 / step, epoch=0, step=step)
        logs.put_log_events(
            logGroupName=TRAINING_LOG_GROUP,
            logStreamName=stream,
            logEvents=[{"timestamp": now, "message": line}],
        )
    # WHEN job-a's curves are read
    curves = job_curves(logs, "job-a")
    # THEN both of its streams are read and the other job's is not
    assert [p.step for p in curves.metrics[contract.METRIC_TRAIN_LOSS]] == [10, 20]


def test_a_job_without_logs_has_no_curves(aws):
    # GIVEN no log group at all (the job has not started)
    # THEN its curves are empty rather than an error
    assert job_curves(boto3.client("logs"), "job-x").metrics == {}
