"""moto's SQS ReceiveMessage, made linear in the queue's depth.

For every message it hands out, moto checks the retention period by building all of the queue's
attributes, three times over; the attributes include the approximate message counts, each a scan of the
whole queue. A receive from a queue of n messages thus costs O(n) per message, and draining it O(n²):
the demo's 1,800 uploads spent most of their ingest time there. :func:`installed` reads the retention
period from the queue itself, which is the same value and the same rule (a message older than its
queue's retention period is not delivered).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def installed() -> Iterator[None]:
    """Check retention without building the queue's attributes while the context lasts."""
    from moto.core.utils import unix_time
    from moto.sqs.models import SQSBackend

    original = SQSBackend.is_message_valid_based_on_retention_period

    def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
        retention_seconds = int(self.get_queue(queue_name).message_retention_period)
        return bool(retention_seconds + message.sent_timestamp / 1000 > unix_time())

    SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[method-assign]
    try:
        yield
    finally:
        SQSBackend.is_message_valid_based_on_retention_period = original  # type: ignore[method-assign]
