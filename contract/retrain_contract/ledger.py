"""The upload ledger's rows, as the Lambdas write them and the manifest-freezing job reads them.

One DynamoDB row per uploaded object (PK data set, SK key). An accepted row also carries the sparse
index key that lists a data set's accepted uploads by the time they were recorded. A run trains every
accepted row recorded before its cut (`recorded_at < cut`); the data set keeps the cut of its last
completed run (`trained_through`), so an upload is new, and pending for the dispatcher, while its
`recorded_at` is not below that watermark. Nothing rewrites a row when a run ends: finishing a run
moves one watermark, whatever the number of images.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

PK: Final = "dataset"
SK: Final = "key"
RECORDED_AT: Final = "recorded_at"  # when ingest wrote the row (UTC, ISO 8601 with microseconds, "Z")
LABEL: Final = "label"
STATE: Final = "state"
PROBLEM: Final = "problem"
SIZE: Final = "size"  # the object's bytes, from its S3 notice
# (The sparse index of accepted rows by recorded time is the control plane's: controller/names.py.)

STATE_ACCEPTED: Final = "accepted"
STATE_REJECTED: Final = "rejected"
STATE_REMOVED: Final = "removed"  # the object was deleted from the bucket: no longer trained on
# Rows written before the watermark existed were marked per run; they are accepted rows too.
LEGACY_PENDING: Final = "pending"
LEGACY_TRAINED: Final = "trained"
LEGACY_HELD: Final = "held"
ACCEPTED_STATES: Final = (STATE_ACCEPTED, LEGACY_PENDING, LEGACY_TRAINED, LEGACY_HELD)

# Claim rows: which key first brought a content into a data set; their sort key starts with '#', which
# no upload key does (those start with data/).
CONTENT_PREFIX: Final = "#content/"

# A row's `recorded_at` is taken just before its PutItem, and ingest's DynamoDB client gives up on a put
# within RECORD_PUT_BOUND_SECONDS (connect and read timeouts, two attempts): a row recorded before a cut
# is readable once the cut is this much in the past. The freezing job reads no earlier.
RECORD_PUT_BOUND_SECONDS: Final = 13
RECORD_FENCE_SECONDS: Final = 20


def is_upload(row: Mapping[str, Any]) -> bool:
    return not str(row.get(SK, "")).startswith(CONTENT_PREFIX)


def is_accepted(row: Mapping[str, Any]) -> bool:
    return row.get(STATE) in ACCEPTED_STATES


def is_new(row: Mapping[str, Any], trained_through: str) -> bool:
    """Whether a completed run has not trained (or set aside) this accepted row yet."""
    if row.get(STATE) in (LEGACY_TRAINED, LEGACY_HELD):
        return False
    return str(row.get(RECORDED_AT, "")) >= trained_through
