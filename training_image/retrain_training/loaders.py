"""The PyTorch DataLoader implementation (PIL decode, CPU augmentations from augment.py) of the loader
interface (batching.py), and the choice of a loader: this one, or the DALI loader (dali_loader.py).

Every loader yields, for an epoch, `(images float NCHW normalised, labels int64)` batches in the
order `data.epoch_order(len(samples), seed, epoch)` sharded by `data.rank_batches`, starting at any
batch, so a resumed run continues with exactly the batches an uninterrupted run would see.
"""

from __future__ import annotations

import atexit
import importlib
import os
import signal
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Unpack

import numpy as np
import torch
from PIL import Image

from retrain_contract import container as contract
from retrain_training import data, distributed
from retrain_training.augment import CROP_SCALE, eval_transform, train_transform
from retrain_training.batching import BatchLoader, Loader, LoaderOptions


class _SampleDataset(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """The loader's samples, keyed by (epoch, position in the epoch order, sample index): the key says
    everything an item depends on, so one dataset (and one set of persistent workers) serves every epoch."""

    def __init__(
        self,
        samples: Sequence[data.Sample],
        *,
        train: bool,
        image_size: int,
        augment_load: int,
        seed: int,
        crop_scale_min: float = CROP_SCALE[0],
    ) -> None:
        self.samples = samples
        self.train = train
        self.image_size = image_size
        self.augment_load = augment_load
        self.seed = seed
        self.crop_scale_min = crop_scale_min

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: tuple[int, int, int]) -> tuple[torch.Tensor, int]:
        epoch, position, index = key
        sample = self.samples[index]
        with Image.open(sample.path) as image:
            if self.train:
                rng = np.random.Generator(np.random.PCG64(data.sample_seed(self.seed, epoch, position)))
                tensor = train_transform(image, self.image_size, self.augment_load, rng, self.crop_scale_min)
            else:
                tensor = eval_transform(image, self.image_size)
        return tensor, sample.label


class _PlannedBatches(torch.utils.data.Sampler[list[tuple[int, int, int]]]):
    """The batches of the epoch being read, as dataset keys; the loader sets them before each epoch. The
    DataLoader's main process iterates it anew at every `iter()`, so persistent workers need no restart."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, int, int]]] = []

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[tuple[int, int, int]]]:
        return iter(list(self.batches))


class TorchLoader(BatchLoader):
    """PyTorch DataLoader over PIL decode and CPU augmentations; batches follow `data.rank_batches`.

    One DataLoader serves every epoch. With worker processes they persist across epochs
    (`persistent_workers`: forking them again each epoch costs a pause per epoch and the workers' warm
    state), each `PREFETCH_FACTOR` batches ahead, and batches are pinned for non-blocking copies on a GPU.
    """

    kind = "torch"
    PREFETCH_FACTOR = 2  # batches each worker prepares ahead (the DataLoader's default)

    def __init__(self, samples: Sequence[data.Sample], **options: Unpack[LoaderOptions]) -> None:
        super().__init__(samples, **options)
        self.planned = _PlannedBatches()
        self.dataset = _SampleDataset(
            self.samples,
            train=self.train,
            image_size=self.image_size,
            augment_load=self.augment_load,
            seed=self.seed,
            crop_scale_min=self.crop_scale_min,
        )
        self._loader: torch.utils.data.DataLoader[tuple[torch.Tensor, int]] | None = None

    def _data_loader(self) -> torch.utils.data.DataLoader[tuple[torch.Tensor, int]]:
        if self._loader is None:
            workers = self.num_workers > 0
            self._loader = torch.utils.data.DataLoader(
                self.dataset,
                batch_sampler=self.planned,
                num_workers=self.num_workers,
                pin_memory=self.device.type == "cuda",
                worker_init_fn=_ignore_sigterm if workers else None,
                persistent_workers=workers,
                prefetch_factor=self.PREFETCH_FACTOR if workers else None,
            )
            if workers:
                atexit.register(_close_at_exit, weakref.ref(self))
        return self._loader

    def close(self) -> None:
        """Stop the worker processes. They ignore SIGTERM, which is how the interpreter's exit stops
        daemon processes, so a process that exits with them alive would wait for them forever. This
        calls the DataLoader's own clean-up (what its iterator's finaliser calls): an epoch left midway
        keeps the iterator alive. A later epoch starts new workers."""
        iterator = getattr(self._loader, "_iterator", None)
        self._loader = None
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.delay.start_epoch()
        order = self.order(epoch)
        batches = data.rank_batches(
            order, self.batch_size, train=self.train, rank=self.rank, world_size=self.world_size
        )[start_batch:]
        if not batches:
            return
        positions = {index: position for position, index in enumerate(order)}
        self.planned.batches = [[(epoch, positions[i], i) for i in batch] for batch in batches]
        for number, (images, labels) in enumerate(self._data_loader(), start=start_batch):
            self.delay.wait()
            self.position = (epoch, number + 1)
            yield images, labels.to(torch.int64)

    @property
    def worker_pids(self) -> list[int]:
        """The live worker processes' ids (none before the first epoch, or without workers)."""
        iterator = getattr(self._loader, "_iterator", None)
        return [w.pid for w in getattr(iterator, "_workers", []) if w.is_alive()]


def _close_at_exit(loader: weakref.ref[TorchLoader]) -> None:
    """Registered after `multiprocessing`'s own exit handler, so it runs before it (atexit is LIFO)."""
    alive = loader()
    if alive is not None:
        alive.close()


def _ignore_sigterm(worker_id: int) -> None:
    """Workers leave SIGTERM to the training process, which finishes its step and checkpoints."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def worker_count(
    requested: int, kind: str, environ: Mapping[str, str] | None = None, *, busy: int = 0
) -> int:
    """The loader's workers: `requested`, or with `contract.NUM_WORKERS_AUTO` this process's share of
    the instance's vCPUs (SageMaker's SM_NUM_CPUS, else the CPUs this process may run on), as
    NVIDIA's and torchvision's trainers size them: the DataLoader's worker processes leave one vCPU
    to the training process; DALI's CPU threads leave one to it and one to each of the job's `busy`
    threads and processes besides (the parallel feed's processes, the prefetch thread), which DALI's
    threads took before: 4 + 3 runnable on a 4-vCPU instance."""
    if requested != contract.NUM_WORKERS_AUTO:
        if requested < 0:
            raise ValueError(
                f"num-workers must be {contract.NUM_WORKERS_AUTO} (auto) or at least 0, got {requested}"
            )
        return requested
    env = os.environ if environ is None else environ
    cpus = int(env.get(contract.NUM_CPUS_ENV) or len(os.sched_getaffinity(0)))
    share = max(1, cpus // max(1, distributed.local_world_size(env)))
    return max(1, share - 1) if kind == TorchLoader.kind else max(1, share - 1 - busy)


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
