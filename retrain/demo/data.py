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


# Real photographs scikit-image's wheel ships (skimage/data): one class per photograph. A crop is a random
# square of PHOTO_CROP_SHARE of the photo's shorter side, anywhere in it, maybe mirrored: crops of one
# photograph show different parts of it (the astronaut's face, suit or flag; the cat's eye or fur).
PHOTOS = {
    "astronaut": "astronaut.png",
    "cat": "chelsea.png",
    "coffee": "coffee.png",
    "rocket": "rocket.jpg",
    "motorcycle": "motorcycle_left.png",
    "retina": "retina.jpg",
    "tissue": "ihc.png",
    "bricks": "brick.png",
    "grass": "grass.png",
    "gravel": "gravel.png",
}
# More of them, for harder data sets: many labels, some pairs hard to tell apart (the same motorcycle from
# the left and from the right; two retinas; a printed page and printed text; coins and the moon in grey).
MORE_PHOTOS = {
    "motorcycle-right": "motorcycle_right.png",
    "microaneurysms": "microaneurysms.png",
    "page": "page.png",
    "text": "text.png",
    "coins": "coins.png",
    "moon": "moon.png",
    "cameraman": "camera.png",
    "galaxies": "hubble_deep_field.jpg",
    "horse": "horse.png",
    "cells": "cell.png",
    "clock": "clock_motion.png",
    "colours": "color.png",
    "logo": "logo.png",
    "phantom": "phantom.png",
}
ALL_PHOTOS = {**PHOTOS, **MORE_PHOTOS}
PHOTO_CROP_SHARE = (0.15, 0.45)
PHOTO_SIZE = 128


def write_photos(
    root: Path,
    *,
    per_class: int = 40,
    size: int = PHOTO_SIZE,
    classes: Sequence[str] = tuple(PHOTOS),
    seed: int = 0,
) -> DemoDataset:
    """Write `root/<class>/crop-<n>.jpg`: `per_class` random crops of each class's photograph (a name of
    ALL_PHOTOS), `size` pixels square, as RGB JPEGs (what users upload). The same seed writes the same
    crops."""
    import skimage.data

    unknown = [c for c in classes if c not in ALL_PHOTOS]
    if unknown:
        raise ValueError(f"unknown photo classes {unknown}: use some of {', '.join(ALL_PHOTOS)}")
    folder = Path(skimage.data.__file__).parent
    rng = np.random.default_rng(seed)
    files: list[Path] = []
    per_label: Counter[str] = Counter()
    for label in classes:
        photo = Image.open(folder / ALL_PHOTOS[label]).convert("RGB")
        width, height = photo.size
        for n in range(per_class):
            side = int(min(width, height) * rng.uniform(*PHOTO_CROP_SHARE))
            left, top = int(rng.integers(0, width - side + 1)), int(rng.integers(0, height - side + 1))
            crop = photo.crop((left, top, left + side, top + side)).resize(
                (size, size), Image.Resampling.BICUBIC
            )
            if rng.random() < 0.5:
                crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            path = root / label / f"crop-{n:03d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            crop.save(path, format="JPEG", quality=90)
            files.append(path)
            per_label[label] += 1
    return DemoDataset(root=root, files=tuple(files), per_label=dict(per_label))


def mislabel(root: Path, share: float, *, seed: int = 0) -> list[tuple[Path, str]]:
    """Move `share` of the images under `root/<label>/` into another label's folder, drawn at random, as
    careless labelling does; returns each moved image's new path and its true label. Its name keeps it
    apart from the images of its new label."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be from 0 to 1, got {share}")
    labels = sorted(p.name for p in root.iterdir() if p.is_dir())
    if len(labels) < 2 and share > 0:
        raise ValueError(f"{root} has {len(labels)} label folder(s); mislabelling needs two or more")
    images = sorted(p for p in root.glob("*/*") if p.is_file())
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(images), size=round(share * len(images)), replace=False)
    moved = []
    for index in sorted(int(i) for i in chosen):
        image = images[index]
        truth = image.parent.name
        target = root / _other_label(labels, truth, rng) / f"wrong-{truth}-{image.name}"
        image.rename(target)
        moved.append((target, truth))
    return moved


def _other_label(labels: list[str], truth: str, rng: np.random.Generator) -> str:
    others = [label for label in labels if label != truth]
    return others[int(rng.integers(len(others)))]
