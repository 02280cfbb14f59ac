"""Step-exact checkpoints: atomic, verified, the newest K kept, written on an interval and on SIGTERM.

Each file is a torch.save payload followed by a trailer (magic + sha256 of the payload), written to
a temporary name, fsynced, renamed into place and the directory fsynced, so a reader sees either a
whole checkpoint or none; a torn or corrupt newest file fails verification and the previous one is
used. Managed spot training syncs the directory to S3 and restores it before a restarted job runs.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import random
import re
import signal
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

import numpy as np
import torch

from retrain_contract import container as contract

log = logging.getLogger(__name__)

MAGIC = b"RETRAIN-CKPT-SHA256:"
TRAILER_SIZE = len(MAGIC) + 32
TEMP_PREFIX = ".tmp-"
_NAME = re.compile(
    re.escape(contract.CHECKPOINT_PREFIX) + r"(\d{9})" + re.escape(contract.CHECKPOINT_SUFFIX) + "$"
)


class CheckpointError(Exception):
    """A checkpoint file that is torn, corrupt or not ours."""


class _HashingWriter:
    """File-like sink for torch.save that hashes what it writes (no in-memory copy of the payload)."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()

    def write(self, chunk: bytes) -> int:
        self.digest.update(chunk)
        return self.handle.write(chunk)

    def flush(self) -> None:
        self.handle.flush()


def write_checkpoint(handle: BinaryIO, state: dict[str, Any]) -> None:
    """The torch.save payload, then MAGIC and the payload's sha256."""
    writer = _HashingWriter(handle)
    torch.save(state, writer)  # type: ignore[arg-type]
    handle.write(MAGIC + writer.digest.digest())


def encode(state: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    write_checkpoint(buffer, state)
    return buffer.getvalue()


def decode(blob: bytes, *, source: str = "checkpoint") -> dict[str, Any]:
    """Verify the trailer, then load with weights_only (the state holds only tensors and plain data)."""
    if len(blob) < TRAILER_SIZE or blob[-TRAILER_SIZE:-32] != MAGIC:
        raise CheckpointError(f"{source} has no checkpoint trailer (torn or not a retrain checkpoint)")
    payload, digest = memoryview(blob)[:-TRAILER_SIZE], blob[-32:]
    if hashlib.sha256(payload).digest() != digest:
        raise CheckpointError(f"{source} fails its sha256 check (torn or corrupt)")
    state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise CheckpointError(f"{source} does not hold a checkpoint dictionary")
    return state


def step_of(path: Path) -> int | None:
    match = _NAME.match(path.name)
    return int(match.group(1)) if match else None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def snapshot(value: Any) -> Any:
    """A deep copy with every tensor copied to the CPU: what a background write may read while
    training goes on changing the originals."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: snapshot(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(snapshot(item) for item in value)
    return value


@dataclass
class CheckpointStore:
    """The checkpoints of one training job on one host (contract.Paths.job_checkpoint_dir).

    `save_async` snapshots the state and writes it on a background thread, so a step waits only
    for the copy, not for serialisation and fsync; one write is in flight at a time.
    """

    directory: Path
    keep: int = 3
    _pending: Future[Path] | None = field(default=None, init=False, repr=False)
    _writer: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)

    def save_async(self, step: int, state: dict[str, Any]) -> None:
        self.wait()
        frozen = snapshot(state)
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
        self._pending = self._writer.submit(self.save, step, frozen)

    def wait(self) -> Path | None:
        """Block until the write in flight is durable; re-raises its error."""
        pending, self._pending = self._pending, None
        return pending.result() if pending is not None else None

    def close(self) -> None:
        self.wait()
        if self._writer is not None:
            self._writer.shutdown()
            self._writer = None

    def files(self) -> list[tuple[int, Path]]:
        """(step, path), newest first."""
        if not self.directory.is_dir():
            return []
        found = [(step, p) for p in self.directory.iterdir() if (step := step_of(p)) is not None]
        return sorted(found, reverse=True)

    def save(self, step: int, state: dict[str, Any]) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / contract.checkpoint_name(step)
        temp = self.directory / f"{TEMP_PREFIX}{target.name}.{os.getpid()}"
        with open(temp, "wb") as handle:
            write_checkpoint(handle, state)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
        _fsync_dir(self.directory)
        self.prune()
        log.info("checkpoint %s written", target.name)
        return target

    def prune(self) -> None:
        """Keep the newest `keep` checkpoints; remove our leftover temporary files."""
        for _, path in self.files()[max(1, self.keep) :]:
            path.unlink(missing_ok=True)
        for path in self.directory.glob(f"{TEMP_PREFIX}*"):
            path.unlink(missing_ok=True)

    def load_latest(self) -> tuple[int, dict[str, Any]] | None:
        """The newest checkpoint that verifies; torn or corrupt newer ones are logged and passed over."""
        for step, path in self.files():
            try:
                return step, decode(path.read_bytes(), source=str(path))
            except (CheckpointError, OSError, RuntimeError) as error:
                log.warning("checkpoint %s is unusable (%s); trying the previous one", path, error)
        return None


def rng_state() -> dict[str, Any]:
    """Python, numpy, torch and CUDA generator states, as tensors and plain data (weights_only-safe)."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, torch.from_numpy(np.asarray(keys, dtype=np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Interruption:
    """SIGTERM sets a flag; the training loop finishes its step, checkpoints and exits with
    contract.INTERRUPTED_EXIT_CODE. Spot reclaims and StopTrainingJob both arrive as SIGTERM."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        log.warning("SIGTERM received: finishing the current step, then checkpointing and exiting")

    def __enter__(self) -> Interruption:
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGTERM, self._previous)


class Interrupted(Exception):  # noqa: N818 (a stop request, not an error)
    """Raised after the interruption checkpoint is written; the entry point exits with the code."""
