from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from controller import datasets, dispatch, ledger, runs
from controller.config import DispatchPolicy
from tests.unit.functions.support import function_environment, object_created, sqs_event

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
POLICY = DispatchPolicy(min_new_images=3, quiet_period_seconds=60, max_wait_seconds=600)


def _stats(count: int, oldest: datetime, newest: datetime) -> ledger.PendingStats:
    return ledger.PendingStats(count, oldest.isoformat(), newest.isoformat())


@pytest.mark.parametrize(
    ("count", "oldest", "newest", "now", "due"),
    [
        (0, None, None, T0, False),  # nothing pending
        (3, T0, T0, T0 + timedelta(seconds=30), False),  # enough, but uploads did not pause
        (3, T0, T0, T0 + timedelta(seconds=60), True),  # enough and quiet
        (2, T0, T0, T0 + timedelta(seconds=300), False),  # quiet but too few
        (1, T0, T0 + timedelta(seconds=590), T0 + timedelta(seconds=600), True),  # the oldest waited MaxWait
    ],
)
def test_due_reason_applies_min_images_quiet_period_and_max_wait(count, oldest, newest, now, due):
    stats = ledger.PendingStats(0, None, None) if count == 0 else _stats(count, oldest, newest)
    assert (dispatch.due_reason(stats, POLICY, now) is not None) is due


def _upload(aws, config, events_dir, key, *, time="2026-01-01T10:00:00Z", sequencer="0A"):
    from controller import ingest

    recorded = dispatch.parse_time(time)
    ingest.ingest(
        sqs_event([object_created(events_dir, key, time=time, sequencer=sequencer)]),
        config=config,
        dynamodb=aws.dynamodb,
        clock=lambda: recorded,  # the ledger's time is when ingest recorded the upload
    )


def test_the_oldest_and_newest_pending_uploads_are_read_from_every_index_partition(aws, config, events_dir):
    # GIVEN two uploads 12 seconds apart whose keys lie in different partitions of the pending index (as
    # many as the data set has: its first upload fixed them)
    oldest = "data/flowers/daisy/a.jpg"
    _upload(aws, config, events_dir, oldest, time="2026-01-01T10:00:05Z")
    parts = datasets.partitions("flowers", table_name=aws.datasets_table, client=aws.dynamodb)
    assert parts.index_shards > 1
    candidates = (f"data/flowers/tulip/{i}.jpg" for i in range(1000))
    newest = next(key for key in candidates if parts.index_of(key) != parts.index_of(oldest))
    _upload(aws, config, events_dir, newest, time="2026-01-01T10:00:17Z", sequencer="0B")
    # WHEN the dispatcher reads what waits
    stats = ledger.pending_stats(parts, "", limit=100, table_name=aws.ledger_table, client=aws.dynamodb)
    # THEN its quiet period and maximum wait start from those two, to the microsecond
    assert stats == ledger.PendingStats(2, "2026-01-01T10:00:05.000000Z", "2026-01-01T10:00:17.000000Z")


def test_a_dispatch_that_stopped_before_start_execution_is_resumed_with_the_same_name(
    aws, config, events_dir
):
    # GIVEN a dispatcher took the lock and wrote the run record, then died before StartExecution
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg")
    run_id = datasets.acquire("flowers", None, "t", table_name=aws.datasets_table, client=aws.dynamodb)
    assert run_id == "flowers-00001"
    runs.put_run(
        {"dataset": "flowers", "run_id": run_id, "status": "STARTING", "trigger": "schedule"},
        table_name=aws.runs_table,
        client=aws.dynamodb,
    )
    # WHEN the next dispatch runs, twice
    first = dispatch.consider(
        "flowers", now=T0 + timedelta(hours=1), config=config, dynamodb=aws.dynamodb, sfn=aws.sfn
    )
    second = dispatch.consider(
        "flowers", now=T0 + timedelta(hours=1), config=config, dynamodb=aws.dynamodb, sfn=aws.sfn
    )
    # THEN the first starts the execution under the run's name, the second sees the run busy
    assert (first.action, second.action) == ("resumed", "busy")
    executions = aws.sfn.list_executions(stateMachineArn=aws.state_machine_arn)["executions"]
    assert [e["name"] for e in executions] == ["flowers-00001"]


def test_no_automatic_run_starts_during_the_backoff_after_a_failed_run(aws, config, events_dir):
    # GIVEN pending uploads and a failed run that set a back-off until 11:00
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg")
    aws.dynamodb.update_item(
        TableName=aws.datasets_table,
        Key=runs.serialize({"dataset": "flowers"}),
        UpdateExpression="SET not_before = :t",
        ExpressionAttributeValues=runs.serialize({":t": "2026-01-01T11:00:00Z"}),
    )
    # WHEN the dispatcher runs before and after it
    before = dispatch.consider(
        "flowers", now=T0 + timedelta(minutes=30), config=config, dynamodb=aws.dynamodb, sfn=aws.sfn
    )
    after = dispatch.consider(
        "flowers", now=T0 + timedelta(minutes=61), config=config, dynamodb=aws.dynamodb, sfn=aws.sfn
    )
    # THEN only the later one starts a run
    assert (before.action, after.action) == ("not-due", "started")


def test_a_run_not_prepared_yet_is_stuck_once_its_lock_is_older_than_stuck_run_seconds(aws, config):
    # GIVEN a lock taken at 10:00 by a run that has no deadline yet (Prepare has not run)
    datasets.acquire(
        "flowers", None, "2026-01-01T10:00:00Z", table_name=aws.datasets_table, client=aws.dynamodb
    )
    margin = timedelta(seconds=config.stuck_run_seconds)
    # THEN it is stuck a minute after StuckRunSeconds and not a minute before
    early = dispatch.stuck_runs(now=T0 + margin - timedelta(minutes=1), config=config, dynamodb=aws.dynamodb)
    late = dispatch.stuck_runs(now=T0 + margin + timedelta(minutes=1), config=config, dynamodb=aws.dynamodb)
    assert (early, late) == ([], [("flowers", "flowers-00001")])


# 8 spot trials, 2 at a time, each allowed 4 h with its waits for capacity, then a final spot job.
LONG_RUN = {
    "max_jobs": 8,
    "parallel_jobs": 2,
    "spot": True,
    "max_runtime_seconds": 3 * 3600,
    "max_wait_seconds": 4 * 3600,
    "final_training": True,
    "data_source": "s3",
}


def _prepare_at_t0(aws, config, events_dir, overrides):
    from controller import prepare

    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg")
    _upload(aws, config, events_dir, "data/flowers/tulip/b.jpg", sequencer="0B")
    event = {
        "input": {"dataset": "flowers", "overrides": overrides},
        "execution_name": "flowers-00001",
        "execution_arn": "arn:aws:states:us-east-1:123456789012:execution:m:flowers-00001",
    }
    return prepare.prepare(event, config=config, dynamodb=aws.dynamodb, s3=aws.s3, now=T0)["run"]


def test_a_runs_time_limits_are_its_trial_rounds_and_final_job_at_their_longest_wait(aws, config, events_dir):
    from controller import deadline

    # GIVEN the run of 8 spot trials, 2 at a time, 4 h MaxWait each, and a final job
    run = _prepare_at_t0(aws, config, events_dir, LONG_RUN)
    # THEN it may take the freezing job's hour, 4 rounds of trials and the final job, 4 h each
    freeze = deadline.FREEZE_SECONDS
    assert deadline.longest_seconds(run) == freeze + (4 + 1) * 4 * 3600
    # AND on demand the runtime limit counts instead, and fixed hyperparameters skip the tuning
    on_demand = {**run, "spot": False}
    fixed = {**run, "fixed_hyperparameters": True}
    assert deadline.longest_seconds(on_demand) == freeze + 5 * 3 * 3600
    assert deadline.longest_seconds(fixed) == freeze + 4 * 3600


def test_a_healthy_long_run_is_not_stuck_before_its_deadline(aws, config, events_dir):
    # GIVEN the run of 8 spot trials, 2 at a time, 4 h MaxWait each, and a final job, prepared at 10:00
    _prepare_at_t0(aws, config, events_dir, LONG_RUN)
    limits = timedelta(hours=21) + timedelta(seconds=config.stuck_run_seconds)  # the freezing job's hour too
    # WHEN the stuck check looks 13 h later (past the old fixed 12 h), just before and just after its limits
    seen = [
        dispatch.stuck_runs(now=T0 + after, config=config, dynamodb=aws.dynamodb)
        for after in (timedelta(hours=13), limits - timedelta(minutes=1), limits + timedelta(minutes=1))
    ]
    # THEN it is stuck only once it outlived its limits by StuckRunSeconds
    assert seen == [[], [], [("flowers", "flowers-00001")]]
    record = runs.get_run("flowers", "flowers-00001", table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None and dispatch.parse_time(record["deadline"]) == T0 + limits


def test_the_scheduled_handler_reads_its_configuration_from_the_environment(aws, monkeypatch, events_dir):
    # GIVEN the environment the template gives the dispatch function, and due uploads
    from controller import config as config_module
    from controller import names

    env = {
        **function_environment(aws, "DispatchFunction"),
        names.ENV_MIN_NEW_IMAGES: "1",
        names.ENV_QUIET_PERIOD_SECONDS: "0",
        names.ENV_MAX_WAIT_SECONDS: "3600",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config_module.get_config.cache_clear()
    try:
        _upload(
            aws,
            config_module.get_config(),
            events_dir,
            "data/flowers/daisy/a.jpg",
            time="2020-01-01T00:00:00Z",
        )
        # WHEN the schedule invokes the handler
        result = dispatch.handler(json.loads((events_dir / "scheduled_event.json").read_text()), _Context())
    finally:
        config_module.get_config.cache_clear()
    # THEN it started the run
    assert [o["action"] for o in result["outcomes"]] == ["started"]


class _Context:
    function_name = "DispatchFunction"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:DispatchFunction"
    aws_request_id = "req-1"
