"""train.py --loader dali on CPU: SIGTERM mid-epoch, then a restart, ends bit-equal to no interruption."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from retrain_contract import container as contract

pytest.importorskip("nvidia.dali")
pytestmark = [pytest.mark.slow]

TRAIN = Path(__file__).resolve().parents[3] / "training_image" / "train.py"
JOB = "dali-resume"
# 40 images, 8 hashed into validation -> 32 train = 4 steps of 8 per epoch, 2 epochs.
HYPERPARAMETERS = {
    "loader": "dali",
    "model": "resnet18",
    "epochs": "2",
    "batch-size": "8",
    "image-size": "32",
    "augment-load": "3",
    "checkpoint-every-steps": "3",
    "num-workers": "1",
    "seed": "11",
    "debug-hook": "false",
}


def run_training(base: Path, data: Path, *, sigterm_on: str | None = None, feed_processes: int = 0) -> int:
    """Run train.py as SageMaker would; send SIGTERM once a stderr line matches `sigterm_on`."""
    env = {
        **os.environ,
        contract.BASE_DIR_ENV: str(base),
        contract.CHANNEL_ENV_PREFIX + "TRAIN": str(data),
        contract.JOB_NAME_ENV: JOB,
        "OMP_NUM_THREADS": "1",
    }
    hyperparameters = {**HYPERPARAMETERS, contract.HP_DALI_FEED_PROCESSES: str(feed_processes)}
    args = [part for name, value in hyperparameters.items() for part in (f"--{name}", value)]
    base.mkdir(parents=True, exist_ok=True)
    with (base / "stdout.log").open("a") as stdout, (base / "stderr.log").open("a") as log:
        process = subprocess.Popen(
            [sys.executable, str(TRAIN), *args], env=env, stdout=stdout, stderr=subprocess.PIPE, text=True
        )
        assert process.stderr is not None
        signalled = False
        for line in process.stderr:
            log.write(line)
            if sigterm_on and not signalled and re.search(sigterm_on, line):
                process.send_signal(signal.SIGTERM)
                signalled = True
        return process.wait(timeout=300)


def final_weights(base: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = torch.load(base / "model" / contract.MODEL_FILE, weights_only=True)[
        "state_dict"
    ]
    return state


@pytest.mark.parametrize("feed_processes", [0, 2], ids=["fed-by-a-thread", "fed-by-dali-workers"])
def test_dali_training_interrupted_mid_epoch_resumes_to_the_same_weights(
    tmp_path: Path, feed_processes: int
) -> None:
    # GIVEN two labels of photos-sized-down JPEGs and an uninterrupted DALI training run
    data = tmp_path / "data"
    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (data / label).mkdir(parents=True)
        for i in range(20):
            pixels = rng.integers(0, 256, size=(int(rng.integers(36, 60)), 44, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(data / label / f"{i:03d}.jpg")
    assert run_training(tmp_path / "uninterrupted", data) == 0
    # WHEN another run gets SIGTERM during its first epoch (it checkpoints mid-epoch and exits)
    # and is restarted with its checkpoints
    interrupted = tmp_path / "interrupted"
    # (fed by DALI's worker processes: the same weights as the thread-fed run)
    signal_on = r"training and \d+ validation images"
    code = run_training(interrupted, data, sigterm_on=signal_on, feed_processes=feed_processes)
    assert code == contract.INTERRUPTED_EXIT_CODE
    assert run_training(interrupted, data, feed_processes=feed_processes) == 0
    # THEN it resumed inside epoch 0 and its final weights equal the uninterrupted run's bit for bit
    assert re.search(r"resumed from .* at epoch 0 batch [123] ", (interrupted / "stderr.log").read_text())
    expected, actual = final_weights(tmp_path / "uninterrupted"), final_weights(interrupted)
    assert actual.keys() == expected.keys()
    assert [name for name in expected if not torch.equal(actual[name], expected[name])] == []
