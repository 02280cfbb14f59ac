"""SQS event-source mappings and schedules, run as Lambda runs them."""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from retrain.embedded.events.scheduler import (
    ScheduledRule,
    ScheduleError,
    Scheduler,
    cron_matches,
    schedule_period_seconds,
)
from retrain.embedded.events.sqs_poller import SqsMapping, SqsPoller


@pytest.fixture
def sqs() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


def _queue(sqs: Any, name: str, **attributes: str) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def _send(sqs: Any, url: str, count: int) -> None:
    for index in range(count):
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"n": index}))


def _count(sqs: Any, url: str) -> int:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def test_messages_arrive_in_batches_of_batch_size_and_are_deleted(sqs: Any) -> None:
    url, arn = _queue(sqs, "in")
    _send(sqs, url, 5)
    batches: list[list[int]] = []
    poller = SqsPoller(
        SqsMapping("fn", url, arn, batch_size=3, batching_window_seconds=1),
        sqs_client=sqs,
        invoke=lambda _name, event: batches.append([json.loads(r["body"])["n"] for r in event["Records"]]),
    )

    poller.poll_once()
    poller.poll_once()

    assert sorted(len(batch) for batch in batches) == [2, 3]
    assert sorted(n for batch in batches for n in batch) == [0, 1, 2, 3, 4]
    assert _count(sqs, url) == 0


def test_batches_run_at_once_up_to_the_pollers_concurrency(sqs: Any) -> None:
    # GIVEN a queue with four batches of work and a function that returns only once two batches are in it
    url, arn = _queue(sqs, "busy")
    _send(sqs, url, 4)
    together = threading.Barrier(2, timeout=5)
    overlapped: list[bool] = []

    def invoke(_name: str, _event: dict[str, Any]) -> None:
        try:
            together.wait()
            overlapped.append(True)
        except threading.BrokenBarrierError:
            overlapped.append(False)

    poller = SqsPoller(SqsMapping("fn", url, arn, batch_size=1), sqs_client=sqs, invoke=invoke, concurrency=2)
    # WHEN it polls with two batches at once
    poller.start()
    deadline = time.monotonic() + 20
    while len(overlapped) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    poller.stop()
    # THEN every batch ran beside another (one poller at a time breaks the barrier) and all were deleted
    assert overlapped == [True] * 4
    assert _count(sqs, url) == 0


def test_a_processed_batch_is_deleted_ten_messages_to_a_request(sqs: Any) -> None:
    url, arn = _queue(sqs, "many")
    _send(sqs, url, 25)
    calls: list[int] = []
    original = sqs.delete_message_batch

    def counted(**kwargs: Any) -> Any:
        calls.append(len(kwargs["Entries"]))
        return original(**kwargs)

    sqs.delete_message_batch = counted
    mapping = SqsMapping("fn", url, arn, batch_size=25, batching_window_seconds=1)
    poller = SqsPoller(mapping, sqs_client=sqs, invoke=lambda *_: None)
    assert poller.poll_once() == 25
    assert calls == [10, 10, 5] and _count(sqs, url) == 0


def test_records_have_the_lambda_sqs_shape(sqs: Any) -> None:
    url, arn = _queue(sqs, "shape")
    _send(sqs, url, 1)
    events: list[dict[str, Any]] = []
    SqsPoller(SqsMapping("fn", url, arn), sqs_client=sqs, invoke=lambda _n, e: events.append(e)).poll_once()

    record = events[0]["Records"][0]
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == arn
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert {"messageId", "receiptHandle", "body", "md5OfBody", "awsRegion"} <= set(record)


def test_partial_batch_failure_keeps_only_the_failed_messages(sqs: Any) -> None:
    url, arn = _queue(sqs, "partial")
    _send(sqs, url, 3)

    def invoke(_name: str, event: dict[str, Any]) -> dict[str, Any]:
        bad = [r["messageId"] for r in event["Records"] if json.loads(r["body"])["n"] == 1]
        return {"batchItemFailures": [{"itemIdentifier": i} for i in bad]}

    mapping = SqsMapping("fn", url, arn, batch_size=10, report_batch_item_failures=True)
    SqsPoller(mapping, sqs_client=sqs, invoke=invoke, time_scale=0).poll_once()

    left = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"])["n"] for m in left] == [1]


def test_failing_messages_move_to_the_dead_letter_queue_after_max_receive_count(sqs: Any) -> None:
    dlq_url, dlq_arn = _queue(sqs, "dlq")
    url, arn = _queue(
        sqs, "main", RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2})
    )
    _send(sqs, url, 1)
    calls: list[int] = []

    def invoke(_name: str, event: dict[str, Any]) -> None:
        calls.append(len(event["Records"]))
        raise RuntimeError("handler failed")

    poller = SqsPoller(SqsMapping("fn", url, arn), sqs_client=sqs, invoke=invoke, time_scale=0)
    for _ in range(3):
        poller.poll_once()

    assert calls == [1, 1]
    assert _count(sqs, url) == 0
    assert _count(sqs, dlq_url) == 1


def test_rate_and_cron_expressions() -> None:
    assert schedule_period_seconds("rate(5 minutes)") == 300
    assert schedule_period_seconds("rate(1 hour)") == 3600
    assert schedule_period_seconds("cron(0/15 * * * ? *)") is None
    assert cron_matches("cron(0/15 * * * ? *)", datetime.datetime(2026, 1, 1, 3, 30, tzinfo=datetime.UTC))
    assert not cron_matches("cron(0/15 * * * ? *)", datetime.datetime(2026, 1, 1, 3, 31, tzinfo=datetime.UTC))
    assert cron_matches("cron(5 2,4 * * ? *)", datetime.datetime(2026, 1, 1, 4, 5, tzinfo=datetime.UTC))


def test_unsupported_schedule_is_refused_with_the_reason() -> None:
    with pytest.raises(ScheduleError, match="minutes and hours only"):
        schedule_period_seconds("cron(0 12 1 * ? *)")


def test_a_scheduled_rule_invokes_its_lambda_target_with_a_scheduled_event() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    rule = ScheduledRule(
        "sweep",
        "arn:aws:events:us-east-1:123456789012:rule/sweep",
        "rate(1 minute)",
        ({"Id": "t", "Arn": "arn:aws:lambda:us-east-1:123456789012:function:dispatch"},),
    )
    scheduler = Scheduler([rule], invoke=lambda name, event: calls.append((name, event)))

    scheduler.fire(rule)

    name, event = calls[0]
    assert name.endswith(":function:dispatch")
    assert event["detail-type"] == "Scheduled Event"
    assert event["resources"] == [rule.arn]


def test_a_rule_still_running_is_not_fired_again() -> None:
    import threading

    release = threading.Event()
    calls: list[str] = []

    def slow(name: str, event: dict[str, Any]) -> None:
        calls.append(name)
        release.wait(5)

    rule = ScheduledRule(
        "r",
        "arn:aws:events:us-east-1:123456789012:rule/r",
        "rate(1 minute)",
        ({"Id": "t", "Arn": "arn:aws:lambda:us-east-1:123456789012:function:f"},),
    )
    scheduler = Scheduler([rule], invoke=slow)

    scheduler._fire_async(rule)
    while not calls:
        time.sleep(0.01)

    scheduler._fire_async(rule)
    release.set()
    time.sleep(0.2)

    assert calls == ["arn:aws:lambda:us-east-1:123456789012:function:f"]
