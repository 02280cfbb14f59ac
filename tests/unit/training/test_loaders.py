from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from retrain_contract import container as contract
from retrain_training import augment, batching, data, loaders
from tests.unit.training.conftest import write_images

CPU = torch.device("cpu")


@pytest.fixture
def samples(tmp_path: Path) -> list[data.Sample]:
    write_images(tmp_path, {"cat": 7, "dog": 6}, size=(30, 22))
    return data.load_dataset(tmp_path, val_fraction=0.0).train


def build(samples: list[data.Sample], **overrides: object) -> batching.Loader:
    options: dict[str, object] = {
        "train": True,
        "batch_size": 4,
        "image_size": 16,
        "augment_load": 3,
        "seed": 5,
        "num_workers": 0,
        "device": CPU,
    }
    options.update(overrides)
    return loaders.build_loader("torch", samples, **options)  # type: ignore[arg-type]


def test_batches_are_normalised_nchw_with_int64_labels(samples: list[data.Sample]) -> None:
    images, labels = next(iter(build(samples).epoch(0)))
    assert images.shape == (4, 3, 16, 16)
    assert images.dtype == torch.float32
    assert labels.dtype == torch.int64
    assert len(build(samples)) == 3  # 13 samples, global batch 4, last partial batch dropped


def test_starting_mid_epoch_yields_the_same_batches_as_the_uninterrupted_epoch(
    samples: list[data.Sample],
) -> None:
    # GIVEN a whole epoch WHEN the same epoch starts at batch 1 THEN it yields the same remaining batches
    whole = list(build(samples).epoch(2))
    resumed = list(build(samples).epoch(2, start_batch=1))
    assert len(resumed) == 2
    assert all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(whole[1:], resumed, strict=True)
    )


def test_augmentations_do_not_depend_on_worker_processes(samples: list[data.Sample]) -> None:
    # GIVEN the same epoch decoded in-process and by two worker processes THEN the tensors are equal
    inline = list(build(samples).epoch(1))
    workers = list(build(samples, num_workers=2).epoch(1))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(inline, workers, strict=True))


def test_worker_processes_persist_across_epochs_and_serve_each_epoch_as_in_process(
    samples: list[data.Sample],
) -> None:
    # GIVEN one loader with two worker processes and an in-process one
    inline, workers = build(samples), build(samples, num_workers=2)
    assert isinstance(workers, loaders.TorchLoader)
    # WHEN epoch 0 is left after one batch, then epochs 1 and 2 are read whole
    next(iter(workers.epoch(0)))
    first_pids = workers.worker_pids
    epochs = {epoch: list(workers.epoch(epoch)) for epoch in (1, 2)}
    # THEN the same two processes served every epoch (no fork per epoch)
    assert len(first_pids) == 2
    assert workers.worker_pids == first_pids
    # AND each epoch's batches equal the in-process loader's, the abandoned epoch's leftovers dropped
    for epoch, batches in epochs.items():
        expected = list(inline.epoch(epoch))
        assert len(batches) == len(expected) == 3
        for (images, labels), (want_images, want_labels) in zip(batches, expected, strict=True):
            assert torch.equal(images, want_images) and torch.equal(labels, want_labels)


EXIT_MIDWAY = """
import sys
from pathlib import Path
import torch
from retrain_training import data, loaders
samples = data.load_dataset(Path(sys.argv[1]), val_fraction=0.0).train
loader = loaders.TorchLoader(samples, train=True, batch_size=4, image_size=16, augment_load=1, seed=0,
                             num_workers=2, device=torch.device("cpu"))
batches = loader.epoch(0)
next(batches)
print(len(loader.worker_pids), flush=True)
"""


def test_a_process_that_exits_with_an_epoch_midway_ends(samples: list[data.Sample]) -> None:
    # GIVEN a process whose persistent workers (which ignore SIGTERM) are mid-epoch WHEN it exits
    folder = samples[0].path.parent.parent
    done = subprocess.run(
        [sys.executable, "-c", EXIT_MIDWAY, str(folder)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # THEN it ends at once, its workers stopped (before: it waited for them for ever)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"


@pytest.mark.parametrize(
    ("env", "torch_workers", "dali_threads"),
    [
        ({contract.NUM_CPUS_ENV: "4"}, 3, 3),  # ml.g5.xlarge: one vCPU left to the training process
        ({contract.NUM_CPUS_ENV: "2"}, 1, 1),
        ({contract.NUM_CPUS_ENV: "1"}, 1, 1),
        ({contract.NUM_CPUS_ENV: "96", "LOCAL_WORLD_SIZE": "8"}, 11, 11),  # 8 GPUs share 96
    ],
)
def test_auto_workers_are_this_process_s_share_of_the_instance_s_vcpus(
    env: dict[str, str], torch_workers: int, dali_threads: int
) -> None:
    auto = contract.NUM_WORKERS_AUTO
    assert loaders.worker_count(auto, "torch", env) == torch_workers
    assert loaders.worker_count(auto, "dali", env) == dali_threads


def test_dali_threads_leave_a_vcpu_to_each_feed_process_and_the_prefetch_thread() -> None:
    # GIVEN 16 vCPUs, 2 feed processes and a prefetch thread besides the training process
    env = {contract.NUM_CPUS_ENV: "16"}
    # THEN DALI's threads take the 12 left, and on 4 vCPUs the one left (before: 4, with 7 runnable)
    assert loaders.worker_count(contract.NUM_WORKERS_AUTO, "dali", env, busy=3) == 12
    assert loaders.worker_count(contract.NUM_WORKERS_AUTO, "dali", {contract.NUM_CPUS_ENV: "4"}, busy=3) == 1


def test_workers_asked_for_are_kept_and_a_negative_count_is_refused() -> None:
    env = {contract.NUM_CPUS_ENV: "16"}
    assert loaders.worker_count(0, "torch", env) == 0
    assert loaders.worker_count(5, "dali", env) == 5
    with pytest.raises(ValueError, match="num-workers must be -1 \\(auto\\) or at least 0, got -2"):
        loaders.worker_count(-2, "torch", env)


def test_auto_workers_outside_sagemaker_count_the_cpus_this_process_may_use() -> None:
    usable = len(os.sched_getaffinity(0))
    assert loaders.worker_count(contract.NUM_WORKERS_AUTO, "dali", {}) == max(1, usable - 1)


def test_epochs_see_different_orders_and_augmentations(samples: list[data.Sample]) -> None:
    first, second = next(iter(build(samples).epoch(0))), next(iter(build(samples).epoch(1)))
    assert not torch.equal(first[0], second[0])


def test_evaluation_is_deterministic_and_keeps_every_sample(samples: list[data.Sample]) -> None:
    evaluation = build(samples, train=False)
    batches = list(evaluation.epoch(0))
    assert sum(len(labels) for _, labels in batches) == len(samples)
    assert torch.equal(batches[0][0], next(iter(evaluation.epoch(3)))[0])


def test_loader_state_round_trips_and_refuses_other_data(samples: list[data.Sample]) -> None:
    # GIVEN a loader that served two batches of epoch 1
    loader = build(samples)
    iterator = loader.epoch(1)
    next(iterator)
    next(iterator)
    state = loader.state_dict()
    # WHEN its state loads into a fresh loader THEN the position carries over
    fresh = build(samples)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    assert (state["epoch"], state["next_batch"]) == (1, 2)
    # AND a loader over other data or another seed refuses it
    with pytest.raises(ValueError, match="the data or seed changed"):
        build(samples[:-1]).load_state_dict(state)
    with pytest.raises(ValueError, match="the data or seed changed"):
        build(samples, seed=6).load_state_dict(state)


def test_random_resized_crop_stays_inside_the_image_within_the_ranges() -> None:
    # GIVEN a 40x30 image WHEN 200 crop boxes are drawn
    rng = np.random.default_rng(0)
    areas, ratios = [], []
    for _ in range(200):
        left, top, right, bottom = augment.random_resized_crop_box(40, 30, rng)
        # THEN each lies inside the image
        assert 0 <= left < right <= 40
        assert 0 <= top < bottom <= 30
        # AND its whole-pixel width and height round a box of an area in CROP_SCALE of the image's
        # and an aspect ratio in CROP_RATIO (each side is off by at most half a pixel)
        w, h = right - left, bottom - top
        assert (w + 0.5) * (h + 0.5) >= augment.CROP_SCALE[0] * 40 * 30
        assert (w - 0.5) / (h + 0.5) <= augment.CROP_RATIO[1]
        assert (w + 0.5) / (h - 0.5) >= augment.CROP_RATIO[0]
        areas.append(w * h / (40 * 30))
        ratios.append(w / h)
    # AND the boxes span those ranges: slivers and near-whole crops, tall and wide ones
    assert min(areas) < 0.15 and max(areas) > 0.85
    assert min(ratios) < 0.85 and max(ratios) > 1.2


def test_eval_transform_center_crops_after_resizing_the_shorter_side() -> None:
    # GIVEN a wide image whose left and right thirds are black and middle white
    pixels = np.zeros((70, 210, 3), dtype=np.uint8)
    pixels[:, 70:140] = 255
    # WHEN transformed for evaluation at 56 px (shorter side to 64, center 56 crop)
    tensor = augment.eval_transform(Image.fromarray(pixels), 56)
    # THEN the crop is the white middle, normalised
    assert tensor.shape == (3, 56, 56)
    white = (1 - torch.tensor(augment.IMAGENET_MEAN)) / torch.tensor(augment.IMAGENET_STD)
    torch.testing.assert_close(tensor[:, 28, 28], white)


class FakeClock:
    """The planted delay's clock: time moves only when the code sleeps or the test says a step took long;
    the sleeps asked for are recorded (what the delay decided, not how long the machine took)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def step(self, seconds: float) -> None:
        """The consumer's work between two batches."""
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(batching, "time", fake)
    return fake


def test_the_delay_fault_knob_sleeps_per_batch(samples: list[data.Sample], clock: FakeClock) -> None:
    # GIVEN inject-loader-delay-ms of 200 WHEN an epoch of 3 batches is read THEN each batch slept 0.2 s
    assert len(list(build(samples, delay_ms=200).epoch(0))) == 3
    assert clock.sleeps == pytest.approx([0.2, 0.2, 0.2])


def test_the_planted_delay_outlasts_a_slow_consumer_so_data_wait_dominates_every_step(
    clock: FakeClock,
) -> None:
    # GIVEN a 10 ms planted delay and a consumer whose step takes 100 ms
    delay = batching.PlantedDelay(10)
    delay.wait()
    clock.step(0.1)
    # WHEN the next batch is fetched THEN the loader waits DOMINANCE x the step, not just the 10 ms
    delay.wait()
    assert clock.sleeps == pytest.approx([0.01, batching.PlantedDelay.DOMINANCE * 0.1])
    # AND across an epoch boundary the last step's length still rules, while the time spent between
    # epochs (evaluation) is not taken for a step
    delay.start_epoch()
    clock.step(0.5)
    delay.wait()
    assert clock.sleeps[-1] == pytest.approx(batching.PlantedDelay.DOMINANCE * 0.1)


def test_a_resumed_loader_starves_its_first_step_with_the_steps_the_checkpoint_saw(
    samples: list[data.Sample], clock: FakeClock
) -> None:
    # GIVEN a delayed loader whose consumer took 100 ms steps, checkpointed mid-epoch
    first = build(samples, delay_ms=10)
    batches = first.epoch(0)
    next(batches)
    clock.step(0.1)
    next(batches)
    state = first.state_dict()
    assert state["planted_recent_steps_s"] == pytest.approx([0.1])
    # WHEN a new process (a spot resume) loads that state and reads its first batch
    resumed = build(samples, delay_ms=10)
    resumed.load_state_dict(state)
    clock.sleeps.clear()
    next(resumed.epoch(state["epoch"], start_batch=state["next_batch"]))
    # THEN that batch waited DOMINANCE x the saved step, not the plain 10 ms
    assert clock.sleeps == pytest.approx([batching.PlantedDelay.DOMINANCE * 0.1])


def test_a_loader_without_a_planted_delay_keeps_its_state_as_before(samples: list[data.Sample]) -> None:
    assert "planted_recent_steps_s" not in build(samples).state_dict()


def test_auto_picks_the_dataloader_without_a_gpu() -> None:
    assert loaders.resolve_kind("auto", CPU) == "torch"
    assert loaders.resolve_kind("dali", CPU) == "dali"


def test_unknown_loader_kind_is_refused(samples: list[data.Sample]) -> None:
    with pytest.raises(ValueError, match="use torch, dali or auto"):
        loaders.build_loader(
            "ffcv",
            samples,
            train=True,
            batch_size=4,
            image_size=16,
            augment_load=1,
            seed=0,
            num_workers=0,
            device=CPU,
        )


def test_crop_scale_min_raises_the_smallest_crop_kept() -> None:
    # GIVEN a crop-scale-min of 0.5 WHEN many boxes are drawn THEN none keeps less than about half the
    # image (rounding to whole pixels aside), while ImageNet's default 0.08 does keep slivers
    rng = np.random.default_rng(1)
    areas = []
    for _ in range(300):
        left, top, right, bottom = augment.random_resized_crop_box(64, 64, rng, 0.5)
        areas.append((right - left) * (bottom - top) / (64 * 64))
    default_rng = np.random.default_rng(1)
    default_areas = []
    for _ in range(300):
        left, top, right, bottom = augment.random_resized_crop_box(64, 64, default_rng)
        default_areas.append((right - left) * (bottom - top) / (64 * 64))
    assert min(areas) >= 0.45
    assert min(default_areas) < 0.2


@pytest.mark.parametrize("scale_min", [0.0, -0.1, 1.5])
def test_crop_scale_min_outside_the_unit_interval_is_refused(
    samples: list[data.Sample], scale_min: float
) -> None:
    # GIVEN an impossible crop-scale-min WHEN a loader is built THEN the error names the hyperparameter
    with pytest.raises(ValueError, match="crop-scale-min"):
        build(samples, crop_scale_min=scale_min)
