"""What the gatekeeper costs a request: moto's server plain, gated for the operator (the API contract only),
and gated for a role (contract and IAM through iam-simulate), side by side in one run.

The embedded stack gates every request; this measures the cost per request of the calls a run makes
most (DynamoDB GetItem/UpdateItem, S3 GetObject/PutObject), interleaved per round.

    .venv/bin/python bench/gatekeeper.py [--requests 300 --rounds 3]
    add --append BENCHMARKS.md to record the result
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from bench import results
from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.gatekeeper.gate import Gatekeeper
from retrain.embedded.gatekeeper.iam.evaluator import Policy, PolicyEvaluator
from retrain.embedded.gatekeeper.iam.principals import Principals
from retrain.embedded.server import gated_moto_server

ROOT = Path(__file__).resolve().parent.parent

ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/bench"
TABLE, BUCKET = "bench-runs", "bench-artifacts"
POLICY = Policy(
    "bench",
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["dynamodb:GetItem", "dynamodb:UpdateItem"],
                "Resource": f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table/{TABLE}",
            },
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject"],
                "Resource": f"arn:aws:s3:::{BUCKET}/*",
            },
        ],
    },
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def client(service: str, endpoint: str, key: str, secret: str) -> Any:
    return boto3.client(  # type: ignore[call-overload]
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
    )


def workload(endpoint: str, key: str, secret: str) -> Callable[[int], None]:
    ddb, s3 = client("dynamodb", endpoint, key, secret), client("s3", endpoint, key, secret)

    keys = itertools.count()

    def run(requests: int) -> None:
        for i in range(requests // 4):
            # The same table each time (as a run's steps), a new object each time (as a job's files).
            key = f"runs/{next(keys)}.json"
            ddb.get_item(TableName=TABLE, Key={"k": {"S": f"item-{i % 10}"}})
            ddb.update_item(
                TableName=TABLE,
                Key={"k": {"S": f"item-{i % 10}"}},
                UpdateExpression="SET n = :n",
                ExpressionAttributeValues={":n": {"N": str(i)}},
            )
            s3.put_object(Bucket=BUCKET, Key=key, Body=b"{}")
            s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--append", type=Path)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)

    principals = Principals()
    credentials = principals.add(ROLE, [POLICY])
    evaluator = PolicyEvaluator(account=ACCOUNT_ID)
    gatekeeper = Gatekeeper(principals, evaluator, region=REGION, account=ACCOUNT_ID)
    plain_port, gated_port = free_port(), free_port()
    plain = ThreadedMotoServer(ip_address="127.0.0.1", port=plain_port, verbose=False)
    plain.start()
    gated = gated_moto_server(gatekeeper, ip_address="127.0.0.1", port=gated_port)
    try:
        for port in (plain_port, gated_port):  # moto's backends are shared: create once, on either
            endpoint = f"http://127.0.0.1:{port}"
            setup = client("dynamodb", endpoint, "bench", "bench")
            if TABLE not in setup.list_tables()["TableNames"]:
                setup.create_table(
                    TableName=TABLE,
                    BillingMode="PAY_PER_REQUEST",
                    AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                    KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                )
                client("s3", endpoint, "bench", "bench").create_bucket(Bucket=BUCKET)
        variants = {
            "moto, ungated": workload(f"http://127.0.0.1:{plain_port}", "bench", "bench"),
            "gated, operator (contract)": workload(f"http://127.0.0.1:{gated_port}", "bench", "bench"),
            "gated, role (contract + IAM)": workload(
                f"http://127.0.0.1:{gated_port}", credentials.access_key_id, credentials.secret_access_key
            ),
        }
        for run in variants.values():
            run(40)  # warm-up: models loaded, sidecar started, connections open
        samples: dict[str, list[float]] = {name: [] for name in variants}
        load_before = os.getloadavg()[0]
        for _ in range(args.rounds):
            for name, run in variants.items():
                started = time.perf_counter()
                run(args.requests)
                samples[name].append((time.perf_counter() - started) / args.requests * 1000)
        load_after = os.getloadavg()[0]
    finally:
        gated.stop()
        plain.stop()
        evaluator.close()

    base = statistics.median(samples["moto, ungated"])
    when = results.when()
    rows = [
        f"| {name} | {statistics.median(times):.2f} | {statistics.median(times) / base:.2f}x |"
        for name, times in samples.items()
    ]
    section = "\n".join(
        [
            f"## Embedded stack: the gatekeeper's cost per request ({when})",
            "",
            results.machine_line(load_before, load_after),
            f"{args.requests} requests a round (DynamoDB GetItem and UpdateItem, S3 PutObject and GetObject, "
            f"in turn) from one client; median of {args.rounds} rounds, the variants interleaved.",
            "",
            "| variant | ms per request | vs ungated |",
            "| --- | ---: | ---: |",
            *rows,
            "",
        ]
    )
    results.publish(section, args.append)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
