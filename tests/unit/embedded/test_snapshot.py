"""The embedded stack's data outlives its process: what `snapshot.save` wrote, `restore` puts back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws

from retrain.embedded import snapshot

BUCKET = "retrain-artifacts"
TABLE = "retrain-runs"
GROUP = "/aws/sagemaker/TrainingJobs"


def clients() -> dict[str, Any]:
    return {f"{name}_client": boto3.client(name) for name in ("s3", "dynamodb", "logs")}


def fresh_resources() -> dict[str, Any]:
    """The clients, with the stack's bucket (versioned) and table made anew."""
    c = clients()
    c["s3_client"].create_bucket(Bucket=BUCKET)
    c["s3_client"].put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    c["dynamodb_client"].create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return c


def versions(s3: Any) -> dict[str, list[str]]:
    """Per key, oldest first (S3 lists newest first): each version's content, and "deleted" last when a
    delete marker is the key's latest version."""
    listed = s3.list_object_versions(Bucket=BUCKET)
    out: dict[str, list[str]] = {}
    for version in reversed(listed.get("Versions", [])):
        body = s3.get_object(Bucket=BUCKET, Key=version["Key"], VersionId=version["VersionId"])["Body"].read()
        out.setdefault(version["Key"], []).append(body.decode())
    for marker in listed.get("DeleteMarkers", []):
        if marker["IsLatest"]:
            out[marker["Key"]].append("deleted")
    return out


def test_a_restored_stack_has_every_version_item_and_log_event_it_saved(tmp_path: Path) -> None:
    saved = tmp_path / "snapshot"
    with mock_aws():
        # GIVEN a stack's data: keys with several versions (one deleted), a binary item, a job's log
        c = fresh_resources()
        s3 = c["s3_client"]
        for number in range(12):  # more keys than the transfer threads
            s3.put_object(
                Bucket=BUCKET, Key=f"checkpoints/ckpt-{number:02d}.pt", Body=f"step {number}".encode()
            )
        for body in ("first", "second", "third"):
            s3.put_object(
                Bucket=BUCKET,
                Key="runs/record.json",
                Body=body.encode(),
                Metadata={"m": body},
                ContentType="application/json",
            )
        s3.put_object(Bucket=BUCKET, Key="runs/gone.txt", Body=b"soon deleted")
        s3.delete_object(Bucket=BUCKET, Key="runs/gone.txt")
        c["dynamodb_client"].put_item(
            TableName=TABLE, Item={"pk": {"S": "run-1"}, "blob": {"B": b"\x00\x01"}}
        )
        c["logs_client"].create_log_group(logGroupName=GROUP)
        c["logs_client"].create_log_stream(logGroupName=GROUP, logStreamName="job/algo-1")
        c["logs_client"].put_log_events(
            logGroupName=GROUP,
            logStreamName="job/algo-1",
            logEvents=[{"timestamp": int(time.time() * 1000), "message": "epoch 1"}],
        )
        before = versions(s3)
        # WHEN it is saved
        snapshot.save(saved, buckets=[BUCKET], tables=[TABLE], **c)
    with mock_aws():
        # AND put back into a new process's fresh resources
        c = fresh_resources()
        assert snapshot.restore(saved, **c)
        # THEN every key has the same versions in the same order, deletions included
        assert versions(c["s3_client"]) == before
        assert before["runs/record.json"] == ["first", "second", "third"]
        assert before["runs/gone.txt"] == ["soon deleted", "deleted"]
        head = c["s3_client"].head_object(Bucket=BUCKET, Key="runs/record.json")
        assert (head["Metadata"], head["ContentType"]) == ({"m": "third"}, "application/json")
        # AND the items and log events are back
        item = c["dynamodb_client"].get_item(TableName=TABLE, Key={"pk": {"S": "run-1"}})["Item"]
        assert item["blob"]["B"] == b"\x00\x01"
        events = c["logs_client"].get_log_events(
            logGroupName=GROUP, logStreamName="job/algo-1", startFromHead=True
        )["events"]
        assert [e["message"] for e in events] == ["epoch 1"]


def test_a_state_directory_without_a_snapshot_restores_nothing(tmp_path: Path) -> None:
    with mock_aws():
        assert not snapshot.restore(tmp_path / "snapshot", **clients())


def test_a_pruned_snapshot_keeps_current_objects_outside_the_dropped_prefixes(tmp_path: Path) -> None:
    saved = tmp_path / "snapshot"
    with mock_aws():
        # GIVEN overwritten and deleted keys, and checkpoints of two runs
        c = fresh_resources()
        s3 = c["s3_client"]
        for body in ("first", "second"):
            s3.put_object(Bucket=BUCKET, Key="runs/record.json", Body=body.encode())
        s3.put_object(Bucket=BUCKET, Key="runs/gone.txt", Body=b"soon deleted")
        s3.delete_object(Bucket=BUCKET, Key="runs/gone.txt")
        for run in ("run-1", "run-10"):
            s3.put_object(Bucket=BUCKET, Key=f"checkpoints/{run}/job/ckpt-1.pt", Body=b"weights")
        # WHEN it is saved without old versions and without run-1's checkpoints
        pruning = snapshot.Pruning(current_only=True, dropped={BUCKET: ["checkpoints/run-1/"]})
        snapshot.save(saved, buckets=[BUCKET], tables=[TABLE], pruning=pruning, **c)
    with mock_aws():
        c = fresh_resources()
        assert snapshot.restore(saved, **c)
        # THEN each kept key has its current content only; the deleted key and the dropped prefix are gone
        assert versions(c["s3_client"]) == {
            "runs/record.json": ["second"],
            "checkpoints/run-10/job/ckpt-1.pt": ["weights"],
        }
