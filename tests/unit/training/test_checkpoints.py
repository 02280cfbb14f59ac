from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from retrain_contract import container as contract
from retrain_training import checkpoints


def state(step: int) -> dict[str, object]:
    return {"step": step, "weights": torch.full((3,), float(step)), "args": {"lr": 0.1}}


def test_saved_checkpoint_loads_back_equal(tmp_path: Path) -> None:
    store = checkpoints.CheckpointStore(tmp_path / "job" / "algo-1")
    path = store.save(7, state(7))
    assert path.name == contract.checkpoint_name(7)
    step, loaded = store.load_latest() or (None, {})
    assert step == 7
    assert torch.equal(loaded["weights"], torch.full((3,), 7.0))
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


def test_only_the_newest_k_are_kept(tmp_path: Path) -> None:
    store = checkpoints.CheckpointStore(tmp_path, keep=2)
    for step in (5, 10, 15, 20):
        store.save(step, state(step))
    assert [step for step, _ in store.files()] == [20, 15]


@pytest.mark.parametrize("damage", ["truncate", "flip a byte", "empty"])
def test_a_torn_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path, damage: str) -> None:
    # GIVEN two checkpoints, the newest damaged
    store = checkpoints.CheckpointStore(tmp_path)
    store.save(1, state(1))
    newest = store.save(2, state(2))
    blob = bytearray(newest.read_bytes())
    if damage == "truncate":
        blob = blob[: len(blob) // 2]
    elif damage == "flip a byte":
        blob[len(blob) // 3] ^= 0xFF
    else:
        blob = bytearray()
    newest.write_bytes(bytes(blob))
    # WHEN the latest is loaded THEN the previous one is returned and the damaged file is kept
    step, loaded = store.load_latest() or (None, {})
    assert step == 1
    assert loaded["step"] == 1
    assert newest.exists()


def test_no_usable_checkpoint_means_a_fresh_start(tmp_path: Path) -> None:
    store = checkpoints.CheckpointStore(tmp_path)
    assert store.load_latest() is None
    (tmp_path / contract.checkpoint_name(3)).write_bytes(b"garbage")
    assert store.load_latest() is None


def test_a_file_that_is_not_a_checkpoint_is_refused() -> None:
    with pytest.raises(checkpoints.CheckpointError, match="no checkpoint trailer"):
        checkpoints.decode(b"x" * 100)


def test_rng_states_round_trip_through_a_checkpoint(tmp_path: Path) -> None:
    # GIVEN generator states captured and saved
    store = checkpoints.CheckpointStore(tmp_path)
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    store.save(1, {"rng": checkpoints.rng_state()})
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    # WHEN restored after the generators moved on THEN they replay the same numbers
    random.random()
    torch.rand(5)
    _, loaded = store.load_latest() or (None, {})
    checkpoints.set_rng_state(loaded["rng"])
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_sigterm_sets_the_flag_instead_of_killing_the_process() -> None:
    # GIVEN a SIGTERM handler already installed (a bound method compares equal, never identical)
    earlier: list[int] = []

    def previous(signum: int, frame: object) -> None:
        earlier.append(signum)

    original = signal.signal(signal.SIGTERM, previous)
    try:
        # WHEN SIGTERM arrives inside the block
        with checkpoints.Interruption() as interruption:
            assert signal.getsignal(signal.SIGTERM) == interruption._handle
            os.kill(os.getpid(), signal.SIGTERM)
            # THEN the flag is set, the process lives on and the earlier handler was not called
            assert interruption.requested
            assert earlier == []
        # AND after the block the earlier handler is back and handles the next SIGTERM
        assert signal.getsignal(signal.SIGTERM) is previous
        os.kill(os.getpid(), signal.SIGTERM)
        assert earlier == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, original)


def test_a_background_write_holds_the_state_as_it_was_when_saved(tmp_path: Path) -> None:
    # GIVEN a state saved in the background
    store = checkpoints.CheckpointStore(tmp_path)
    weights = torch.zeros(1000)
    store.save_async(1, {"weights": weights, "nested": [{"t": weights}]})
    # WHEN training changes the tensors in place before the write finishes
    weights += 1
    store.close()
    # THEN the checkpoint holds the values at save time
    _, loaded = store.load_latest() or (None, {})
    assert torch.equal(loaded["weights"], torch.zeros(1000))
    assert torch.equal(loaded["nested"][0]["t"], torch.zeros(1000))


def test_a_failed_background_write_surfaces_on_wait(tmp_path: Path) -> None:
    # GIVEN a checkpoint directory that is a file (the write cannot succeed)
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    store = checkpoints.CheckpointStore(blocked)
    store.save_async(1, state(1))
    # WHEN waited for THEN the error reaches the training loop
    with pytest.raises(OSError):
        store.wait()
