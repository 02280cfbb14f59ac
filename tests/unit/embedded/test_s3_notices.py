"""The embedded stack's S3 EventBridge events carry S3's fields: sequencers that grow, `etag`, deletions."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws

from controller.s3events import parse_body
from retrain.embedded.events import s3_notices


def _events(actions: Any) -> list[dict[str, Any]]:
    with mock_aws(), s3_notices.installed():
        s3 = boto3.client("s3", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        events = boto3.client("events", region_name="us-east-1")
        s3.create_bucket(Bucket="data")
        s3.put_bucket_notification_configuration(
            Bucket="data", NotificationConfiguration={"EventBridgeConfiguration": {}}
        )
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="all", EventPattern=json.dumps({"source": ["aws.s3"]}))
        events.put_targets(Rule="all", Targets=[{"Id": "q", "Arn": arn}])
        actions(s3)
        bodies = []
        while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            bodies += [json.loads(m["Body"]) for m in messages]
            for m in messages:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        return bodies


def test_an_upload_a_re_upload_and_a_deletion_arrive_in_order_with_s3s_fields() -> None:
    def actions(s3: Any) -> None:
        s3.put_object(Bucket="data", Key="data/pets/cat/a.jpg", Body=b"one")
        s3.put_object(Bucket="data", Key="data/pets/cat/a.jpg", Body=b"two!")
        s3.delete_object(Bucket="data", Key="data/pets/cat/a.jpg")

    # (moto also sends "Object Tags Added" for a put; the template's rule matches only these two)
    sent = [e for e in _events(actions) if e["detail-type"] in ("Object Created", "Object Deleted")]
    created, again, deleted = sent
    assert [e["detail-type"] for e in (created, again, deleted)] == ["Object Created"] * 2 + [
        "Object Deleted"
    ]
    assert created["detail"]["object"]["etag"] == hashlib.md5(b"one", usedforsecurity=False).hexdigest()
    assert again["detail"]["object"]["size"] == 4
    assert deleted["detail"]["deletion-type"] == "Permanently Deleted"
    assert set(deleted["detail"]["object"]) == {"key", "sequencer"}
    # ingest's view: the notices compare in the order they happened
    notices = [parse_body(json.dumps(e))[0] for e in (created, again, deleted)]
    assert notices[0].sequencer < notices[1].sequencer < notices[2].sequencer
    assert notices[2].removed and not notices[1].removed and notices[1].etag


def test_a_multipart_upload_is_one_object_created_event(tmp_path: Path) -> None:
    # moto stores a completed multipart upload with its PutObject code (which notifies) and then sends
    # CompleteMultipartUpload's event; S3 sends one event, and counting checkpoints relies on that.
    big = tmp_path / "ckpt.pt"
    big.write_bytes(b"w" * (9 << 20))  # over boto3's 8 MiB multipart threshold

    def actions(s3: Any) -> None:
        s3.upload_file(str(big), "data", "checkpoints/run/ckpt-000000001.pt")

    created = [e for e in _events(actions) if e["detail-type"] == "Object Created"]
    assert [e["detail"]["reason"] for e in created] == ["CompleteMultipartUpload"]
