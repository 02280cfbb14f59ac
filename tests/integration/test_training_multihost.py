"""The entry point's torchrun launch on CPU: two emulated hosts of two processes each (4 gloo ranks, two
launchers on 127.0.0.1, each with its own base directory) train as one process does at the same global
batch, from the same pretrained start, and a job interrupted by SIGTERM resumes to the same weights."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch

from retrain_contract import container as contract
from retrain_training import models
from tests.integration.test_training_ddp import free_port, weights, write_images

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "training_image" / "train.py"
HOSTS = ("algo-1", "algo-2")
JOB = "multihost"
START = "start.pt"
# 48 images, 43 train after the validation hash: 6 steps of 8 (2 per rank) per epoch, 2 epochs. The
# frozen backbone's BatchNorm uses running statistics, so every split of a batch has one gradient.
HYPERPARAMETERS = {
    "model": "resnet18",
    "pretrained": START,
    "epochs": "2",
    "freeze-backbone-epochs": "2",
    "batch-size": "8",
    "image-size": "32",
    "lr": "0.05",
    "val-fraction": "0.1",
    "checkpoint-every-steps": "2",
    "num-workers": "0",
    "seed": "3",
    "debug-hook": "false",
}
ARGS = [part for name, value in HYPERPARAMETERS.items() for part in (f"--{name}", value)]
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def channels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The train channel, and a pretrained channel holding a champion-like model.pt of other weights."""
    root = tmp_path_factory.mktemp("channels")
    write_images(root / "train")
    (root / "pretrained").mkdir()
    torch.manual_seed(11)
    start = {
        "arch": "resnet18",
        "labels": ["cat", "dog"],
        "state_dict": models.build_model("resnet18", 2).state_dict(),
    }
    torch.save(start, root / "pretrained" / START)
    return {"train": root / "train", "pretrained": root / "pretrained"}


def environment(base: Path, channels: Mapping[str, Path], extra: Mapping[str, str]) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", contract.PROCESSES_PER_HOST_ENV)
    }
    env.update(
        {
            contract.BASE_DIR_ENV: str(base),
            contract.JOB_NAME_ENV: JOB,
            contract.CHANNEL_ENV_PREFIX + "TRAIN": str(channels["train"]),
            contract.CHANNEL_ENV_PREFIX + "PRETRAINED": str(channels["pretrained"]),
            "OMP_NUM_THREADS": "1",
            **extra,
        }
    )
    return env


def start(base: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    base.mkdir(parents=True, exist_ok=True)
    log = open(base / "launcher.log", "ab")  # noqa: SIM115 (closed when the process ends)
    return subprocess.Popen([sys.executable, str(TRAIN), *ARGS], env=dict(env), stdout=log, stderr=log)


def start_hosts(root: Path, channels: Mapping[str, Path]) -> list[subprocess.Popen[bytes]]:
    """One launcher per emulated host, two processes each; the first host's launcher is the master."""
    port = str(free_port())
    return [
        start(
            root / host,
            environment(
                root / host,
                channels,
                {
                    contract.HOSTS_ENV: json.dumps(HOSTS),
                    contract.CURRENT_HOST_ENV: host,
                    contract.PROCESSES_PER_HOST_ENV: "2",
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": port,
                },
            ),
        )
        for host in HOSTS
    ]


def logs(root: Path) -> str:
    return "\n".join((root / host / "launcher.log").read_text() for host in HOSTS)


def tails(root: Path, chars: int = 3000) -> str:
    """Each host's log tail and failure reason: a failure on one host shows beside the other's echo of it
    (a host whose peer died logs the lost connection last, which alone hid the cause)."""
    parts = []
    for host in HOSTS:
        failure = root / host / "output" / contract.FAILURE_FILE
        reason = failure.read_text() if failure.exists() else "none"
        log = (root / host / "launcher.log").read_text()[-chars:]
        parts.append(f"--- {host}: failure reason {reason!r}, log tail:\n{log}")
    return "\n".join(parts)


def checkpoints(base: Path) -> list[str]:
    return sorted(p.name for p in (base / "checkpoints" / JOB).glob("*/ckpt-*.pt"))


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory, channels: dict[str, Path]) -> Path:
    """An uninterrupted job of two hosts with two processes each."""
    root = tmp_path_factory.mktemp("four-ranks")
    codes = [p.wait(timeout=TIMEOUT_S) for p in start_hosts(root, channels)]
    assert codes == [0, 0], tails(root)
    return root


def test_two_hosts_of_two_processes_match_one_process(
    tmp_path: Path, channels: dict[str, Path], four_ranks: Path
) -> None:
    # GIVEN the same job run by one process
    single = tmp_path / "single"
    assert start(single, environment(single, channels, {})).wait(timeout=TIMEOUT_S) == 0
    # WHEN two hosts of two processes ran it (the four_ranks fixture)
    first, second = four_ranks / HOSTS[0], four_ranks / HOSTS[1]
    # THEN the first host holds the model and the checkpoints (rank 0's), trained by four ranks ...
    assert json.loads((first / "model" / contract.CONFIG_FILE).read_text())["world_size"] == 4
    assert not (second / "model" / contract.MODEL_FILE).exists()
    assert checkpoints(first) and not checkpoints(second)
    # ... every rank started from the pretrained channel's weights (the frozen backbone keeps them) ...
    start_state = models.read_start_weights(channels["pretrained"] / START).state
    one, four = weights(single), weights(first)
    assert all(torch.equal(four[n], start_state[n]) for n in four if not n.startswith("fc."))
    assert all(torch.equal(one[n], four[n]) for n in one if not n.startswith("fc."))
    # ... and the trained head agrees with one process's to float rounding, far below what training moved
    assert (one["fc.weight"] - start_state["fc.weight"]).abs().max() > 1e-3
    for name in ("fc.weight", "fc.bias"):
        torch.testing.assert_close(four[name], one[name], rtol=0, atol=1e-5)


def wait_for(pattern: str, path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not re.search(pattern, path.read_text()):
        assert all(p.poll() is None for p in processes), path.read_text()[-4000:]
        assert time.monotonic() < deadline, f"no {pattern!r} in {path}"
        time.sleep(0.2)


def test_sigterm_to_both_hosts_then_restart_matches_the_uninterrupted_job(
    tmp_path: Path, channels: dict[str, Path], four_ranks: Path
) -> None:
    # GIVEN a two-host job whose launchers get SIGTERM once rank 0 wrote its first checkpoint
    launchers = start_hosts(tmp_path, channels)
    wait_for(r"checkpoint ckpt-000000002\.pt written", tmp_path / HOSTS[0] / "launcher.log", launchers)
    for launcher in launchers:
        launcher.send_signal(signal.SIGTERM)
    # THEN the children checkpoint and exit interrupted, and so do both launchers, with no failure
    codes = [p.wait(timeout=TIMEOUT_S) for p in launchers]
    assert codes == [contract.INTERRUPTED_EXIT_CODE] * 2, tails(tmp_path)
    assert all(not (tmp_path / h / "output" / contract.FAILURE_FILE).exists() for h in HOSTS)
    assert not (tmp_path / HOSTS[0] / "model" / contract.MODEL_FILE).exists()
    assert checkpoints(tmp_path / HOSTS[0]) and not checkpoints(tmp_path / HOSTS[1])
    # WHEN the job restarts on both hosts
    codes = [p.wait(timeout=TIMEOUT_S) for p in start_hosts(tmp_path, channels)]
    assert codes == [0, 0], tails(tmp_path)
    # THEN all four ranks resumed from rank 0's checkpoint (the second host has none of its own) and
    # the job ends with the uninterrupted job's weights: to the last float bit but for rounding, as the
    # first step after DDP is built reduces its gradient bucket in another layout (a sum of 4 ranks'
    # gradients is not associative)
    assert logs(tmp_path).count("resumed from") == 4
    final, expected = weights(tmp_path / HOSTS[0]), weights(four_ranks / HOSTS[0])
    assert final.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(final[name], tensor, rtol=0, atol=1e-7)


def test_a_failing_process_writes_the_failure_reason_once(tmp_path: Path, channels: dict[str, Path]) -> None:
    # GIVEN one host of two processes given a pretrained file that is not in the channel
    base = tmp_path / "job"
    env = environment(base, channels, {contract.PROCESSES_PER_HOST_ENV: "2"})
    launcher = subprocess.Popen(
        [sys.executable, str(TRAIN), *ARGS, "--pretrained", "missing.pt"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, stderr = launcher.communicate(timeout=TIMEOUT_S)
    # THEN the launcher fails, and the failure file holds the children's reason, not the launcher's
    assert launcher.returncode == 1, stderr.decode()[-4000:]
    reason = (base / "output" / contract.FAILURE_FILE).read_text()
    assert reason.startswith("ModelError: pretrained weights") and "missing.pt" in reason
    assert reason.count("\n") == 1
