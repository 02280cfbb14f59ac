"""The embedded stack's cheaper SQS checks give what moto's own would: retention, approximate counts."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.sqs.models import Queue, sqs_backends

from retrain.embedded.events import sqs_speed

RETENTION = 60


@contextlib.contextmanager
def _queue(messages: int) -> Iterator[tuple[Any, str]]:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": str(RETENTION)})[
            "QueueUrl"
        ]
        for number in range(messages):
            sqs.send_message(QueueUrl=url, MessageBody=str(number))
        yield sqs, url


def _age(message_number: int, seconds: float) -> None:
    queue = sqs_backends["123456789012"]["us-east-1"].queues["q"]
    message = queue._messages[message_number]
    message.sent_timestamp = int(message.sent_timestamp) - int(seconds * 1000)


def _received(sqs: Any, url: str) -> list[str]:
    return [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])]


@pytest.mark.parametrize("patched", [False, True], ids=["moto", "embedded"])
def test_a_message_past_its_queues_retention_period_is_not_delivered(patched: bool) -> None:
    with _queue(3) as (sqs, url), sqs_speed.installed() if patched else contextlib.nullcontext():
        _age(0, RETENTION + 5)
        _age(1, RETENTION - 5)
        # moto stops at the first expired message it meets, as it did before the patch.
        assert _received(sqs, url) == []
    with _queue(3) as (sqs, url), sqs_speed.installed() if patched else contextlib.nullcontext():
        _age(1, RETENTION - 5)
        assert _received(sqs, url) == ["0", "1", "2"]


def test_receiving_does_not_build_the_queues_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    attributes = Queue.attributes

    def counted(self: Queue) -> Any:
        built.append(1)
        return attributes.fget(self)  # type: ignore[attr-defined]

    with _queue(20) as (sqs, url):
        monkeypatch.setattr(Queue, "attributes", property(counted))
        _received(sqs, url)
        unpatched = len(built)
        built.clear()
        with sqs_speed.installed():
            assert len(_received(sqs, url)) == 10
        assert unpatched >= 10  # moto builds them for each message (so the check above means something)
        assert built == []


def _counts(sqs: Any, url: str) -> dict[str, str]:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    names.append("ApproximateNumberOfMessagesDelayed")
    return dict(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"])


def test_the_approximate_counts_are_mottos_own() -> None:
    with _queue(5) as (sqs, url):
        sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60)
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=60)
        expected = _counts(sqs, url)
        with sqs_speed.installed():
            assert _counts(sqs, url) == expected
    assert expected == {
        "ApproximateNumberOfMessages": "3",
        "ApproximateNumberOfMessagesNotVisible": "2",
        "ApproximateNumberOfMessagesDelayed": "1",
    }


def test_the_patches_are_removed_when_the_context_ends() -> None:
    from moto.sqs.models import SQSBackend

    original = SQSBackend.is_message_valid_based_on_retention_period
    count = Queue.__dict__["approximate_number_of_messages"]
    with sqs_speed.installed():
        assert SQSBackend.is_message_valid_based_on_retention_period is not original
        assert Queue.__dict__["approximate_number_of_messages"] is not count
    assert SQSBackend.is_message_valid_based_on_retention_period is original
    assert Queue.__dict__["approximate_number_of_messages"] is count
