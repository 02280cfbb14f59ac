"""The embedded stack's SQS: a delete cannot drop a message sent while it runs."""

from __future__ import annotations

import threading

import boto3
from moto import mock_aws
from moto.sqs.models import sqs_backends

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.events import sqs_locks


def test_a_delete_waits_for_a_send_holding_the_queues_lock() -> None:
    with mock_aws(), sqs_locks.installed():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="processed")
        handle = sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
        queue = sqs_backends[ACCOUNT_ID][REGION].queues["q"]
        # GIVEN a send in the middle of appending its message (it holds the queue's lock)
        deleted = threading.Event()
        with queue._messages_lock:
            # WHEN the processed message is deleted meanwhile
            deleter = threading.Thread(target=lambda: (queue.delete_message(handle), deleted.set()))
            deleter.start()
            # THEN the delete waits for the send (it rebuilds the list the send appends to)
            assert not deleted.wait(0.3)
            sqs_backends[ACCOUNT_ID][REGION].send_message("q", "sent meanwhile")  # appends, re-entering
        deleter.join(5)
        # and afterwards the processed message is gone, the one sent meanwhile kept
        assert deleted.is_set()
        assert [m.body for m in queue._messages] == ["sent meanwhile"]
