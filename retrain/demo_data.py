"""The demo's data set: scikit-learn's digits (1,797 labelled 8x8 images, shipped inside the package)
written as JPEG files in label folders, as a user would have them on disk."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
from PIL import Image

T = TypeVar("T")

LABELS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
DIGITS_MAX = 16.0  # load_digits' pixel values run 0..16
DEFAULT_SIZE = 32


@dataclass(frozen=True)
class DemoDataset:
    root: Path
    files: tuple[Path, ...]
    per_label: dict[str, int]


def write_digits(
    root: Path, *, size: int = DEFAULT_SIZE, limit: int | None = None, start: int = 0
) -> DemoDataset:
    """Write `root/<label>/digit-<index>.jpg` for the digits from index `start` (at most `limit` of them).

    The 8x8 images are upscaled to `size` pixels (bicubic) so a CNN has something to convolve, and saved
    as RGB JPEGs because that is what users upload.
    """
    from sklearn.datasets import load_digits

    if size < 8:
        raise ValueError(f"size must be at least 8 pixels, got {size}")
    digits = load_digits()
    images = np.asarray(digits.images)
    targets = np.asarray(digits.target)
    if not 0 <= start < len(images):
        raise ValueError(f"start must be within the {len(images)} digits, got {start}")
    stop = len(images) if limit is None else min(start + limit, len(images))
    files: list[Path] = []
    per_label: Counter[str] = Counter()
    for index in range(start, stop):
        label = LABELS[int(targets[index])]
        pixels = np.clip(images[index] * (255.0 / DIGITS_MAX), 0, 255).astype(np.uint8)
        image = Image.fromarray(pixels, mode="L").resize((size, size), Image.Resampling.BICUBIC)
        path = root / label / f"digit-{index:04d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        image.convert("RGB").save(path, format="JPEG", quality=95)
        files.append(path)
        per_label[label] += 1
    return DemoDataset(root=root, files=tuple(files), per_label=dict(per_label))


def write_mistakes(root: Path) -> list[Path]:
    """Two files a user uploads by mistake, so the demo shows validation: a note in a label folder and
    an empty image. The control plane rejects both with a reason and leaves them where they are."""
    note = root / LABELS[0] / "notes.txt"
    empty = root / LABELS[1] / "empty.jpg"
    note.parent.mkdir(parents=True, exist_ok=True)
    empty.parent.mkdir(parents=True, exist_ok=True)
    note.write_text("scanned from the lab notebook, page 3\n", encoding="utf-8")
    empty.write_bytes(b"")
    return [note, empty]


def batches(files: Sequence[T], count: int) -> list[list[T]]:
    """Split files into `count` nearly equal upload batches, interleaved so every batch has every label."""
    if count < 1:
        raise ValueError(f"batch count must be at least 1, got {count}")
    return [b for b in (list(files[i::count]) for i in range(count)) if b]
