"""S3's EventBridge events the way S3 sends them, where moto's differ.

moto (pinned in requirements-dev.txt) gives every event the same `sequencer`, spells `etag` as `eTag`
and sends a deletion with the object's size and ETag. S3's sequencer grows with each event of a key,
which is how ingest orders a re-upload after the upload it replaces and a deletion after both (it is a
hex string compared after right-padding); a deletion's detail names the key, its version, the sequencer
and the `deletion-type`. ``installed()`` swaps moto's sender for one that builds those events, for as long
as the context lasts, and sends them to the same rules. Docs: "Amazon S3 event notifications with
EventBridge" (the detail of Object Created and Object Deleted).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from retrain.embedded.account import ACCOUNT_ID

_DELETED: Final = "Object Deleted"
_PUT: Final = "s3:ObjectCreated:Put"  # moto's event name for PutObject
# S3's `reason` of an Object Created event, by moto's event name.
_REASONS: Final = {
    _PUT: "PutObject",
    "s3:ObjectCreated:Post": "POST Object",
    "s3:ObjectCreated:Copy": "CopyObject",
    "s3:ObjectCreated:CompleteMultipartUpload": "CompleteMultipartUpload",
}


class _Sequencers:
    """18 hex digits, like S3's, from the clock in microseconds: they grow within a process and across
    restarts of the embedded stack (whose ledger outlives it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> str:
        with self._lock:
            self._last = max(self._last + 1, time.time_ns() // 1000)
            return f"{self._last:018X}"


_sequencers = _Sequencers()


def next_sequencer() -> str:
    return _sequencers.next()


def event_detail(event_name: str, bucket: Any, key: Any, detail_type: str) -> dict[str, Any]:
    """The `detail` of S3's EventBridge event for `key` (a moto FakeKey or FakeDeleteMarker)."""
    obj: dict[str, Any] = {"key": key.name, "sequencer": next_sequencer()}
    version = getattr(key, "version_id", None)
    if version and version != "null":
        obj["version-id"] = version
    detail: dict[str, Any] = {
        "version": "0",
        "bucket": {"name": bucket.name},
        "object": obj,
        "request-id": "EMBEDDED00000000",
        "requester": getattr(bucket, "account_id", ACCOUNT_ID),
        "source-ip-address": "127.0.0.1",
        "reason": _REASONS.get(event_name, event_name.rsplit(":", 1)[-1]),
    }
    if detail_type == _DELETED:
        marker = type(key).__name__ == "FakeDeleteMarker"
        detail["reason"] = "DeleteObject"
        detail["deletion-type"] = "Delete Marker Created" if marker else "Permanently Deleted"
    else:
        obj["size"] = key.size
        obj["etag"] = key.etag.replace('"', "")
    return detail


@contextmanager
def installed() -> Iterator[None]:
    """Send S3's EventBridge events with S3's sequencers and fields while the context lasts."""
    from moto.core.utils import unix_time
    from moto.events.models import events_backends
    from moto.events.utils import _BASE_EVENT_MESSAGE
    from moto.s3 import notifications

    original = notifications._send_event_bridge_message

    def send(account_id: str, bucket: Any, event_name: str, key: Any) -> None:
        if event_name == _PUT and getattr(key, "multipart", None) is not None:
            # moto completes a multipart upload by storing the object with its PutObject code, which
            # notifies too, then sends CompleteMultipartUpload's event: S3 sends only the latter. Two
            # events for one checkpoint made the checkpoint evaluator count every one twice.
            return
        detail_type = notifications._detail_type(event_name)
        event = copy.deepcopy(_BASE_EVENT_MESSAGE)
        event.update(
            {
                "detail-type": detail_type,
                "source": "aws.s3",
                "account": account_id,
                "time": unix_time(),
                "region": bucket.region_name,
                "resources": [bucket.arn],
                "detail": event_detail(event_name, bucket, key, detail_type),
            }
        )
        backend = events_backends[account_id][bucket.region_name]
        for bus in backend.event_buses.values():
            for rule in bus.rules.values():
                rule.send_to_targets(event, transform_input=False)

    notifications._send_event_bridge_message = send
    try:
        yield
    finally:
        notifications._send_event_bridge_message = original
