"""moto's SQS, made linear in the queue's depth where the demo's uploads made it quadratic.

Sending a message and delivering one both build the queue's attributes; those include the approximate
message counts, each a scan of the whole queue that reads the clock twice per message. For every message
it hands out, ReceiveMessage built the attributes three times over just to read the retention period.
With the demo's 1,800 uploads in the queue that was most of the ingest time. :func:`installed` reads the
retention period from the queue and counts with one clock reading per scan: the same values and rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def installed() -> Iterator[None]:
    """moto's SQS with the cheaper checks while the context lasts."""
    from moto.core.utils import unix_time, unix_time_millis
    from moto.sqs.models import Queue, SQSBackend

    def retained(self: Any, queue_name: str, message: Any) -> bool:
        retention_seconds = int(self.get_queue(queue_name).message_retention_period)
        return bool(retention_seconds + message.sent_timestamp / 1000 > unix_time())

    def visible_now(queue: Any) -> int:
        now = unix_time_millis()
        return sum(1 for m in queue._messages if now > m.visible_at and not now < m.delayed_until)

    def not_visible(queue: Any) -> int:
        now = unix_time_millis()
        return sum(1 for m in queue._messages if not now > m.visible_at)

    def delayed(queue: Any) -> int:
        now = unix_time_millis()
        return sum(1 for m in queue._messages if now < m.delayed_until)

    patches: dict[tuple[type, str], Any] = {
        (SQSBackend, "is_message_valid_based_on_retention_period"): retained,
        (Queue, "approximate_number_of_messages"): property(visible_now),
        (Queue, "approximate_number_of_messages_not_visible"): property(not_visible),
        (Queue, "approximate_number_of_messages_delayed"): property(delayed),
    }
    originals = {(owner, name): owner.__dict__[name] for owner, name in patches}
    for (owner, name), patch in patches.items():
        setattr(owner, name, patch)
    try:
        yield
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)
