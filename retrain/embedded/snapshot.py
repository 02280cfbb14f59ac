"""Saving and restoring the embedded stack's data, since moto keeps everything in memory.

What a later ``retrain runs`` / ``retrain report`` / second demo needs is data, not infrastructure: the
stack is re-created from the template on every start (with the same physical names, see
``provisioning.external.deterministic_names``), then this module puts back the objects of its buckets (every
version, oldest first, so each key's newest content is current again; moto assigns new version ids),
the items of its tables and the CloudWatch Logs events of the job and function log groups. The
SageMaker emulator and the FSx emulation keep their own records on disk.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

LOG_GROUP_PREFIXES: Final = ("/aws/sagemaker/", "/aws/lambda/")
# Objects moved at once: the server hashes and copies large bodies (checkpoints) with the GIL released,
# so a few threads finish sooner than one, also on 2 cores (bench/snapshot.py).
TRANSFER_THREADS: Final = 4


def save(
    directory: Path,
    *,
    s3_client: Any,
    dynamodb_client: Any,
    logs_client: Any,
    buckets: list[str],
    tables: list[str],
    threads: int = TRANSFER_THREADS,
) -> None:
    """Write the stack's data under ``directory`` (replacing an older snapshot atomically)."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "s3").mkdir(parents=True)
    for bucket in buckets:
        _save_bucket(tmp / "s3" / bucket, s3_client, bucket, threads)
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
    if not (directory / "dynamodb.json").exists():
        return False
    for bucket_dir in sorted((directory / "s3").iterdir()):
        _restore_bucket(bucket_dir, s3_client, bucket_dir.name, threads)
    for table, items in json.loads((directory / "dynamodb.json").read_text(encoding="utf-8")).items():
        for item in items:
            dynamodb_client.put_item(TableName=table, Item=_decode_binary(item))
    _restore_logs(logs_client, json.loads((directory / "logs.json").read_text(encoding="utf-8")))
    return True


def _save_bucket(target: Path, s3_client: Any, bucket: str, threads: int) -> None:
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
    entries = [entry for versions in by_key.values() for entry in _oldest_first(versions)]

    def fetch(index: int, entry: dict[str, Any]) -> None:
        if entry.get("Deleted"):
            return
        obj = s3_client.get_object(Bucket=bucket, Key=entry["Key"], VersionId=entry["VersionId"])
        blob = target / f"{index:08d}.bin"
        blob.write_bytes(obj["Body"].read())
        entry.update(Blob=blob.name, Metadata=obj.get("Metadata", {}), ContentType=obj.get("ContentType"))

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fetch, range(len(entries)), entries))
    (target / "index.json").write_text(json.dumps(entries), encoding="utf-8")


def _oldest_first(versions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One key's versions in the order they were written. S3 lists a key's versions newest first but
    stamps them to the second, so the listing order breaks ties, and the latest one goes last."""
    return sorted(reversed(versions), key=lambda e: (e["IsLatest"], e["LastModified"]))


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
