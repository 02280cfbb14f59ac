"""batching.Prefetched on CPU: the loaders' work runs in a thread of its own, ahead of the step that takes
the batches, and resume, clean-up and errors stay what they are without it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from retrain_training import batching, data, loaders
from tests.unit.training.test_dali_loader import in_process, options, write_images

dali_loader = pytest.importorskip("retrain_training.dali_loader")


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> list[data.Sample]:
    return write_images(tmp_path_factory.mktemp("images"), 22)


class RecordingDali(dali_loader.DaliLoader):  # type: ignore[misc,name-defined]
    """The DALI loader, noting which thread each external-source feed ran in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.feeding_threads: set[int] = set()

    def _feed(self) -> Any:
        self.feeding_threads.add(threading.get_ident())
        return super()._feed()


def _wait_until(condition: Any, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("kind", ["dali", "torch"])
def test_prefetched_batches_are_the_loaders_own_in_the_same_order(
    samples: list[data.Sample], kind: str
) -> None:
    def loader() -> batching.BatchLoader:
        built = loaders.build_loader(kind, samples, **in_process(options()))
        assert isinstance(built, batching.BatchLoader)
        return built

    # GIVEN an epoch taken in the step's thread, and the same epoch taken through a prefetching thread
    plain = list(loader().epoch(2))
    prefetched = list(batching.Prefetched(loader(), depth=2).epoch(2))
    # THEN every batch, label and pixel is the same
    assert len(prefetched) == len(plain) > 2
    for (images, labels), (expected_images, expected_labels) in zip(prefetched, plain, strict=True):
        assert torch.equal(labels, expected_labels) and torch.equal(images, expected_images)


def test_the_dali_feeding_runs_off_the_step_s_thread_and_ahead_of_it(samples: list[data.Sample]) -> None:
    # GIVEN a DALI loader prefetched two batches deep
    inner = RecordingDali(samples, **options())
    prefetched = batching.Prefetched(inner, depth=2)
    batches = prefetched.epoch(0)
    # WHEN the step takes the first batch and holds on to it (a step that has not finished)
    next(batches)
    # THEN meanwhile the loader's thread prepares the following batches, up to the depth
    assert _wait_until(lambda: inner.position[1] >= 3), inner.position
    # AND every feed (file reads, header parsing, augmentation draws) ran in that thread, not the step's
    assert inner.feeding_threads == {prefetched.producer_thread}
    assert threading.get_ident() not in inner.feeding_threads
    batches.close()


def test_a_checkpoint_says_the_batches_the_step_took_and_a_resume_equals_the_uninterrupted_epoch(
    samples: list[data.Sample],
) -> None:
    uninterrupted = list(dali_loader.DaliLoader(samples, **options()).epoch(3))
    # GIVEN a prefetched loader whose step took 2 batches while its thread prepared more
    first = batching.Prefetched(dali_loader.DaliLoader(samples, **options()), depth=3)
    batches = first.epoch(3)
    next(batches), next(batches)
    assert _wait_until(lambda: first.inner.position[1] >= 4)
    state = first.state_dict()
    batches.close()
    # THEN the checkpoint's position is after the 2 taken, not after the prepared ones
    assert (state["epoch"], state["next_batch"]) == (3, 2)
    # AND a restarted loader resumed from it yields the rest of the uninterrupted epoch, pixel for pixel
    resumed = batching.Prefetched(dali_loader.DaliLoader(samples, **options()), depth=3)
    resumed.load_state_dict(state)
    rest = list(resumed.epoch(3, start_batch=state["next_batch"]))
    assert len(rest) == len(uninterrupted) - 2
    for (images, labels), (expected_images, expected_labels) in zip(rest, uninterrupted[2:], strict=True):
        assert torch.equal(labels, expected_labels) and torch.equal(images, expected_images)


def test_an_epoch_left_midway_stops_the_loader_s_thread(samples: list[data.Sample]) -> None:
    # GIVEN a prefetched epoch the step leaves after one batch (an interruption)
    prefetched = batching.Prefetched(dali_loader.DaliLoader(samples, **options()), depth=2)
    batches = prefetched.epoch(0)
    next(batches)
    # WHEN the step's generator is closed THEN no thread is left preparing batches
    batches.close()
    assert not [t for t in threading.enumerate() if t.name == "dali-prefetch"]
    # AND the next epoch starts from its own first batch
    assert torch.equal(
        next(iter(prefetched.epoch(1)))[1],
        next(iter(dali_loader.DaliLoader(samples, **options()).epoch(1)))[1],
    )


def test_an_epoch_left_midway_stops_preparing_batches_at_once(samples: list[data.Sample]) -> None:
    # GIVEN a long epoch, 275 batches of 20 ms each (the planted loader delay), prefetched 2 ahead
    inner = loaders.build_loader("torch", samples * 50, **in_process(options(delay_ms=20)))
    prefetched = batching.Prefetched(inner, depth=2)
    batches = prefetched.epoch(0)
    next(batches)
    next(batches)
    # WHEN the step leaves it after two batches
    batches.close()
    # THEN the thread stopped within the batch it was preparing: the two taken, the two queued and at
    # most that one were read, not the rest of the epoch (which close() would have waited for)
    assert inner.position[1] <= 2 + 2 + 1, inner.position
    assert not [t for t in threading.enumerate() if t.name == "torch-prefetch"]


def test_a_loader_s_error_reaches_the_step(tmp_path: Path) -> None:
    # GIVEN a batch none of whose images can be decoded any more
    samples = write_images(tmp_path, 4)
    for sample in samples:
        sample.path.write_bytes(b"not a jpeg")
    prefetched = batching.Prefetched(dali_loader.DaliLoader(samples, **options()), depth=2)
    # WHEN the step asks for it THEN the loader's reason is raised in the step's thread
    with pytest.raises(data.DataError, match="no image of batch 0 can be decoded"):
        next(iter(prefetched.epoch(0)))


def test_a_prefetch_depth_below_one_is_refused(samples: list[data.Sample]) -> None:
    with pytest.raises(ValueError, match="prefetch depth must be at least 1, got 0"):
        batching.Prefetched(dali_loader.DaliLoader(samples, **options()), depth=0)
