"""S3 transfers the emulated instances do: channel downloads, checkpoint sync, artifact uploads."""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boto3.s3.transfer import TransferConfig

from retrain.embedded.s3files import InputCache, get_file

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectTypeDef


# "Upload an object in a single operation by using the AWS SDKs, REST API, or AWS CLI - With a single PUT
# operation, you can upload a single object up to 5 GB in size." (Amazon S3 User Guide, Uploading objects,
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/upload-objects.html)
MAX_SINGLE_PUT_BYTES = 5 * 1024**3
MULTIPART_CHUNK_BYTES = 64 * 1024**2


@dataclass(frozen=True)
class S3Uri:
    bucket: str
    key: str

    @classmethod
    def parse(cls, uri: str) -> S3Uri:
        if not uri.startswith("s3://") or len(uri) <= len("s3://"):
            raise ValueError(f"{uri!r} is not an S3 URI; write it as s3://bucket/prefix")
        bucket, _, key = uri[len("s3://") :].partition("/")
        if not bucket:
            raise ValueError(f"{uri!r} names no bucket; write it as s3://bucket/prefix")
        return cls(bucket, key)

    def join(self, *parts: str) -> S3Uri:
        key = self.key.rstrip("/")
        for part in parts:
            key = f"{key}/{part.strip('/')}" if key else part.strip("/")
        return S3Uri(self.bucket, key)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


GIB = 1024**3


class InsufficientDiskError(Exception):
    """A job's File-mode inputs do not fit its ML storage volume."""


@dataclass
class Volume:
    """The ML storage volume (ResourceConfig/ClusterConfig VolumeSizeInGB) that SageMaker copies a job's
    File-mode inputs to: what does not fit fails the job before it runs."""

    size_gb: int
    used: int = 0

    def take(self, size: int, what: str) -> None:
        capacity = self.size_gb * GIB
        if self.used + size > capacity:
            raise InsufficientDiskError(
                f"{what} needs {size} bytes but {capacity - self.used} of the job's {self.size_gb} GB volume "
                "are free"
            )
        self.used += size


def list_objects(s3: S3Client, uri: S3Uri) -> list[ObjectTypeDef]:
    objects: list[ObjectTypeDef] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=uri.key):
        objects.extend(page.get("Contents", []))
    return objects


def download_prefix(
    s3: S3Client, uri: S3Uri, target: Path, cache: InputCache | None = None, volume: Volume | None = None
) -> int:
    """Copy every object whose key starts with the prefix to `target`, as SageMaker's S3Prefix does:
    the local path is the key with the prefix removed (an exact object key keeps its file name). With a
    `volume`, the objects' bytes are taken from it first (InsufficientDiskError when they do not fit)."""
    count = 0
    objects = list_objects(s3, uri)
    if volume is not None:
        volume.take(sum(int(obj.get("Size", 0)) for obj in objects), str(uri))
    for obj in objects:
        key = obj["Key"]
        if key.endswith("/"):
            continue
        rel = key[len(uri.key) :].lstrip("/") or key.rsplit("/", 1)[-1]
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if cache is None:
            get_file(s3, uri.bucket, key, dest)
        else:
            cache.fetch(s3, uri.bucket, obj, dest)
        count += 1
    return count


def download_manifest(s3: S3Client, uri: S3Uri, target: Path, volume: Volume | None = None) -> int:
    """A ManifestFile channel: [{"prefix": "s3://b/p/"}, "rel/key", ...] -> target/rel/key; with a
    `volume`, each file's bytes are taken from it."""
    body = s3.get_object(Bucket=uri.bucket, Key=uri.key)["Body"].read()
    try:
        entries: Any = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"manifest {uri} is not JSON ({exc})") from exc
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        raise ValueError(f'manifest {uri} must be a JSON list starting with {{"prefix": "s3://..."}}')
    prefix = S3Uri.parse(str(entries[0].get("prefix", "")))
    for rel in entries[1:]:
        key = prefix.join(str(rel))
        dest = target / str(rel).strip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        get_file(s3, key.bucket, key.key, dest)
        if volume is not None:
            volume.take(dest.stat().st_size, str(key))
    return len(entries) - 1


def upload_file(s3: S3Client, path: Path, uri: S3Uri) -> None:
    """One PutObject up to S3's single-PUT limit, multipart above it. boto3 splits anything over 8 MB into
    8 MB parts, and each part of a 134 MB checkpoint cost the embedded server a request, a signature over
    its bytes and a copy when the upload completed: 1.8 s of CPU per checkpoint against 1.2 s in one PUT
    (BENCHMARKS.md, "Where the suite's time goes, and three cuts")."""
    single_put = TransferConfig(
        multipart_threshold=MAX_SINGLE_PUT_BYTES, multipart_chunksize=MULTIPART_CHUNK_BYTES
    )
    s3.upload_file(str(path), uri.bucket, uri.key, Config=single_put)


def upload_tree(s3: S3Client, root: Path, uri: S3Uri) -> int:
    count = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        upload_file(s3, path, uri.join(path.relative_to(root).as_posix()))
        count += 1
    return count


def tar_directory(source: Path, archive: Path) -> Path:
    """A gzip tarball of a directory's contents (members relative to it), as SageMaker packs /opt/ml/model."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    # Fastest gzip level: weights barely compress, and level 9 took seconds of the emulator's core per
    # job; the archive is as valid (SageMaker's own level does not matter to anyone who reads it).
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        if source.is_dir():
            for path in sorted(source.rglob("*")):
                tar.add(path, arcname=path.relative_to(source).as_posix(), recursive=False)
    return archive
