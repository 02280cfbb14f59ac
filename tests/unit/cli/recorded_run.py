"""A finished run written into the moto account: run record, ledger rows, job logs, evaluation output."""

from __future__ import annotations

import io
import json
import tarfile
import time
from typing import Any

import boto3

from controller import names, runs
from retrain_contract import container as contract
from retrain_contract import ledger

DATASET = "digits"
RUN_ID = "r1"
TUNING_JOB = "digits-r1-tune"
TRIALS = ("digits-r1-tune-001-1a2b3c4d", "digits-r1-tune-002-5e6f7a8b", "digits-r1-tune-003-9c0d1e2f")
BEST = TRIALS[1]
LABELS = ["one", "two", "zero"]
EVALUATION_KEY = names.evaluation_prefix(DATASET, RUN_ID, "challenger") + contract.EVALUATION_FILE
CLASS_COUNTS_KEY = names.frozen_prefix(DATASET, RUN_ID) + contract.FROZEN_CLASS_COUNTS_FILE
ACCEPTED_KEYS = [f"data/{DATASET}/{label}/img-{i}.jpg" for label in LABELS for i in range(3)]
REJECTED = {
    f"data/{DATASET}/notes.txt": "not under data/<dataset>/<label>/",
    f"data/{DATASET}/one/empty.jpg": "zero bytes",
    f"data/{DATASET}/one/fake.jpg": "the bytes are not an image (they start with b'hello')",
    f"data/{DATASET}/two/copy.jpg": "the same bytes are already uploaded under label 'one'",
}
PROBLEMS = {
    f"data/{DATASET}/one/fake.jpg": names.PROBLEM_CONTENT,
    f"data/{DATASET}/two/copy.jpg": names.PROBLEM_CONFLICT,
}
REMOVED_KEY = f"data/{DATASET}/zero/deleted.jpg"
# The run's cut: the rows above were recorded before it; a later wave (the next run's) after it.
CUT = "2026-11-22T04:00:00.000000Z"
BEFORE_CUT = "2026-11-22T03:59:00.000000Z"
LATER_ACCEPTED = [f"data/{DATASET}/two/later-{i}.jpg" for i in range(4)]
LATER_REJECTED = {
    f"data/{DATASET}/two/later-copy.jpg": "the same bytes are already uploaded as two/img-0.jpg"
}
CLASS_COUNTS = {
    "one": {"images": 30, "validation": 6, "train": 24, "train_lines": 24},
    "two": {"images": 5, "validation": 1, "train": 4, "train_lines": 12},
    "zero": {"images": 20, "validation": 4, "train": 16, "train_lines": 16},
}


# The run started from the data set's champion (Prepare records the lineage).
STARTED_FROM = {
    "kind": "champion",
    "uri": "s3://retrain-artifacts-test/runs/digits/r0/output/job/output/model.tar.gz",
    "model_package_arn": "arn:aws:sagemaker:us-east-1:123456789012:model-package/retrain-digits/0",
    "reason": "the data set's champion (run r0)",
}


def record(status: str = "SUCCEEDED", **extra: Any) -> runs.RunRecord:
    base: dict[str, Any] = {
        "dataset": DATASET,
        "run_id": RUN_ID,
        "status": status,
        "trigger": "upload",
        "execution_arn": "",
        "created_at": "2026-11-22T04:00:00Z",
        "cut": CUT,
        "accepted_uploads": len(ACCEPTED_KEYS),
        "new_images": 6,
        "finished_at": "2026-11-22T04:05:30Z",
        "tuning_job": TUNING_JOB,
        "best_training_job": BEST,
        "best_hyperparameters": {"lr": "0.001", "batch-size": "64", "optimizer": "adamw"},
        "best_objective": 0.95,
        "training_seconds": 98,
        "billable_seconds": 30,
        "rule_results": [
            {
                "rule": "LossNotDecreasing",
                "status": "NoIssuesFound",
                "step": 40,
                "detail": "",
                "action": "block",
            },
            {
                "rule": "CPUBottleneck",
                "status": "IssuesFound",
                "step": 12,
                "detail": "CPU p95 97%",
                "action": "warn",
            },
        ],
        "challenger": {
            "top1": 0.95,
            "top3": 0.99,
            "report_uri": f"s3://retrain-artifacts-test/{EVALUATION_KEY}",
        },
        "champion": {"top1": 0.9},
        "checkpoint_evaluations": [
            {"step": 10, "top1": 0.4, "top3": 0.8, "status": "Completed", "training_job": BEST},
            {"step": 20, "top1": 0.8, "top3": 0.95, "status": "Completed", "training_job": BEST},
            {"step": 30, "status": "InProgress"},
        ],
        "gate": {"decision": "accepted", "reason": "challenger top-1 0.950 >= champion 0.900 + 0.010"},
        "model_package_arn": "arn:aws:sagemaker:us-east-1:123456789012:model-package/retrain-digits/1",
        "class_balance": {
            "mode": "oversample",
            "ratio": 0.5,
            "min_images_per_label": 5,
            "small_labels": "exclude",
        },
        "label_count": len(CLASS_COUNTS),
        "class_counts_uri": f"s3://retrain-artifacts-test/{CLASS_COUNTS_KEY}",
        "excluded_label_count": 1,
        "excluded_labels": {"lynx": "2 image(s), below MinImagesPerLabel 5; upload more images of it"},
        "rejected_uploads": {"conflict": 1, "content": 1, "layout": 2},
        "unreadable_images": [{"key": f"data/{DATASET}/zero/img-2.jpg", "reason": "image file is truncated"}],
        "started_from": STARTED_FROM,
    }
    base.update(extra)
    return runs.RunRecord(**base)  # type: ignore[typeddict-item]


def write_later_wave(stack: Any, at: str = "2026-11-22T04:03:00.000000Z", *, wave: str = "") -> None:
    """Uploads recorded after the run's cut (the next run's): accepted, and a refused copy."""
    dynamodb = boto3.client("dynamodb")
    parts = ledger.Partitions(DATASET, ledger.LEDGER_SHARDS)
    for template in LATER_ACCEPTED:
        key = template.replace("later-", f"later{wave}-")
        item = {names.LEDGER_PK: parts.of(key), names.LEDGER_SK: key, "state": names.STATE_ACCEPTED,
                ledger.RECORDED_AT: at}  # fmt: skip
        dynamodb.put_item(TableName=stack.output("ledger_table"), Item=runs.serialize(item))
    for template, reason in LATER_REJECTED.items():
        key = template.replace("later-", f"later{wave}-")
        item = {names.LEDGER_PK: parts.of(key), names.LEDGER_SK: key, "state": names.STATE_REJECTED,
                "reason": reason, "problem": names.PROBLEM_DUPLICATE, ledger.RECORDED_AT: at}  # fmt: skip
        dynamodb.put_item(TableName=stack.output("ledger_table"), Item=runs.serialize(item))


def write(stack: Any, run: runs.RunRecord | None = None) -> runs.RunRecord:
    run = run or record()
    dynamodb = boto3.client("dynamodb")
    runs.put_run(run, table_name=stack.output("runs_table"), client=dynamodb)
    parts = ledger.Partitions(DATASET, ledger.LEDGER_SHARDS)  # a data set first seen by this stack
    for key in ACCEPTED_KEYS:
        item = {names.LEDGER_PK: parts.of(key), names.LEDGER_SK: key, "state": names.STATE_ACCEPTED,
                ledger.RECORDED_AT: BEFORE_CUT}  # fmt: skip
        dynamodb.put_item(TableName=stack.output("ledger_table"), Item=runs.serialize(item))
    for key, reason in REJECTED.items():
        item = {
            names.LEDGER_PK: parts.of(key),
            names.LEDGER_SK: key,
            "state": names.STATE_REJECTED,
            "reason": reason,
            "problem": PROBLEMS.get(key, names.PROBLEM_LAYOUT),
            ledger.RECORDED_AT: BEFORE_CUT,
        }
        dynamodb.put_item(TableName=stack.output("ledger_table"), Item=runs.serialize(item))
    removed = {
        names.LEDGER_PK: parts.of(REMOVED_KEY),
        names.LEDGER_SK: REMOVED_KEY,
        "state": names.STATE_REMOVED,
        ledger.RECORDED_AT: BEFORE_CUT,
    }
    dynamodb.put_item(TableName=stack.output("ledger_table"), Item=runs.serialize(removed))
    write_later_wave(stack)
    logs = boto3.client("logs")
    logs.create_log_group(logGroupName="/aws/sagemaker/TrainingJobs")
    for index, job in enumerate(TRIALS):
        stream = f"{job}/algo-1-1763784000"
        logs.create_log_stream(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream)
        lines = ["starting training"]
        for step in (5, 10, 15, 20):
            loss = 2.0 / (step * (index + 1))
            lines.append(
                contract.format_metric(contract.METRIC_TRAIN_LOSS, loss, epoch=step // 10, step=step)
            )
            if step % 10 == 0:
                lines.append(
                    contract.format_metric(contract.METRIC_VAL_LOSS, loss * 1.1, epoch=step // 10, step=step)
                )
        if index < 2:
            lines.append("resumed from ckpt-000000010.pt at epoch 1 batch 0 (step 10)")
        now_ms = int(time.time() * 1000)
        events = [{"timestamp": now_ms + i, "message": line} for i, line in enumerate(lines)]
        logs.put_log_events(
            logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream, logEvents=events
        )
    evaluation = {
        "top1": 0.95,
        "top3": 0.99,
        "labels": LABELS,
        "per_class": {label: {"precision": 0.9, "recall": 0.95, "support": 20} for label in LABELS},
        "confusion_matrix": [[19, 1, 0], [0, 20, 0], [1, 0, 19]],
        "baseline": {"top1": 0.9, "top3": 0.97},
        "checkpoint_step": None,
    }
    s3 = boto3.client("s3")
    counts = {"class_counts": CLASS_COUNTS, "excluded_labels": run.get("excluded_labels", {})}
    s3.put_object(
        Bucket=stack.output("artifact_bucket"), Key=CLASS_COUNTS_KEY, Body=json.dumps(counts).encode()
    )
    s3.put_object(
        Bucket=stack.output("artifact_bucket"), Key=EVALUATION_KEY, Body=json.dumps(evaluation).encode()
    )
    s3.put_object(
        Bucket=stack.output("artifact_bucket"),
        Key=f"runs/{DATASET}/{RUN_ID}/output/{BEST}/output/output.tar.gz",
        Body=_output_tarball(),
    )
    return run


def _output_tarball() -> bytes:
    """What the container ships in output.tar.gz: a system profile written by the container's own
    profiler over a few short steps."""
    import tempfile
    from pathlib import Path

    from retrain_training.profiler import SystemProfiler

    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory() as work:
        profile_dir = Path(work) / contract.PROFILE_DIRNAME
        with SystemProfiler(profile_dir, interval_s=0.01) as profiler:
            for step in range(1, 6):
                time.sleep(0.01)
                profiler.step(step, data_wait_s=0.002, compute_s=0.008)
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            archive.add(profile_dir, arcname=contract.PROFILE_DIRNAME)
    return buffer.getvalue()
