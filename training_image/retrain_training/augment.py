"""The augmentations every loader shares, defined once: the ranges, the crop box and the PIL transforms
(torch loader) that the DALI loader reproduces on the GPU (dali_loader.py)."""

from __future__ import annotations

import math

import numpy as np
import torch
from PIL import Image

CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)
FLIP_PROBABILITY = 0.5
ROTATION_DEGREES = 15.0  # uniform in [-ROTATION_DEGREES, ROTATION_DEGREES]
EVAL_RESIZE_RATIO = 8.0 / 7.0  # eval: shorter side to image_size * 8/7, then center crop
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def eval_resize_size(image_size: int) -> int:
    return round(image_size * EVAL_RESIZE_RATIO)


def check_crop_scale_min(value: float) -> float:
    """The crop-scale-min hyperparameter, refused outside (0, CROP_SCALE[1]] with its name."""
    if not 0.0 < value <= CROP_SCALE[1]:
        raise ValueError(f"hyperparameter crop-scale-min must be in (0, {CROP_SCALE[1]}], got {value}")
    return value


def random_resized_crop_box(
    width: int, height: int, rng: np.random.Generator, scale_min: float = CROP_SCALE[0]
) -> tuple[float, float, float, float]:
    """torchvision's RandomResizedCrop box: 10 tries at a random area and aspect, else a center crop.

    `scale_min` (hyperparameter crop-scale-min) replaces the lower end of CROP_SCALE: ImageNet's 0.08
    keeps slivers that erase small or low-resolution subjects such as digits."""
    check_crop_scale_min(scale_min)
    area = width * height
    log_ratio = (math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(scale_min, CROP_SCALE[1])
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left = int(rng.integers(0, width - w + 1))
            top = int(rng.integers(0, height - h + 1))
            return (left, top, left + w, top + h)
    in_ratio = width / height
    if in_ratio < CROP_RATIO[0]:
        w, h = width, round(width / CROP_RATIO[0])
    elif in_ratio > CROP_RATIO[1]:
        w, h = round(height * CROP_RATIO[1]), height
    else:
        w, h = width, height
    left, top = (width - w) // 2, (height - h) // 2
    return (left, top, left + w, top + h)


def to_tensor(image: Image.Image) -> torch.Tensor:
    """CHW float normalised with the ImageNet mean and standard deviation."""
    array = np.asarray(image, dtype=np.float32) / 255.0
    array = (array - np.asarray(IMAGENET_MEAN, dtype=np.float32)) / np.asarray(IMAGENET_STD, dtype=np.float32)
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def train_transform(
    image: Image.Image,
    image_size: int,
    augment_load: int,
    rng: np.random.Generator,
    crop_scale_min: float = CROP_SCALE[0],
) -> torch.Tensor:
    image = image.convert("RGB")
    box = random_resized_crop_box(image.width, image.height, rng, crop_scale_min)
    image = image.resize((image_size, image_size), Image.Resampling.BILINEAR, box=box)
    for _ in range(augment_load):
        if rng.random() < FLIP_PROBABILITY:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        angle = float(rng.uniform(-ROTATION_DEGREES, ROTATION_DEGREES))
        image = image.rotate(angle, resample=Image.Resampling.BILINEAR)
    return to_tensor(image)


def eval_transform(image: Image.Image, image_size: int) -> torch.Tensor:
    image = image.convert("RGB")
    short = eval_resize_size(image_size)
    scale = short / min(image.width, image.height)
    size = (max(short, round(image.width * scale)), max(short, round(image.height * scale)))
    image = image.resize(size, Image.Resampling.BILINEAR)
    left, top = (size[0] - image_size) // 2, (size[1] - image_size) // 2
    return to_tensor(image.crop((left, top, left + image_size, top + image_size)))
