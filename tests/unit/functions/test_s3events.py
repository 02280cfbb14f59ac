"""Object notices as they reach the ingest queue, reduced to one record: keys, fields and defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controller.s3events import SEQUENCER_WIDTH, UnreadableNoticeError, parse_body

KEY = "data/flowers/daisy/été 1+1.jpg"  # a space, a plus and non-ASCII letters


def _eventbridge(events_dir: Path, **object_fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((events_dir / "eventbridge_object_created.json").read_text())
    event["detail"]["object"].update(object_fields)
    return event


def _notification(events_dir: Path, **object_fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((events_dir / "s3_notification_object_created.json").read_text())
    body["Records"][0]["s3"]["object"].update(object_fields)
    return body


def test_an_eventbridge_key_is_taken_as_it_is(events_dir: Path) -> None:
    # GIVEN S3's EventBridge event for a key with a space, a plus and accents (not URL-encoded there)
    body = json.dumps(_eventbridge(events_dir, key=KEY))
    # WHEN parsed THEN the key is the object's key: the plus is not read as a space
    [notice] = parse_body(body)
    assert notice.key == KEY
    assert (notice.bucket, notice.size, notice.version_id) == ("retrain-data", 2048, "v1")
    assert notice.sequencer == "0062E99A88DC407460".ljust(SEQUENCER_WIDTH, "0")
    assert (notice.event_time, notice.removed) == ("2026-01-01T10:00:00Z", False)


def test_a_notification_key_is_url_decoded(events_dir: Path) -> None:
    # GIVEN a direct S3 notification of the same key, URL-encoded as S3 encodes it (space as '+', a plus
    # as %2B, UTF-8 escapes)
    body = json.dumps(_notification(events_dir, key="data/flowers/daisy/%C3%A9t%C3%A9+1%2B1.jpg"))
    # WHEN parsed THEN the key is decoded to the object's key
    [notice] = parse_body(body)
    assert notice.key == KEY
    assert (notice.size, notice.etag, notice.version_id) == (1024, "0123456789abcdef0123456789abcdef", "v7")


def test_a_deletion_without_size_or_version_is_a_removal_of_size_zero(events_dir: Path) -> None:
    # GIVEN deletions as both shapes carry them: no size, no ETag, no version
    bridge = _eventbridge(events_dir)
    bridge["detail-type"] = "Object Deleted"
    for field in ("size", "etag", "version-id"):
        del bridge["detail"]["object"][field]
    direct = _notification(events_dir)
    direct["Records"][0]["eventName"] = "ObjectRemoved:Delete"
    for field in ("size", "eTag", "versionId"):
        del direct["Records"][0]["s3"]["object"][field]
    # WHEN parsed THEN each is a removal with empty identity fields
    for body in (bridge, direct):
        [notice] = parse_body(json.dumps(body))
        assert (notice.removed, notice.size, notice.etag, notice.version_id) == (True, 0, "", "")


def test_events_without_objects_yield_nothing(events_dir: Path) -> None:
    # GIVEN S3's test event, another EventBridge event, another notification, and an empty record list
    other = _eventbridge(events_dir)
    other["detail-type"] = "Object Restore Completed"
    restored = _notification(events_dir)
    restored["Records"][0]["eventName"] = "ObjectRestore:Completed"
    bodies = [
        (events_dir / "s3_test_event.json").read_text(),
        json.dumps(other),
        json.dumps(restored),
        json.dumps({"Records": []}),
    ]
    # WHEN parsed THEN none is an object notice
    assert [parse_body(body) for body in bodies] == [[], [], [], []]


@pytest.mark.parametrize(
    "body",
    [
        "not json {",
        "[1, 2]",
        json.dumps({"hello": "world"}),
        json.dumps({"detail-type": "Object Created", "detail": {"object": {}}}),
        json.dumps({"Records": [{"eventName": "ObjectCreated:Put", "s3": {"object": {"key": "k"}}}]}),
    ],
)
def test_an_unreadable_body_is_refused_with_a_reason(body: str) -> None:
    with pytest.raises(UnreadableNoticeError):
        parse_body(body)


def test_a_sequencer_that_is_not_hexadecimal_is_refused(events_dir: Path) -> None:
    with pytest.raises(UnreadableNoticeError, match="sequencer"):
        parse_body(json.dumps(_eventbridge(events_dir, sequencer="xyz")))
