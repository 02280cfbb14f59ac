"""Reading S3 objects into files, for the emulated services that copy data onto their "instances"."""

from __future__ import annotations

import hashlib
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectTypeDef


def get_file(s3: S3Client, bucket: str, key: str, dest: Path) -> None:
    """One object to a file with one GetObject. The instances' inputs are many small images; boto3's
    download_file adds a HeadObject and a transfer thread pool to each, which doubled the requests the
    embedded stack serves."""
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    with dest.open("wb") as out:
        for chunk in body.iter_chunks(1 << 20):
            out.write(chunk)


class InputCache:
    """Small objects the emulated instances downloaded before, by bucket, key and ETag.

    Each SageMaker job downloads its inputs to its own instance; here every checkpoint evaluation
    fetched the whole data set again (1,800 GetObjects through the embedded server for the digits). An
    object whose key and ETag are unchanged has the same bytes, so a job gets a copy of the cached file
    instead; a changed object has a new ETag and is fetched. Only objects up to `max_bytes` are kept
    (images, manifests; not checkpoints or models), so the cache stays the size of the data sets.
    Entries are kept per caller's access key: a job's role gets a copy only of what that role itself
    was allowed to GetObject, so a role without the permission is still refused, as on AWS.
    """

    def __init__(self, root: Path, max_bytes: int = 1 << 20) -> None:
        self.root = root
        self.max_bytes = max_bytes

    def fetch(self, s3: S3Client, bucket: str, obj: ObjectTypeDef, dest: Path) -> None:
        key = obj["Key"]
        if obj.get("Size", self.max_bytes + 1) > self.max_bytes or "ETag" not in obj:
            get_file(s3, bucket, key, dest)
            return
        caller = s3._request_signer._credentials.get_frozen_credentials().access_key  # type: ignore[attr-defined]
        name = hashlib.sha256(f"{caller}\0{bucket}\0{key}\0{obj['ETag']}".encode()).hexdigest()
        cached = self.root / name[:2] / name
        if not cached.exists():
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_name(f"{name}.{threading.get_ident()}.part")
            get_file(s3, bucket, key, partial)
            partial.replace(cached)
        shutil.copyfile(cached, dest)
