from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import threading
import time
from datetime import UTC, datetime

import boto3
import pytest

from controller import clients, datasets, ingest, ledger, names
from retrain_contract.ledger import LEDGER_SHARDS, Partitions
from tests.unit.functions.support import function_environment, make_config, object_created, sqs_event


def _etag(key):
    """The etag object_created gives `key` by default (its bytes' own)."""
    return hashlib.md5(key.encode(), usedforsecurity=False).hexdigest()


def _parts(aws, dataset):
    return datasets.partitions(dataset, table_name=aws.datasets_table, client=aws.dynamodb)


def _rows(aws, dataset):
    return list(ledger.rows(_parts(aws, dataset), table_name=aws.ledger_table, client=aws.dynamodb))


def _ingest(aws, config, bodies, **kwargs):
    """Ingest `bodies` as recorded at the first notice's event time (the tests' clock), unless a clock
    is given."""
    first = json.loads(bodies[0]) if bodies else {}
    at = datetime.fromisoformat(str(first.get("time", "2026-01-01T10:00:00Z")).replace("Z", "+00:00"))
    kwargs.setdefault("clock", lambda: at)
    return ingest.ingest(sqs_event(bodies), config=config, dynamodb=aws.dynamodb, **kwargs)


def test_an_eventbridge_notice_records_a_pending_row(aws, config, events_dir):
    # GIVEN the EventBridge event of one upload (keys are not URL-encoded there)
    body = (events_dir / "eventbridge_object_created.json").read_text()
    # WHEN the ingest function processes it
    response = _ingest(aws, config, [body])
    # THEN the batch succeeds and the ledger holds one pending row with the object's identity
    assert response == {"batchItemFailures": []}
    [row] = _rows(aws, "flowers")
    assert row["key"] == "data/flowers/daisy/photo 1.jpg"
    assert (row["state"], row["label"], row["size"], row["version_id"]) == ("accepted", "daisy", 2048, "v1")
    # in the data set's partitions for its key, on the table and on the pending index
    parts = _parts(aws, "flowers")
    assert (row[names.LEDGER_PK], row[names.LEDGER_PENDING_PK]) == (
        parts.of(row["key"]),
        parts.index_of(row["key"]),
    )


def test_a_direct_s3_notification_key_is_url_decoded(aws, config, events_dir):
    # GIVEN an S3 notification whose key is URL-encoded ('/' as %2F, space as '+', UTF-8 escapes)
    body = (events_dir / "s3_notification_object_created.json").read_text()
    # WHEN ingested
    _ingest(aws, config, [body])
    # THEN the row is keyed by the real object key
    [row] = _rows(aws, "flowers")
    assert row["key"] == "data/flowers/daisy/my photoé.jpg"
    assert row["etag"] == "0123456789abcdef0123456789abcdef"


def test_test_events_and_unreadable_bodies_do_not_fail_the_batch(aws, config, events_dir):
    # GIVEN a batch with S3's test event, a non-JSON body, JSON of another shape and one good notice
    bodies = [
        (events_dir / "s3_test_event.json").read_text(),
        "not json {",
        json.dumps({"hello": "world"}),
        object_created(events_dir, "data/flowers/tulip/a.png"),
    ]
    # WHEN ingested
    response = _ingest(aws, config, bodies)
    # THEN no message fails and only the good notice is recorded
    assert response == {"batchItemFailures": []}
    assert [row["key"] for row in _rows(aws, "flowers")] == ["data/flowers/tulip/a.png"]


def test_bad_uploads_are_recorded_as_rejected_with_reasons_and_left_in_place(aws, config, events_dir):
    # GIVEN uploads that break the layout, the extension, the label rules and the size limits
    bad = {
        "data/flowers/daisy/notes.txt": (10, "extension"),
        "data/flowers/da isy/a.jpg": (10, "label"),
        "data/flowers/daisy/empty.jpg": (0, "empty"),
        "data/flowers/daisy/huge.jpg": (names.MAX_IMAGE_BYTES + 1, "limit"),
        "data/flowers/a.jpg": (10, "levels"),
        "data/flowers/daisy/": (0, "folder"),
    }
    for key, (size, _) in bad.items():
        aws.s3.put_object(Bucket=aws.data_bucket, Key=key, Body=b"x" * min(size, 10))
    bodies = [object_created(events_dir, key, size=size) for key, (size, _) in bad.items()]
    # WHEN ingested
    response = _ingest(aws, config, bodies)
    # THEN the batch succeeds, each is rejected with a reason naming the problem, and no object is gone
    assert response == {"batchItemFailures": []}
    rows = {row["key"]: row for row in _rows(aws, "flowers")}
    assert set(rows) == set(bad)
    for key, (_, word) in bad.items():
        assert rows[key]["state"] == "rejected"
        assert word in rows[key]["reason"], (key, rows[key]["reason"])
        assert names.LEDGER_PENDING_PK not in rows[key]
    stored = {o["Key"] for o in aws.s3.list_objects_v2(Bucket=aws.data_bucket)["Contents"]}
    assert stored == set(bad)


def test_a_key_with_an_unusable_dataset_is_rejected_under_a_placeholder_partition(aws, config, events_dir):
    # GIVEN an upload outside data/ and one whose data set name has a space
    bodies = [object_created(events_dir, "uploads/x.jpg"), object_created(events_dir, "data/my set/a/b.jpg")]
    # WHEN ingested
    _ingest(aws, config, bodies)
    # THEN both are rejected rows under the placeholder data set, with reasons
    rows = {row["key"]: row for row in _rows(aws, "-")}
    assert "outside data/" in rows["uploads/x.jpg"]["reason"]
    assert "data set" in rows["data/my set/a/b.jpg"]["reason"]


def test_an_older_notice_arriving_late_does_not_overwrite_a_newer_one(aws, config, events_dir):
    # GIVEN the newer upload of a key is delivered first, then the older one
    key = "data/flowers/daisy/a.jpg"
    newer = object_created(events_dir, key, sequencer="0062E99A88DC407470", etag="new")
    older = object_created(events_dir, key, sequencer="0062E99A88DC40746", etag="old")
    # WHEN both are ingested in that order
    _ingest(aws, config, [newer])
    _ingest(aws, config, [older])
    # THEN the row holds the newer object (sequencers compare after right-padding)
    [row] = _rows(aws, "flowers")
    assert row["etag"] == "new"


def _pending(aws, trained_through="", dataset="flowers"):
    return ledger.pending_stats(
        _parts(aws, dataset),
        trained_through,
        limit=100_000,
        table_name=aws.ledger_table,
        client=aws.dynamodb,
    )


def test_a_re_upload_of_a_key_makes_its_row_pending_again(aws, config, events_dir):
    # GIVEN a row a completed run trained (the data set's watermark is past it)
    key = "data/flowers/daisy/a.jpg"
    _ingest(aws, config, [object_created(events_dir, key, sequencer="0A", time="2026-01-01T10:00:00Z")])
    watermark = "2026-01-01T10:30:00.000000Z"
    assert _pending(aws, watermark).count == 0
    # WHEN the user uploads a new version of the same key
    _ingest(
        aws, config, [object_created(events_dir, key, sequencer="0B", etag="v2", time="2026-01-01T11:00:00Z")]
    )
    # THEN the row is pending again, for the next run
    [row] = _rows(aws, "flowers")
    assert (row["state"], row["etag"]) == ("accepted", "v2")
    assert _pending(aws, watermark).count == 1


def test_the_check_after_ingest_starts_a_run_once_the_oldest_upload_waited_too_long(aws, config, events_dir):
    # GIVEN an upload from 10:00 still pending, and MaxWaitSeconds of one hour
    _ingest(
        aws, config, [object_created(events_dir, "data/flowers/daisy/a.jpg", time="2026-01-01T10:00:00Z")]
    )
    # WHEN another upload is ingested at 11:00 (uploads have not paused)
    late = object_created(events_dir, "data/flowers/daisy/b.jpg", time="2026-01-01T11:00:00Z", sequencer="0B")
    _ingest(aws, config, [late], sfn=aws.sfn, now=datetime(2026, 1, 1, 11, 0, 1, tzinfo=UTC))
    # THEN the ingest function itself started the run, without waiting for the schedule
    [execution] = aws.sfn.list_executions(stateMachineArn=aws.state_machine_arn)["executions"]
    assert execution["name"] == "flowers-00001"


def test_a_failed_write_fails_only_that_message(aws, config, events_dir):
    # GIVEN a batch where one notice carries a key longer than DynamoDB's 1,024-byte sort key limit
    bodies = [
        object_created(events_dir, "data/flowers/daisy/" + "a" * 1100 + ".jpg"),
        object_created(events_dir, "data/flowers/daisy/ok.jpg"),
    ]
    # WHEN ingested
    response = _ingest(aws, config, bodies)
    # THEN only that message is reported for retry, and the other is recorded
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-0"}]}
    assert [row["key"] for row in _rows(aws, "flowers")] == ["data/flowers/daisy/ok.jpg"]


def _throttle(client, *, when, times):
    """`client`'s requests whose body holds `when` answered as DynamoDB answers a hot partition (HTTP 400,
    ProvisionedThroughputExceededException), unapplied, the first `times` times; every other request
    goes to moto. The answers given, in a list. Hooked where botocore sends, so its retries see them."""
    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse
    from moto.core.models import botocore_stubber

    given = []

    def send(event_name, request, **kwargs):
        if when.encode() not in request.body or len(given) >= times:
            return botocore_stubber(event_name=event_name, request=request, **kwargs)
        given.append("ProvisionedThroughputExceededException")
        body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{given[-1]}", "message": "throttled"})
        return AWSResponse(
            request.url, 400, {"Content-Type": "application/x-amz-json-1.0"}, MockRawResponse(body)
        )

    client.meta.events.unregister("before-send", botocore_stubber)
    client.meta.events.register("before-send", send)
    return given


def test_a_throttle_that_clears_is_waited_out_in_the_same_batch(aws, config, events_dir):
    # GIVEN the ledger writer (its retries as on AWS) throttled at its first four attempts to put a.jpg's
    # row (two tries of the writer), after a.jpg's bytes were claimed
    writer = boto3.client("dynamodb", region_name="us-east-1", config=clients.LEDGER_WRITES)
    throttled = _throttle(writer, when="daisy/a.jpg", times=4)
    bodies = [object_created(events_dir, f"data/flowers/daisy/{name}.jpg") for name in ("a", "b", "c")]
    # WHEN a batch of three uploads is ingested
    response = _ingest(aws, config, bodies, writer=writer)
    # THEN the throttled notice was tried again with backoff and recorded: no message failed (none walks
    # toward the DLQ for a limit that cleared), and a.jpg is accepted, not a duplicate of its own claim
    assert throttled == ["ProvisionedThroughputExceededException"] * 4
    assert response == {"batchItemFailures": []}
    rows = {row["key"]: row["state"] for row in _rows(aws, "flowers")}
    assert rows == {f"data/flowers/daisy/{name}.jpg": names.STATE_ACCEPTED for name in ("a", "b", "c")}


def _ingest_queue(aws):
    sqs = boto3.client("sqs", region_name="us-east-1")
    return sqs, sqs.create_queue(QueueName="retrain-ingest")["QueueUrl"]


def _received(sqs, url):
    return sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], AttributeNames=["All"]
    ).get("Messages", [])


def test_a_throttle_that_outlasts_the_function_puts_the_notice_back_as_a_new_message(
    aws, config, events_dir, monkeypatch
):
    # GIVEN a.jpg's row write throttled longer than the function may wait, and the ingest queue
    writer = boto3.client("dynamodb", region_name="us-east-1", config=clients.LEDGER_WRITES)
    _throttle(writer, when="daisy/a.jpg", times=1_000)
    sqs, url = _ingest_queue(aws)
    config = dataclasses.replace(config, ingest_queue_url=url)
    monkeypatch.setattr(ingest, "REQUEUE_DELAY_SECONDS", (0, 0))  # moto would hold a delayed one back
    bodies = [object_created(events_dir, f"data/flowers/daisy/{name}.jpg") for name in ("a", "b")]
    # WHEN the batch is ingested with half a second of patience
    response = _ingest(aws, config, bodies, writer=writer, sqs=sqs, patience_seconds=0.5)
    # THEN no message failed (its receive count would walk it to the DLQ): a.jpg's notice went back on the
    # queue as a new message, counting its return, and b.jpg is recorded
    assert response == {"batchItemFailures": []}
    assert [row["key"] for row in _rows(aws, "flowers")] == ["data/flowers/daisy/b.jpg"]
    [again] = _received(sqs, url)
    assert again["Body"] == bodies[0]
    assert again["MessageAttributes"][ingest.REQUEUES_ATTRIBUTE]["StringValue"] == "1"
    assert again["Attributes"]["ApproximateReceiveCount"] == "1"
    # WHEN it is delivered again once the throttle cleared THEN it is recorded
    event = sqs_event([again["Body"]])
    event["Records"][0]["messageAttributes"] = {
        ingest.REQUEUES_ATTRIBUTE: {"stringValue": "1", "dataType": "Number"}
    }
    cleared = ingest.ingest(event, config=config, dynamodb=aws.dynamodb, sqs=sqs)
    assert cleared == {"batchItemFailures": []}
    assert {row["key"] for row in _rows(aws, "flowers")} == {f"data/flowers/daisy/{n}.jpg" for n in "ab"}


@pytest.mark.parametrize("returned", [False, True])
def test_a_throttle_fails_the_message_without_a_queue_or_after_many_returns(
    aws, config, events_dir, monkeypatch, returned
):
    requeues = ingest.MAX_REQUEUES if returned else None
    # GIVEN a.jpg's row write throttled for good, and either no queue to send it back to, or a message
    # that came back MAX_REQUEUES times already
    writer = boto3.client("dynamodb", region_name="us-east-1", config=clients.LEDGER_WRITES)
    _throttle(writer, when="daisy/a.jpg", times=1_000)
    sqs, url = _ingest_queue(aws)
    if requeues is not None:
        config = dataclasses.replace(config, ingest_queue_url=url)
    event = sqs_event([object_created(events_dir, f"data/flowers/daisy/{name}.jpg") for name in "ab"])
    if requeues is not None:
        event["Records"][0]["messageAttributes"] = {
            ingest.REQUEUES_ATTRIBUTE: {"stringValue": str(requeues), "dataType": "Number"}
        }
    # WHEN ingested THEN the message fails as any AWS error does (SQS retries it, then the DLQ and its
    # alarm), and nothing went back on the queue
    response = ingest.ingest(event, config=config, dynamodb=aws.dynamodb, writer=writer, sqs=sqs,
                             patience_seconds=0.2)  # fmt: skip
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-0"}]}
    assert _received(sqs, url) == []


def test_one_thousand_duplicate_deliveries_make_one_row_and_one_run(aws, config, events_dir):
    # GIVEN the same notice delivered 1,000 times, in batches of 10 as SQS delivers them
    body = object_created(events_dir, "data/flowers/daisy/a.jpg")
    # WHEN every batch is ingested and the dispatcher then runs after the quiet period, twice
    for _ in range(100):
        assert _ingest(aws, config, [body] * 10) == {"batchItemFailures": []}
    later = datetime(2026, 1, 1, 11, tzinfo=UTC)
    from controller import dispatch

    first = dispatch.dispatch_all(now=later, config=config, dynamodb=aws.dynamodb, sfn=aws.sfn)
    second = dispatch.dispatch_all(now=later, config=config, dynamodb=aws.dynamodb, sfn=aws.sfn)
    # THEN the ledger has one row and exactly one execution was started
    assert len(_rows(aws, "flowers")) == 1
    assert [o.action for o in first] == ["started"] and [o.action for o in second] == ["busy"]
    assert len(aws.sfn.list_executions(stateMachineArn=aws.state_machine_arn)["executions"]) == 1


@pytest.mark.slow  # ~10,000 conditional puts through moto: about a minute on 2 cores
def test_a_burst_of_ten_thousand_uploads_makes_ten_thousand_rows_and_one_run(aws, config, events_dir):
    # GIVEN 10,000 distinct uploads of one data set within a minute
    template = json.loads(object_created(events_dir, "data/flowers/daisy/x.jpg"))
    bodies = []
    for i in range(10_000):
        template["detail"]["object"]["key"] = f"data/flowers/label{i % 5}/img{i:05d}.jpg"
        template["detail"]["object"]["etag"] = f"{i:032x}"  # distinct bytes
        template["time"] = f"2026-01-01T10:00:{i % 60:02d}Z"
        bodies.append(json.dumps(template))
    # WHEN they are ingested (in large batches, straight through the handler function), and the
    # dispatcher runs both during the burst and after it
    during = datetime(2026, 1, 1, 10, 0, 30, tzinfo=UTC)
    for start in range(0, len(bodies), 1000):
        _ingest(aws, config, bodies[start : start + 1000], sfn=aws.sfn, now=during)
    after = datetime(2026, 1, 1, 10, 5, tzinfo=UTC)
    outcomes = [dispatch_all(aws, config, after) for _ in range(3)]
    # THEN 10,000 pending rows exist and one run was started (its freezing job counts them)
    assert _pending(aws).count == 10_000
    assert [[o.action for o in round_] for round_ in outcomes] == [["started"], ["busy"], ["busy"]]
    executions = aws.sfn.list_executions(stateMachineArn=aws.state_machine_arn)["executions"]
    assert [e["name"] for e in executions] == ["flowers-00001"]


def dispatch_all(aws, config, now):
    from controller import dispatch

    return dispatch.dispatch_all(now=now, config=config, dynamodb=aws.dynamodb, sfn=aws.sfn)


def test_the_lambda_handler_reads_its_environment_and_reports_partial_failures(
    aws, monkeypatch, events_dir, capsys
):
    # GIVEN the environment the template gives the ingest function
    from controller import config as config_module

    env = {
        **function_environment(aws, "IngestFunction"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config_module.get_config.cache_clear()
    from controller.observability import metrics

    metrics.clear_metrics()  # earlier tests called the plain functions, which add but never flush

    class Context:
        function_name = "IngestFunction"
        memory_limit_in_mb = 512
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:IngestFunction"
        aws_request_id = "req-1"

        def get_remaining_time_in_millis(self) -> int:
            return 60_000

    from tests.unit.functions import images

    aws.s3.put_object(Bucket=aws.data_bucket, Key="data/flowers/daisy/a.jpg", Body=images.jpeg())
    try:
        # WHEN SQS delivers a good and a bad upload
        event = sqs_event(
            [
                object_created(events_dir, "data/flowers/daisy/a.jpg", version_id=""),
                object_created(events_dir, "data/x.txt"),
            ]
        )
        response = ingest.handler(event, Context())
    finally:
        config_module.get_config.cache_clear()
    # THEN nothing fails, both are ledgered, and the counts go out as CloudWatch metrics (EMF)
    assert response == {"batchItemFailures": []}
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    [metrics] = [m for m in emf if names.METRIC_ACCEPTED in m]
    assert (metrics[names.METRIC_ACCEPTED], metrics[names.METRIC_REJECTED]) == ([1.0], [1.0])
    assert len(_rows(aws, "flowers")) == 1


def test_an_fsx_completion_report_in_the_data_bucket_is_not_an_upload(aws, config, events_dir):
    # GIVEN FSx wrote an import's completion report inside the linked repository (under data/)
    key = names.fsx_report_prefix("flowers", "flowers-00001") + "/task-1/failures.csv"
    # WHEN its object-created notice is ingested
    response = _ingest(aws, config, [object_created(events_dir, key)])
    # THEN nothing is ledgered: not a pending image, not a rejected upload
    assert response == {"batchItemFailures": []}
    rows = aws.dynamodb.scan(TableName=aws.ledger_table)["Items"]
    assert rows == []


# --- what the bytes are: content, duplicates, conflicts, deletions (uploaded to moto's S3 for real) ------


def _upload(aws, events_dir, key: str, body: bytes, sequencer: str) -> str:
    """Put the object and return its notice, with the ETag and size S3 gave it."""
    put = aws.s3.put_object(Bucket=aws.data_bucket, Key=key, Body=body)
    return object_created(
        events_dir,
        key,
        size=len(body),
        sequencer=sequencer,
        etag=put["ETag"].strip('"'),
        version_id=put.get("VersionId", ""),
    )


def _deleted(events_dir, key: str, sequencer: str) -> str:
    event = json.loads(object_created(events_dir, key, sequencer=sequencer))
    event["detail-type"] = "Object Deleted"
    event["detail"]["reason"] = "DeleteObject"
    return json.dumps(event)


def test_uploads_whose_bytes_are_not_a_usable_image_are_rejected_and_kept(aws, config, events_dir):
    from tests.unit.functions import images

    # GIVEN a good photo and the files users upload by mistake, all well named
    bad = {
        "data/pets/cat/fake.jpg": (b"this is a text file, not a photo\n" * 10, "not an image"),
        "data/pets/cat/cut.jpg": (images.noisy_jpeg(256, 256)[:20_000], "cut off"),
        "data/pets/cat/screen.jpg": (images.png(), "rename it to .png"),
        "data/pets/cat/icon.jpg": (images.jpeg(20, 20), "below MinImageSide 32"),
        "data/pets/cat/bomb.png": (images.png_declaring(100_000, 100_000), "too large to decode"),
    }
    bodies = [_upload(aws, events_dir, "data/pets/cat/good.jpg", images.jpeg(), "01")]
    bodies += [
        _upload(aws, events_dir, key, body, f"0{i + 2}") for i, (key, (body, _)) in enumerate(bad.items())
    ]
    # WHEN ingested, the bytes read from S3
    response = _ingest(aws, config, bodies, s3=aws.s3)
    # THEN the good photo waits for a run; each bad one is rejected as content, with its reason
    assert response == {"batchItemFailures": []}
    rows = {row["key"]: row for row in _rows(aws, "pets")}
    assert rows["data/pets/cat/good.jpg"]["state"] == names.STATE_ACCEPTED
    for key, (_, words) in bad.items():
        assert (rows[key]["state"], rows[key]["problem"]) == (names.STATE_REJECTED, names.PROBLEM_CONTENT)
        assert words in rows[key]["reason"], (key, rows[key]["reason"])
        assert names.LEDGER_PENDING_PK not in rows[key]
    # AND nothing is deleted
    stored = {o["Key"] for o in aws.s3.list_objects_v2(Bucket=aws.data_bucket)["Contents"]}
    assert stored == {"data/pets/cat/good.jpg", *bad}


def test_the_same_bytes_under_another_label_are_a_conflict_and_under_the_same_a_duplicate(
    aws, config, events_dir
):
    from tests.unit.functions import images

    photo = images.jpeg(color=(1, 2, 3))
    first = _upload(aws, events_dir, "data/pets/cat/tom.jpg", photo, "01")
    again = _upload(aws, events_dir, "data/pets/cat/tom (copy).jpg", photo, "02")
    relabelled = _upload(aws, events_dir, "data/pets/lynx/tom.jpg", photo, "03")
    # WHEN the three are ingested, then the first is delivered again (SQS delivers at least once)
    _ingest(aws, config, [first, again, relabelled], s3=aws.s3)
    _ingest(aws, config, [first], s3=aws.s3)
    # THEN the first holds the bytes; the copy is a duplicate and the other label a conflict, both naming it
    rows = {row["key"]: row for row in _rows(aws, "pets")}
    assert set(rows) == {"data/pets/cat/tom.jpg", "data/pets/cat/tom (copy).jpg", "data/pets/lynx/tom.jpg"}
    assert rows["data/pets/cat/tom.jpg"]["state"] == names.STATE_ACCEPTED
    copy, other = rows["data/pets/cat/tom (copy).jpg"], rows["data/pets/lynx/tom.jpg"]
    assert (copy["state"], copy["problem"]) == (names.STATE_REJECTED, names.PROBLEM_DUPLICATE)
    assert (other["state"], other["problem"]) == (names.STATE_REJECTED, names.PROBLEM_CONFLICT)
    assert "data/pets/cat/tom.jpg" in copy["reason"] and "data/pets/cat/tom.jpg" in other["reason"]
    assert "label 'cat'" in other["reason"]


def test_deleting_an_upload_stops_it_being_trained_and_frees_its_bytes(aws, config, events_dir):
    from tests.unit.functions import images

    # GIVEN a photo under the wrong label, and its copy under the right one refused as a conflict
    photo = images.jpeg(color=(9, 9, 9))
    _ingest(aws, config, [_upload(aws, events_dir, "data/pets/cat/x.jpg", photo, "01")], s3=aws.s3)
    _ingest(aws, config, [_upload(aws, events_dir, "data/pets/lynx/x.jpg", photo, "02")], s3=aws.s3)
    # WHEN the user deletes the wrong one (as the conflict's reason said) and uploads the right one again
    aws.s3.delete_object(Bucket=aws.data_bucket, Key="data/pets/cat/x.jpg")
    response = _ingest(aws, config, [_deleted(events_dir, "data/pets/cat/x.jpg", "03")], s3=aws.s3)
    _ingest(aws, config, [_upload(aws, events_dir, "data/pets/lynx/x.jpg", photo, "04")], s3=aws.s3)
    # THEN the deleted row is `removed`, no longer waiting, and the right label's upload is pending
    assert response == {"batchItemFailures": []}
    rows = {row["key"]: row for row in _rows(aws, "pets")}
    assert rows["data/pets/cat/x.jpg"]["state"] == names.STATE_REMOVED
    assert names.LEDGER_PENDING_PK not in rows["data/pets/cat/x.jpg"]
    assert rows["data/pets/lynx/x.jpg"]["state"] == names.STATE_ACCEPTED


def test_a_claim_left_by_a_key_overwritten_with_other_bytes_is_taken_over(aws, config, events_dir):
    from tests.unit.functions import images

    # GIVEN a.jpg uploaded, then overwritten with another photo
    old, new = images.jpeg(color=(5, 5, 5)), images.jpeg(color=(250, 250, 250))
    _ingest(aws, config, [_upload(aws, events_dir, "data/pets/cat/a.jpg", old, "01")], s3=aws.s3)
    _ingest(aws, config, [_upload(aws, events_dir, "data/pets/cat/a.jpg", new, "02")], s3=aws.s3)
    # WHEN the old photo is uploaded under another name
    _ingest(aws, config, [_upload(aws, events_dir, "data/pets/cat/b.jpg", old, "03")], s3=aws.s3)
    # THEN it is not a duplicate: no key holds those bytes any more
    rows = {row["key"]: row for row in _rows(aws, "pets")}
    assert rows["data/pets/cat/b.jpg"]["state"] == names.STATE_ACCEPTED


def test_a_late_deletion_notice_does_not_remove_a_newer_upload(aws, config, events_dir):
    from tests.unit.functions import images

    key = "data/pets/cat/a.jpg"
    _ingest(aws, config, [_upload(aws, events_dir, key, images.jpeg(), "05")], s3=aws.s3)
    _ingest(aws, config, [_deleted(events_dir, key, "03")], s3=aws.s3)
    [row] = _rows(aws, "pets")
    assert row["state"] == names.STATE_ACCEPTED


def test_an_object_deleted_before_it_was_read_is_rejected_not_retried(aws, config, events_dir):
    from tests.unit.functions import images

    body = _upload(aws, events_dir, "data/pets/cat/gone.jpg", images.jpeg(), "01")
    aws.s3.delete_object(Bucket=aws.data_bucket, Key="data/pets/cat/gone.jpg")
    response = _ingest(aws, config, [body], s3=aws.s3)
    assert response == {"batchItemFailures": []}
    [row] = _rows(aws, "pets")
    assert row["state"] == names.STATE_REJECTED and "deleted before it could be read" in row["reason"]


def _seed_pending(aws, dataset, count):
    """`count` accepted rows of `dataset`, written straight into the ledger (bulk, not through ingest)."""
    from controller.runs import serialize

    parts = Partitions(dataset, LEDGER_SHARDS)  # a data set first seen now: no row of its own yet
    rows = [
        {
            names.LEDGER_PK: parts.of(key),
            names.LEDGER_SK: key,
            "label": "cat",
            "state": names.STATE_ACCEPTED,
            "sequencer": "01",
            "recorded_at": "2026-01-01T09:00:00.000000Z",
            names.LEDGER_PENDING_PK: parts.index_of(key),
            names.LEDGER_PENDING_SK: "2026-01-01T09:00:00.000000Z",
        }
        for i in range(count)
        for key in [f"data/{dataset}/cat/seed-{i:06d}.jpg"]
    ]
    for start in range(0, count, 25):
        requests = [{"PutRequest": {"Item": serialize(row)}} for row in rows[start : start + 25]]
        aws.dynamodb.batch_write_item(RequestItems={aws.ledger_table: requests})


def test_an_ingest_batch_reads_the_same_ledger_keys_however_many_uploads_wait(aws, events_dir):
    # GIVEN two data sets, one with 200 uploads waiting for a run and one with 2,000, and a stack that
    # wants 100 new images and an hour's quiet before a run (so neither batch below starts one)
    config = make_config(aws, min_new_images=100, quiet_period_seconds=3600, max_wait_seconds=86_400)
    _seed_pending(aws, "few", 200)
    _seed_pending(aws, "many", 2_000)
    scanned: list[int] = []

    def count(parsed, **_):
        scanned.append(int(parsed.get("ScannedCount", 0)))

    aws.dynamodb.meta.events.register("after-call.dynamodb.Query", count)

    def one_batch(dataset):
        scanned.clear()
        bodies = [object_created(events_dir, f"data/{dataset}/dog/new-{i}.jpg", sequencer=f"{i + 10:04X}")
                  for i in range(10)]  # fmt: skip
        now = datetime(2026, 1, 1, 10, 1, tzinfo=UTC)
        assert _ingest(aws, config, bodies, sfn=aws.sfn, now=now) == {"batchItemFailures": []}
        return sum(scanned)

    # WHEN a batch of 10 uploads is ingested into each (with the dispatch check after it)
    few, many = one_batch("few"), one_batch("many")
    # THEN the batch reads at most MinNewImages index keys and the two edges of each index partition
    # either way, where counting every pending row read 2,000 keys after each batch of the larger one
    bound = 100 + 2 * Partitions("many", LEDGER_SHARDS).index_shards
    assert few <= bound and many <= bound
    assert aws.sfn.list_executions(stateMachineArn=aws.state_machine_arn)["executions"] == []


def test_a_data_sets_uploads_spread_over_its_partitions_and_every_reader_reads_them_all(
    aws, config, events_dir
):
    # GIVEN 160 uploads of one new data set, recorded at two times
    early = [
        object_created(events_dir, f"data/shoes/l{i % 4}/{i:03d}.jpg", time="2026-01-01T10:00:00Z")
        for i in range(80)
    ]
    late = [
        object_created(events_dir, f"data/shoes/l{i % 4}/{i:03d}.jpg", time="2026-01-01T11:00:00Z")
        for i in range(80, 160)
    ]
    # WHEN they are ingested
    assert _ingest(aws, config, early) == _ingest(aws, config, late) == {"batchItemFailures": []}
    # THEN the data set's row fixes its shard count, and its rows, claims and index entries lie in every
    # one of its partition keys, each row's where its key hashes
    parts = _parts(aws, "shoes")
    state = aws.dynamodb.get_item(TableName=aws.datasets_table, Key={"dataset": {"S": "shoes"}})["Item"]
    assert parts == Partitions("shoes", LEDGER_SHARDS) and state["ledger_shards"] == {"N": str(LEDGER_SHARDS)}
    items = aws.dynamodb.scan(TableName=aws.ledger_table)["Items"]
    assert {i["dataset"]["S"] for i in items} == set(parts.all())
    assert all(i["dataset"]["S"] == parts.of(i["key"]["S"]) for i in items)
    pending = [i for i in items if names.LEDGER_PENDING_PK in i]
    assert len(pending) == 160 and {i[names.LEDGER_PENDING_PK]["S"] for i in pending} == set(
        parts.index_all()
    )
    assert all(i[names.LEDGER_PENDING_PK]["S"] == parts.index_of(i["key"]["S"]) for i in pending)
    # AND the readers read every partition: all rows in key order, every pending upload, the edges
    rows = _rows(aws, "shoes")
    assert [r["key"] for r in rows] == sorted(f"data/shoes/l{i % 4}/{i:03d}.jpg" for i in range(160))
    stats = _pending(aws, dataset="shoes")
    assert (stats.count, stats.oldest[:13], stats.newest[:13]) == (160, "2026-01-01T10", "2026-01-01T11")
    assert ledger.pending_stats(parts, "", limit=100, table_name=aws.ledger_table, client=aws.dynamodb) == (
        ledger.PendingStats(100, stats.oldest, stats.newest, at_least=True)
    )


def test_index_entries_written_under_an_earlier_smaller_index_count_are_still_read(aws, config, events_dir):
    # GIVEN a data set's uploads recorded now, and one whose index entry was written when the index had 4
    # keys (the row's shard modulo 4), under a key that shard does not map to today
    _ingest(aws, config, [object_created(events_dir, f"data/shoes/l/{i}.jpg") for i in range(3)])
    parts = _parts(aws, "shoes")
    key = next(
        f"data/shoes/l/old-{i}.jpg"
        for i in range(1000)
        if parts.index_of(f"data/shoes/l/old-{i}.jpg")
        != parts.name(parts.shard(f"data/shoes/l/old-{i}.jpg") % 4)
    )
    aws.dynamodb.put_item(
        TableName=aws.ledger_table,
        Item={
            names.LEDGER_PK: {"S": parts.of(key)},
            names.LEDGER_SK: {"S": key},
            "state": {"S": names.STATE_ACCEPTED},
            names.LEDGER_PENDING_PK: {"S": parts.name(parts.shard(key) % 4)},
            names.LEDGER_PENDING_SK: {"S": "2025-12-31T09:00:00.000000Z"},
        },
    )
    # WHEN the dispatcher's reader counts what waits THEN it counts the old entry too, and it is the oldest
    stats = _pending(aws, dataset="shoes")
    assert (stats.count, stats.oldest) == (4, "2025-12-31T09:00:00.000000Z")


def test_a_data_set_recorded_before_sharding_keeps_its_one_partition(aws, config, events_dir):
    # GIVEN a data set whose rows and row were written before the ledger was sharded: one partition key,
    # the data set's name, and no shard count on its row
    _ingest(aws, config, [object_created(events_dir, "data/old/cat/a.jpg")])
    for item in aws.dynamodb.scan(TableName=aws.ledger_table)["Items"]:
        aws.dynamodb.delete_item(
            TableName=aws.ledger_table, Key={"dataset": item["dataset"], "key": item["key"]}
        )
        aws.dynamodb.put_item(TableName=aws.ledger_table, Item={**item, "dataset": {"S": "old"}} | (
            {names.LEDGER_PENDING_PK: {"S": "old"}} if names.LEDGER_PENDING_PK in item else {}))  # fmt: skip
    aws.dynamodb.update_item(TableName=aws.datasets_table, Key={"dataset": {"S": "old"}},
                             UpdateExpression="REMOVE ledger_shards")  # fmt: skip
    # WHEN another upload of it, and one of the same bytes under another key, arrive
    _ingest(aws, config, [object_created(events_dir, "data/old/cat/b.jpg", sequencer="0B")])
    _ingest(
        aws, config, [object_created(events_dir, "data/old/dog/copy.jpg", etag=_etag("data/old/cat/a.jpg"))]
    )
    # THEN they are written beside the old ones, and the claim written before sharding still holds
    assert _parts(aws, "old") == Partitions("old", 1)
    assert {i["dataset"]["S"] for i in aws.dynamodb.scan(TableName=aws.ledger_table)["Items"]} == {"old"}
    rows = {r["key"]: r for r in _rows(aws, "old")}
    assert set(rows) == {"data/old/cat/a.jpg", "data/old/cat/b.jpg", "data/old/dog/copy.jpg"}
    assert rows["data/old/dog/copy.jpg"]["problem"] == names.PROBLEM_CONFLICT
    assert _pending(aws, dataset="old").count == 2


def test_a_batchs_records_are_read_at_once(aws, config, events_dir):
    # GIVEN S3 that answers each ranged read after a pause, and a batch of 32 well-formed uploads
    from PIL import Image

    bodies = []
    for i in range(32):
        buffer = io.BytesIO()
        Image.new("RGB", (64, 64), (i * 8, 20, 30)).save(buffer, "JPEG")  # bytes of its own
        key = f"data/fast/cat/{i:02d}.jpg"
        put = aws.s3.put_object(Bucket=aws.data_bucket, Key=key, Body=buffer.getvalue())
        bodies.append(object_created(events_dir, key, size=buffer.tell(), etag=put["ETag"].strip('"'),
                                     version_id=""))  # fmt: skip
    reading, most = 0, 0
    lock = threading.Lock()

    def slow_read(**_):
        nonlocal reading, most
        with lock:
            reading += 1
            most = max(most, reading)
        time.sleep(0.2)
        with lock:
            reading -= 1

    aws.s3.meta.events.register("before-call.s3.GetObject", slow_read)
    # WHEN the batch is ingested
    response = _ingest(aws, config, bodies, s3=aws.s3)
    # THEN every upload is recorded, and records' reads overlapped, never more than ingest's threads (how
    # many reached a read together depends on the machine's load: 13 of 16 in a loaded CI run)
    assert response == {"batchItemFailures": []}
    assert len(_rows(aws, "fast")) == 32 and {r["state"] for r in _rows(aws, "fast")} == {"accepted"}
    assert 1 < most <= ingest.RECORD_THREADS
