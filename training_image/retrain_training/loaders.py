"""The PyTorch DataLoader implementation (PIL decode, CPU augmentations from augment.py) of the loader
interface (batching.py), and the choice of a loader: this one, or the DALI loader (dali_loader.py).

Every loader yields, for an epoch, `(images float NCHW normalised, labels int64)` batches in the
order `data.epoch_order(len(samples), seed, epoch)` sharded by `data.rank_batches`, starting at any
batch, so a resumed run continues with exactly the batches an uninterrupted run would see.
"""

from __future__ import annotations

import importlib
import signal
from collections.abc import Iterator, Sequence
from typing import Unpack

import numpy as np
import torch
from PIL import Image

from retrain_training import data
from retrain_training.augment import CROP_SCALE, eval_transform, train_transform
from retrain_training.batching import BatchLoader, Loader, LoaderOptions


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
