"""Lambda's SQS event-source mappings, which moto does not run the way Lambda does.

moto invokes an SQS-mapped function inline, one message at a time, at SendMessage. Lambda instead polls:
batches of up to BatchSize gathered for up to MaximumBatchingWindowInSeconds, several batches at once (five
to start with, at most the mapping's ScalingConfig MaximumConcurrency), partial batch failures
(``batchItemFailures`` when ReportBatchItemFailures is on), failed messages back to the queue after their
visibility timeout and to the dead-letter queue after the redrive policy's maxReceiveCount (moto's SQS
does the last move at receive time). :class:`SqsPoller` does that; ``time_scale`` shrinks batching
windows and visibility timeouts so a demo does not wait minutes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from retrain.embedded.account import REGION

LOG = logging.getLogger(__name__)
Invoker = Callable[[str, dict[str, Any]], Any]


@dataclass(frozen=True)
class SqsMapping:
    """An AWS::Lambda::EventSourceMapping (or SAM SQS event) from a queue to a function."""

    function: str
    queue_url: str
    queue_arn: str
    batch_size: int = 10
    batching_window_seconds: float = 0.0
    report_batch_item_failures: bool = False
    enabled: bool = True
    maximum_concurrency: int | None = None  # ScalingConfig.MaximumConcurrency (2-1,000), None when unset


# Lambda's SQS pollers start with five concurrent batches and scale out from there (the Lambda developer
# guide, "Scaling and processing" of SQS event sources): the batches one mapping runs at once here.
INITIAL_CONCURRENT_BATCHES = 5
DELETE_BATCH = 10  # DeleteMessageBatch takes at most 10 entries


def sqs_record(message: dict[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """One Records[] entry of the event Lambda builds from an SQS message."""
    attributes = dict(message.get("Attributes", {}))
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": attributes,
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": value.get("BinaryValue"),
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": value["DataType"],
            }
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def failed_message_ids(result: Any, batch_ids: list[str]) -> set[str] | None:
    """The message ids a ReportBatchItemFailures response names; None means the whole batch failed.

    As on Lambda, a malformed response or an id outside the batch fails the whole batch."""
    if result is None or (isinstance(result, dict) and not result.get("batchItemFailures")):
        return set()
    if not isinstance(result, dict) or not isinstance(result["batchItemFailures"], list):
        return None
    ids: set[str] = set()
    for item in result["batchItemFailures"]:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not identifier or identifier not in batch_ids:
            return None
        ids.add(str(identifier))
    return ids


class SqsPoller:
    """Polls one queue for one function as Lambda's SQS event source does."""

    def __init__(
        self,
        mapping: SqsMapping,
        *,
        sqs_client: Any,
        invoke: Invoker,
        region: str = REGION,
        time_scale: float = 1.0,
        control_client: Any = None,
        concurrency: int = 1,
    ) -> None:
        self.mapping = mapping
        self._sqs = sqs_client
        # Lambda reads and deletes with the function's role (sqs_client). Making a failed batch visible
        # again sooner is this emulation's shortcut, not a call Lambda makes: the operator's client does it.
        self._control = control_client if control_client is not None else sqs_client
        self._invoke = invoke
        self._region = region
        self._scale = time_scale
        self._stop = threading.Event()
        # One thread per batch in flight: each receives, invokes and deletes on its own, as Lambda's do.
        self._threads = [
            threading.Thread(target=self._loop, daemon=True, name=f"sqs-{mapping.function}-{n}")
            for n in range(max(1, concurrency))
        ]
        visibility = sqs_client.get_queue_attributes(
            QueueUrl=mapping.queue_url, AttributeNames=["VisibilityTimeout"]
        )
        self._visibility = int(visibility["Attributes"].get("VisibilityTimeout", "30"))

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _receive(self) -> list[dict[str, Any]]:
        batch: list[dict[str, Any]] = []
        window_end = time.monotonic() + self.mapping.batching_window_seconds * self._scale
        while not self._stop.is_set() and len(batch) < self.mapping.batch_size:
            messages = self._sqs.receive_message(
                QueueUrl=self.mapping.queue_url,
                MaxNumberOfMessages=min(10, self.mapping.batch_size - len(batch)),
                WaitTimeSeconds=0 if batch else 1,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            batch += messages
            if not batch or time.monotonic() >= window_end:
                break
            if not messages:
                time.sleep(0.05)
        return batch

    def poll_once(self) -> int:
        """Receive one batch and run it; how many messages it held."""
        batch = self._receive()
        if not batch:
            return 0
        event = {"Records": [sqs_record(m, self.mapping.queue_arn, self._region) for m in batch]}
        ids = [m["MessageId"] for m in batch]
        failed: set[str] | None
        try:
            result = self._invoke(self.mapping.function, event)
            failed = failed_message_ids(result, ids) if self.mapping.report_batch_item_failures else set()
        except Exception as exc:
            LOG.warning(
                "batch of %d from %s failed in %s: %s",
                len(batch),
                self.mapping.queue_url,
                self.mapping.function,
                exc,
            )
            failed = None
        done = []
        for message in batch:
            if failed is None or message["MessageId"] in failed:
                self._control.change_message_visibility(
                    QueueUrl=self.mapping.queue_url,
                    ReceiptHandle=message["ReceiptHandle"],
                    VisibilityTimeout=max(0, round(self._visibility * self._scale)),
                )
            else:
                done.append(message)
        self._delete(done)
        return len(batch)

    def _delete(self, messages: list[dict[str, Any]]) -> None:
        """The processed messages, ten to a DeleteMessageBatch (the same sqs:DeleteMessage permission); one
        that fails to delete comes back after its visibility timeout, as on Lambda."""
        for start in range(0, len(messages), DELETE_BATCH):
            chunk = messages[start : start + DELETE_BATCH]
            response = self._sqs.delete_message_batch(
                QueueUrl=self.mapping.queue_url,
                Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(chunk)],
            )
            for failure in response.get("Failed", []):
                LOG.warning("a processed message of %s stays: %s", self.mapping.queue_url, failure)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:
                LOG.exception("SQS poller for %s", self.mapping.function)
                self._stop.wait(1.0)
