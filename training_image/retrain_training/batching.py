"""The loader interface train.py uses and the base every loader builds on: batches in
`data.epoch_order` sharded by `data.rank_batches`, from any batch (so a resumed run continues with
exactly the batches an uninterrupted run would see), and the planted loader delay."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, Protocol, TypedDict, Unpack

import torch

from retrain_training import data
from retrain_training.augment import CROP_SCALE, check_crop_scale_min

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
    # DALI only (dali_loader.py): worker processes of its parallel external source, where it decodes and
    # augments on a GPU (mixed or cpu), the hardware JPEG decoder's share, and batches in channels-last
    # memory (for a channels-last model: no copy at the step)
    feed_processes: NotRequired[int]
    dali_decode: NotRequired[str]
    hw_decoder_load: NotRequired[float]
    channels_last: NotRequired[bool]


def sample_order(count: int, seed: int, epoch: int, *, train: bool) -> list[int]:
    """The order an epoch reads the samples in: shuffled by (seed, epoch) for training, as they are for
    evaluation."""
    return data.epoch_order(count, seed, epoch) if train else list(range(count))


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

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        raise NotImplementedError(f"{type(self).__name__} gives no epoch()")

    def order(self, epoch: int) -> list[int]:
        return sample_order(len(self.samples), self.seed, epoch, train=self.train)

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


class Prefetched:
    """A loader whose batches a thread of its own prepares, up to `depth` ahead of the step that takes
    them: the next batches' host work (DALI's feeding - file reads, header parsing, the augmentation
    draws - and its `run()`; the DataLoader's hand-over) runs while the model trains on this one, as
    DALI's docs recommend for an external source (feed ahead of the iteration that needs it) and as the
    DataLoader's own workers do. On a GPU the thread works on a CUDA stream of its own and each batch is
    handed over with an event the step's stream waits on, so copies overlap compute without a sync.

    Resume stays exact: `state_dict()` gives the position after the last batch handed to the step, not
    after the last one prepared; batches prepared and not taken are dropped with the epoch.
    """

    def __init__(self, inner: BatchLoader, depth: int) -> None:
        if depth < 1:
            raise ValueError(f"prefetch depth must be at least 1, got {depth}")
        self.inner = inner
        self.depth = depth
        self.kind = inner.kind
        self.handed = inner.position  # (epoch, next batch) after the last batch the step took
        self.producer_thread: int | None = None  # ident of the thread that ran the last epoch's loader

    def __len__(self) -> int:
        return len(self.inner)

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "epoch": self.handed[0], "next_batch": self.handed[1]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.handed = self.inner.position

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        ready: queue.Queue[_Handed | _Finished] = queue.Queue(maxsize=self.depth)
        stop = threading.Event()
        device = self.inner.device
        producer = threading.Thread(
            target=self._produce,
            args=(epoch, start_batch, ready, stop),
            name=f"{self.kind}-prefetch",
            daemon=True,
        )
        producer.start()
        try:
            while True:
                item = ready.get()
                if isinstance(item, _Finished):
                    if item.error is not None:
                        raise item.error
                    return
                if item.event is not None:
                    stream = torch.cuda.current_stream(device)
                    stream.wait_event(item.event)
                    item.images.record_stream(stream)
                    item.labels.record_stream(stream)
                self.handed = item.position
                yield item.images, item.labels
        finally:
            stop.set()
            while producer.is_alive():
                with contextlib.suppress(queue.Empty):
                    ready.get(timeout=0.1)  # unblock a put, so the thread sees the stop
            producer.join()

    def _produce(
        self,
        epoch: int,
        start_batch: int,
        ready: queue.Queue[_Handed | _Finished],
        stop: threading.Event,
    ) -> None:
        self.producer_thread = threading.get_ident()
        device = self.inner.device
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.set_device(device)
        stream = torch.cuda.Stream(device) if cuda else None
        batches = self.inner.epoch(epoch, start_batch)
        try:
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                for host_images, host_labels in batches:
                    images, labels, event = host_images, host_labels, None
                    if cuda:
                        images = host_images.to(device, non_blocking=True)
                        labels = host_labels.to(device, non_blocking=True)
                        event = torch.cuda.Event()
                        event.record(stream)
                    if not _put(ready, _Handed(images, labels, self.inner.position, event), stop):
                        return
            _put(ready, _Finished(None), stop)
        except BaseException as error:  # the step's thread raises it
            _put(ready, _Finished(error), stop)
        finally:
            close = getattr(batches, "close", None)  # a generator's: its clean-up, in the thread that ran it
            if close is not None:
                close()


@dataclass(frozen=True)
class _Handed:
    images: torch.Tensor
    labels: torch.Tensor
    position: tuple[int, int]
    event: Any  # torch.cuda.Event on a GPU, else None


@dataclass(frozen=True)
class _Finished:
    error: BaseException | None


def _put(ready: queue.Queue[_Handed | _Finished], item: _Handed | _Finished, stop: threading.Event) -> bool:
    """Put `item` unless the consumer stopped meanwhile; False when it did."""
    while not stop.is_set():
        try:
            ready.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False
