"""moto's SQS queue, its deletes made atomic with its sends.

moto appends a sent message to the queue's list under the queue's lock, but DeleteMessage rebuilds that
list without it: the messages but the deleted one, copied into a new list that then replaces the old.
A message sent between the copy and the replacement (an upload's S3 event, while the ingest poller
deletes a processed batch) is dropped, with no error anywhere. SQS loses no message it accepted
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/standard-queues.html:
at-least-once delivery). :func:`installed` runs moto's delete under the queue's own lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def installed() -> Iterator[None]:
    """moto's Queue.delete_message under the lock its add_message takes, while the context lasts."""
    from moto.sqs.models import Queue

    original = Queue.__dict__["delete_message"]

    def delete_message(self: Any, receipt_handle: str) -> None:
        with self._messages_lock:
            original(self, receipt_handle)

    Queue.delete_message = delete_message  # type: ignore[method-assign]
    try:
        yield
    finally:
        Queue.delete_message = original  # type: ignore[method-assign]
