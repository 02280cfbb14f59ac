"""Data-parallel training: two CPU processes (gloo) match one process at the same global batch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from retrain_contract import container as contract
from retrain_training import models

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "training_image" / "train.py"
HYPERPARAMETERS = {
    "model": "resnet18",
    "epochs": "2",
    "freeze-backbone-epochs": "2",
    "batch-size": "8",
    "image-size": "32",
    "lr": "0.05",
    "val-fraction": "0.1",
    "checkpoint-every-steps": "0",
    "num-workers": "0",
    "seed": "3",
    "debug-hook": "false",
}
ARGS = [part for name, value in HYPERPARAMETERS.items() for part in (f"--{name}", value)]


def write_images(root: Path, per_label: int = 24) -> None:
    rng = np.random.default_rng(1)
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for i in range(per_label):
            Image.fromarray(rng.integers(0, 256, size=(36, 36, 3), dtype=np.uint8)).save(
                root / label / f"{i}.png"
            )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def launch(base: Path, data: Path, *, rank: int, world_size: int, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        contract.BASE_DIR_ENV: str(base),
        contract.CHANNEL_ENV_PREFIX + "TRAIN": str(data),
        "OMP_NUM_THREADS": "1",
    }
    if world_size > 1:
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
    log = open(base / f"rank{rank}.log", "wb")  # noqa: SIM115 (closed when the process ends)
    return subprocess.Popen([sys.executable, str(TRAIN), *ARGS], env=env, stdout=log, stderr=log)


def weights(base: Path) -> dict[str, torch.Tensor]:
    return torch.load(base / "model" / contract.MODEL_FILE, weights_only=True)["state_dict"]


def test_two_ranks_match_one_process_at_the_same_global_batch(tmp_path: Path) -> None:
    # GIVEN one data set trained by one process, and by two gloo ranks each taking half of every batch
    data = tmp_path / "data"
    write_images(data)
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    single.mkdir()
    ddp.mkdir()
    port = free_port()
    # WHEN both finish
    assert launch(single, data, rank=0, world_size=1, port=port).wait(timeout=300) == 0
    ranks = [launch(ddp, data, rank=r, world_size=2, port=port) for r in range(2)]
    assert [p.wait(timeout=300) for p in ranks] == [0, 0], (ddp / "rank1.log").read_text()[-2000:]
    # THEN the trained head agrees to float rounding (a frozen backbone's BatchNorm uses running
    # statistics, so each rank's half-batch gradient averages to the one-process gradient), and the
    # difference is far smaller than what training changed
    one, two = weights(single), weights(ddp)
    torch.manual_seed(3)  # train.py seeds torch before building the model
    initial = models.build_model("resnet18", 2).state_dict()
    assert all(torch.equal(one[n], two[n]) for n in one if not n.startswith("fc."))
    for name in ("fc.weight", "fc.bias"):
        moved = (one[name] - initial[name]).abs().max()
        assert moved > 1e-3
        torch.testing.assert_close(two[name], one[name], rtol=0, atol=1e-5)
