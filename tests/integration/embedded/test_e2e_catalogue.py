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
from retrain.collect import read_json_object
from retrain.embedded.faults import Faults
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
    with run_to_the_end(tmp_path / "state", Uploads(tmp_path / "unused", files=files), Faults(),
                        overrides=PARAMETERS) as finished:  # fmt: skip
        record = finished.record
        # THEN the run completed through the gate (a noise catalogue learns nothing: the gate may refuse it)
        assert record["status"] in ("SUCCEEDED", "REJECTED"), record.get("failure")
        s3 = finished.stack.client("s3")
        labels = read_json_object(s3, record["labels_uri"], "")
        assert record["label_count"] == len(labels) > 1_000
        assert record["new_images"] == record["manifest_size"] > 2_000
        # AND the record, which DynamoDB holds as one item, points at the per-label facts
        item = finished.stack.client("dynamodb").get_item(
            TableName=finished.outputs[names.STACK_OUTPUTS["runs_table"]],
            Key={"dataset": {"S": record["dataset"]}, "run_id": {"S": record["run_id"]}},
        )["Item"]
        assert len(json.dumps(item).encode()) < 100 * 1024
        counts = read_json_object(s3, record["class_counts_uri"], "")
        assert set(counts["class_counts"]) == set(labels)
        # AND every state of the execution stayed far below 256 KB
        history = finished.stack.client("stepfunctions").get_execution_history(
            executionArn=record["execution_arn"], maxResults=1000
        )["events"]
        sizes = [
            len(str(details.get("input") or details.get("output") or ""))
            for event in history
            for key, details in event.items()
            if key.endswith("EventDetails") and isinstance(details, dict)
        ]
        assert max(sizes) < 64 * 1024
