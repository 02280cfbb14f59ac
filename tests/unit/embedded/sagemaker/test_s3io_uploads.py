"""How the emulated instances upload a file: one PutObject up to S3's single-PUT limit (5 GB), a
multipart upload above it, the object's bytes the file's either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from retrain.embedded.sagemaker import s3io

from .conftest import BUCKET

# Above boto3's default multipart threshold (8 MB), so its default would split it into parts.
SIZE = 9 * 1024 * 1024


def _operations(s3: Any) -> list[str]:
    called: list[str] = []
    s3.meta.events.register("before-call.s3.*", lambda model, **_: called.append(model.name))
    return called


@pytest.mark.parametrize(
    ("single_put_limit", "expected"),
    [
        (s3io.MAX_SINGLE_PUT_BYTES, ["PutObject"]),
        (SIZE - 1, ["CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"]),
    ],
    ids=["checkpoint-sized-file", "file-over-the-single-put-limit"],
)
def test_a_file_is_one_put_up_to_the_single_put_limit_and_multipart_above(
    aws: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    single_put_limit: int,
    expected: list[str],
) -> None:
    # GIVEN a 9 MB file and the emulator's upload, with S3's limit (or one just under the file's size)
    monkeypatch.setattr(s3io, "MAX_SINGLE_PUT_BYTES", single_put_limit)
    monkeypatch.setattr(s3io, "MULTIPART_CHUNK_BYTES", 5 * 1024 * 1024)  # S3's smallest part
    path = tmp_path / "ckpt-000000050.pt"
    body = bytes(range(256)) * (SIZE // 256)
    path.write_bytes(body)
    called = _operations(aws["s3"])
    # WHEN it uploads the file
    s3io.upload_file(aws["s3"], path, s3io.S3Uri(BUCKET, "checkpoints/job/ckpt-000000050.pt"))
    # THEN it made the requests S3's limit calls for (two parts above it), and the object is the file
    assert sorted(set(called)) == sorted(expected)
    assert called.count("UploadPart") == (2 if "UploadPart" in expected else 0)
    got = aws["s3"].get_object(Bucket=BUCKET, Key="checkpoints/job/ckpt-000000050.pt")["Body"].read()
    assert got == body
