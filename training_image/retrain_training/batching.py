"""The loader interface train.py uses and the base every loader builds on: batches in
`data.epoch_order` sharded by `data.rank_batches`, from any batch (so a resumed run continues with
exactly the batches an uninterrupted run would see), and the planted loader delay."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
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
