"""The upload ledger's rows, as the Lambdas write them and the manifest-freezing job reads them.

One DynamoDB row per uploaded object (PK its data set's partition, `Partitions.of(key)`; SK the key).
An accepted row also carries the sparse index key that lists a data set's accepted uploads by the time
they were recorded. A run trains every accepted row recorded before its cut (`recorded_at < cut`); the
data set keeps the cut of its last completed run (`trained_through`), so an upload is new, and pending
for the dispatcher, while its `recorded_at` is not below that watermark. Nothing rewrites a row when a
run ends: finishing a run moves one watermark, whatever the number of images.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
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

# A data set's rows are spread over LEDGER_SHARDS partition keys, `<dataset>#<shard>`, the shard a hash of
# the row's sort key, so one data set's first load is not held to one partition's 1,000 write units/s
# (docs/ARCHITECTURE.md, "A catalogue's first load"): a row and a content claim per upload. The pending
# index takes one write per upload and is read by every dispatch check (two queries per index key), so its
# key spreads over INDEX_SHARDS (the row's shard modulo that). Both are sized so that no key takes more than
# a quarter of a partition's writes at the first load's projected rate (bench/ingest_scale.py prints each
# key's share). The ledger count is fixed per data set when it is first seen and kept on its row in the
# data set table (SHARDS_ATTRIBUTE); a data set recorded before sharding has no count there and keeps one
# partition, named by the data set alone, in the table and in the index. INDEX_SHARDS may only grow:
# readers read index keys 0..INDEX_SHARDS-1, which hold every entry written under a smaller count.
LEDGER_SHARDS: Final = 32
INDEX_SHARDS: Final = 16
SHARDS_ATTRIBUTE: Final = "ledger_shards"


@dataclass(frozen=True)
class Partitions:
    """The ledger partition keys of one data set."""

    dataset: str
    shards: int = 1

    def shard(self, sort_key: str) -> int:
        digest = hashlib.blake2b(sort_key.encode(), digest_size=4).digest()
        return int.from_bytes(digest, "big") % self.shards

    def of(self, sort_key: str) -> str:
        """The partition key of the row (upload or content claim) whose sort key is `sort_key`."""
        return self.name(self.shard(sort_key))

    def index_of(self, sort_key: str) -> str:
        """The pending index's partition key of that row."""
        return self.name(self.shard(sort_key) % self.index_shards)

    @property
    def index_shards(self) -> int:
        return min(self.shards, INDEX_SHARDS)

    def name(self, shard: int) -> str:
        return self.dataset if self.shards == 1 else f"{self.dataset}#{shard:02d}"

    def all(self) -> tuple[str, ...]:
        return tuple(self.name(shard) for shard in range(self.shards))

    def index_all(self) -> tuple[str, ...]:
        return tuple(self.name(shard) for shard in range(self.index_shards))


def partitions_of(dataset: str, dataset_row: Mapping[str, Any]) -> Partitions:
    """A data set's partitions from its row in the data set table (one, if it predates sharding)."""
    return Partitions(dataset, int(dataset_row.get(SHARDS_ATTRIBUTE, 1)))


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
