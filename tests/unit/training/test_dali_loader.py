"""The DALI loader on CPU: torch-loader order and augmentations, exact resume, bad files skipped."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nvidia.dali")

import numpy as np
import torch
from PIL import Image

from retrain_training import batching, dali_loader, data, loaders

CPU = torch.device("cpu")


def write_images(root: Path, count: int, *, seed: int = 0) -> list[data.Sample]:
    """Small JPEGs of varied sizes with gradients (so crops, flips and rotations show), two labels."""
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(count):
        width, height = int(rng.integers(48, 96)), int(rng.integers(40, 80))
        yy, xx = np.mgrid[0:height, 0:width]
        pixels = np.stack([xx * 255 // width, yy * 255 // height, (xx * yy + 40 * i) % 256], axis=-1)
        key = f"label{i % 2}/{i:03d}.jpg"
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels.astype(np.uint8)).save(path, quality=95)
        samples.append(data.Sample(path, i % 2, key))
    return samples


def in_process(settings: dict[str, Any]) -> dict[str, Any]:
    """The torch loader's settings without worker processes: a DataLoader worker forked from a process
    that holds DALI pipelines can deadlock in DALI's pipeline shutdown (seen: a hung test run)."""
    return {**settings, "num_workers": 0}


def options(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "train": True,
        "batch_size": 4,
        "image_size": 32,
        "augment_load": 2,
        "seed": 7,
        "num_workers": 1,
        "device": CPU,
    }
    return base | overrides


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> list[data.Sample]:
    return write_images(tmp_path_factory.mktemp("images"), 14)


def run_epoch(loader: batching.Loader, epoch: int, start_batch: int = 0) -> list[tuple[torch.Tensor, ...]]:
    return list(loader.epoch(epoch, start_batch=start_batch))


def test_batches_after_a_resume_equal_the_uninterrupted_epoch(samples: list[data.Sample]) -> None:
    # GIVEN an uninterrupted epoch, and a run stopped after 1 batch whose loader state is checkpointed
    uninterrupted = run_epoch(dali_loader.DaliLoader(samples, **options()), epoch=3)
    first = dali_loader.DaliLoader(samples, **options())
    next(iter(first.epoch(3)))
    state = first.state_dict()
    # WHEN a new loader (a restarted process) loads that state and resumes at the saved batch
    resumed_loader = dali_loader.DaliLoader(samples, **options())
    resumed_loader.load_state_dict(state)
    resumed = run_epoch(resumed_loader, epoch=3, start_batch=state["next_batch"])
    # THEN labels and every pixel equal batches 1.. of the uninterrupted epoch
    assert state["next_batch"] == 1
    assert len(resumed) == len(uninterrupted) - 1
    for (images, labels), (expected_images, expected_labels) in zip(resumed, uninterrupted[1:], strict=True):
        assert torch.equal(labels, expected_labels)
        assert torch.equal(images, expected_images)


def test_train_batches_follow_the_torch_loader_order(samples: list[data.Sample]) -> None:
    # GIVEN both loaders with the same seed
    dali = dali_loader.DaliLoader(samples, **options())
    torch_loader = loaders.TorchLoader(samples, **in_process(options()))
    # WHEN each yields epoch 2
    dali_labels = [labels.tolist() for _, labels in dali.epoch(2)]
    torch_labels = [labels.tolist() for _, labels in torch_loader.epoch(2)]
    # THEN the batches carry the same labels in the same order, and len() agrees
    assert dali_labels == torch_labels
    assert len(dali) == len(torch_loader) == len(dali_labels)


@pytest.mark.parametrize("augment_load", [1, 3])
def test_train_images_get_the_torch_loaders_crop_flips_and_rotations(
    samples: list[data.Sample], augment_load: int
) -> None:
    # GIVEN both loaders with the same seed and augment-load
    settings = options(augment_load=augment_load)
    dali_images = torch.cat([i for i, _ in dali_loader.DaliLoader(samples, **settings).epoch(1)])
    torch_images = torch.cat([i for i, _ in loaders.TorchLoader(samples, **in_process(settings)).epoch(1)])
    # WHEN their pixels are compared away from the borders (where rotations fill differently)
    inner = (dali_images - torch_images).abs()[..., 6:-6, 6:-6]
    # THEN they agree up to resampling differences (a different crop, flip or angle differs by ~1)
    assert dali_images.shape == torch_images.shape
    assert float(inner.mean()) < 0.03
    assert float(inner.max()) < 0.25


def test_eval_batches_match_the_torch_loaders_resize_and_center_crop(samples: list[data.Sample]) -> None:
    # GIVEN evaluation loaders (no augmentation, samples in data order, last batch kept)
    settings = options(train=False)
    dali = list(dali_loader.DaliLoader(samples, **settings).epoch(0))
    reference = list(loaders.TorchLoader(samples, **in_process(settings)).epoch(0))
    # WHEN compared batch by batch
    # THEN labels are equal and pixels agree within resampling rounding
    assert [len(labels) for _, labels in dali] == [4, 4, 4, 2]
    for (images, labels), (expected_images, expected_labels) in zip(dali, reference, strict=True):
        assert torch.equal(labels, expected_labels)
        assert float((images - expected_images).abs().max()) < 0.05


def test_each_epoch_draws_a_new_order_and_new_augmentations(samples: list[data.Sample]) -> None:
    # GIVEN one loader
    loader = dali_loader.DaliLoader(samples, **options())
    # WHEN it yields two different epochs and the first again
    first, second, again = (torch.cat([i for i, _ in loader.epoch(e)]) for e in (0, 1, 0))
    # THEN epochs differ, and the same epoch repeats exactly (the pipeline is reused after a full epoch)
    assert not torch.equal(first, second)
    assert torch.equal(first, again)


def test_an_epoch_abandoned_midway_does_not_leak_prefetched_batches(samples: list[data.Sample]) -> None:
    # GIVEN a loader whose epoch 0 is abandoned after one batch (DALI has prefetched more)
    loader = dali_loader.DaliLoader(samples, **options())
    expected = run_epoch(dali_loader.DaliLoader(samples, **options()), epoch=1)
    iterator = loader.epoch(0)
    next(iterator)
    assert isinstance(iterator, Generator)
    iterator.close()
    # WHEN the same loader runs epoch 1
    got = run_epoch(loader, epoch=1)
    # THEN it yields exactly epoch 1
    assert len(got) == len(expected)
    for (images, labels), (expected_images, expected_labels) in zip(got, expected, strict=True):
        assert torch.equal(labels, expected_labels)
        assert torch.equal(images, expected_images)


def test_each_rank_gets_its_slice_of_every_global_batch(samples: list[data.Sample]) -> None:
    # GIVEN two ranks sharing a global batch of 4
    ranks = [dali_loader.DaliLoader(samples, **options(rank=r, world_size=2)) for r in (0, 1)]
    single = dali_loader.DaliLoader(samples, **options())
    # WHEN each yields epoch 0
    per_rank = [[labels.tolist() for _, labels in loader.epoch(0)] for loader in ranks]
    # THEN rank 0 then rank 1 make up the one-process batch
    for batch, (zero, one) in enumerate(zip(*per_rank, strict=True)):
        assert zero + one == [labels.tolist() for _, labels in single.epoch(0)][batch]


@pytest.mark.parametrize("feed", [{}, {"feed_processes": 2}], ids=["thread", "worker-processes"])
def test_a_file_damaged_after_the_scan_is_skipped_and_counted(tmp_path: Path, feed: dict[str, int]) -> None:
    # GIVEN verified samples of which one is then truncated (its header still parses, so only DALI's
    # decoder finds out) and one replaced by text (its header check fails before feeding)
    samples = write_images(tmp_path, 8)
    truncated, text = samples[2].path, samples[5].path
    encoded = truncated.read_bytes()
    truncated.write_bytes(encoded[: len(encoded) * 6 // 10])
    text.write_text("not an image", encoding="utf-8")
    loader = dali_loader.DaliLoader(samples, **options(train=False, **feed))
    # WHEN an epoch runs (fed by the loader's thread, or by DALI's worker processes)
    labels = torch.cat([batch_labels for _, batch_labels in loader.epoch(0)])
    # THEN the other six images come through in order, and both files are recorded with a reason
    assert labels.tolist() == [s.label for i, s in enumerate(samples) if i not in (2, 5)]
    assert sorted(loader.skipped) == sorted([str(truncated), str(text)])
    assert "DALI cannot decode" in loader.skipped[str(truncated)]
    assert "UnidentifiedImageError" in loader.skipped[str(text)]
    assert loader.state_dict()["skipped"] == loader.skipped


@pytest.mark.parametrize("feed", [{}, {"feed_processes": 2}], ids=["thread", "worker-processes"])
def test_a_batch_with_no_decodable_image_fails_with_a_clear_reason(
    tmp_path: Path, feed: dict[str, int]
) -> None:
    # GIVEN a first evaluation batch whose two images were both overwritten after the scan
    samples = write_images(tmp_path, 4)
    for sample in samples[:2]:
        sample.path.write_text("not an image", encoding="utf-8")
    loader = dali_loader.DaliLoader(samples, **options(train=False, batch_size=2, **feed))
    # WHEN the epoch runs
    # THEN it stops with a data error that says what to do (train.py turns it into the failure file)
    with pytest.raises(data.DataError, match=r"no image of batch 0 can be decoded.*remove the undecodable"):
        list(loader.epoch(0))


def test_a_checkpoint_from_other_data_is_refused(samples: list[data.Sample]) -> None:
    # GIVEN the state of a loader over fewer samples
    state = dali_loader.DaliLoader(samples[:-2], **options()).state_dict()
    # WHEN a loader over all samples loads it
    # THEN it refuses, naming what changed
    with pytest.raises(ValueError, match="the data or seed changed"):
        dali_loader.DaliLoader(samples, **options()).load_state_dict(state)


def test_build_loader_makes_a_dali_loader_for_kind_dali(samples: list[data.Sample]) -> None:
    # GIVEN / WHEN the factory train.py uses is asked for dali
    loader = loaders.build_loader("dali", samples, **options())
    # THEN it is this module's loader and yields normalised float NCHW and int64 labels
    images, labels = next(iter(loader.epoch(0)))
    assert isinstance(loader, dali_loader.DaliLoader)
    assert images.dtype == torch.float32 and images.shape == (4, 3, 32, 32)
    assert labels.dtype == torch.int64


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_images_are_decoded_on_mixed_and_returned_on_the_device(samples: list[data.Sample]) -> None:
    # GIVEN a loader on the GPU and its CPU twin
    gpu = dali_loader.DaliLoader(samples, **options(device=torch.device("cuda")))
    cpu = dali_loader.DaliLoader(samples, **options())
    # WHEN both yield epoch 0
    gpu_batches, cpu_batches = run_epoch(gpu, 0), run_epoch(cpu, 0)
    # THEN images live on the GPU, with the same labels and pixels close to the CPU decode
    for (images, labels), (cpu_images, cpu_labels) in zip(gpu_batches, cpu_batches, strict=True):
        assert images.is_cuda
        assert torch.equal(labels, cpu_labels)
        assert float((images.cpu() - cpu_images).abs()[..., 6:-6, 6:-6].mean()) < 0.05


# The parallel external source (dali-feed-processes): DALI's worker processes read the files and draw the
# augmentations; what they feed must be exactly what the loader's own thread feeds.
FEED = {"feed_processes": 2}


def assert_same_batches(
    got: list[tuple[torch.Tensor, ...]], expected: list[tuple[torch.Tensor, ...]]
) -> None:
    assert len(got) == len(expected)
    for (images, labels), (expected_images, expected_labels) in zip(got, expected, strict=True):
        assert torch.equal(labels, expected_labels)
        assert torch.equal(images, expected_images)


def test_worker_processes_feed_every_epoch_as_the_loader_s_thread_does(
    samples: list[data.Sample], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the thread-fed loader's epochs 0 and 1
    expected = [run_epoch(dali_loader.DaliLoader(samples, **options()), epoch=e) for e in (0, 1)]
    # AND, in this process, file reads that fail: only processes of DALI's own can feed the pipeline
    monkeypatch.setattr(dali_loader, "read_encoded", lambda path: (_ for _ in ()).throw(OSError(path)))
    loader = dali_loader.DaliLoader(samples, **options(**FEED))
    # WHEN a loader fed by two worker processes runs both epochs
    first = run_epoch(loader, epoch=0)
    pipeline = loader._pipe
    second = run_epoch(loader, epoch=1)
    # THEN every label and pixel is the thread-fed loader's, nothing skipped
    assert_same_batches(first, expected[0])
    assert_same_batches(second, expected[1])
    assert loader.skipped == {}
    # AND the second epoch reused the first one's pipeline and workers
    assert loader._pipe is pipeline


def test_worker_processes_resume_mid_epoch_and_evaluate_as_the_thread(samples: list[data.Sample]) -> None:
    uninterrupted = run_epoch(dali_loader.DaliLoader(samples, **options()), epoch=3)
    resumed = run_epoch(dali_loader.DaliLoader(samples, **options(**FEED)), epoch=3, start_batch=1)
    assert_same_batches(resumed, uninterrupted[1:])
    # an epoch left midway: the next starts clean
    loader = dali_loader.DaliLoader(samples, **options(**FEED))
    iterator = loader.epoch(0)
    next(iterator)
    assert isinstance(iterator, Generator)
    iterator.close()
    assert_same_batches(run_epoch(loader, epoch=3), uninterrupted)
    # evaluation: the same batches every pass
    evaluation = dali_loader.DaliLoader(samples, **options(train=False, **FEED))
    reference = run_epoch(dali_loader.DaliLoader(samples, **options(train=False)), epoch=0)
    assert_same_batches(run_epoch(evaluation, epoch=0), reference)
    assert_same_batches(run_epoch(evaluation, epoch=1), reference)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"feed_processes": -1}, "dali-feed-processes must not be negative, got -1"),
        ({"dali_decode": "gpu"}, "dali-decode must be one of mixed, cpu, got 'gpu'"),
        ({"hw_decoder_load": 1.5}, "dali-hw-decoder-load must be between 0 and 1, got 1.5"),
    ],
)
def test_dali_settings_out_of_range_are_refused_by_name(
    samples: list[data.Sample], setting: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        dali_loader.DaliLoader(samples, **options(**setting))


def test_channels_last_batches_are_the_same_pixels_with_no_copy_left_for_the_step(
    samples: list[data.Sample],
) -> None:
    # GIVEN the loader's batches in torch's default layout and in channels-last (HWC from DALI)
    default = run_epoch(dali_loader.DaliLoader(samples, **options()), epoch=0)
    last = run_epoch(dali_loader.DaliLoader(samples, **options(channels_last=True)), epoch=0)
    for (images, labels), (expected, expected_labels) in zip(last, default, strict=True):
        # THEN every pixel is the same, in NCHW's shape with channels-last strides
        assert torch.equal(images, expected) and torch.equal(labels, expected_labels)
        assert images.is_contiguous(memory_format=torch.channels_last)
        # AND the step's conversion to channels-last returns the batch itself: no copy
        assert images.to(memory_format=torch.channels_last).data_ptr() == images.data_ptr()
