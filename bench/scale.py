"""Catalogue scale, control plane: what each Lambda step costs as the data set and its labels grow.

A data set's ledger is seeded straight into the embedded stack's DynamoDB (bulk, not through ingest), and
the control-plane steps run as the state machine and the schedule run them, through the embedded Lambda
runtime (the template's handlers, `sam build`'s packages, each function's Timeout and MemorySize):
Prepare the run, Read the frozen manifest, Finalize the run, the dispatcher, and ingest. The freezing
job's summary, which "Read the frozen manifest" reads, is made by the job's own code
(training_image/retrain_training/freeze.py) over the same rows; its time is reported apart, as it runs
on a SageMaker Processing instance, not in a Lambda.

Per step: the worker process's CPU seconds and peak resident memory (the Lambda's own cost: moto's time
to answer is the emulation's, and moto scans a whole index where DynamoDB reads only what a query
returns), the wall time, the AWS requests the function's role made, the largest payload (the state in
or out), and afterwards the largest item (the run record, the data set's row).

    .venv/bin/python bench/scale.py [--sizes 10000 100000 1000000] [--new 10000] \\
        [--labels 10 1000 20000] [--pending 1000 100000] [--append BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import results
from controller import names
from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain_contract import balance, container, ledger
from retrain_training import freeze

ROOT = Path(__file__).resolve().parent.parent

LABEL_LENGTH = 60
IMAGE_BYTES = 150_000  # a photo's JPEG
WATERMARK = "2026-01-01T10:00:00.000000Z"
OLD, NEW = "2026-01-01T09:00:00.000000Z", "2026-01-01T11:00:00.000000Z"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The bench invokes each step itself: the schedule must not start runs of the seeded data sets meanwhile.
PARAMETERS = {
    "DispatchSchedule": "rate(1 day)",
    "MinNewImages": "100",
    "QuietPeriodSeconds": "86400",
    "MaxWaitSeconds": "864000",
}


def counting_stack(state_dir: Path) -> Any:
    """The embedded stack, counting the signed requests of each access key (one per role). Imported by
    name: the bench's type check does not follow the emulation's modules."""
    base: Any = importlib.import_module("retrain.embedded.stack").EmbeddedStack

    class CountingStack(base):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.requests: Counter[str] = Counter()

        def _before_request(self, access_key: str, service: str) -> None:
            self.requests[access_key] += 1
            super()._before_request(access_key, service)

    return CountingStack(state_dir, parameter_overrides=PARAMETERS)


def labels_of(count: int) -> list[str]:
    return [f"category-{i:06d}-".ljust(LABEL_LENGTH, "x") for i in range(count)]


def seed(dataset: str, total: int, new: int, labels: list[str], table: str) -> list[dict[str, Any]]:
    """`total` accepted rows straight into moto's table, the last `new` recorded after the watermark."""
    from moto.dynamodb.models import dynamodb_backends

    backend = dynamodb_backends[ACCOUNT_ID][REGION]
    parts = ledger.Partitions(dataset, ledger.LEDGER_SHARDS)  # a data set first seen now
    rows = []
    for i in range(total):
        label = labels[i % len(labels)]
        at = NEW if i >= total - new else OLD
        key = f"data/{dataset}/{label}/{i:08d}.jpg"
        row = {
            ledger.PK: parts.of(key),
            ledger.SK: key,
            ledger.LABEL: label,
            ledger.STATE: ledger.STATE_ACCEPTED,
            ledger.RECORDED_AT: at,
            names.LEDGER_PENDING_PK: parts.index_of(key),
            names.LEDGER_PENDING_SK: at,
            "sequencer": "01",
            "size": IMAGE_BYTES,
        }
        backend.put_item(
            table, {k: ({"N": str(v)} if isinstance(v, int) else {"S": v}) for k, v in row.items()}
        )
        rows.append(row)
    return rows


@dataclass
class Step:
    name: str
    cpu_s: float
    peak_mb: float
    wall_s: float
    requests: int
    largest_payload: int


class Bench:
    def __init__(self, stack: Any) -> None:
        self.stack = stack
        assert stack.runtime is not None
        self.runtime = stack.runtime
        outputs = stack.client("cloudformation").describe_stacks(StackName=stack.stack_name)["Stacks"][0]
        self.outputs = {o["OutputKey"]: o["OutputValue"] for o in outputs["Outputs"]}
        self.s3 = stack.client("s3")
        self.dynamodb = stack.client("dynamodb")

    def output(self, key: str) -> str:
        return self.outputs[names.STACK_OUTPUTS[key]]

    def function(self, logical_id: str) -> Any:
        return next(s for s in self.runtime.functions.values() if s.logical_id == logical_id)

    def invoke(self, logical_id: str, payload: Any) -> tuple[Any, Step]:
        """One invocation in a fresh worker: its CPU, peak memory, wall time, requests and payloads."""
        spec = self.function(logical_id)
        key, _ = self.stack.gatekeeper.credentials(spec.role_arn)
        before = self.stack.requests[key]
        began = time.monotonic()
        try:
            result = self.runtime.invoke(spec.name, payload)
        except Exception as error:
            # moto answers a query of an index by scanning and sorting every item of the table: with a
            # million rows that alone can outlast a Timeout, where DynamoDB reads only what it returns
            wall = time.monotonic() - began
            requests = self.stack.requests[key] - before
            return None, Step(f"{logical_id} ({error})", float("nan"), float("nan"), wall, requests, 0)
        wall = time.monotonic() - began
        cpu, peak = self.worker_usage(spec.name)
        size = max(len(json.dumps(payload).encode()), len(json.dumps(result).encode()))
        return result, Step(logical_id, cpu, peak, wall, self.stack.requests[key] - before, size)

    def worker_usage(self, name: str) -> tuple[float, float]:
        """CPU seconds and peak RSS (MiB) of the function's newest worker process."""
        workers = getattr(self.runtime, "_idle", {}).get(name) or []
        pid = workers[-1].process.pid
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(stat[11]) + int(stat[12])) / CLOCK_TICKS
        hwm = next(
            line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM")
        )
        # a fresh worker per measurement: the next invocation starts from a new process
        workers.pop().kill()
        return cpu, int(hwm.split()[1]) / 1024

    def frozen_summary(
        self, run: dict[str, Any], rows: list[dict[str, Any]], policy: balance.Policy
    ) -> tuple[float, dict[str, Any]]:
        """What the freezing job writes, made by its own code over the seeded rows; its seconds, and what
        an evaluation downloads before and after it read the split's ManifestFile."""
        began = time.monotonic()
        frozen = freeze.freeze(
            rows,
            dataset=run["dataset"],
            cut=run["cut"],
            trained_through=run["trained_through"],
            policy=policy,
        )
        with tempfile.TemporaryDirectory() as work:
            data_uri = run["data_s3_uri"]
            freeze.write(
                frozen, manifest_dir=Path(work) / "m", frozen_dir=Path(work) / "f", data_uri=data_uri
            )
            seconds = time.monotonic() - began
            summary = frozen.summary
            manifest = (Path(work) / "m" / container.MANIFEST_FILE).stat().st_size
            lines = (
                (Path(work) / "f" / container.VALIDATION_LINES_DIR / container.MANIFEST_FILE).stat().st_size
            )
            downloads = {
                # an S3Prefix of the data set and the whole manifest, onto a fixed 30 GB volume
                "before_bytes": summary["data_bytes"] + manifest,
                "before_volume_gb": 30,
                # the split's images (ManifestFile) and its manifest lines, on a volume sized to them
                "after_bytes": summary["validation_bytes"] + lines,
                "after_volume_gb": container.evaluation_volume_gb(summary["validation_bytes"]),
            }
            for directory, uri in (
                (Path(work) / "m", run["manifest_s3_uri"]),
                (Path(work) / "f", run["frozen_s3_uri"]),
            ):
                bucket, _, prefix = uri.removeprefix("s3://").partition("/")
                for file in (f for f in directory.rglob("*") if f.is_file()):
                    key = prefix + file.relative_to(directory).as_posix()
                    self.s3.put_object(Bucket=bucket, Key=key, Body=file.read_bytes())
        return seconds, downloads

    def item_size(self, table: str, key: dict[str, str]) -> int:
        item = self.dynamodb.get_item(TableName=table, Key={k: {"S": v} for k, v in key.items()})["Item"]
        return len(json.dumps(item).encode())

    def run(self, dataset: str, total: int, new: int, labels: int) -> dict[str, Any]:
        """Seed, then Prepare, the freezing job's summary, Read the frozen manifest, Finalize, dispatch."""
        table = self.output("ledger_table")
        rows = seed(dataset, total, new, labels_of(labels), table)
        self.dynamodb.put_item(
            TableName=self.output("datasets_table"),
            Item={"dataset": {"S": dataset}, names.TRAINED_THROUGH: {"S": WATERMARK}},
        )
        run_id = f"{dataset}-00001"
        event = {
            "input": {"dataset": dataset},
            "execution_name": run_id,
            "execution_arn": f"arn:aws:states:{REGION}:{ACCOUNT_ID}:execution:bench:{run_id}",
        }
        state, prepare = self.invoke("PrepareRunFunction", event)
        arguments = state["run"]["freeze_arguments"]
        policy = balance.Policy(**json.loads(arguments[arguments.index("--policy") + 1]))
        freeze_s, downloads = self.frozen_summary(state["run"], rows, policy)
        state, read = self.invoke("ReadFrozenManifestFunction", state)
        decision = {"decision": "accepted", "reason": "bench", "top1": 0.9}
        final = {
            "run": state["run"],
            "model": {"model_data": "s3://x/model.tar.gz"},
            "gate": decision,
            "registered": {"model_package_arn": ""},
            "import": state["import"],
        }
        _, finalize = self.invoke("FinalizeRunFunction", final)
        _, dispatch = self.invoke(
            "DispatchFunction", {"source": "aws.events", "detail-type": "Scheduled Event"}
        )
        record = self.item_size(self.output("runs_table"), {"dataset": dataset, "run_id": run_id})
        row = self.item_size(self.output("datasets_table"), {"dataset": dataset})
        return {
            "dataset": dataset,
            "images": total,
            "new": new,
            "labels": labels,
            "freeze_s": freeze_s,
            "steps": [prepare, read, finalize, dispatch],
            "record_bytes": record,
            "dataset_row_bytes": row,
            "new_images": state["run"]["new_images"],
            "size": state["run"]["manifest_size"],
            "downloads": downloads,
        }

    def ingest_cost(self, pending: int, uploads: int = 10) -> Step:
        """One SQS batch of `uploads` new images into a data set with `pending` uploads waiting."""
        import io

        from PIL import Image

        dataset = f"ingest{pending}"
        seed(dataset, pending, pending, labels_of(2), self.output("ledger_table"))
        bucket = self.output("data_bucket")
        # the bench hands ingest its batch itself: the bucket's own notices would run it a second time, in
        # the background, under the same role whose requests are counted
        self.s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={})
        # S3's Object Created event as EventBridge delivers it (the tests' fixture), one per upload
        template = json.loads((ROOT / "tests" / "events" / "eventbridge_object_created.json").read_text())
        bodies = []
        for i in range(uploads):
            buffer = io.BytesIO()
            Image.new("RGB", (64, 64), (i * 20, 30, 200)).save(buffer, "JPEG")  # distinct bytes
            key = f"data/{dataset}/{labels_of(2)[i % 2]}/upload-{i}.jpg"
            put = self.s3.put_object(Bucket=bucket, Key=key, Body=buffer.getvalue())
            detail = {
                "key": key,
                "size": buffer.tell(),
                "etag": put["ETag"].strip('"'),
                "sequencer": f"{i + 1:018X}",
                "version-id": put.get("VersionId", ""),
            }
            notice = {**template, "time": NEW, "detail": {**template["detail"], "object": detail}}
            notice["detail"]["bucket"] = {"name": bucket}
            bodies.append(json.dumps(notice))
        records = [
            {
                "messageId": f"m-{i}",
                "receiptHandle": f"r-{i}",
                "body": body,
                "attributes": {},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:ingest",
                "awsRegion": REGION,
            }
            for i, body in enumerate(bodies)
        ]
        result, step = self.invoke("IngestFunction", {"Records": records})
        assert result == {"batchItemFailures": []}, result
        return step


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| images | new | labels | step | Lambda CPU s | peak MiB | wall s | AWS requests "
        "| largest payload KiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        for s in r["steps"]:
            lines.append(
                f"| {r['images']:,} | {r['new']:,} | {r['labels']:,} | {s.name} | {s.cpu_s:.2f} | "
                f"{s.peak_mb:.0f} | {s.wall_s:.2f} | {s.requests} | {s.largest_payload / 1024:.1f} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--new", type=int, default=10_000)
    parser.add_argument("--labels", type=int, nargs="+", default=[10, 1_000, 20_000])
    parser.add_argument("--label-images", type=int, default=100_000, help="images of the label-count runs")
    parser.add_argument("--all-new", type=int, default=1_000_000, help="a run whose images are all new")
    parser.add_argument("--pending", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--append", type=Path)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]

    def fresh(action: Any) -> Any:
        """`action` on a stack of its own: moto answers a query of an index by scanning every item of
        its table, so a stack holding one data set keeps the emulation's cost out of the larger ones."""
        with tempfile.TemporaryDirectory() as state:
            stack = counting_stack(Path(state))
            stack.start()
            try:
                return action(Bench(stack))
            finally:
                stack.stop(save=False)  # a snapshot of a million rows is not what is measured

    by_size = [fresh(lambda b, n=n: b.run(f"size{n}", n, min(args.new, n), 10)) for n in args.sizes]
    by_labels = [
        fresh(lambda b, n=n: b.run(f"labels{n}", args.label_images, args.new, n)) for n in args.labels
    ]
    all_new = [fresh(lambda b: b.run("allnew", args.all_new, args.all_new, 10))] if args.all_new else []
    ingest = [(p, fresh(lambda b, p=p: b.ingest_cost(p))) for p in args.pending]
    load_after = os.getloadavg()[0]
    section = [
        f"## Catalogue scale, control plane (bench/scale.py, {results.when()})",
        "",
        results.machine_line(load_before, load_after),
        "",
        "### Per run, as the data set grows (10 labels of 60 characters)",
        "",
        table(by_size),
        "",
        "### Per run, as the labels grow",
        "",
        table(by_labels),
        "",
    ]
    if all_new:
        section += ["### A run whose images are all new", "", table(all_new), ""]
    section += [
        "### Largest item after the run (bytes, DynamoDB JSON)",
        "",
        "| images | labels | run record | data set row | freezing job s (its own code, this machine) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in by_size + by_labels + all_new:
        section.append(
            f"| {r['images']:,} | {r['labels']:,} | {r['record_bytes']:,} | {r['dataset_row_bytes']:,} "
            f"| {r['freeze_s']:.1f} |"
        )
    section += [
        "",
        f"### What one evaluation job downloads ({IMAGE_BYTES // 1000} KB images; issue 29)",
        "",
        "| images | before: bytes | before: volume GB | after: bytes | after: volume GB |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in by_size + all_new:
        d = r["downloads"]
        section.append(
            f"| {r['images']:,} | {d['before_bytes'] / 2**30:.2f} GiB | {d['before_volume_gb']} "
            f"| {d['after_bytes'] / 2**30:.2f} GiB | {d['after_volume_gb']} |"
        )
    section += [
        "",
        "### Ingest: one SQS batch of 10 uploads",
        "",
        "| uploads pending | Lambda CPU s | peak MiB | wall s | AWS requests | per upload |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for pending, step in ingest:
        section.append(
            f"| {pending:,} | {step.cpu_s:.2f} | {step.peak_mb:.0f} | {step.wall_s:.2f} | {step.requests} "
            f"| {step.requests / 10:.1f} |"
        )
    results.publish("\n".join(section) + "\n", args.append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
