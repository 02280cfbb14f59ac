"""The NVIDIA DALI loader behind `batching.Loader`: decode on `mixed` (nvJPEG) with a GPU, on `cpu` without.

Resume design: DALI is fed with `fn.external_source` in our own order — the epoch order of
`data.epoch_order(seed, epoch)` sharded by `data.rank_batches`, exactly the torch loader's — and every
random choice (the random resized crop box, each repetition's flip and rotation angle) is drawn in
Python from `data.sample_seed(seed, epoch, position)` with the same generator calls in the same order
as `augment.train_transform`, then handed to DALI as per-sample operator arguments. Nothing depends on
DALI's RNG or its readers' shuffling, so resuming at batch k just feeds batches k.. and yields the same
samples with the same augmentations as an uninterrupted epoch. No DALI operator here draws random
numbers or carries state across iterations, so DALI has nothing of its own to checkpoint and
`state_dict()` holds the position and the files found undecodable. The alternative, DALI's readers
with `enable_checkpointing=True`, shuffles and shards by DALI's own scheme: its batches could not
follow `data.epoch_order`/`rank_batches`, which the torch loader, the checkpoint's stored epoch order
and DDP all use, and its random operators would not match the torch loader's per-sample draws.

Bad files: `data.load_dataset` already fully decodes every image with PIL and drops (and logs) what
fails. Here each file's bytes are read and their header parsed before feeding (a file unreadable or
no longer an image is skipped). A file PIL decodes but DALI's decoder rejects fails the DALI batch:
the loader then probes the in-flight samples one by one with a one-image DALI decode, records the
culprits in `skipped` (path, reason), rebuilds the pipeline and feeds the same batches without them.
"""

from __future__ import annotations

import dataclasses
import io
import logging
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack, cast

import numpy as np
import torch
from nvidia.dali import fn
from nvidia.dali.data_node import DataNode
from nvidia.dali.pipeline import Pipeline
from nvidia.dali.plugin.pytorch import feed_ndarray
from nvidia.dali.types import DALIDataType, DALIImageType
from PIL import Image, UnidentifiedImageError

from retrain_contract import container as contract
from retrain_training import augment, batching, data

log = logging.getLogger(__name__)

KIND = "dali"
PREFETCH_DEPTH = 2
# What crop_mirror_normalize writes: CHW, the NCHW batches of torch's default memory format; or HWC,
# which read as NCHW with channels-last strides (a permuted view) are what a channels-last model takes
# without the copy a CHW batch needs at every step.
LAYOUT_CHW = "CHW"
LAYOUT_HWC = "HWC"
# dali-decode (contract.DALI_DECODES): mixed decodes with nvJPEG and augments with GPU operators; cpu uses
# libjpeg-turbo and CPU operators on the pipeline's threads and copies the batch to the GPU.
DECODE_MIXED, DECODE_CPU = contract.DALI_DECODES
DECODES = contract.DALI_DECODES
DEFAULT_HW_DECODER_LOAD = contract.DALI_HW_DECODER_LOAD
# external_source columns. Train: encoded, crop anchor (x, y), crop shape (w, h), flips, angles.
# Eval: encoded, resized size (h, w), crop anchor (x, y).
TRAIN_COLUMNS = (
    DALIDataType.UINT8,
    DALIDataType.FLOAT,
    DALIDataType.FLOAT,
    DALIDataType.INT32,
    DALIDataType.FLOAT,
)
EVAL_COLUMNS = (DALIDataType.UINT8, DALIDataType.FLOAT, DALIDataType.INT32)


@dataclass(frozen=True)
class Augmentation:
    """One training sample's random choices, as `augment.train_transform` draws them."""

    box: tuple[int, int, int, int]  # (left, top, right, bottom) in source pixels
    flips: tuple[bool, ...]  # one per augment-load repetition
    angles: tuple[float, ...]  # degrees, counter-clockwise, one per repetition


def draw_augmentation(
    width: int,
    height: int,
    augment_load: int,
    rng: np.random.Generator,
    crop_scale_min: float = augment.CROP_SCALE[0],
) -> Augmentation:
    """The same generator calls, in the same order, as `augment.train_transform`."""
    left, top, right, bottom = augment.random_resized_crop_box(width, height, rng, crop_scale_min)
    flips: list[bool] = []
    angles: list[float] = []
    for _ in range(augment_load):
        flips.append(bool(rng.random() < augment.FLIP_PROBABILITY))
        angles.append(float(rng.uniform(-augment.ROTATION_DEGREES, augment.ROTATION_DEGREES)))
    return Augmentation((int(left), int(top), int(right), int(bottom)), tuple(flips), tuple(angles))


def eval_geometry(width: int, height: int, image_size: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((resized width, height), (left, top) of the center crop), as `augment.eval_transform` does."""
    short = augment.eval_resize_size(image_size)
    scale = short / min(width, height)
    size = (max(short, round(width * scale)), max(short, round(height * scale)))
    return size, ((size[0] - image_size) // 2, (size[1] - image_size) // 2)


@dataclass
class _Item:
    """A sample ready to feed: its encoded bytes and its per-sample operator arguments."""

    sample: data.Sample
    encoded: np.ndarray
    region: tuple[np.ndarray, np.ndarray]  # train: crop anchor/shape (x, y); eval: resize (h, w), crop anchor
    flips: np.ndarray  # train only
    angles: np.ndarray


@dataclass(frozen=True)
class Recipe:
    """What a sample's operator arguments depend on besides the sample and its position."""

    train: bool
    seed: int
    epoch: int
    image_size: int
    augment_load: int
    crop_scale_min: float


def make_item(
    recipe: Recipe, sample: data.Sample, encoded: np.ndarray, size: tuple[int, int], position: int
) -> _Item:
    """The sample's operator arguments: its augmentation draws (training) or its resize and center
    crop (evaluation)."""
    width, height = size
    if recipe.train:
        seed = data.sample_seed(recipe.seed, recipe.epoch, position)
        rng = np.random.Generator(np.random.PCG64(seed))
        aug = draw_augmentation(width, height, recipe.augment_load, rng, recipe.crop_scale_min)
        left, top, right, bottom = aug.box
        return _Item(
            sample,
            encoded,
            (np.array([left, top], np.float32), np.array([right - left, bottom - top], np.float32)),
            np.array(aug.flips, np.int32),
            np.array(aug.angles, np.float32),
        )
    (resized_w, resized_h), (left, top) = eval_geometry(width, height, recipe.image_size)
    return _Item(
        sample,
        encoded,
        (np.array([resized_h, resized_w], np.float32), np.array([left, top], np.int32)),
        np.zeros(0, np.int32),
        np.zeros(0, np.float32),
    )


# What read_encoded raises for a file that is unreadable or no longer an image.
UNREADABLE = (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError)


def read_encoded(path: Path) -> tuple[np.ndarray, tuple[int, int]]:
    """The file's bytes and (width, height) from its header; raises OSError or ValueError when bad."""
    encoded = path.read_bytes()
    with Image.open(io.BytesIO(encoded)) as image:
        return np.frombuffer(encoded, dtype=np.uint8), image.size


class ParallelFeed:
    """The external source's callback in DALI's worker processes (`parallel=True`, `batch_info=True`,
    `dali-feed-processes` > 0): batch `info.iteration` of epoch `first_epoch + info.epoch_idx` (a
    pipeline reset after StopIteration starts DALI's next epoch), from the first epoch's
    `first_batch` on. It reads the files, parses their headers and draws the augmentations as the
    loader's own feed does, so batches, order and draws are the same; it holds only what pickles
    (DALI starts the workers with `spawn`), and a column of each batch's sample indices tells the
    loader which samples came through (labels, and the files skipped for a bad header)."""

    def __init__(self, loader: DaliLoader, first_epoch: int, first_batch: int) -> None:
        self.samples = loader.samples
        self.recipe = loader._recipe(first_epoch)
        self.batch_size, self.rank, self.world_size = loader.batch_size, loader.rank, loader.world_size
        self.first_epoch, self.first_batch = first_epoch, first_batch
        self.skipped = frozenset(loader.skipped)
        self._plans: dict[int, tuple[list[list[int]], dict[int, int]]] = {}

    def plan(self, epoch: int) -> tuple[list[list[int]], dict[int, int]]:
        """The epoch's batches for this rank (sample indices) and each sample's position in the order."""
        if epoch not in self._plans:
            recipe = self.recipe
            order = batching.sample_order(len(self.samples), recipe.seed, epoch, train=recipe.train)
            batches = data.rank_batches(
                order, self.batch_size, train=recipe.train, rank=self.rank, world_size=self.world_size
            )
            self._plans = {epoch: (batches, {index: position for position, index in enumerate(order)})}
        return self._plans[epoch]

    def __call__(self, info: Any) -> tuple[list[np.ndarray], ...]:
        epoch = self.first_epoch + info.epoch_idx
        number = info.iteration + (self.first_batch if info.epoch_idx == 0 else 0)
        batches, positions = self.plan(epoch)
        if number >= len(batches):
            raise StopIteration
        recipe = dataclasses.replace(self.recipe, epoch=epoch)
        items: list[tuple[int, _Item]] = []
        for index in batches[number]:
            sample = self.samples[index]
            if str(sample.path) in self.skipped:
                continue
            try:
                encoded, size = read_encoded(sample.path)
            except UNREADABLE:
                continue  # the loader sees it missing from the index column and records why
            items.append((index, make_item(recipe, sample, encoded, size, positions[index])))
        if not items:
            raise data.DataError(
                f"no image of batch {number} can be decoded; remove the undecodable files from the data set"
            )
        return _columns(recipe.train, [item for _, item in items], [index for index, _ in items])


def _columns(
    train: bool, items: Sequence[_Item], indices: Sequence[int] | None
) -> tuple[list[np.ndarray], ...]:
    """The external source's columns of a batch (TRAIN_COLUMNS or EVAL_COLUMNS, then the indices)."""
    columns: list[list[np.ndarray]] = [
        [item.encoded for item in items],
        [item.region[0] for item in items],
        [item.region[1] for item in items],
    ]
    if train:
        columns += [[item.flips for item in items], [item.angles for item in items]]
    if indices is not None:
        columns.append([np.array([index], np.int64) for index in indices])
    return tuple(columns)


def _header_error(path: Path) -> str:
    """Why `read_encoded` refuses the file (it is read again: rare, and only for a skipped file)."""
    try:
        read_encoded(path)
    except UNREADABLE as error:
        return f"{type(error).__name__}: {error}"
    return "unreadable when it was fed"


class DaliLoader(batching.BatchLoader):
    """`batching.Loader` over a DALI pipeline fed by `fn.external_source` (see the module docstring)."""

    kind = KIND

    def __init__(self, samples: Sequence[data.Sample], **options: Unpack[batching.LoaderOptions]) -> None:
        super().__init__(samples, **options)
        if self.augment_load < 1 and self.train:
            raise ValueError(f"augment-load must be at least 1, got {self.augment_load}")
        self.num_threads = max(1, self.num_workers)
        self.feed_processes = options.get("feed_processes", 0)
        self.layout = LAYOUT_HWC if options.get("channels_last", False) else LAYOUT_CHW
        self.decode = options.get("dali_decode", DECODE_MIXED)
        self.hw_decoder_load = options.get("hw_decoder_load", DEFAULT_HW_DECODER_LOAD)
        if self.feed_processes < 0:
            raise ValueError(f"dali-feed-processes must not be negative, got {self.feed_processes}")
        if self.decode not in DECODES:
            raise ValueError(f"dali-decode must be one of {', '.join(DECODES)}, got {self.decode!r}")
        if not 0.0 <= self.hw_decoder_load <= 1.0:
            raise ValueError(f"dali-hw-decoder-load must be between 0 and 1, got {self.hw_decoder_load}")
        self._next: tuple[int, int] | None = None  # (epoch, batch) a parallel pipeline's feed is at
        self.skipped: dict[str, str] = {}  # path -> why DALI could not use it
        self._pipe: Pipeline | None = None
        self._epoch = 0
        self._generation = 0  # which epoch() call owns the pipeline
        self._plan: deque[tuple[int, list[tuple[int, data.Sample]]]] = deque()
        self._in_flight: deque[tuple[int, list[tuple[int, data.Sample]], list[_Item]]] = deque()

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.delay.start_epoch()
        if self.feed_processes:
            yield from self._parallel_epoch(epoch, start_batch)
            return
        order = self.order(epoch)
        batches = data.rank_batches(
            order, self.batch_size, train=self.train, rank=self.rank, world_size=self.world_size
        )
        if start_batch >= len(batches):
            return
        positions = {index: position for position, index in enumerate(order)}
        self._epoch = epoch
        self._plan = deque(
            (number, [(positions[i], self.samples[i]) for i in batches[number]])
            for number in range(start_batch, len(batches))
        )
        self._in_flight = deque()
        self._generation += 1
        generation, finished = self._generation, False
        try:
            pipe = self._pipeline()
            while True:
                try:
                    outputs = pipe.run()
                except StopIteration:
                    finished = True
                    return
                except RuntimeError as error:
                    self._recover(error)
                    pipe = self._pipeline()
                    continue
                number, _, items = self._in_flight.popleft()
                images = self._to_torch(outputs[0])
                labels = torch.tensor([item.sample.label for item in items], dtype=torch.int64)
                self.delay.wait()
                self.position = (epoch, number + 1)
                yield images, labels
        finally:
            if generation != self._generation:
                pass  # a later epoch() owns the pipeline now
            elif finished and self._pipe is not None:
                self._pipe.reset()
            else:
                self._pipe = None  # stopped mid-epoch: prefetched batches must not leak into the next

    def _parallel_epoch(self, epoch: int, start_batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """An epoch fed by DALI's worker processes (ParallelFeed). The pipeline and its workers carry
        over to the next epoch when this one ran to its end and the next starts where its feed is."""
        key = epoch if self.train else 0  # evaluation's batches do not depend on the epoch
        batches = data.rank_batches(
            self.order(epoch), self.batch_size, train=self.train, rank=self.rank, world_size=self.world_size
        )
        if start_batch >= len(batches):
            return
        if self._next != (key, start_batch):
            self._pipe = self._build(ParallelFeed(self, key, start_batch))
        self._next = None  # until this epoch ends cleanly
        number = start_batch
        pipe = self._pipeline()
        while True:
            try:
                outputs = pipe.run()
            except StopIteration:
                pipe.reset()
                self._next = (key + 1 if self.train else 0, 0)
                return
            except Exception as error:  # a decoder or a worker failed: find the files, feed again
                self._recover_parallel(error, [batches[n] for n in range(number, len(batches))])
                pipe = self._pipe = self._build(ParallelFeed(self, key, number))
                continue
            indices = [int(i) for i in np.asarray(outputs[1].as_tensor()).reshape(-1)]
            for index in set(batches[number]) - set(indices):
                path = str(self.samples[index].path)
                if path not in self.skipped:
                    self._skip(path, _header_error(self.samples[index].path))
            images = self._to_torch(outputs[0])
            labels = torch.tensor([self.samples[i].label for i in indices], dtype=torch.int64)
            self.delay.wait()
            number += 1
            self.position = (epoch, number)
            yield images, labels

    def _recover_parallel(self, error: Exception, pending: Sequence[Sequence[int]]) -> None:
        """The batches from the failed one on: record the files DALI cannot decode, or raise `error`
        when every file decodes (the failure is not the data's: a DataError, a worker's crash)."""
        if isinstance(error, data.DataError) or "DataError" in str(error):
            message = str(error).splitlines()
            found = [line for line in message if "no image of batch" in line]
            raise data.DataError(found[0].split("DataError: ")[-1] if found else str(error)) from error
        culprits: list[tuple[str, str]] = []
        for members in pending[: PREFETCH_DEPTH + 1]:
            for index in members:
                file = self.samples[index].path
                if str(file) in self.skipped:
                    continue
                try:
                    encoded, _ = read_encoded(file)
                except UNREADABLE:
                    continue
                if why := self._decode_error(encoded):
                    culprits.append((str(file), why))
        if not culprits:
            raise error
        for path, why in culprits:
            self._skip(path, f"DALI cannot decode it: {why}")

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "skipped": dict(self.skipped)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.skipped.update({str(k): str(v) for k, v in state.get("skipped", {}).items()})

    # Feeding -----------------------------------------------------------------------------------

    def _prepare(self, members: Sequence[tuple[int, data.Sample]]) -> list[_Item]:
        """Read and check each sample's bytes (only now: an epoch is never held in memory at once)."""
        items: list[_Item] = []
        for position, sample in members:
            if str(sample.path) in self.skipped:
                continue
            try:
                encoded, (width, height) = read_encoded(sample.path)
            except UNREADABLE as error:
                self._skip(str(sample.path), f"{type(error).__name__}: {error}")
                continue
            items.append(self._item(sample, encoded, width, height, position))
        return items

    def _item(
        self, sample: data.Sample, encoded: np.ndarray, width: int, height: int, position: int
    ) -> _Item:
        return make_item(self._recipe(self._epoch), sample, encoded, (width, height), position)

    def _recipe(self, epoch: int) -> Recipe:
        return Recipe(self.train, self.seed, epoch, self.image_size, self.augment_load, self.crop_scale_min)

    def _feed(self) -> tuple[list[np.ndarray], ...]:
        """external_source callback: the next planned batch, remembered until its output is taken."""
        if not self._plan:
            raise StopIteration
        number, members = self._plan.popleft()
        items = self._prepare(members)
        if not items:
            raise data.DataError(
                f"no image of batch {number} can be decoded ({len(self.skipped)} skipped, see the log); "
                "remove the undecodable files from the data set"
            )
        self._in_flight.append((number, members, items))
        return _columns(self.train, items, None)

    def _skip(self, path: str, why: str) -> None:
        self.skipped[path] = why
        log.warning("skipping image %s (%s); %d skipped by the DALI loader", path, why, len(self.skipped))

    def _recover(self, error: RuntimeError) -> None:
        """A batch failed inside DALI: find the undecodable samples in flight and feed again without them."""
        suspects = [item for _, _, items in self._in_flight for item in items]
        culprits = [(item, why) for item in suspects if (why := self._decode_error(item.encoded))]
        if not culprits:
            raise error
        for item, why in culprits:
            self._skip(str(item.sample.path), f"DALI cannot decode it: {why}")
        self._plan.extendleft((number, members) for number, members, _ in reversed(self._in_flight))
        self._in_flight.clear()
        self._pipe = None

    def _decode_error(self, encoded: np.ndarray) -> str | None:
        """None when DALI decodes the image alone, else the decoder's reason."""
        probe = Pipeline(batch_size=1, num_threads=1, device_id=self._device_id(), prefetch_queue_depth=1)
        with probe:
            image = fn.decoders.image(
                fn.external_source(source=lambda: [encoded], batch=True, dtype=DALIDataType.UINT8),
                device=self._decode_device(),
                output_type=DALIImageType.RGB,
            )
            probe.set_outputs(image)
        try:
            probe.build()
            probe.run()
        except RuntimeError as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            after = lines.index("encountered:") + 1 if "encountered:" in lines else len(lines) - 1
            return lines[min(after, len(lines) - 1)].rstrip(" :") if lines else type(error).__name__
        return None

    # Pipeline ----------------------------------------------------------------------------------

    def _device_id(self) -> int | None:
        if self.device.type != "cuda":
            return None
        return self.device.index if self.device.index is not None else torch.cuda.current_device()

    def _decode_device(self) -> str:
        return DECODE_MIXED if self.device.type == "cuda" and self.decode == DECODE_MIXED else DECODE_CPU

    def _pipeline(self) -> Pipeline:
        if self._pipe is None:
            self._pipe = self._build()
        return self._pipe

    def _build(self, parallel: ParallelFeed | None = None) -> Pipeline:
        """The pipeline fed by this loader's thread (`_feed`), or by DALI's worker processes running
        `parallel` (then a last output holds each batch's sample indices)."""
        processes = {"py_num_workers": self.feed_processes, "py_start_method": "spawn"} if parallel else {}
        pipe = Pipeline(
            batch_size=self.batch_size,
            num_threads=self.num_threads,
            device_id=self._device_id(),
            prefetch_queue_depth=PREFETCH_DEPTH,
            seed=self.seed,
            **processes,
        )
        with pipe:
            dtypes = [*(TRAIN_COLUMNS if self.train else EVAL_COLUMNS)]
            source: dict[str, Any] = {"source": self._feed, "batch": True}
            if parallel is not None:
                dtypes.append(DALIDataType.INT64)
                # Its own queue: one batch ahead per worker process. The parallel external source's
                # prefetch_queue_depth defaults to 1, and DALI hands a worker a batch only while fewer
                # than that wait: one process fed at a time, whatever py_num_workers (DALI's
                # external_source docs, "Parallel External Source").
                source = {
                    "source": parallel,
                    "batch": True,
                    "batch_info": True,
                    "parallel": True,
                    "prefetch_queue_depth": max(self.feed_processes, PREFETCH_DEPTH),
                }
            columns = cast(
                "list[DataNode]", fn.external_source(num_outputs=len(dtypes), dtype=dtypes, **source)
            )
            graph = train_graph if self.train else eval_graph
            images = graph(
                columns[: len(dtypes) - (parallel is not None)],
                decode_device=self._decode_device(),
                image_size=self.image_size,
                augment_load=self.augment_load,
                hw_decoder_load=self.hw_decoder_load,
                layout=self.layout,
            )
            pipe.set_outputs(images, *columns[len(dtypes) - 1 :] if parallel is not None else ())
        pipe.build()
        return pipe

    def _to_torch(self, images: Any) -> torch.Tensor:
        """The batch as a torch tensor: on the GPU when DALI's operators ran there (copied on the
        current stream), else in pinned host memory for the step's non-blocking copy (`dali-decode
        cpu` on a GPU, as NVIDIA's dali-cpu ResNet-50 recipe)."""
        dense = images.as_tensor()
        on_gpu = self._decode_device() == DECODE_MIXED
        pin = not on_gpu and self.device.type == "cuda"
        out = torch.empty(
            tuple(dense.shape()),
            dtype=torch.float32,
            device=self.device if on_gpu else torch.device("cpu"),
            pin_memory=pin,
        )
        stream = torch.cuda.current_stream(self.device) if on_gpu else None
        feed_ndarray(dense, out, cuda_stream=stream)
        return out.permute(0, 3, 1, 2) if self.layout == LAYOUT_HWC else out


def _node(value: object) -> DataNode:
    """DALI's stubs type operator results loosely; every operator used here returns one DataNode."""
    if not isinstance(value, DataNode):
        raise TypeError(f"expected one DALI DataNode, got {type(value).__name__}")
    return value


def _decoder_options(decode_device: str, hw_decoder_load: float) -> dict[str, Any]:
    return {
        "device": decode_device,
        # the share of JPEGs the A100/H100/H200 hardware decoder takes (mixed only; DALI's default 0.65)
        **({"hw_decoder_load": hw_decoder_load} if decode_device == DECODE_MIXED else {}),
        "output_type": DALIImageType.RGB,
        "adjust_orientation": False,  # like PIL's Image.open in the torch loader
        "jpeg_fancy_upsampling": True,  # libjpeg's default, which PIL uses
    }


def _normalize(images: DataNode, device: str, layout: str) -> DataNode:
    return fn.crop_mirror_normalize(
        images,
        dtype=DALIDataType.FLOAT,
        output_layout=layout,
        mean=[255.0 * m for m in augment.IMAGENET_MEAN],
        std=[255.0 * s for s in augment.IMAGENET_STD],
        device=device,
    )


def train_graph(
    columns: Sequence[DataNode],
    *,
    decode_device: str,
    image_size: int,
    augment_load: int,
    hw_decoder_load: float = DEFAULT_HW_DECODER_LOAD,
    layout: str = LAYOUT_CHW,
) -> DataNode:
    """Crop-decode the drawn box, resize it to image_size, then augment_load x (flip, rotate), normalise
    into `layout` (CHW, or HWC for a channels-last model)."""
    encoded, anchor, shape, flips, angles = columns
    device = "gpu" if decode_device == "mixed" else "cpu"
    images = fn.decoders.image_slice(
        encoded,
        anchor,
        shape,
        normalized_anchor=False,
        normalized_shape=False,
        **_decoder_options(decode_device, hw_decoder_load),
    )
    images = _node(fn.resize(images, size=[image_size, image_size], device=device))
    for repetition in range(augment_load):
        images = _node(fn.flip(images, horizontal=_node(flips[repetition]), device=device))
        images = _node(
            fn.rotate(images, angle=_node(angles[repetition]), keep_size=True, fill_value=0, device=device)
        )
    return _normalize(images, device, layout)


def eval_graph(
    columns: Sequence[DataNode],
    *,
    decode_device: str,
    image_size: int,
    augment_load: int,
    hw_decoder_load: float = DEFAULT_HW_DECODER_LOAD,
    layout: str = LAYOUT_CHW,
) -> DataNode:
    """Decode, resize the shorter side to image_size * 8/7, center-crop image_size, normalise into
    `layout`."""
    del augment_load  # evaluation never augments
    encoded, resized, anchor = columns
    device = "gpu" if decode_device == "mixed" else "cpu"
    images = fn.decoders.image(encoded, **_decoder_options(decode_device, hw_decoder_load))
    images = _node(fn.resize(images, size=resized, device=device))
    images = _node(fn.slice(images, start=anchor, shape=[image_size, image_size], device=device))
    return _normalize(images, device, layout)
