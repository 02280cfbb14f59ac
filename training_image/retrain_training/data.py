"""Samples, labels, the train/validation split and the per-epoch order every loader follows.

Images come from `<channel>/<label>/<file>` folders or from a manifest channel of JSON lines. The
split hashes each image's relative path, so adding images never moves an older one between splits;
the per-epoch order is a permutation drawn from (seed, epoch) and sharded by global batch, so a
resumed or data-parallel run sees exactly the samples an uninterrupted one-process run would.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
from PIL import Image, UnidentifiedImageError

from retrain_contract import container as contract

log = logging.getLogger(__name__)


class DataError(Exception):
    """The data cannot train a classifier; the message says which input and what to do."""


class Sample(NamedTuple):
    path: Path
    label: int  # index into the data set's sorted labels
    key: str  # "<label>/<file>": the path relative to the channel root, hashed for the split


@dataclass
class DataSet:
    labels: list[str]
    train: list[Sample]
    validation: list[Sample]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)


def is_image_name(name: str) -> bool:
    return name.lower().endswith(contract.IMAGE_EXTENSIONS) and not name.startswith(".")


def scan_folders(root: Path) -> list[tuple[str, str]]:
    """(relative path, label) for every image file in `<root>/<label>/<file>`, sorted."""
    found: list[tuple[str, str]] = []
    for label_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for file in sorted(label_dir.rglob("*")):
            if is_image_name(file.name) and not file.is_dir():  # a dangling link is counted as unreadable
                found.append((file.relative_to(root).as_posix(), label_dir.name))
    return found


def read_manifest(manifest: Path) -> list[tuple[str, str]]:
    """(relative path, label) per manifest line, in file order; repeats are kept (they boost a class)."""
    entries: list[tuple[str, str]] = []
    for number, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            path, label = str(record[contract.MANIFEST_PATH_KEY]), str(record[contract.MANIFEST_LABEL_KEY])
        except (ValueError, KeyError, TypeError) as error:
            raise DataError(
                f"manifest {manifest} line {number} is not a JSON object with "
                f"'{contract.MANIFEST_PATH_KEY}' and '{contract.MANIFEST_LABEL_KEY}': {error}; fix that line"
            ) from error
        entries.append((path.lstrip("/"), label))
    return entries


def manifest_splits(manifest: Path) -> dict[str, str]:
    """Path -> split of the manifest lines that name one (the control plane's frozen split)."""
    splits: dict[str, str] = {}
    for line in manifest.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            split = record.get(contract.MANIFEST_SPLIT_KEY) if isinstance(record, dict) else None
            if split is not None:
                if split not in (contract.SPLIT_TRAIN, contract.SPLIT_VALIDATION):
                    raise DataError(
                        f"manifest {manifest}: '{contract.MANIFEST_SPLIT_KEY}' is {split!r}; give "
                        f"'{contract.SPLIT_TRAIN}' or '{contract.SPLIT_VALIDATION}'"
                    )
                splits[str(record[contract.MANIFEST_PATH_KEY]).lstrip("/")] = str(split)
    return splits


def validation_rule(splits: dict[str, str], fraction: float) -> Callable[[str], bool]:
    """Whether a key is a validation sample: the manifest's split where it names one, else the hash."""

    def is_validation(key: str) -> bool:
        if key in splits:
            return splits[key] == contract.SPLIT_VALIDATION
        return contract.in_validation(key, fraction)

    return is_validation


def verify_image(path: Path) -> str | None:
    """None when PIL can fully decode the file, else why not (corrupt, truncated, not an image)."""
    try:
        with Image.open(path) as image:
            image.load()
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def decodable(
    entries: Sequence[tuple[str, str]], root: Path, skipped: list[tuple[str, str]]
) -> list[tuple[Path, str, str]]:
    """(path, key, label) of the entries PIL decodes; the rest go to `skipped`, logged once per path."""
    verdicts: dict[str, str | None] = {}
    kept: list[tuple[Path, str, str]] = []
    for key, label in entries:
        path = root / key
        if key not in verdicts:
            verdicts[key] = verify_image(path)
            if verdicts[key] is not None:
                skipped.append((str(path), str(verdicts[key])))
                log.warning("skipping unreadable image %s (%s)", path, verdicts[key])
        if verdicts[key] is None:
            kept.append((path, key, label))
    return kept


def load_dataset(
    train_root: Path | None,
    *,
    validation_root: Path | None = None,
    manifest: Path | None = None,
    val_fraction: float = 0.2,
) -> DataSet:
    """Resolve the channels into labelled, decodable samples split into train and validation."""
    if train_root is None:
        raise DataError("no train channel: give the job a 'train' input channel with <label>/<file> images")
    if not 0.0 <= val_fraction < 1.0:
        raise DataError(f"val-fraction must be in [0, 1), got {val_fraction}")
    skipped: list[tuple[str, str]] = []
    entries = read_manifest(manifest) if manifest is not None else scan_folders(train_root)
    if not entries:
        source = manifest if manifest is not None else train_root
        raise DataError(f"the data set is empty: no {'/'.join(contract.IMAGE_EXTENSIONS)} images in {source}")
    train_entries = decodable(entries, train_root, skipped)
    if validation_root is not None:
        val_entries = decodable(scan_folders(validation_root), validation_root, skipped)
    else:
        is_validation = validation_rule(manifest_splits(manifest) if manifest else {}, val_fraction)
        # Repeated lines boost training only: each validation image counts once.
        val_entries = list({e[1]: e for e in train_entries if is_validation(e[1])}.values())
        train_entries = [e for e in train_entries if not is_validation(e[1])]
    labels = sorted({label for _, _, label in (*train_entries, *val_entries)})
    if len(labels) < 2:
        raise DataError(
            f"a classifier needs at least two labels, found {len(labels)} ({', '.join(labels) or 'none'}) "
            f"in {manifest or train_root}; upload images under data/<dataset>/<label>/ for another label"
        )
    trained = {label for _, _, label in train_entries}
    missing = [label for label in labels if label not in trained]
    if missing:
        raise DataError(
            f"label(s) {', '.join(missing)} have no training image (all went to validation or were "
            "unreadable); add more images for them or lower val-fraction"
        )
    index = {label: i for i, label in enumerate(labels)}
    if skipped:
        log.warning("skipped %d unreadable file(s)", len(skipped))
    return DataSet(
        labels=labels,
        train=[Sample(path, index[label], key) for path, key, label in train_entries],
        validation=[Sample(path, index[label], key) for path, key, label in val_entries],
        skipped=skipped,
    )


def epoch_order(num_samples: int, seed: int, epoch: int) -> list[int]:
    """The epoch's sample order: a permutation drawn only from (seed, epoch)."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch])))
    return [int(i) for i in rng.permutation(num_samples)]


def repeats_for_steps(num_train: int, global_batch: int, epochs: int, min_steps: int) -> int:
    """How many passes over `num_train` images one epoch makes so that `epochs` epochs take at least
    `min_steps` optimizer steps (1: the images once). A fine-tune of a few dozen images per class is
    then sized in steps, not in passes, while the epochs (validation, the metric lines) stay as many."""
    if num_train == 0 or min_steps <= 0:
        return 1
    steps_per_epoch = -(-min_steps // epochs)
    return max(1, -(-steps_per_epoch * global_batch // num_train))


def num_batches(num_samples: int, global_batch: int, *, train: bool) -> int:
    """Training drops a last partial global batch (every rank must step together); eval keeps it."""
    if num_samples == 0:
        return 0
    if train:
        return max(1, num_samples // global_batch)
    return -(-num_samples // global_batch)


def rank_batches(
    order: Sequence[int], global_batch: int, *, train: bool, rank: int = 0, world_size: int = 1
) -> list[list[int]]:
    """This rank's batches: rank r takes the r-th contiguous slice of every global batch.

    So the union over ranks of batch i is the one-process batch i, and averaged DDP gradients equal
    the one-process gradient (up to BatchNorm's per-rank statistics).
    """
    batches: list[list[int]] = []
    for b in range(num_batches(len(order), global_batch, train=train)):
        chunk = list(order[b * global_batch : (b + 1) * global_batch])
        per_rank = -(-len(chunk) // world_size) if not train else len(chunk) // world_size
        if train and per_rank == 0:
            raise DataError(
                f"batch-size {global_batch} gives no sample per rank with {world_size} ranks; "
                "raise batch-size to at least the number of ranks"
            )
        batches.append(chunk[rank * per_rank : (rank + 1) * per_rank])
    return batches


def sample_seed(seed: int, epoch: int, position: int) -> np.random.SeedSequence:
    """Per-sample randomness: derived from (seed, epoch, position in the epoch), never from workers."""
    return np.random.SeedSequence([seed, epoch, position])
