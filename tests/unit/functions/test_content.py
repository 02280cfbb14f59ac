"""content.py on real image bytes: what a user uploads by mistake is refused with what to do."""

from __future__ import annotations

from typing import Any

import pytest

from controller import content
from tests.unit.functions import images
from tests.unit.functions.support import Aws, moto_aws

LIMITS = content.Limits(min_side=32, max_pixels=89_478_485)


def _check(aws: Aws, key: str, body: bytes) -> str | None:
    put = aws.s3.put_object(Bucket=aws.data_bucket, Key=key, Body=body)
    return content.check_object(
        aws.data_bucket, key, version_id=put.get("VersionId", ""), size=len(body), limits=LIMITS, s3=aws.s3
    )


@pytest.fixture
def aws() -> Any:
    yield from moto_aws()


@pytest.mark.parametrize(
    ("key", "body"),
    [
        ("data/pets/cat/a.jpg", images.jpeg()),
        ("data/pets/cat/a.JPEG", images.jpeg(300, 200)),
        ("data/pets/cat/a.png", images.png(32, 40)),
        ("data/pets/cat/camera.jpg", images.jpeg_with_big_exif(exif_bytes=200_000)),
        ("data/pets/cat/big.jpg", images.noisy_jpeg(400, 300)),
    ],
)
def test_a_real_image_of_its_extensions_format_is_accepted(aws: Aws, key: str, body: bytes) -> None:
    assert _check(aws, key, body) is None


@pytest.mark.parametrize(
    ("key", "body", "expected"),
    [
        ("data/pets/cat/notes.jpg", b"shopping list: milk, eggs\n" * 40, "not an image"),
        ("data/pets/cat/empty.jpg", b"\xff\xd8\xff\xe0", "header does not decode"),
        ("data/pets/cat/cut.jpg", images.noisy_jpeg(256, 256)[:20_000], "cut off"),
        ("data/pets/cat/cut.png", images.png(64, 64)[:-12], "cut off"),
        ("data/pets/cat/screenshot.jpg", images.png(), "PNG image but the name says .jpg; rename it to .png"),
        ("data/pets/cat/photo.png", images.jpeg(), "JPEG image but the name says .png; rename it to .jpg"),
        ("data/pets/cat/tiny.jpg", images.jpeg(16, 48), "16x48 pixels, below MinImageSide 32"),
        ("data/pets/cat/bomb.png", images.png_declaring(100_000, 100_000), "too large to decode safely"),
        ("data/pets/cat/huge.png", images.png_declaring(10_000, 10_000), "above MaxImagePixels 89478485"),
    ],
)
def test_a_bad_upload_is_refused_with_what_to_do(aws: Aws, key: str, body: bytes, expected: str) -> None:
    reason = _check(aws, key, body)
    assert reason is not None and expected in reason
    # the object stays where it is: refusing is recording, never deleting
    assert aws.s3.get_object(Bucket=aws.data_bucket, Key=key)["Body"].read() == body


def _checked_reading(aws: Aws, key: str, body: bytes) -> tuple[str | None, list[int]]:
    """Upload `body`, check it, and return the reason with the bytes each GetObject returned."""
    aws.s3.put_object(Bucket=aws.data_bucket, Key=key, Body=body)
    read: list[int] = []
    aws.s3.meta.events.register(
        "after-call.s3.GetObject", lambda parsed, **_: read.append(int(parsed["ContentLength"]))
    )
    reason = content.check_object(
        aws.data_bucket, key, version_id="", size=len(body), limits=LIMITS, s3=aws.s3
    )
    return reason, read


def test_only_the_head_and_the_tail_of_a_large_image_are_read(aws: Aws) -> None:
    # GIVEN a 5 MB image (most of it pixel data) and S3 calls counted by the bytes they return
    body = images.noisy_jpeg(1600, 1200)
    assert len(body) > 2_000_000
    # WHEN it is checked
    reason, read = _checked_reading(aws, "data/pets/cat/big.jpg", body)
    # THEN two ranged reads brought 64 KiB and 1 KiB, not the file
    assert reason is None
    assert read == [content.HEAD_BYTES, content.TAIL_BYTES]


@pytest.mark.parametrize("side", [64, 300, 560])
def test_a_small_image_is_read_in_one_get(aws: Aws, side: int) -> None:
    # GIVEN images up to WHOLE_READ_BYTES (a catalogue's usual photo), one of them larger than the head
    body = images.noisy_jpeg(side, side)
    assert len(body) <= content.WHOLE_READ_BYTES
    # WHEN it is checked THEN one GET read it whole
    reason, read = _checked_reading(aws, f"data/pets/cat/{side}.jpg", body)
    assert reason is None
    assert read == [len(body)]


def test_one_get_still_catches_a_small_image_cut_off(aws: Aws) -> None:
    # the whole object read in one GET is judged as before: a JPEG cut before its end marker is refused
    body = images.noisy_jpeg(300, 300)
    reason, read = _checked_reading(aws, "data/pets/cat/cut.jpg", body[: len(body) // 2])
    assert reason is not None and "cut off" in reason
    assert read == [len(body) // 2]


def test_the_head_grows_until_a_long_header_fits(aws: Aws) -> None:
    # a large camera JPEG whose APP segments fill the first 64 KiB: a larger read finds the frame header,
    # and the tail is read on its own
    body = images.jpeg_with_big_exif(1600, 1200, exif_bytes=150_000, noisy=True)
    assert len(body) > content.WHOLE_READ_BYTES
    reason, read = _checked_reading(aws, "data/pets/cat/cam.jpg", body)
    assert reason is None
    assert read == [content.HEAD_BYTES, 4 * content.HEAD_BYTES, content.TAIL_BYTES]


def test_a_reason_names_the_format_found_when_the_extension_is_not_an_image_format() -> None:
    header = content.Header("GIF", 64, 64)
    reason = content.judge(header, b"", extension=".jpg", size=100, limits=LIMITS)
    assert reason == "the bytes are a GIF image but the name says .jpg; convert it to JPEG or PNG"
