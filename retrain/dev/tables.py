"""The stack's three DynamoDB tables as template.yaml declares them, for moto-backed tests and benches."""

from __future__ import annotations

from typing import Any

from controller import names


def _table(client: Any, name: str, hash_key: str, range_key: str | None = None, **extra: Any) -> None:
    keys = [hash_key] if range_key is None else [hash_key, range_key]
    attributes = {*keys, *extra.pop("index_keys", ())}
    client.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in sorted(attributes)],
        KeySchema=[{"AttributeName": k, "KeyType": t} for k, t in zip(keys, ("HASH", "RANGE"), strict=False)],
        **extra,
    )


def create_tables(client: Any, *, ledger: str, runs: str | None = None, datasets: str) -> None:
    """The ledger (with its pending index), the runs table (unless None) and the data sets table."""
    _table(
        client,
        ledger,
        names.LEDGER_PK,
        names.LEDGER_SK,
        index_keys=(names.LEDGER_PENDING_PK, names.LEDGER_PENDING_SK),
        GlobalSecondaryIndexes=[
            {
                "IndexName": names.LEDGER_PENDING_INDEX,
                "KeySchema": [
                    {"AttributeName": names.LEDGER_PENDING_PK, "KeyType": "HASH"},
                    {"AttributeName": names.LEDGER_PENDING_SK, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
    )
    if runs is not None:
        _table(client, runs, names.RUNS_PK, names.RUNS_SK)
    _table(client, datasets, names.DATASETS_PK)
