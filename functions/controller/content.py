"""What an upload's bytes are, in one GET: the whole object when it is small, else its head; the tail too.

An object of at most WHOLE_READ_BYTES is read whole in one GET (most catalogue images: one request per
upload, not two, which halves ingest's GETs against S3's per-prefix rate); a larger one is read as two
ranged GETs, the head and the tail, never downloading the image.

An upload is a training image when its bytes are an image of the format its extension names (Pillow
reads the format and the dimensions from the header alone), its header decodes, its sides are at least
the stack's minimum and its pixel count within the decoder's budget (a decompression bomb declares
billions), and it ends where its format ends (a JPEG's EOI marker, a PNG's IEND chunk), so a file cut
off half way is caught. Each refusal says what is wrong and what to do; nothing here changes the object.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from botocore.exceptions import ClientError
from PIL import Image, UnidentifiedImageError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

HEAD_BYTES: Final = 64 * 1024  # a JPEG's header (EXIF included) fits in most; more is read when it does not
MAX_HEAD_BYTES: Final = 1024 * 1024
# Read whole in one GET up to this size: a second request's latency (tens to 200 ms) costs more than the
# bytes (a millisecond or so per 100 KB inside a region), and the checks see every byte instead of two ends.
WHOLE_READ_BYTES: Final = MAX_HEAD_BYTES
TAIL_BYTES: Final = 1024
FORMATS: Final = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG"}
EXTENSION_OF: Final = {"JPEG": ".jpg", "PNG": ".png"}
# A JPEG ends with its EOI marker (cameras may append a trailer after it); a PNG with its IEND chunk.
ENDINGS: Final = {"JPEG": b"\xff\xd9", "PNG": b"IEND\xaeB`\x82"}


@dataclass(frozen=True)
class Limits:
    """The stack's MinImageSide and MaxImagePixels."""

    min_side: int
    max_pixels: int


@dataclass(frozen=True)
class Header:
    format: str
    width: int
    height: int


class _NeedMoreBytesError(Exception):
    """The header did not fit in the bytes read so far."""


def read_header(head: bytes, *, complete: bool) -> Header | str:
    """The image format and size from the first bytes, or why they are not an image's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(head)) as image:
                return Header(str(image.format), int(image.width), int(image.height))
        except Image.DecompressionBombError as error:
            return f"the header declares an image too large to decode safely ({error})"
        except UnidentifiedImageError:
            if not _has_image_magic(head):
                return _not_an_image(head)
            if not complete:
                raise _NeedMoreBytesError from None
            return (
                f"the file starts like an image but its header does not decode ({len(head)} bytes read): "
                "it is damaged or cut off; upload it again"
            )
        except (OSError, SyntaxError, ValueError) as error:
            if not complete:
                raise _NeedMoreBytesError from None
            return f"the image header does not decode ({type(error).__name__}: {error})"


def _has_image_magic(head: bytes) -> bool:
    return head.startswith((b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n"))


def _not_an_image(head: bytes) -> str:
    start = head[:12]
    return f"the bytes are not an image (they start with {start!r}); upload the image file itself"


def judge(header: Header | str, tail: bytes, *, extension: str, size: int, limits: Limits) -> str | None:
    """None for a training image; otherwise the reason, in words a person acts on."""
    if isinstance(header, str):
        return header
    expected = FORMATS.get(extension.lower())
    if header.format != expected:
        hint = EXTENSION_OF.get(header.format)
        fix = f"rename it to {hint}" if hint else "convert it to JPEG or PNG"
        return f"the bytes are a {header.format} image but the name says {extension}; {fix}"
    if min(header.width, header.height) < limits.min_side:
        return (
            f"the image is {header.width}x{header.height} pixels, below MinImageSide {limits.min_side}; "
            "upload a larger image"
        )
    if header.width * header.height > limits.max_pixels:
        return (
            f"the image is {header.width}x{header.height} pixels, above MaxImagePixels {limits.max_pixels} "
            "(a decoder's budget); downscale it"
        )
    if ENDINGS[header.format] not in tail:
        return (
            f"the {header.format} file ends before its end marker ({size} bytes): it was cut off while "
            "uploading or copying; upload it again"
        )
    return None


def _read(s3: S3Client, bucket: str, key: str, version_id: str, byte_range: str) -> bytes:
    request = {"Bucket": bucket, "Key": key, "Range": byte_range}
    if version_id and version_id != "null":
        request["VersionId"] = version_id
    return bytes(s3.get_object(**request)["Body"].read())  # type: ignore[arg-type]


def check_object(
    bucket: str, key: str, *, version_id: str, size: int, limits: Limits, s3: S3Client
) -> str | None:
    """Why the uploaded object is not a training image, or None: the whole object when it is at most
    WHOLE_READ_BYTES, else the head (grown until the header fits, up to MAX_HEAD_BYTES) and the last
    TAIL_BYTES, read with ranged GETs of the version ledgered."""
    try:
        return _check(bucket, key, version_id=version_id, size=size, limits=limits, s3=s3)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") not in ("NoSuchKey", "NoSuchVersion"):
            raise
        # Deleted (or overwritten, without versioning) before it was read: its deletion notice follows.
        return "the object was deleted before it could be read; upload it again if it was meant to stay"


def _check(bucket: str, key: str, *, version_id: str, size: int, limits: Limits, s3: S3Client) -> str | None:
    length = size if size <= WHOLE_READ_BYTES else HEAD_BYTES
    while True:
        head = _read(s3, bucket, key, version_id, f"bytes=0-{min(length, size) - 1}")
        complete = length >= size or length >= MAX_HEAD_BYTES
        try:
            header = read_header(head, complete=complete)
            break
        except _NeedMoreBytesError:
            length *= 4
    tail = (
        head[-TAIL_BYTES:]
        if size <= len(head)
        else _read(s3, bucket, key, version_id, f"bytes=-{TAIL_BYTES}")
    )
    extension = "." + key.rsplit(".", 1)[-1] if "." in key else ""
    return judge(header, tail, extension=extension, size=size, limits=limits)
