"""The event path in moto: S3 -> EventBridge (the template's rule) -> SQS -> ingest, and uploads that
arrive during a run going to the next run."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from controller import datasets, dispatch, finalize, ingest, ledger, prepare
from retrain.embedded.events import s3_notices
from tests.unit.functions import images
from tests.unit.functions.support import Aws, freeze_run, make_config, moto_aws, sqs_event

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_multi_constructor(
    "!",
    lambda loader, suffix, node: (
        {suffix: loader.construct_scalar(node)}
        if isinstance(node, yaml.ScalarNode)
        else {suffix: loader.construct_sequence(node)}
        if isinstance(node, yaml.SequenceNode)
        else {suffix: loader.construct_mapping(node)}
    ),
)


def uploads_rule_pattern(bucket: str) -> dict[str, Any]:
    """The template's UploadsRule pattern with the data bucket's name filled in."""
    template = yaml.load((REPO / "template.yaml").read_text(), Loader=_Loader)
    text = json.dumps(template["Resources"]["UploadsRule"]["Properties"]["EventPattern"])
    return json.loads(re.sub(r'\{"Ref": "DataBucket"\}', json.dumps(bucket), text))


@pytest.fixture
def aws() -> Iterator[Aws]:
    # S3's EventBridge events as S3 sends them (sequencers that grow), as the embedded stack does
    with s3_notices.installed():
        yield from moto_aws()


def _drain(sqs: Any, url: str) -> list[str]:
    bodies: list[str] = []
    while True:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not messages:
            return bodies
        bodies.extend(m["Body"] for m in messages)
        for m in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def _flowers(aws):
    return datasets.partitions("flowers", table_name=aws.datasets_table, client=aws.dynamodb)


def test_an_upload_reaches_the_ledger_through_eventbridge_and_the_queue(aws: Aws) -> None:
    # GIVEN the data bucket sending to EventBridge, the template's rule, and the ingest queue
    sqs, events = (
        boto3.client("sqs", region_name="us-east-1"),
        boto3.client("events", region_name="us-east-1"),
    )
    aws.s3.put_bucket_notification_configuration(
        Bucket=aws.data_bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    url = sqs.create_queue(QueueName="ingest")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="uploads", EventPattern=json.dumps(uploads_rule_pattern(aws.data_bucket)))
    events.put_targets(Rule="uploads", Targets=[{"Id": "ingest", "Arn": arn}])
    # WHEN a user uploads an image (with a space in its name) and a file outside data/
    photo = images.jpeg()
    aws.s3.put_object(Bucket=aws.data_bucket, Key="data/flowers/daisy/my photo.jpg", Body=photo)
    aws.s3.put_object(Bucket=aws.data_bucket, Key="notes/readme.txt", Body=b"text")
    bodies = _drain(sqs, url)
    config = make_config(aws)
    response = ingest.ingest(sqs_event(bodies), config=config, dynamodb=aws.dynamodb, s3=aws.s3)
    # THEN only the data/ upload was forwarded, and the ledger holds it pending with its identity
    assert len(bodies) == 1 and response == {"batchItemFailures": []}
    [row] = ledger.rows(_flowers(aws), table_name=aws.ledger_table, client=aws.dynamodb)
    assert (row["key"], row["state"], row["size"]) == (
        "data/flowers/daisy/my photo.jpg",
        "accepted",
        len(photo),
    )
    assert row["sequencer"] and row["etag"]
    # AND WHEN the user deletes it, the rule forwards the deletion and its row is removed
    aws.s3.delete_object(Bucket=aws.data_bucket, Key="data/flowers/daisy/my photo.jpg")
    bodies = _drain(sqs, url)
    assert [json.loads(b)["detail-type"] for b in bodies] == ["Object Deleted"]
    ingest.ingest(sqs_event(bodies), config=config, dynamodb=aws.dynamodb, s3=aws.s3)
    [row] = ledger.rows(_flowers(aws), table_name=aws.ledger_table, client=aws.dynamodb)
    assert row["state"] == "removed"


def test_a_direct_s3_to_sqs_notification_is_decoded(aws: Aws) -> None:
    # GIVEN a bucket notifying a queue directly (moto URL-encodes the key, '/' included)
    sqs = boto3.client("sqs", region_name="us-east-1")
    url = sqs.create_queue(QueueName="direct")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    aws.s3.put_bucket_notification_configuration(
        Bucket=aws.data_bucket,
        NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*"]}]
        },
    )
    # WHEN an image whose name needs encoding is uploaded and the queue's messages are ingested
    aws.s3.put_object(Bucket=aws.data_bucket, Key="data/flowers/tulip/été 1+1.png", Body=images.png())
    bodies = _drain(sqs, url)
    response = ingest.ingest(sqs_event(bodies), config=make_config(aws), dynamodb=aws.dynamodb, s3=aws.s3)
    # THEN the test event S3 sends is ignored, and the image is recorded under its real key
    assert response == {"batchItemFailures": []}
    [row] = ledger.rows(_flowers(aws), table_name=aws.ledger_table, client=aws.dynamodb)
    assert (row["key"], row["state"]) == ("data/flowers/tulip/été 1+1.png", "accepted")


def test_an_upload_during_a_run_goes_to_the_next_run(aws: Aws, events_dir: Path) -> None:
    from tests.unit.functions.support import object_created

    config = make_config(aws, min_new_images=1, quiet_period_seconds=60, max_wait_seconds=3600)

    def upload(key: str, at: datetime, sequencer: str) -> None:
        body = object_created(events_dir, key, time=at.strftime("%Y-%m-%dT%H:%M:%SZ"), sequencer=sequencer)
        ingest.ingest(sqs_event([body]), config=config, dynamodb=aws.dynamodb, clock=lambda: at)

    def prepared(run_id: str, at: datetime) -> dict[str, Any]:
        """Prepare at `at` (the run's cut), then the freezing job and Read the frozen manifest."""
        event = {
            "input": {"dataset": "flowers", "run_id": run_id, "trigger": "schedule"},
            "execution_name": run_id,
            "execution_arn": f"arn:{run_id}",
        }
        state = prepare.prepare(event, config=config, dynamodb=aws.dynamodb, s3=aws.s3, now=at)
        return freeze_run(aws, config, dict(state), tempfile.mkdtemp(prefix="freeze-"))["run"]

    def labels(run: dict[str, Any]) -> list[str]:
        key = run["frozen_s3_uri"].removeprefix(f"s3://{aws.artifact_bucket}/") + "labels.json"
        return list(json.loads(aws.s3.get_object(Bucket=aws.artifact_bucket, Key=key)["Body"].read()))

    # GIVEN two uploads, and the dispatcher starting run 1 after the quiet period
    upload("data/flowers/daisy/a.jpg", T0, "01")
    upload("data/flowers/tulip/b.jpg", T0, "02")
    started = dispatch.consider(
        "flowers", now=T0 + timedelta(minutes=2), config=config, dynamodb=aws.dynamodb, sfn=aws.sfn
    )
    assert (started.action, started.run_id) == ("started", "flowers-00001")
    run1 = prepared("flowers-00001", T0 + timedelta(minutes=2))
    # WHEN an image arrives while run 1 trains (and the dispatcher runs meanwhile)
    upload("data/flowers/rose/c.jpg", T0 + timedelta(minutes=3), "03")
    busy = dispatch.consider(
        "flowers", now=T0 + timedelta(minutes=10), config=config, dynamodb=aws.dynamodb, sfn=aws.sfn
    )
    # AND run 1 finishes, its model where its training job wrote it
    model_key = "runs/flowers/flowers-00001/output/job/output/model.tar.gz"
    aws.s3.put_object(Bucket=config.artifact_bucket, Key=model_key, Body=b"weights")
    done = finalize.finalize(
        {
            "run": run1,
            "gate": {"decision": "accepted", "reason": "ok", "top1": 0.9},
            "model": {"model_data": f"s3://{config.artifact_bucket}/{model_key}"},
            "registered": {"model_package_arn": ""},
        },
        config=config,
        dynamodb=aws.dynamodb,
        sagemaker=aws.sagemaker,
        sfn=aws.sfn,
        now=T0 + timedelta(minutes=20),
    )
    # THEN no overlapping run started, run 1 trained on the first two only, and finishing it started
    # run 2, whose manifest holds all three with the late one as its only new image
    assert busy.action == "busy"
    assert run1["manifest_size"] == 2
    assert done["next_run"] == "flowers-00002"
    run2 = prepared("flowers-00002", T0 + timedelta(minutes=20))
    assert (run2["manifest_size"], run2["new_images"], labels(run2)) == (3, 1, ["daisy", "rose", "tulip"])
    names_started = [
        e["name"] for e in aws.sfn.list_executions(stateMachineArn=aws.state_machine_arn)["executions"]
    ]
    assert sorted(names_started) == ["flowers-00001", "flowers-00002"]
