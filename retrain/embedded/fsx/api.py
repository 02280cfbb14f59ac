"""Make moto's FSx HTTP API (what boto3 with AWS_ENDPOINT_URL reaches) answer from the FSx emulation,
so Lambdas and the CLI reach its data repository tasks with plain boto3."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import ClientError

from retrain.embedded.fsx.emulator import FsxEmulator


@contextmanager
def install_api(service: FsxEmulator) -> Iterator[None]:
    """Make moto's FSx HTTP API (what boto3 with AWS_ENDPOINT_URL reaches) answer from ``service``."""
    from moto.core.exceptions import JsonRESTError
    from moto.fsx import responses

    response_class: Any = responses.FSxResponse
    actions = (
        "create_data_repository_association",
        "create_file_system",
        "describe_file_systems",
        "create_data_repository_task",
        "describe_data_repository_tasks",
    )
    originals = {name: response_class.__dict__.get(name) for name in actions}

    def route(action: str) -> Any:
        def handler(self: Any) -> str:
            request = json.loads(self.body or "{}")
            try:
                result = getattr(service, action)(**request)
            except ClientError as exc:
                raise JsonRESTError(exc.response["Error"]["Code"], exc.response["Error"]["Message"]) from exc
            return json.dumps(
                result, default=lambda v: v.timestamp() if isinstance(v, datetime.datetime) else str(v)
            )

        return handler

    for name in actions:
        setattr(response_class, name, route(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            if original is None:
                delattr(response_class, name)
            else:
                setattr(response_class, name, original)
