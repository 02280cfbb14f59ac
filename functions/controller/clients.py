"""The handlers' AWS clients, made once per execution environment and reused by its invocations.

Lambda's best practice: a client costs milliseconds to build and its first request a TLS handshake, so it
is made once, outside the per-event code. It is made on first use, not at import: a handler module imports
without building clients it may not need, and tests import handlers before their fake AWS is up.

A client is kept per region and endpoint as the environment names them when it is asked for: code that
points AWS_ENDPOINT_URL (or AWS_REGION) elsewhere, as the embedded stack and tests do, gets a client for
that endpoint, never one made against another. `reset()` drops them all.
"""

from __future__ import annotations

import os
from functools import cache
from typing import TYPE_CHECKING, Any, cast

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_logs import CloudWatchLogsClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sagemaker import SageMakerClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

_Where = tuple[tuple[str, str], ...]


def _where() -> _Where:
    """The environment that decides where a client sends its requests (boto3 reads the same)."""
    return tuple(
        sorted(
            (name, value)
            for name, value in os.environ.items()
            if name in ("AWS_REGION", "AWS_DEFAULT_REGION") or name.startswith("AWS_ENDPOINT_URL")
        )
    )


# Connections each client keeps open: as many as ingest's record threads (ingest.RECORD_THREADS) use at
# once; botocore's default of 10 would open and drop the others' connections on every request.
POOL_CONNECTIONS = 16
POOL = Config(max_pool_connections=POOL_CONNECTIONS)


@cache
def _client(service: str, where: _Where) -> Any:
    """One client of `service` per `where` (the key only; boto3 reads region and endpoint itself)."""
    del where
    return boto3.client(service, config=POOL)  # type: ignore[call-overload]


def reset() -> None:
    """Forget every client (the next call of each accessor makes a new one)."""
    _client.cache_clear()
    _ledger_writer.cache_clear()


def dynamodb() -> DynamoDBClient:
    return cast("DynamoDBClient", _client("dynamodb", _where()))


# Ingest's ledger writes give up within retrain_contract.ledger.RECORD_PUT_BOUND_SECONDS (two attempts
# of at most 1 s to connect and 5 s to answer, and standard mode's backoff of at most 1 s between them),
# so a row stamped with `recorded_at` is readable, or never written, that long after; the freezing job
# relies on it.
LEDGER_WRITES = POOL.merge(
    Config(connect_timeout=1, read_timeout=5, retries={"mode": "standard", "total_max_attempts": 2})
)


@cache
def _ledger_writer(where: _Where) -> Any:
    del where
    return boto3.client("dynamodb", config=LEDGER_WRITES)


def ledger_writer() -> DynamoDBClient:
    """The DynamoDB client whose writes of a ledger row end within RECORD_PUT_BOUND_SECONDS."""
    return cast("DynamoDBClient", _ledger_writer(_where()))


def logs() -> CloudWatchLogsClient:
    return cast("CloudWatchLogsClient", _client("logs", _where()))


def s3() -> S3Client:
    return cast("S3Client", _client("s3", _where()))


def sagemaker() -> SageMakerClient:
    return cast("SageMakerClient", _client("sagemaker", _where()))


def sfn() -> SFNClient:
    return cast("SFNClient", _client("stepfunctions", _where()))


def sns() -> SNSClient:
    return cast("SNSClient", _client("sns", _where()))


def sqs() -> SQSClient:
    return cast("SQSClient", _client("sqs", _where()))
