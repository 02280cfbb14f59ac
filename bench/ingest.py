"""Ingest throughput before and after its content checks, side by side in one run.

Ingest used to judge a key and write its ledger row; it now also reads the object's head and tail with two
ranged GETs (content.py) and claims its bytes (a conditional put). Each variant ingests the same uploads
(real JPEGs in a moto server's S3, over HTTP as the Lambda reaches S3 and DynamoDB) in SQS batches of 10,
rounds interleaved, median reported:

- before: key layout and ledger row only (what ingest did before the checks);
- content: plus the header and end-marker checks;
- after: plus the duplicate/conflict claim (what ingest does now).

moto answers on loopback, so the absolute rates are moto's; on AWS each extra call is a network round
trip (S3 GET first byte ~10-30 ms, DynamoDB put ~5 ms) and the ratio is the honest part.

    .venv/bin/python bench/ingest.py [--uploads 200 --rounds 3] [--append BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import random
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer
from PIL import Image

from bench import results

os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "Retrain")
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "bench")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

from controller import ingest, names
from controller.config import from_environ
from controller.observability import metrics
from retrain.dev import tables
from retrain.dev.template_model import default_environment

ROOT = Path(__file__).resolve().parent.parent

REGION, BUCKET, TABLE, DATASETS = "us-east-1", "bench-data", "bench-ledger", "bench-datasets"
BATCH = 10


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def photo(index: int, side: int) -> bytes:
    """A distinct photo-like JPEG: noise, so no two uploads have the same bytes."""
    image = Image.frombytes("RGB", (side, side), random.Random(index).randbytes(side * side * 3))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=85)
    return buffer.getvalue()


def notice(key: str, put: dict[str, Any], size: int, sequencer: int, *, etag: bool) -> str:
    detail = {"key": key, "size": size, "sequencer": f"{sequencer:018X}", "etag": ""}
    if etag:
        detail["etag"] = put["ETag"].strip('"')
    event = {"detail-type": "Object Created", "time": "2026-11-23T10:00:00Z",
             "detail": {"bucket": {"name": BUCKET}, "object": detail}}  # fmt: skip
    return json.dumps(event)


def sqs_event(bodies: list[str]) -> dict[str, Any]:
    records = [
        {"messageId": str(i), "receiptHandle": str(i), "body": b, "attributes": {}, "messageAttributes": {},
         "md5OfBody": "", "eventSource": "aws:sqs", "eventSourceARN": "arn", "awsRegion": REGION}
        for i, b in enumerate(bodies)
    ]  # fmt: skip
    return {"Records": records}


def create(endpoint: str) -> tuple[Any, Any]:
    kwargs: dict[str, Any] = {"endpoint_url": endpoint, "region_name": REGION, "aws_access_key_id": "bench",
                              "aws_secret_access_key": "bench"}  # fmt: skip
    s3, ddb = boto3.client("s3", **kwargs), boto3.client("dynamodb", **kwargs)
    s3.create_bucket(Bucket=BUCKET)
    tables.create_tables(ddb, ledger=TABLE, datasets=DATASETS)
    return s3, ddb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uploads", type=int, default=200)
    parser.add_argument("--side", type=int, default=256, help="pixels of each square test photo")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--append", type=Path)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    logging.getLogger("bench").setLevel(logging.WARNING)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        s3, ddb = create(f"http://127.0.0.1:{port}")
        # the ingest function's environment as the template sets it, on the bench's bucket and tables
        config = from_environ(
            {
                **default_environment("IngestFunction"),
                names.ENV_DATA_BUCKET: BUCKET,
                names.ENV_LEDGER_TABLE: TABLE,
                names.ENV_DATASETS_TABLE: DATASETS,
            }
        )
        objects = []
        sizes = []
        for i in range(args.uploads):
            body = photo(i, args.side)
            key = names.upload_key("bench", f"label{i % 5}", f"img-{i:05d}.jpg")
            objects.append((key, s3.put_object(Bucket=BUCKET, Key=key, Body=body), len(body)))
            sizes.append(len(body))
        variants = {
            "before: key and ledger row": (None, False),
            "content: + head and tail ranged GETs": (s3, False),
            "after: + duplicate claim (ingest now)": (s3, True),
        }
        sequencer = iter(range(1, 10**9))
        samples: dict[str, list[float]] = {name: [] for name in variants}
        load_before = os.getloadavg()[0]
        for round_ in range(args.rounds + 1):  # round 0 warms up connections and imports
            for name, (client, etag) in variants.items():
                bodies = [notice(k, put, size, next(sequencer), etag=etag) for k, put, size in objects]
                started = time.perf_counter()
                for start in range(0, len(bodies), BATCH):
                    response = ingest.ingest(sqs_event(bodies[start : start + BATCH]), config=config,
                                             dynamodb=ddb, s3=client)  # fmt: skip
                    assert response == {"batchItemFailures": []}, response
                    metrics.clear_metrics()  # the handler's decorator would flush them; nothing does here
                if round_:
                    samples[name].append(len(bodies) / (time.perf_counter() - started))
        load_after = os.getloadavg()[0]
        rows = ddb.scan(TableName=TABLE, Select="COUNT")["Count"]
        assert rows >= args.uploads, rows
    finally:
        server.stop()

    base = statistics.median(samples["before: key and ledger row"])
    when = results.when()
    table = [
        f"| {name} | {statistics.median(rates):.0f} | {statistics.median(rates) / base:.2f}x |"
        for name, rates in samples.items()
    ]
    section = "\n".join(
        [
            f"## Ingest throughput before and after the content checks ({when})",
            "",
            results.machine_line(load_before, load_after),
            f"{args.uploads} JPEG uploads of {args.side}x{args.side} pixels (median "
            f"{statistics.median(sizes) / 1024:.0f} KiB) in a moto server's S3, ingested in SQS batches of "
            f"{BATCH} over loopback HTTP; median of {args.rounds} rounds, the variants interleaved.",
            "",
            "| variant | uploads/s | vs before |",
            "| --- | ---: | ---: |",
            *table,
            "",
        ]
    )
    results.publish(section, args.append)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
