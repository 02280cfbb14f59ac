"""Saving and restoring the embedded stack's data, since moto keeps everything in memory.

What a later ``retrain runs`` / ``retrain report`` / second demo needs is data, not infrastructure: the
stack is re-created from the template on every start (with the same physical names, see
``provisioning.external.deterministic_names``), then this module puts back the objects of its buckets (every
version, oldest first, so each key's newest content is current again; moto assigns new version ids),
the items of its tables and the CloudWatch Logs events of the job and function log groups. The
SageMaker emulator and the FSx emulation keep their own records on disk.

What is saved can be pruned (``Pruning``, the embedded stack's choice): only each key's current content,
as no reader of this project asks S3 for an older version (and a restore cannot give back version ids
anyway), and none of the objects under prefixes whose only reader is gone (the checkpoints of training
jobs that ended). Restoring comes in two parts, so a command that reads the tables only (``retrain
runs``) need not wait for the buckets: ``restore_records`` (tables, logs) and ``restore_buckets``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from retrain.embedded.account import ACCOUNT_ID

LOG_GROUP_PREFIXES: Final = ("/aws/sagemaker/", "/aws/lambda/")
# Objects moved at once: restoring, the server hashes and copies large bodies (checkpoints) with the GIL
# released, so a few threads finish sooner than one, also on 2 cores (bench/snapshot.py).
TRANSFER_THREADS: Final = 4
BATCH_WRITE_ITEMS: Final = 25  # DynamoDB's limit
PARTITION: Final = "aws"  # moto keeps a backend per account and partition


@dataclass(frozen=True)
class Pruning:
    """What a snapshot leaves out: with ``current_only`` a key's older versions (and a key whose current
    version is a delete marker); and the keys under ``dropped`` (bucket -> key prefixes)."""

    current_only: bool = False
    dropped: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def keeps(self, bucket: str, key: str) -> bool:
        return not any(key.startswith(prefix) for prefix in self.dropped.get(bucket, ()))


def save(
    directory: Path,
    *,
    s3_client: Any,
    dynamodb_client: Any,
    logs_client: Any,
    buckets: list[str],
    tables: list[str],
    threads: int = TRANSFER_THREADS,
    pruning: Pruning | None = None,
) -> None:
    """Write the stack's data under ``directory`` (replacing an older snapshot atomically); every version
    of every object unless ``pruning`` says otherwise."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "s3").mkdir(parents=True)
    for bucket in buckets:
        _save_bucket(tmp / "s3" / bucket, s3_client, bucket, threads, pruning or Pruning())
    items = {table: _scan(dynamodb_client, table) for table in tables}
    (tmp / "dynamodb.json").write_text(json.dumps(items), encoding="utf-8")
    (tmp / "logs.json").write_text(json.dumps(_logs(logs_client)), encoding="utf-8")
    old = directory.with_name(directory.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def restore(
    directory: Path,
    *,
    s3_client: Any,
    dynamodb_client: Any,
    logs_client: Any,
    threads: int = TRANSFER_THREADS,
) -> bool:
    """Put a snapshot back into freshly created resources; False when there is none."""
    if not restore_records(directory, dynamodb_client=dynamodb_client, logs_client=logs_client):
        return False
    restore_buckets(directory, s3_client=s3_client, threads=threads)
    return True


def restore_records(directory: Path, *, dynamodb_client: Any, logs_client: Any) -> bool:
    """The tables' items and the log events of a snapshot; False when there is none."""
    if not (directory / "dynamodb.json").exists():
        return False
    for table, items in json.loads((directory / "dynamodb.json").read_text(encoding="utf-8")).items():
        _put_items(dynamodb_client, table, [_decode_binary(item) for item in items])
    _restore_logs(logs_client, json.loads((directory / "logs.json").read_text(encoding="utf-8")))
    return True


def has_objects(directory: Path) -> bool:
    """Whether a snapshot holds any bucket to put back."""
    return (directory / "dynamodb.json").exists() and any((directory / "s3").iterdir())


def restore_buckets(directory: Path, *, s3_client: Any, threads: int = TRANSFER_THREADS) -> None:
    """The objects of a snapshot's buckets (nothing when there is no snapshot)."""
    if not (directory / "dynamodb.json").exists():
        return
    for bucket_dir in sorted((directory / "s3").iterdir()):
        _restore_bucket(bucket_dir, s3_client, bucket_dir.name, threads)


def _save_bucket(target: Path, s3_client: Any, bucket: str, threads: int, pruning: Pruning) -> None:
    target.mkdir(parents=True)
    by_key: dict[str, list[dict[str, Any]]] = {}
    paginator = s3_client.get_paginator("list_object_versions")
    for page in paginator.paginate(Bucket=bucket):
        found = [(v, False) for v in page.get("Versions", [])]
        found += [(m, True) for m in page.get("DeleteMarkers", [])]
        for version, deleted in found:
            by_key.setdefault(version["Key"], []).append(
                {
                    "Key": version["Key"],
                    "VersionId": version["VersionId"],
                    "LastModified": version["LastModified"].isoformat(),
                    "IsLatest": version["IsLatest"],
                    **({"Deleted": True} if deleted else {}),
                }
            )
    entries = [
        entry
        for key, versions in by_key.items()
        if pruning.keeps(bucket, key)
        for entry in _kept(_oldest_first(versions), current_only=pruning.current_only)
    ]

    def fetch(index: int, entry: dict[str, Any]) -> None:
        if entry.get("Deleted"):
            return
        body, metadata, content_type = _stored_object(bucket, entry["Key"], entry["VersionId"])
        blob = target / f"{index:08d}.bin"
        blob.write_bytes(body)
        entry.update(Blob=blob.name, Metadata=metadata, ContentType=content_type)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fetch, range(len(entries)), entries))
    (target / "index.json").write_text(json.dumps(entries), encoding="utf-8")


USER_METADATA: Final = "x-amz-meta-"


def _stored_object(bucket: str, key: str, version_id: str) -> tuple[bytes, dict[str, str], str | None]:
    """One version's body, user metadata and content type, as GetObject answers them, read from moto's
    S3 backend in this process (the embedded server's): a request per object through the gatekeeper took
    10 s of a demo's stop for its 1,800 images."""
    from moto.s3.models import s3_backends

    found = s3_backends[ACCOUNT_ID][PARTITION].get_object(bucket, key, version_id)
    if found is None:
        raise KeyError(f"s3://{bucket}/{key} version {version_id} is gone from the embedded S3")
    headers = dict(found.metadata)
    metadata = {k.removeprefix(USER_METADATA): v for k, v in headers.items() if k.startswith(USER_METADATA)}
    return found.value, metadata, headers.get("content-type")


def _oldest_first(versions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One key's versions in the order they were written. S3 lists a key's versions newest first but
    stamps them to the second, so the listing order breaks ties, and the latest one goes last."""
    return sorted(reversed(versions), key=lambda e: (e["IsLatest"], e["LastModified"]))


def _kept(versions: list[dict[str, Any]], *, current_only: bool) -> list[dict[str, Any]]:
    """A key's versions to save, oldest first: all, or its current one (none when it is deleted)."""
    if not current_only:
        return versions
    current = versions[-1:]
    return [] if current and current[0].get("Deleted") else current


def _restore_bucket(source: Path, s3_client: Any, bucket: str, threads: int) -> None:
    # Each key's versions go back in their order, one key per thread at a time.
    by_key: dict[str, list[dict[str, Any]]] = {}
    for entry in json.loads((source / "index.json").read_text(encoding="utf-8")):
        by_key.setdefault(entry["Key"], []).append(entry)

    def put_back(versions: list[dict[str, Any]]) -> None:
        for entry in versions:
            if entry.get("Deleted"):
                s3_client.delete_object(Bucket=bucket, Key=entry["Key"])
                continue
            extra: dict[str, Any] = {"Metadata": entry.get("Metadata") or {}}
            if entry.get("ContentType"):
                extra["ContentType"] = entry["ContentType"]
            s3_client.put_object(
                Bucket=bucket, Key=entry["Key"], Body=(source / entry["Blob"]).read_bytes(), **extra
            )

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put_back, by_key.values()))


def _put_items(dynamodb_client: Any, table: str, items: list[dict[str, Any]]) -> None:
    """BatchWriteItem, 25 items a request (a ledger holds two items per upload: thousands)."""
    for start in range(0, len(items), BATCH_WRITE_ITEMS):
        requests = {
            table: [{"PutRequest": {"Item": item}} for item in items[start : start + BATCH_WRITE_ITEMS]]
        }
        while requests:
            requests = dynamodb_client.batch_write_item(RequestItems=requests).get("UnprocessedItems") or {}


def _scan(dynamodb_client: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in dynamodb_client.get_paginator("scan").paginate(TableName=table):
        items += [_encode_binary(item) for item in page.get("Items", [])]
    return items


def _encode_binary(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"B"} and isinstance(value["B"], bytes):
            return {"B": base64.b64encode(value["B"]).decode()}
        return {k: _encode_binary(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode_binary(v) for v in value]
    return value


def _decode_binary(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"B"} and isinstance(value["B"], str):
            return {"B": base64.b64decode(value["B"])}
        return {k: _decode_binary(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_binary(v) for v in value]
    return value


def _logs(logs_client: Any) -> dict[str, dict[str, list[dict[str, Any]]]]:
    saved: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for prefix in LOG_GROUP_PREFIXES:
        for page in logs_client.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=prefix):
            for group in page.get("logGroups", []):
                name = group["logGroupName"]
                streams = saved.setdefault(name, {})
                for spage in logs_client.get_paginator("describe_log_streams").paginate(logGroupName=name):
                    for stream in spage.get("logStreams", []):
                        events = logs_client.get_log_events(
                            logGroupName=name, logStreamName=stream["logStreamName"], startFromHead=True
                        )["events"]
                        streams[stream["logStreamName"]] = [
                            {"timestamp": e["timestamp"], "message": e["message"]} for e in events
                        ]
    return saved


def _restore_logs(logs_client: Any, saved: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    for group, streams in saved.items():
        with contextlib.suppress(logs_client.exceptions.ResourceAlreadyExistsException):
            logs_client.create_log_group(logGroupName=group)
        for stream, events in streams.items():
            with contextlib.suppress(logs_client.exceptions.ResourceAlreadyExistsException):
                logs_client.create_log_stream(logGroupName=group, logStreamName=stream)
            for start in range(0, len(events), 1000):
                batch = events[start : start + 1000]
                if batch:
                    logs_client.put_log_events(logGroupName=group, logStreamName=stream, logEvents=batch)
