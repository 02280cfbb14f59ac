"""Instances' channel downloads reuse small objects whose key and ETag are unchanged, and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from retrain.embedded.s3files import InputCache
from retrain.embedded.sagemaker.s3io import S3Uri, download_prefix


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="data")
        yield client


def _gets(client: Any) -> list[str]:
    """The keys of the GetObject calls the client makes from now on."""
    keys: list[str] = []
    client.meta.events.register(
        "provide-client-params.s3.GetObject", lambda params, **_: keys.append(params["Key"])
    )
    return keys


def test_a_second_job_copies_unchanged_objects_and_fetches_changed_ones(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket="data", Key="d/cat/a.jpg", Body=b"a1")
    s3.put_object(Bucket="data", Key="d/dog/b.jpg", Body=b"b1")
    cache = InputCache(tmp_path / "cache")
    gets = _gets(s3)
    assert download_prefix(s3, S3Uri("data", "d/"), tmp_path / "job1", cache) == 2
    assert sorted(gets) == ["d/cat/a.jpg", "d/dog/b.jpg"]

    gets.clear()
    s3.put_object(Bucket="data", Key="d/dog/b.jpg", Body=b"b2")  # a re-upload: a new ETag
    assert download_prefix(s3, S3Uri("data", "d/"), tmp_path / "job2", cache) == 2
    assert gets == ["d/dog/b.jpg"]
    assert (tmp_path / "job2" / "cat" / "a.jpg").read_bytes() == b"a1"
    assert (tmp_path / "job2" / "dog" / "b.jpg").read_bytes() == b"b2"
    # A job that writes to its copy does not change what the next job gets.
    (tmp_path / "job2" / "cat" / "a.jpg").write_bytes(b"changed by the job")
    download_prefix(s3, S3Uri("data", "d/"), tmp_path / "job3", cache)
    assert (tmp_path / "job3" / "cat" / "a.jpg").read_bytes() == b"a1"


def test_objects_over_the_size_limit_are_fetched_every_time(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket="data", Key="ckpt/model.pt", Body=b"x" * 2048)
    cache = InputCache(tmp_path / "cache", max_bytes=1024)
    gets = _gets(s3)
    for job in ("job1", "job2"):
        download_prefix(s3, S3Uri("data", "ckpt/"), tmp_path / job, cache)
        assert (tmp_path / job / "model.pt").read_bytes() == b"x" * 2048
    assert gets == ["ckpt/model.pt", "ckpt/model.pt"]
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


def test_a_caller_gets_only_what_it_fetched_itself(s3: Any, tmp_path: Path) -> None:
    # GIVEN an object one job's role fetched into the cache
    s3.put_object(Bucket="data", Key="d/cat/a.jpg", Body=b"a1")
    cache = InputCache(tmp_path / "cache")
    download_prefix(s3, S3Uri("data", "d/"), tmp_path / "job1", cache)
    # WHEN a job under another role (other credentials) downloads the same prefix
    other = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="OTHERROLE", aws_secret_access_key="x"
    )
    gets = _gets(other)
    download_prefix(other, S3Uri("data", "d/"), tmp_path / "job2", cache)
    # THEN it fetched the object itself (so its own permissions decide), not the first role's copy
    assert gets == ["d/cat/a.jpg"]
