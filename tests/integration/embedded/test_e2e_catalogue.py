"""Done-when test of a catalogue on the enforcing embedded stack: thousands of long label names go through
the whole flow (uploads, ingest, dispatch, the freezing job, tuning, rules, evaluation, gate, registry,
finalize) inside Step Functions' 256 KB state and DynamoDB's 400 KB item.

1,500 labels of 64 characters (the longest a label may be), two images each. Before the manifest was
frozen on a Processing job the label list travelled in $.run (about 100 KB of names) and, with the
per-class counts, in the run record (about 300 KB); at 20,000 labels both are far past Step Functions'
256 KB and DynamoDB's 400 KB.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest
from PIL import Image

from controller import names
from retrain.embedded.faults import Faults
from retrain.report.collect import read_json_object
from retrain_contract import container
from tests.integration.embedded.flow import Uploads, run_to_the_end

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LABELS = 1_500
PER_LABEL = 2
PARAMETERS = {
    "Epochs": "1",
    "MaxTuningJobs": "1",
    "MaxParallelTuningJobs": "1",
    "CheckpointEvaluationEvery": "0",
    "MaxWaitSeconds": "3600",
    "MinImagesPerLabel": "2",
}


def label_name(index: int) -> str:
    name = f"product-category-{index:05d}-"
    return name + "x" * (names.MAX_LABEL_LENGTH - len(name))


def _catalogue() -> dict[str, bytes]:
    """Two distinct 32 x 32 photos-to-be (noise) per label."""
    rng = random.Random(7)
    files = {}
    for index in range(LABELS):
        for copy in range(PER_LABEL):
            image = Image.frombytes("RGB", (32, 32), rng.randbytes(32 * 32 * 3))
            buffer = io.BytesIO()
            image.save(buffer, "PNG")
            files[f"{label_name(index)}/{copy}.png"] = buffer.getvalue()
    return files


def test_thousands_of_long_label_names_run_through_the_whole_flow(tmp_path: Path) -> None:
    files = _catalogue()
    assert {len(key.split("/")[0]) for key in files} == {names.MAX_LABEL_LENGTH}
    # no spot interruption: its resumption is test_e2e.py's subject, and here it would restart the trial
    # with its 3,000 images for nothing this test reads
    with run_to_the_end(tmp_path / "state", Uploads(tmp_path / "unused", files=files), Faults(),
                        overrides=PARAMETERS, interruptions=0) as finished:  # fmt: skip
        record = finished.record
        # THEN the run completed through the gate (a noise catalogue learns nothing: the gate may refuse it)
        assert record["status"] in ("SUCCEEDED", "REJECTED"), record.get("failure")
        s3 = finished.stack.client("s3")
        labels = read_json_object(s3, record["labels_uri"], "")
        # exactly the uploaded labels that kept a training image (a label whose two images both hash into
        # validation is set aside, and its images wait), and every image of those
        uploaded = sorted({key.split("/")[0] for key in files})
        trainable = sorted(
            {
                key.split("/")[0]
                for key in files
                if not container.in_validation(key, container.VAL_FRACTION_DEFAULT)
            }
        )
        assert len(uploaded) == LABELS and len(trainable) > 0.9 * LABELS
        assert labels == trainable and record["label_count"] == len(trainable)
        assert record["new_images"] == record["manifest_size"] == PER_LABEL * len(trainable)
        # AND the record, which DynamoDB holds as one item, points at the per-label facts
        item = finished.stack.client("dynamodb").get_item(
            TableName=finished.outputs[names.STACK_OUTPUTS["runs_table"]],
            Key={"dataset": {"S": record["dataset"]}, "run_id": {"S": record["run_id"]}},
        )["Item"]
        assert len(json.dumps(item).encode()) < 100 * 1024
        counts = read_json_object(s3, record["class_counts_uri"], "")
        assert set(counts["class_counts"]) == set(labels)
        # AND every state of the execution, on every page of its history, stayed far below 256 KB (in
        # bytes, as Step Functions counts them) and named no more than a sample of the labels: its size does
        # not grow with them
        pages = finished.stack.client("stepfunctions").get_paginator("get_execution_history")
        history = [
            event
            for page in pages.paginate(
                executionArn=record["execution_arn"], PaginationConfig={"PageSize": 25}
            )
            for event in page["events"]
        ]
        # (pages of 25 events: the whole history is several, from the start to the execution's end)
        assert len(history) > 25 and history[0]["type"] == "ExecutionStarted"
        assert history[-1]["type"] in ("ExecutionSucceeded", "ExecutionFailed")
        documents = [
            str(details.get("input") or details.get("output") or "")
            for event in history
            for key, details in event.items()
            if key.endswith("EventDetails") and isinstance(details, dict)
        ]
        assert max(len(document.encode()) for document in documents) < 64 * 1024
        # (the labels a state names are a bounded sample, the notification's 20 of those set aside)
        named = [label for label in uploaded if any(label in document for document in documents)]
        assert len(named) <= 20 and set(named) <= set(uploaded) - set(trainable)
