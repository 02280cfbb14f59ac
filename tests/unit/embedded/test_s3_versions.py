"""The embedded stack's ListObjectVersions answers as moto's own does, without copying any object's bytes."""

from __future__ import annotations

import contextlib
import copy
import gc
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID
from moto.s3.models import FakeKey, s3_backends

from retrain.embedded import s3_versions

BUCKET = "versions"
BODIES = [bytes([n]) * (1 << 20) for n in range(3)]  # three versions of one key, 1 MiB each


@contextlib.contextmanager
def _bucket() -> Iterator[Any]:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        for body in BODIES:
            s3.put_object(Bucket=BUCKET, Key="checkpoints/model.pt", Body=body)
        s3.put_object(Bucket=BUCKET, Key="data/gone.png", Body=b"png")
        s3.delete_object(Bucket=BUCKET, Key="data/gone.png")
        upload = s3.create_multipart_upload(Bucket=BUCKET, Key="model.tar.gz")["UploadId"]
        part = s3.upload_part(
            Bucket=BUCKET, Key="model.tar.gz", UploadId=upload, PartNumber=1, Body=b"t" * 1000
        )
        s3.complete_multipart_upload(
            Bucket=BUCKET,
            Key="model.tar.gz",
            UploadId=upload,
            MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]},
        )
        yield s3


def _listing(s3: Any) -> list[dict[str, Any]]:
    pages = s3.get_paginator("list_object_versions").paginate(Bucket=BUCKET, PaginationConfig={"PageSize": 2})
    return [{k: v for k, v in page.items() if k != "ResponseMetadata"} for page in pages]


def _bodies(s3: Any) -> dict[tuple[str, str], bytes]:
    versions = s3.list_object_versions(Bucket=BUCKET)["Versions"]
    return {
        (v["Key"], v["VersionId"]): s3.get_object(Bucket=BUCKET, Key=v["Key"], VersionId=v["VersionId"])[
            "Body"
        ].read()
        for v in versions
    }


def test_the_listing_is_the_same_and_reads_no_body(monkeypatch: pytest.MonkeyPatch) -> None:
    with _bucket() as s3:
        expected = _listing(s3)
        reads: list[str] = []
        value = FakeKey.value

        def counted(self: FakeKey) -> bytes:
            reads.append(self.name)
            return value.fget(self)  # type: ignore[attr-defined]

        monkeypatch.setattr(FakeKey, "value", property(counted, value.fset))  # type: ignore[attr-defined]
        tracked = len(FakeKey.instances_tracked)  # type: ignore[attr-defined]
        with s3_versions.installed():
            assert _listing(s3) == expected
            assert reads == []  # moto's own deep copy reads every version's body on every page
            assert len(FakeKey.instances_tracked) == tracked  # type: ignore[attr-defined]  # and keeps it
        monkeypatch.undo()
        assert "__deepcopy__" not in FakeKey.__dict__
        assert len(expected) > 1 and sum(len(p.get("Versions", [])) for p in expected) == len(BODIES) + 2
        assert sum(len(p.get("DeleteMarkers", [])) for p in expected) == 1


def test_a_copy_once_gone_leaves_the_stored_object_whole() -> None:
    with _bucket() as s3:
        before = _bodies(s3)
        backend = s3_backends[ACCOUNT_ID]["aws"].buckets[BUCKET]
        stored = [v for _, versions in backend.keys.iterlists() for v in versions if isinstance(v, FakeKey)]
        with s3_versions.installed():
            for version in stored:
                twin = copy.deepcopy(version)
                assert (twin.etag, twin.size) == (version.etag, version.size)
                twin.dispose()  # what moto does when a copy is collected
            del twin
            gc.collect()
            assert _bodies(s3) == before
            assert not any(version._value_buffer.closed for version in stored)
        assert sorted(b for b in before.values() if len(b) == 1 << 20) == sorted(BODIES)
