"""Done-when test of data trust on the embedded stack: bad uploads are refused and explained, a skewed data
set trains boosted, a small label is set aside, and the run still succeeds on the good images.

The uploads: 60 zeros, 60 ones, 6 twos (10:1), 2 threes (below MinImagesPerLabel 5), and the files users
upload by mistake: a text file named .jpg, a JPEG cut in half, a PNG named .jpg, a 16x16 icon, a PNG whose
header declares 10^10 pixels, a zero under label one, and a JPEG whose header is fine but whose data is not
(only training's full decode finds it). ClassBalance=oversample, ratio 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controller import names
from retrain import local
from retrain.demo import data as demo_data
from retrain.embedded.faults import Faults
from retrain.embedded.stack import EmbeddedStack
from retrain.report import job_logs
from retrain.report.build import write_report
from retrain.report.collect import collect, read_json_object
from retrain_contract import container
from tests.integration.embedded.flow import DATASET, Uploads, run_to_the_end
from tests.unit.functions import images

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARAMETERS = {
    "ClassBalance": "oversample",
    "ClassBalanceRatio": "1",
    "MinImagesPerLabel": "5",
    "Epochs": "1",
    "MaxTuningJobs": "2",
    "CheckpointEvaluationEvery": "0",
}
PER_LABEL = {"zero": 60, "one": 60, "two": 6, "three": 2}


def _uploads(folder: Path) -> tuple[dict[str, bytes], dict[str, tuple[str, str]]]:
    """(every upload, the refused ones: <label>/<file> -> (problem, words of the reason))."""
    files = demo_data.write_digits(folder, limit=700).files
    good: dict[str, bytes] = {}
    for path in files:
        label = path.parent.name
        if sum(1 for k in good if k.startswith(label + "/")) < PER_LABEL.get(label, 0):
            good[f"{label}/{path.name}"] = path.read_bytes()
    zero = next(body for key, body in good.items() if key.startswith("zero/"))
    bad = {
        "zero/fake.jpg": (b"lab notebook, page 3: re-scan the batch\n" * 30, ("content", "not an image")),
        "one/cut.jpg": (images.noisy_jpeg(128, 128)[:6000], ("content", "cut off")),
        "one/screenshot.jpg": (images.png(64, 64), ("content", "rename it to .png")),
        "two/icon.jpg": (images.jpeg(16, 16), ("content", "below MinImageSide 32")),
        "zero/bomb.png": (images.png_declaring(100_000, 100_000), ("content", "too large to decode")),
        "one/zero-again.jpg": (zero, ("conflict", "under label 'zero'")),
    }
    uploads = {**good, **{key: body for key, (body, _) in bad.items()}}
    uploads["zero/corrupt.jpg"] = images.broken_huffman_jpeg()  # passes ingest; training cannot decode it
    return uploads, {key: why for key, (_, why) in bad.items()}


def _subscribe(stack: EmbeddedStack, outputs: dict[str, str]) -> None:
    """A queue on the notification topic, as a user's e-mail subscription would receive it."""
    sqs = stack.client("sqs")
    url = sqs.create_queue(QueueName="notifications-test")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    topic = outputs[names.STACK_OUTPUTS["topic"]]
    stack.client("sns").subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)


def _notifications(stack: EmbeddedStack) -> list[str]:
    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName="notifications-test")["QueueUrl"]
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [str(json.loads(m["Body"]).get("Message", m["Body"])) for m in messages]


def test_bad_uploads_are_explained_and_a_skewed_set_trains_boosted(tmp_path: Path) -> None:
    uploads, refused = _uploads(tmp_path / "digits")
    good = len(uploads) - len(refused)
    with run_to_the_end(
        tmp_path / "state",
        Uploads(tmp_path / "unused", count=good, files=uploads),
        Faults(),
        overrides=PARAMETERS,
        before_upload=_subscribe,
        interruptions=0,  # spot resumption is test_e2e.py's subject, not this one's
    ) as run:
        record: dict[str, Any] = dict(run.record)
        # THEN the run succeeded on the good images
        assert record["status"] == "SUCCEEDED", record.get("failure")
        ledger = _ledger(run.stack, run.outputs)
        # AND each refused upload is a rejected row with its problem and reason
        for relative, (problem, words) in refused.items():
            row = ledger[names.upload_key(DATASET, *relative.split("/"))]
            assert (row["state"], row["problem"]) == ("rejected", problem), row
            assert words in row["reason"], row["reason"]
        # AND nothing was deleted
        bucket = run.outputs[names.STACK_OUTPUTS["data_bucket"]]
        listed = run.stack.client("s3").list_objects_v2(Bucket=bucket, Prefix=names.dataset_prefix(DATASET))
        stored = {o["Key"] for o in listed.get("Contents", [])}
        assert {names.upload_key(DATASET, *k.split("/")) for k in uploads} <= stored
        # AND the small label was set aside: its images stay accepted, for every later run to look at again,
        # and the data set's watermark passed them (they no longer wait for a run)
        assert set(record["excluded_labels"]) == {"three"}
        small = [r for k, r in ledger.items() if "/three/" in k]
        assert {r["state"] for r in small} == {"accepted"}
        row = run.stack.client("dynamodb").get_item(
            TableName=run.outputs[names.STACK_OUTPUTS["datasets_table"]],
            Key={names.DATASETS_PK: {"S": DATASET}},
            ConsistentRead=True,
        )["Item"]
        assert row[names.TRAINED_THROUGH]["S"] == record["cut"] > max(r["recorded_at"] for r in small)
        # AND the rare class was boosted to the largest's training lines; validation was not
        counts = read_json_object(run.stack.client("s3"), record["class_counts_uri"], "")["class_counts"]
        assert (
            counts["two"]["train_lines"] == max(c["train"] for c in counts.values()) > counts["two"]["train"]
        )
        # AND the container trained on the repeated lines (its own count of training and validation images,
        # less the file it could not decode, a zero: the largest class, so never repeated)
        in_validation = container.in_validation("zero/corrupt.jpg", container.VAL_FRACTION_DEFAULT)
        train_lines = sum(c["train_lines"] for c in counts.values()) - (0 if in_validation else 1)
        validation = sum(c["validation"] for c in counts.values()) - (1 if in_validation else 0)
        logs = job_logs.log_lines(
            run.stack.client("logs"), job_logs.TRAINING_LOG_GROUP, record["best_training_job"]
        )
        said = f"{train_lines} training and {validation} validation images"
        assert any(said in line for line in logs), [line for line in logs if "validation images" in line]
        # AND the file only training could decode went back into the run record, with the decoder's reason
        corrupt = names.upload_key(DATASET, "zero", "corrupt.jpg")
        assert [u["key"] for u in record["unreadable_images"]] == [corrupt]
        assert "broken data stream" in record["unreadable_images"][0]["reason"]
        # AND the notification counts each kind and says where the details are
        [message] = [m for m in _notifications(run.stack) if record["run_id"] in m]
        assert "Uploads refused and left in the bucket: 6 (1 conflict, 5 content)" in message
        assert "Labels set aside from this run (1): three" in message
        assert "Images training could not decode: 1" in message
        # AND every request of every role was allowed: ingest may read what it checks
        assert run.stack.gatekeeper.denied() == []
        # AND the report lists every refused file, the counts before and after boosting, and the unreadable
        deployment = local.connect_local(run.stack.endpoint_url, run.stack.stack_name)
        facts = collect(deployment, run.record, out_dir=tmp_path / "report")
        text = write_report(facts, tmp_path / "report").read_text()
    for relative, (problem, _) in refused.items():
        assert f"| `{names.upload_key(DATASET, *relative.split('/'))}` | {problem} |" in text
    two = counts["two"]
    assert f"| two | {two['images']} | {two['validation']} | {two['train']} | {two['train_lines']} |" in text
    assert f"| `{corrupt}` |" in text and "| three |" in text


def _ledger(stack: EmbeddedStack, outputs: dict[str, str]) -> dict[str, dict[str, Any]]:
    from controller import datasets, ledger

    table, dynamodb = outputs[names.STACK_OUTPUTS["ledger_table"]], stack.client("dynamodb")
    parts = datasets.partitions(
        DATASET, table_name=outputs[names.STACK_OUTPUTS["datasets_table"]], client=dynamodb
    )
    return {r["key"]: r for r in ledger.rows(parts, table_name=table, client=dynamodb)}
