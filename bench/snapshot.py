"""Embedded stack restart: putting a saved snapshot back, one object at a time vs on TRANSFER_THREADS.

A later `retrain runs` / `retrain report` / demo starts the embedded stack again and puts every saved
object back through the emulated S3 API. This builds a demo-shaped bucket on a moto server (a few large
checkpoints and many small images), saves it once with `snapshot.save`, then restores it into fresh
resources with 1 thread and with `snapshot.TRANSFER_THREADS`, interleaved per round, side by side.

    .venv/bin/python bench/snapshot.py [--checkpoints 12 --checkpoint-mb 64 --images 400 --rounds 3]
    add --append BENCHMARKS.md to record the result
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from bench import results
from retrain.embedded import snapshot

ROOT = Path(__file__).resolve().parent.parent

BUCKET = "bench-artifacts"
TABLE = "bench-runs"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clients(endpoint: str) -> dict[str, Any]:
    return {
        f"{name}_client": boto3.client(
            name,
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        )
        for name in ("s3", "dynamodb", "logs")
    }


def fresh_resources(endpoint: str) -> dict[str, Any]:
    """Empty the server and create the bucket and table again, as a restarted stack does."""
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")).close()
    c = clients(endpoint)
    c["s3_client"].create_bucket(Bucket=BUCKET)
    c["s3_client"].put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    c["dynamodb_client"].create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return c


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=12)
    parser.add_argument("--checkpoint-mb", type=int, default=64)
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--append", type=Path, default=None, help="append the result to this markdown file")
    args = parser.parse_args()

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    samples: dict[int, list[float]] = {1: [], snapshot.TRANSFER_THREADS: []}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-snapshot-") as tmp:
            saved = Path(tmp) / "snapshot"
            c = fresh_resources(endpoint)
            for number in range(args.checkpoints):
                body = os.urandom(args.checkpoint_mb * 1024 * 1024)
                c["s3_client"].put_object(Bucket=BUCKET, Key=f"checkpoints/ckpt-{number:09d}.pt", Body=body)
            for number in range(args.images):
                c["s3_client"].put_object(
                    Bucket=BUCKET, Key=f"data/digits/{number % 10}/{number}.png", Body=os.urandom(2048)
                )
            snapshot.save(saved, buckets=[BUCKET], tables=[TABLE], **c)
            load_before = os.getloadavg()[0]
            for _ in range(args.rounds):
                for threads, times in samples.items():
                    c = fresh_resources(endpoint)
                    started = time.perf_counter()
                    snapshot.restore(saved, threads=threads, **c)
                    times.append(time.perf_counter() - started)
            load_after = os.getloadavg()[0]
    finally:
        server.stop()

    one, many = (statistics.median(samples[t]) for t in samples)
    when = results.when()
    section = "\n".join(
        [
            f"## Embedded stack restart: snapshot restore ({when})",
            "",
            results.machine_line(load_before, load_after),
            f"Bucket: {args.checkpoints} checkpoints of {args.checkpoint_mb} MB and {args.images} images of "
            f"2 KB, restored through moto's S3 API; median of {args.rounds} rounds, interleaved.",
            "",
            "| threads | median s | vs 1 thread |",
            "| ---: | ---: | ---: |",
            f"| 1 | {one:.2f} | 1.00x |",
            f"| {snapshot.TRANSFER_THREADS} | {many:.2f} | {one / many:.2f}x faster |",
            "",
        ]
    )
    results.publish(section, args.append)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
