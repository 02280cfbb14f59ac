"""Small S3 helpers shared by the step functions: s3:// URIs and JSON objects."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from controller.errors import JobOutputMissingError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def split_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def read_json(uri: str, *, s3: S3Client, what: str) -> Any:
    """The JSON document at `uri`; JobOutputMissingError naming `what` when the job did not write it."""
    bucket, key = split_uri(uri)
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        raise JobOutputMissingError(f"{what} is missing: no object at {uri}; see the job's logs") from None
    try:
        return json.loads(body)
    except json.JSONDecodeError as error:
        raise JobOutputMissingError(f"{what} at {uri} is not JSON ({error.msg})") from None
