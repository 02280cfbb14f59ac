"""Tiny image data sets for the training container's unit tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ImageMaker = Callable[[Path, Mapping[str, int]], Path]


def write_images(
    root: Path, counts: Mapping[str, int], *, size: tuple[int, int] = (24, 20), seed: int = 0
) -> Path:
    """`counts[label]` random JPEGs under root/<label>/, named 000.jpg, 001.jpg, ..."""
    rng = np.random.default_rng(seed)
    for label, count in counts.items():
        (root / label).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i:03d}.jpg")
    return root


@pytest.fixture
def make_images() -> ImageMaker:
    return write_images
