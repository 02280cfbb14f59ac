"""The loader interface train.py uses, the augmentation ranges every loader shares, and the PyTorch
DataLoader implementation (PIL decode, CPU augmentations). The DALI loader lives in dali_loader.py.

Every loader yields, for an epoch, `(images float NCHW normalised, labels int64)` batches in the
order `data.epoch_order(len(samples), seed, epoch)` sharded by `data.rank_batches`, starting at any
batch, so a resumed run continues with exactly the batches an uninterrupted run would see.
"""

from __future__ import annotations

import importlib
import math
import signal
import time
from collections.abc import Iterator, Sequence
from typing import Any, NotRequired, Protocol, TypedDict, Unpack

import numpy as np
import torch
from PIL import Image

from retrain_training import data

# Augmentation ranges, defined once: the DALI loader imports these.
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)
FLIP_PROBABILITY = 0.5
ROTATION_DEGREES = 15.0  # uniform in [-ROTATION_DEGREES, ROTATION_DEGREES]
EVAL_RESIZE_RATIO = 8.0 / 7.0  # eval: shorter side to image_size * 8/7, then center crop
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
LOADER_STATE_VERSION = 1


class Loader(Protocol):
    def __len__(self) -> int:
        """Batches per epoch for this rank."""
        ...

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(images float NCHW normalised, labels int64) for that epoch's order, from start_batch."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What the loader needs to resume; stored in the checkpoint."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


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


class PlantedDelay:
    """Fault injection (`inject-loader-delay-ms`): a loader that starves the step. Before each batch it
    sleeps `delay_ms`, and at least `DOMINANCE` times the longest of the consumer's last `WINDOW` steps
    (the time between two hand-overs inside an epoch), so data wait stays most of every step however
    busy the machine makes the compute. The steps seen go into the loader's state, so an epoch's first
    batch and a resumed job's first batch are starved like the rest; only a new job's first batch, before
    any step was seen, gets the plain delay."""

    DOMINANCE = 4.0
    WINDOW = 5

    def __init__(self, delay_ms: int) -> None:
        self.delay_s = delay_ms / 1000.0
        self.recent_steps_s: list[float] = []
        self._handed_at: float | None = None

    def __bool__(self) -> bool:
        return self.delay_s > 0

    def start_epoch(self) -> None:
        """The time until the next batch holds evaluation, not a step: do not measure it."""
        self._handed_at = None

    def sleep_s(self) -> float:
        return max([self.delay_s, *(self.DOMINANCE * s for s in self.recent_steps_s)])

    def wait(self) -> None:
        if not self:
            return
        if self._handed_at is not None:
            self.recent_steps_s = [*self.recent_steps_s, time.monotonic() - self._handed_at][-self.WINDOW :]
        time.sleep(self.sleep_s())
        self._handed_at = time.monotonic()

    def state_dict(self) -> dict[str, Any]:
        return {"planted_recent_steps_s": list(self.recent_steps_s)} if self else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.recent_steps_s = [float(s) for s in state.get("planted_recent_steps_s", [])][-self.WINDOW :]


class _EpochDataset(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """One epoch's items for a rank; item i is (position in the epoch order, sample)."""

    def __init__(
        self,
        items: Sequence[tuple[int, data.Sample]],
        *,
        train: bool,
        image_size: int,
        augment_load: int,
        seed: int,
        epoch: int,
        crop_scale_min: float = CROP_SCALE[0],
    ) -> None:
        self.items = items
        self.train = train
        self.image_size = image_size
        self.augment_load = augment_load
        self.seed = seed
        self.epoch = epoch
        self.crop_scale_min = crop_scale_min

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        position, sample = self.items[index]
        with Image.open(sample.path) as image:
            if self.train:
                rng = np.random.Generator(np.random.PCG64(data.sample_seed(self.seed, self.epoch, position)))
                tensor = train_transform(image, self.image_size, self.augment_load, rng, self.crop_scale_min)
            else:
                tensor = eval_transform(image, self.image_size)
        return tensor, sample.label


class LoaderOptions(TypedDict):
    """The keyword arguments of every loader and of `build_loader` (written once, here)."""

    train: bool
    batch_size: int  # the GLOBAL batch; each rank yields its slice (see data.rank_batches)
    image_size: int
    augment_load: int
    seed: int
    num_workers: int
    device: torch.device
    rank: NotRequired[int]
    world_size: NotRequired[int]
    delay_ms: NotRequired[int]
    crop_scale_min: NotRequired[float]


class BatchLoader:
    """What both loaders share: the checked options, the epoch order, the resume position and the
    state a checkpoint holds. Subclasses give `kind` and `epoch`."""

    kind: str

    def __init__(self, samples: Sequence[data.Sample], **options: Unpack[LoaderOptions]) -> None:
        if options["batch_size"] < 1:
            raise ValueError(f"batch-size must be at least 1, got {options['batch_size']}")
        self.crop_scale_min = check_crop_scale_min(options.get("crop_scale_min", CROP_SCALE[0]))
        self.samples = list(samples)
        self.train = options["train"]
        self.batch_size = options["batch_size"]
        self.image_size = options["image_size"]
        self.augment_load = options["augment_load"]
        self.seed = options["seed"]
        self.num_workers = options["num_workers"]
        self.device = options["device"]
        self.rank = options.get("rank", 0)
        self.world_size = options.get("world_size", 1)
        self.delay = PlantedDelay(options.get("delay_ms", 0))
        self.position = (0, 0)  # (epoch, next batch)

    def __len__(self) -> int:
        return data.num_batches(len(self.samples), self.batch_size, train=self.train)

    def order(self, epoch: int) -> list[int]:
        if self.train:
            return data.epoch_order(len(self.samples), self.seed, epoch)
        return list(range(len(self.samples)))

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": LOADER_STATE_VERSION,
            "seed": self.seed,
            "num_samples": len(self.samples),
            "epoch": self.position[0],
            "next_batch": self.position[1],
            **self.delay.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = {"seed": self.seed, "num_samples": len(self.samples)}
        found = {key: state.get(key) for key in expected}
        if found != expected:
            raise ValueError(
                f"the checkpoint's loader state {found} does not match this job {expected}: "
                "the data or seed changed since the checkpoint; start a new training job"
            )
        self.position = (int(state["epoch"]), int(state["next_batch"]))
        self.delay.load_state_dict(state)


class TorchLoader(BatchLoader):
    """PyTorch DataLoader over PIL decode and CPU augmentations; batches follow `data.rank_batches`."""

    kind = "torch"

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.delay.start_epoch()
        order = self.order(epoch)
        batches = data.rank_batches(
            order, self.batch_size, train=self.train, rank=self.rank, world_size=self.world_size
        )[start_batch:]
        if not batches:
            return
        positions = {index: position for position, index in enumerate(order)}
        flat = [(positions[i], self.samples[i]) for batch in batches for i in batch]
        dataset = _EpochDataset(
            flat,
            train=self.train,
            image_size=self.image_size,
            augment_load=self.augment_load,
            seed=self.seed,
            epoch=epoch,
            crop_scale_min=self.crop_scale_min,
        )
        sampler = _BatchSampler([len(b) for b in batches])
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_sampler=sampler,
            num_workers=self.num_workers,
            pin_memory=self.device.type == "cuda",
            worker_init_fn=_ignore_sigterm,
        )
        for number, (images, labels) in enumerate(loader, start=start_batch):
            self.delay.wait()
            self.position = (epoch, number + 1)
            yield images, labels.to(torch.int64)


def _ignore_sigterm(worker_id: int) -> None:
    """Workers leave SIGTERM to the training process, which finishes its step and checkpoints."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class _BatchSampler(torch.utils.data.Sampler[list[int]]):
    """Consecutive index ranges of the given sizes over the flattened epoch items."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = list(sizes)

    def __len__(self) -> int:
        return len(self.sizes)

    def __iter__(self) -> Iterator[list[int]]:
        start = 0
        for size in self.sizes:
            yield list(range(start, start + size))
            start += size


def resolve_kind(kind: str, device: torch.device) -> str:
    """`auto` picks DALI when a GPU is present and DALI imports, the DataLoader otherwise."""
    if kind != "auto":
        return kind
    if device.type != "cuda":
        return "torch"
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return "torch"
    return "dali"


def build_loader(kind: str, samples: Sequence[data.Sample], **options: Unpack[LoaderOptions]) -> Loader:
    """A loader of `kind` (torch | dali | auto) over `samples`."""
    resolved = resolve_kind(kind, options["device"])
    if resolved == "torch":
        return TorchLoader(samples, **options)
    if resolved == "dali":
        # lazily: DALI is large and GPU-oriented
        dali_loader = importlib.import_module("retrain_training.dali_loader")
        loader: Loader = dali_loader.DaliLoader(samples, **options)
        return loader
    raise ValueError(f"unknown loader {kind!r}: use torch, dali or auto")
