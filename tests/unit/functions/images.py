"""Real image bytes for the content checks, and the broken files users upload."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def jpeg(width: int = 64, height: int = 64, *, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def png(width: int = 64, height: int = 64, *, color: tuple[int, int, int] = (30, 200, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, "PNG")
    return buffer.getvalue()


def noisy_jpeg(width: int, height: int, *, seed: int = 0) -> bytes:
    """A JPEG whose bytes do not compress (so a cut in the middle leaves a real head and no end)."""
    import random

    rng = random.Random(seed)
    image = Image.frombytes(
        "RGB", (width, height), bytes(rng.getrandbits(8) for _ in range(width * height * 3))
    )
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


def jpeg_with_big_exif(
    width: int = 64, height: int = 64, *, exif_bytes: int = 60_000, noisy: bool = False
) -> bytes:
    """A JPEG whose header runs past the first 64 KiB (a camera's thumbnail and maker notes); `noisy`
    pixels make a large file."""
    plain = noisy_jpeg(width, height) if noisy else jpeg(width, height)
    # APP1 segments of up to 65533 bytes each, right after SOI, push the frame header back.
    segments = b""
    remaining = exif_bytes
    while remaining > 0:
        chunk = min(remaining, 65_000)
        segments += b"\xff\xe1" + struct.pack(">H", chunk + 2) + b"Exif\x00\x00" + b"\x00" * (chunk - 6)
        remaining -= chunk
    return plain[:2] + segments + plain[2:]


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_declaring(width: int, height: int) -> bytes:
    """A small, valid PNG file whose header declares `width` x `height` (a decompression bomb's shape:
    a few bytes that would decode to billions of pixels)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(b"\x00"))
        + _chunk(b"IEND", b"")
    )


def broken_huffman_jpeg(width: int = 64, height: int = 64) -> bytes:
    """A JPEG whose header and end are intact (ingest's checks pass) but whose Huffman table is garbage:
    only a full decode, as training does, finds it ("broken data stream")."""
    body = noisy_jpeg(width, height, seed=7)
    table = body.index(b"\xff\xc4")
    return body[: table + 5] + b"\xff" * 16 + body[table + 21 :]
