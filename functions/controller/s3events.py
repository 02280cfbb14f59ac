"""Object notices in the shapes that reach the ingest queue, reduced to one plain record.

Two shapes arrive as SQS bodies: an EventBridge event (detail-type "Object Created" or "Object
Deleted"; keys are not URL-encoded) and a direct S3 notification (Records[]; keys are URL-encoded, `+`
for space). The `s3:TestEvent` S3 sends when a notification is configured carries no object and yields
nothing. A deletion (or a delete marker) is a notice with `removed` set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from aws_lambda_powertools.utilities.data_classes.s3_event import S3Event, S3EventBridgeNotificationEvent

SEQUENCER_WIDTH = 64


class UnreadableNoticeError(ValueError):
    """The body is not an S3 or EventBridge object-created notice."""


@dataclass(frozen=True)
class ObjectCreated:
    bucket: str
    key: str
    size: int
    etag: str
    version_id: str
    sequencer: str  # normalized: upper-case hex, right-padded with zeros, comparable as strings
    event_time: str
    removed: bool = False  # the object was deleted (its row stops being trained on)


def normalize_sequencer(sequencer: str) -> str:
    """S3 sequencers of one key order its events once the shorter is right-padded with zeros."""
    value = sequencer.strip().upper()
    if not value or any(c not in "0123456789ABCDEF" for c in value) or len(value) > SEQUENCER_WIDTH:
        raise UnreadableNoticeError(f"sequencer {sequencer!r} is not a hexadecimal S3 sequencer")
    return value.ljust(SEQUENCER_WIDTH, "0")


def _from_eventbridge(document: dict[str, Any]) -> list[ObjectCreated]:
    event = S3EventBridgeNotificationEvent(document)
    kind = event.detail_type
    if kind not in ("Object Created", "Object Deleted"):
        return []
    detail = event.detail
    obj = detail.object
    return [
        ObjectCreated(
            bucket=str((detail.get("bucket") or {}).get("name", "")),
            # the key as the event holds it: Powertools' `obj.key` would unquote it, and S3's EventBridge
            # events do not URL-encode keys ("a+b.jpg" is a key with a plus)
            key=str(obj["key"]),
            size=int(obj.raw_event.get("size", 0)),
            etag=str(obj.etag or obj.get("eTag") or ""),
            version_id=str(obj.get("version-id") or ""),
            sequencer=normalize_sequencer(str(obj.get("sequencer", "0"))),
            event_time=str(event.get("time", "")),
            removed=kind == "Object Deleted",
        )
    ]


def _from_notification(document: dict[str, Any]) -> list[ObjectCreated]:
    created: list[ObjectCreated] = []
    if not document.get("Records"):
        return created
    for record in S3Event(document).records:
        name = str(record.get("eventName", ""))
        if not name.startswith(("ObjectCreated:", "ObjectRemoved:")):
            continue
        obj = record.s3.get_object
        created.append(
            ObjectCreated(
                bucket=str(record.s3.bucket.name),
                key=unquote_plus(str(obj.key)),  # URL-encoded in a notification, `+` for space
                size=int(obj.raw_event.get("size", 0)),
                etag=str(obj.etag),
                version_id=str(obj.version_id or ""),
                sequencer=normalize_sequencer(str(obj.get("sequencer", "0"))),
                event_time=str(record.get("eventTime", "")),
                removed=name.startswith("ObjectRemoved:"),
            )
        )
    return created


def parse_body(body: str) -> list[ObjectCreated]:
    """The object notices in one SQS message body ([] for a test event or another event)."""
    try:
        document = json.loads(body)
    except json.JSONDecodeError as error:
        raise UnreadableNoticeError(f"the message body is not JSON ({error.msg})") from None
    if not isinstance(document, dict):
        raise UnreadableNoticeError("the message body is JSON but not an object")
    if document.get("Event") == "s3:TestEvent":
        return []
    try:
        if "detail-type" in document:
            return _from_eventbridge(document)
        if "Records" in document:
            return _from_notification(document)
    except (KeyError, TypeError, ValueError) as error:
        if isinstance(error, UnreadableNoticeError):
            raise
        raise UnreadableNoticeError(f"the notice lacks a field or has a wrong type: {error!r}") from None
    raise UnreadableNoticeError("the body is neither an EventBridge event nor an S3 notification")
