"""A catalogue's first load: ingest's cost per upload, and what it makes of 10^6 and 10^7 uploads on AWS.

Two measurements, side by side in one run:

1. Cost per upload. The ingest function's own code (controller.ingest, its after-batch dispatch check
   included) records real JPEG uploads of one data set, in SQS batches of the template's BatchSize, against
   a moto server in a process of its own, so this process's CPU time is the function's. Every AWS call is
   counted by operation (botocore's before-call event); the write units of each write are computed from the
   written items' sizes by DynamoDB's rules (1 unit per started KB; an index entry is its keys plus 100
   bytes); the rows' spread over the data set's partition keys is read back from the table.
2. The embedded stack, end to end (S3 -> EventBridge -> SQS -> the event source mapping -> Lambda): the
   uploads/s of one data set with IngestMaxConcurrency 2, 4 and 16 (2 is ScalingConfig's minimum), on this
   machine's cores; moto's pace, so the ratio is the honest part.

From (1) and AWS's documented latencies and quotas (docs/INGEST_QUOTAS.md, retrain/quotas.py) it projects
the first load of 10^6 and 10^7 uploads at the template's IngestMaxConcurrency in every region that offers
SageMaker (EventBridge's invocation quota differs by region), with the ledger left at DynamoDB's free
default throughput (LedgerWarmWriteUnits 0: 4,000 write units/s at once, doubling every 30 minutes) and
pre-warmed to 8,000, naming the quota that binds; and each ledger key's share of a partition's 1,000 write
units/s at the projected rate (the keys' spread computed with the ledger's own hash over 10^6 uploads).

    .venv/bin/python bench/ingest_scale.py [--uploads 1000] [--embedded-uploads 400] [--append BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import logging
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import yaml

from bench import results
from bench.ingest import BUCKET, DATASETS, REGION, TABLE, create, free_port, notice, photo, sqs_event

os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "Retrain")
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "bench")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

from controller import datasets, ingest, ledger, names
from controller.config import from_environ
from controller.observability import metrics
from retrain import quotas
from retrain.dev.template_model import default_environment
from retrain.managed_debugger import sagemaker_regions
from retrain_contract.ledger import LEDGER_SHARDS, Partitions

ROOT = Path(__file__).resolve().parent.parent
DATASET = "catalogue"
LABELS = 20
TARGET_UPLOADS, TARGET_SECONDS = 10_000_000, 3600

# AWS's documented figures the projection uses (docs/INGEST_QUOTAS.md names each page).
S3_GET_SECONDS = 0.2  # first byte of a small GET: "100-200 ms" at worst (S3 performance design patterns)
DYNAMODB_SECONDS = 0.010  # "single-digit millisecond" requests, rounded up
VCPU_MB = 1769  # a function's CPU share is MemorySize / 1,769 MB of one vCPU
PARTITION_WRITE_UNITS = 1000  # per partition key, table or index
NEW_TABLE_WRITE_UNITS = 4000  # a new on-demand table, and a new index, serve this much at once ...
DOUBLING_SECONDS = 1800  # ... and double their previous peak within 30 minutes
# A new bucket is not pre-partitioned: until S3 splits it (AWS gives no time), the whole bucket is one
# prefix's 5,500 GETs/s and 3,500 PUTs/s; the projection holds the first load to that throughout.
S3_GETS_PER_PREFIX = 5500
S3_PUTS_PER_PREFIX = 3500
WARM_WRITE_UNITS = 8000  # the LedgerWarmWriteUnits a first load at full speed needs (template.yaml)
SPREAD_UPLOADS = 10**6  # uploads whose keys' spread over the ledger's partition keys is computed


def template() -> dict[str, Any]:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    return dict(yaml.load((ROOT / "template.yaml").read_text(), Loader=Loader))


def moto_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return server, f"http://127.0.0.1:{port}"
        time.sleep(0.2)
    server.kill()
    raise RuntimeError("the moto server did not start within 60 s")


def write_units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


def item_size(item: dict[str, dict[str, Any]]) -> int:
    """DynamoDB's size of an item: each attribute's name and value (strings in UTF-8, numbers about one
    byte per two digits plus one)."""
    total = 0
    for name, value in item.items():
        total += len(name.encode())
        kind, raw = next(iter(value.items()))
        total += len(str(raw).encode()) if kind == "S" else (len(str(raw)) + 1) // 2 + 1
    return total


@dataclasses.dataclass
class Cost:
    uploads: int
    batch: int
    cpu_s: float
    wall_s: float
    calls: Counter[str]
    table_units: float  # per upload: rows, content claims, the data set row
    index_units: float  # per upload: the pending index's entries
    partitions: int
    busiest_share: float  # of the data set's rows, in its busiest partition key

    def per_upload(self, operation: str) -> float:
        return self.calls[operation] / self.uploads


def measure_cost(uploads: int, side: int) -> Cost:
    """Cost per upload of ingest's own code: see the module's docstring, (1)."""
    server, endpoint = moto_server()
    try:
        s3, dynamodb = create(endpoint)
        batch = int(
            template()["Resources"]["IngestFunction"]["Properties"]["Events"]["Uploads"]["Properties"][
                "BatchSize"
            ]
        )
        config = dataclasses.replace(
            from_environ(
                {
                    **default_environment("IngestFunction"),
                    names.ENV_DATA_BUCKET: BUCKET,
                    names.ENV_LEDGER_TABLE: TABLE,
                    names.ENV_DATASETS_TABLE: DATASETS,
                }
            ),
            state_machine_arn=f"arn:aws:states:{REGION}:123456789012:stateMachine:bench",
        )
        # no run is due while the load goes on (the dispatch check reads the pending index and stops)
        config = dataclasses.replace(
            config, policy=dataclasses.replace(config.policy, min_new_images=10**9, max_wait_seconds=10**9)
        )
        sfn = boto3.client("stepfunctions", endpoint_url=endpoint, region_name=REGION,
                           aws_access_key_id="bench", aws_secret_access_key="bench")  # fmt: skip
        bodies = []
        for i in range(uploads):
            body = photo(i, side)
            key = names.upload_key(DATASET, f"label{i % LABELS:02d}", f"img-{i:07d}.jpg")
            bodies.append(
                notice(key, s3.put_object(Bucket=BUCKET, Key=key, Body=body), len(body), i + 1, etag=True)
            )
        calls: Counter[str] = Counter()

        def count(model: Any, **_: Any) -> None:
            calls[model.name] += 1

        for client in (s3, dynamodb, sfn):
            client.meta.events.register("before-call", count)
        cpu, wall = time.process_time(), time.perf_counter()
        for start in range(0, len(bodies), batch):
            response = ingest.ingest(sqs_event(bodies[start : start + batch]), config=config,
                                     dynamodb=dynamodb, s3=s3, sfn=sfn)  # fmt: skip
            assert response == {"batchItemFailures": []}, response
            metrics.clear_metrics()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        for client in (s3, dynamodb, sfn):
            client.meta.events.unregister("before-call", count)

        parts = datasets.partitions(DATASET, table_name=DATASETS, client=dynamodb)
        items = [
            item
            for page in dynamodb.get_paginator("scan").paginate(TableName=TABLE)
            for item in page["Items"]
        ]
        rows = [i for i in items if i[names.LEDGER_SK]["S"].startswith(names.DATA_PREFIX)]
        assert len(rows) == uploads and all(r["state"]["S"] == names.STATE_ACCEPTED for r in rows), len(rows)
        table_units = sum(write_units(item_size(i)) for i in items)  # rows and claims, one put each
        table_units += calls["UpdateItem"]  # the data set row: shard count once, upload count per batch
        index_entry = 100 + sum(
            item_size({k: v}) for r in rows[:1] for k, v in r.items()
            if k in (names.LEDGER_PK, names.LEDGER_SK, names.LEDGER_PENDING_PK, names.LEDGER_PENDING_SK)
        )  # fmt: skip
        spread = Counter(r[names.LEDGER_PK]["S"] for r in items)
        assert set(spread) <= set(parts.all()), spread
        return Cost(
            uploads=uploads,
            batch=batch,
            cpu_s=cpu,
            wall_s=wall,
            calls=calls,
            table_units=table_units / uploads,
            index_units=write_units(index_entry),
            partitions=len(spread),
            busiest_share=max(spread.values()) / len(items),
        )
    finally:
        server.terminate()
        server.wait()


@dataclasses.dataclass(frozen=True)
class Spread:
    """The busiest partition key's share of a data set's writes, from the ledger's own hash."""

    table: float  # rows and content claims
    index: float  # pending index entries


def spread(uploads: int = SPREAD_UPLOADS) -> Spread:
    parts = Partitions(DATASET, LEDGER_SHARDS)
    table: Counter[str] = Counter()
    index: Counter[str] = Counter()
    for i in range(uploads):
        key = names.upload_key(DATASET, f"label{i % LABELS:02d}", f"img-{i:07d}.jpg")
        etag = hashlib.md5(key.encode(), usedforsecurity=False).hexdigest()
        table[parts.of(key)] += 1
        table[parts.of(names.content_claim_key(etag, 50_000 + i % 997))] += 1
        index[parts.index_of(key)] += 1
    return Spread(max(table.values()) / (2 * uploads), max(index.values()) / uploads)


@dataclasses.dataclass
class Projection:
    latency_s: float  # one upload, one thread, on AWS
    per_function: float  # uploads/s of one function
    ceilings: dict[str, float]  # uploads/s each quota allows, whatever the region and the hour
    concurrency: int  # the template's IngestMaxConcurrency
    table_units: float  # per upload
    index_units: float

    def rate(self, region: str, warm: int, elapsed_s: float = 0.0) -> tuple[float, str]:
        """Uploads/s and the quota that binds, in `region`, `elapsed_s` into the load, with the ledger
        pre-warmed to `warm` write units/s (0: DynamoDB's default, doubling every DOUBLING_SECONDS)."""
        capacity = max(warm, NEW_TABLE_WRITE_UNITS * 2 ** int(elapsed_s // DOUBLING_SECONDS))
        source = f"pre-warmed {warm:,}" if warm >= capacity else f"on-demand, {capacity:,} at this hour"
        invocations = quotas.eventbridge_invocations(region)
        ceilings = {
            **self.ceilings,
            f"EventBridge invocations ({invocations:,}/s in {region})": float(invocations),
            f"the ledger table's throughput ({source} units/s)": capacity / self.table_units,
            f"the pending index's throughput ({source} units/s)": capacity / self.index_units,
        }
        binding = min(ceilings, key=ceilings.__getitem__)
        return ceilings[binding], binding

    def hours(self, uploads: int, region: str, warm: int) -> float:
        """Hours to record `uploads`, the rate recomputed each time DynamoDB's default capacity doubles."""
        done, elapsed = 0.0, 0.0
        while True:
            rate, _ = self.rate(region, warm, elapsed)
            step = DOUBLING_SECONDS - elapsed % DOUBLING_SECONDS
            if done + rate * step >= uploads:
                return (elapsed + (uploads - done) / rate) / 3600
            done, elapsed = done + rate * step, elapsed + step


def project(cost: Cost, keys: Spread) -> Projection:
    resources = template()
    function = resources["Resources"]["IngestFunction"]["Properties"]
    memory = int(function.get("MemorySize") or resources["Globals"]["Function"]["MemorySize"])
    concurrency = int(resources["Parameters"]["IngestMaxConcurrency"]["Default"])
    share = memory / VCPU_MB
    cpu_per_upload = cost.cpu_s / cost.uploads
    gets = cost.per_upload("GetObject")
    dynamodb_calls = sum(n for op, n in cost.calls.items() if op not in ("GetObject",)) / cost.uploads
    latency = gets * S3_GET_SECONDS + dynamodb_calls * DYNAMODB_SECONDS
    latency += cpu_per_upload / share
    per_function = min(ingest.RECORD_THREADS / latency, share / cpu_per_upload)
    ceilings = {
        f"IngestMaxConcurrency {concurrency} x {per_function:.0f}/s": concurrency * per_function,
        f"the ledger's busiest key ({keys.table:.2%} of its writes, 1,000 units/s)": PARTITION_WRITE_UNITS
        / (keys.table * cost.table_units),
        f"the index's busiest key ({keys.index:.2%} of its writes, 1,000 units/s)": PARTITION_WRITE_UNITS
        / (keys.index * cost.index_units),
        f"S3 GETs ({gets:.2f} per upload) into a bucket S3 has not split yet, {S3_GETS_PER_PREFIX:,}/s": (
            S3_GETS_PER_PREFIX / gets
        ),
        f"S3 PUTs (the uploads themselves) into that bucket, {S3_PUTS_PER_PREFIX:,}/s": float(
            S3_PUTS_PER_PREFIX
        ),
        f"Lambda concurrency ({quotas.LAMBDA_CONCURRENCY:,}, the default; new accounts less)": (
            quotas.LAMBDA_CONCURRENCY * per_function
        ),
    }
    return Projection(latency, per_function, ceilings, concurrency, cost.table_units, cost.index_units)


def region_rows(projection: Projection) -> list[str]:
    """One row per EventBridge quota: its regions, and the first load of 10^6 and 10^7 uploads there with
    the ledger at DynamoDB's default and pre-warmed."""
    by_quota: dict[int, list[str]] = {}
    for region in sagemaker_regions():
        by_quota.setdefault(quotas.eventbridge_invocations(region), []).append(region)
    rows = []
    for invocations, regions in sorted(by_quota.items(), reverse=True):
        region = regions[0]
        steady, binding = projection.rate(region, WARM_WRITE_UNITS)
        cells = [
            f"{projection.hours(n, region, warm):.2f} h"
            for n in (10**6, 10**7)
            for warm in (0, WARM_WRITE_UNITS)
        ]
        listed = ", ".join(regions)
        rows.append(f"| {invocations:,} | {listed} | {steady:,.0f} | {binding} | " + " | ".join(cells) + " |")
    return rows


def key_rows(projection: Projection, keys: Spread, cost: Cost) -> list[str]:
    """Each ledger key's write units/s at the projected steady rate in the fastest region."""
    rate, _ = projection.rate("us-east-1", WARM_WRITE_UNITS)
    rows = [
        ("ledger table, busiest of its keys", rate * cost.table_units * keys.table),
        ("pending index, busiest of its keys", rate * cost.index_units * keys.index),
        ("data set table, the data set's row (one update per batch)", rate / cost.batch),
    ]
    return [f"| {name} | {units:,.0f} | {units / PARTITION_WRITE_UNITS:.0%} |" for name, units in rows]


def embedded_rate(concurrency: int, uploads: int, side: int) -> float:
    """Uploads/s of one data set through the embedded stack: the first put to the last row recorded."""
    # imported by name: the bench's type check does not follow the emulation's modules
    stack_class: Any = importlib.import_module("retrain.embedded.stack").EmbeddedStack
    overrides = {
        "IngestMaxConcurrency": str(concurrency),
        "DispatchSchedule": "rate(1 day)",
        "MinNewImages": "1000000",
        "MaxWaitSeconds": "864000",
    }
    with tempfile.TemporaryDirectory() as state:
        stack = stack_class(Path(state), parameter_overrides=overrides)
        stack.function_concurrency = concurrency
        stack.start()
        try:
            outputs = stack.client("cloudformation").describe_stacks(StackName=stack.stack_name)
            out = {o["OutputKey"]: o["OutputValue"] for o in outputs["Stacks"][0]["Outputs"]}
            bucket = out[names.STACK_OUTPUTS["data_bucket"]]
            table = out[names.STACK_OUTPUTS["ledger_table"]]
            s3, dynamodb = stack.client("s3"), stack.client("dynamodb")
            bodies = [photo(i, side) for i in range(uploads)]
            began = time.monotonic()
            for i, body in enumerate(bodies):
                key = names.upload_key(DATASET, f"label{i % LABELS:02d}", f"img-{i:07d}.jpg")
                s3.put_object(Bucket=bucket, Key=key, Body=body)
            parts = datasets.partitions(
                DATASET, table_name=out[names.STACK_OUTPUTS["datasets_table"]], client=dynamodb
            )
            deadline = began + 1800
            while time.monotonic() < deadline:
                recorded = sum(1 for _ in ledger.rows(parts, table_name=table, client=dynamodb))
                if recorded >= uploads:
                    return uploads / (time.monotonic() - began)
                time.sleep(0.5)
            raise RuntimeError(f"{recorded} of {uploads} uploads recorded in 30 minutes at {concurrency}")
        finally:
            stack.stop(save=False)


def hours(count: int, rate: float) -> str:
    return f"{count / rate / 3600:.2f} h"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--uploads", type=int, default=1000, help="uploads of the cost measurement")
    parser.add_argument("--embedded-uploads", type=int, default=400, help="uploads per embedded run")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[2, 4, 16])
    parser.add_argument("--side", type=int, default=512, help="pixels of each square test photo")
    parser.add_argument("--append", type=Path)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    load_before = os.getloadavg()[0]
    cost = measure_cost(args.uploads, args.side)
    rates = {c: embedded_rate(c, args.embedded_uploads, args.side) for c in args.concurrency}
    load_after = os.getloadavg()[0]
    keys = spread()
    projection = project(cost, keys)
    rate, binding = projection.rate("us-east-1", WARM_WRITE_UNITS)
    calls = ", ".join(f"{op} {n / cost.uploads:.2f}" for op, n in sorted(cost.calls.items()))
    base = rates[min(rates)]
    lines = [
        f"## A catalogue's first load (bench/ingest_scale.py, {results.when()})",
        "",
        results.machine_line(load_before, load_after),
        "",
        f"**Per upload** ({cost.uploads:,} JPEG uploads of {args.side}x{args.side} in {LABELS} labels of one "
        f"data set, SQS batches of {cost.batch}, ingest's code against a moto server in its own process):",
        "",
        "| measure | per upload |",
        "| --- | ---: |",
        f"| AWS calls | {sum(cost.calls.values()) / cost.uploads:.2f} ({calls}) |",
        f"| write units, ledger table (row, content claim, data set row) | {cost.table_units:.2f} |",
        f"| write units, pending index | {cost.index_units:.2f} |",
        f"| CPU of the function's code, this machine | {cost.cpu_s / cost.uploads * 1000:.1f} ms |",
        f"| wall against moto (moto's pace) | {cost.wall_s / cost.uploads * 1000:.1f} ms |",
        "",
        f"Rows and claims over {cost.partitions} of the data set's {LEDGER_SHARDS} partition keys; the "
        f"busiest holds {cost.busiest_share:.1%} of them here; over {SPREAD_UPLOADS:,} uploads the ledger's "
        f"hash gives its busiest key {keys.table:.2%} (an even spread: {1 / LEDGER_SHARDS:.2%}) and the "
        f"index's {keys.index:.2%}.",
        "",
        f"**Projected on AWS**: one upload takes {projection.latency_s * 1000:.0f} ms in one thread (S3 GETs "
        f"at {S3_GET_SECONDS * 1000:.0f} ms, DynamoDB calls at {DYNAMODB_SECONDS * 1000:.0f} ms, the CPU at "
        f"the function's share of a vCPU); {ingest.RECORD_THREADS} records at once make "
        f"{projection.per_function:.0f} uploads/s per function. Ceilings in every region:",
        "",
        "| ceiling | uploads/s |",
        "| --- | ---: |",
        *(f"| {name} | {value:,.0f} |" for name, value in projection.ceilings.items()),
        "",
        "**Per region** (every region that offers SageMaker; EventBridge's default invocations/s from its "
        f"[quotas page]({quotas.EVENTBRIDGE_QUOTA_PAGE}); the ledger at LedgerWarmWriteUnits 0, DynamoDB's "
        f"free default of {NEW_TABLE_WRITE_UNITS:,} units/s doubling every 30 minutes, or pre-warmed to "
        f"{WARM_WRITE_UNITS:,}):",
        "",
        "| invocations/s | regions | steady uploads/s | binds | 10^6, default | 10^6, pre-warmed | "
        "10^7, default | 10^7, pre-warmed |",
        "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: |",
        *region_rows(projection),
        "",
        f"**Each key at the steady rate in us-east-1** ({rate:,.0f} uploads/s, binding: {binding}):",
        "",
        "| key | write units/s | of a partition's 1,000 |",
        "| --- | ---: | ---: |",
        *key_rows(projection, keys, cost),
        "",
        f"**Embedded stack** ({args.embedded_uploads} uploads of one data set, the first put to the last row "
        "recorded):",
        "",
        "| IngestMaxConcurrency | uploads/s | vs 2 |",
        "| ---: | ---: | ---: |",
        *(f"| {c} | {r:.1f} | {r / base:.2f}x |" for c, r in rates.items()),
        "",
    ]
    results.publish("\n".join(lines), args.append)
    print(json.dumps({"rate": rate, "binding": binding}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
