"""Proof of step-exact spot resume: train.py interrupted by SIGTERM at several points and restarted
ends with weights equal, bit for bit, to an uninterrupted run's with the same seed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from smdebug import modes
from smdebug.trials import create_trial

from retrain_contract import container as contract

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "training_image" / "train.py"
JOB = "resume-proof"
# 40 images, 8 in validation by hash at val-fraction 0.2 -> 32 train = 4 steps of 8 per epoch, 2 epochs.
HYPERPARAMETERS = {
    "model": "resnet18",
    "epochs": "2",
    "batch-size": "8",
    "image-size": "32",
    "checkpoint-every-steps": "3",
    "keep-checkpoints": "2",
    "num-workers": "0",
    "seed": "7",
    "debug-hook": "false",
    "augment-load": "2",
}
ARGS = [part for name, value in HYPERPARAMETERS.items() for part in (f"--{name}", value)]
# The same job with the Debugger hook on, saving every step: its tensors must survive restarts too.
HOOKED = {**HYPERPARAMETERS, "debug-hook": "true", "debug-interval": "1"}
HOOKED_ARGS = [part for name, value in HOOKED.items() for part in (f"--{name}", value)]


def write_images(root: Path, per_label: int = 20) -> None:
    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for i in range(per_label):
            pixels = rng.integers(0, 256, size=(36, 44, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i:03d}.jpg")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_images(root)
    return root


def run_training(
    base: Path,
    data: Path,
    *,
    sigterm_on: str | None = None,
    delay_s: float = 0.0,
    args: Sequence[str] = ARGS,
    signum: signal.Signals = signal.SIGTERM,
    job_name: str | None = JOB,
) -> int:
    """Run train.py as SageMaker would; send SIGTERM (or `signum`) once a stderr line matches `sigterm_on`.
    `job_name` None: no TRAINING_JOB_NAME, as in a container run outside SageMaker."""
    env = {
        **os.environ,
        contract.BASE_DIR_ENV: str(base),
        contract.CHANNEL_ENV_PREFIX + "TRAIN": str(data),
        contract.JOB_NAME_ENV: job_name or "",
        "OMP_NUM_THREADS": "1",
    }
    if job_name is None:
        del env[contract.JOB_NAME_ENV]
    base.mkdir(parents=True, exist_ok=True)
    with open(base / "stdout.log", "a") as stdout:
        process = subprocess.Popen(
            [sys.executable, str(TRAIN), *args],
            env=env,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stderr is not None
        signalled = False
        with open(base / "stderr.log", "a") as log:
            for line in process.stderr:
                log.write(line)
                if sigterm_on and not signalled and re.search(sigterm_on, line):
                    if delay_s:
                        subprocess.run(["sleep", str(delay_s)], check=True)
                    process.send_signal(signum)
                    signalled = True
        return process.wait(timeout=300)


def final_weights(base: Path) -> dict[str, torch.Tensor]:
    artifact = torch.load(base / "model" / contract.MODEL_FILE, weights_only=True)
    return artifact["state_dict"]


def assert_bit_equal(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    differing = [name for name in expected if not torch.equal(actual[name], expected[name])]
    assert differing == []


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A job's base directory; on tmpfs where there is one, so fsync costs no disk time."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="retrain-resume-", dir=shm))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, dataset: Path) -> dict[str, torch.Tensor]:
    base = tmp_path_factory.mktemp("uninterrupted")
    assert run_training(base, dataset) == 0
    return final_weights(base)


def checkpoint_steps(base: Path) -> list[int]:
    directory = base / "checkpoints" / JOB / contract.DEFAULT_HOST
    return sorted(int(p.name[5:14]) for p in directory.glob("ckpt-*.pt"))


@pytest.mark.parametrize(
    ("trigger", "earliest_stop"),
    [
        # Epochs are 4 steps; checkpoints every 3 steps and at epoch ends, written in the background
        # while training goes on. SIGTERM during start-up stops after the first step.
        pytest.param(r"training and \d+ validation images", 1, id="mid-epoch"),
        pytest.param(r"checkpoint ckpt-000000003\.pt written", 3, id="right after a checkpoint"),
        pytest.param(r"writing checkpoint ckpt-000000003\.pt", 3, id="during a checkpoint write"),
    ],
)
def test_sigterm_then_restart_matches_uninterrupted_run(
    trigger: str,
    earliest_stop: int,
    workdir: Path,
    dataset: Path,
    uninterrupted: dict[str, torch.Tensor],
) -> None:
    # GIVEN a job interrupted by SIGTERM at the point named in the test id
    assert run_training(workdir, dataset, sigterm_on=trigger) == contract.INTERRUPTED_EXIT_CODE
    assert not (workdir / "model" / contract.MODEL_FILE).exists()
    assert not (workdir / "output" / contract.FAILURE_FILE).exists()
    assert checkpoint_steps(workdir)[-1] >= earliest_stop
    # WHEN the job restarts with its checkpoints
    assert run_training(workdir, dataset) == 0
    # THEN its final weights equal the uninterrupted run's bit for bit
    assert "resumed from" in (workdir / "stderr.log").read_text()
    assert_bit_equal(final_weights(workdir), uninterrupted)


def test_two_interruptions_in_a_row_then_restart_matches(
    workdir: Path, dataset: Path, uninterrupted: dict[str, torch.Tensor]
) -> None:
    # GIVEN a job interrupted after its first checkpoint, then restarted and interrupted again
    # while writing its step-6 checkpoint, in epoch 1
    assert run_training(workdir, dataset, sigterm_on=r"checkpoint ckpt-000000003\.pt written") == 143
    second = run_training(workdir, dataset, sigterm_on=r"writing checkpoint ckpt-000000006\.pt")
    assert second == contract.INTERRUPTED_EXIT_CODE
    assert checkpoint_steps(workdir)[-1] >= 6
    # WHEN it restarts a second time
    assert run_training(workdir, dataset) == 0
    # THEN it still ends where the uninterrupted run did
    assert (workdir / "stderr.log").read_text().count("resumed from") == 2
    assert_bit_equal(final_weights(workdir), uninterrupted)


def test_torn_newest_checkpoint_falls_back_to_the_previous_one(
    workdir: Path, dataset: Path, uninterrupted: dict[str, torch.Tensor]
) -> None:
    # GIVEN an interrupted job whose newest checkpoint was torn (cut short) on its way to storage
    assert run_training(workdir, dataset, sigterm_on=r"checkpoint ckpt-000000004\.pt written") == 143
    steps = checkpoint_steps(workdir)
    assert len(steps) == 2
    newest = workdir / "checkpoints" / JOB / contract.DEFAULT_HOST / contract.checkpoint_name(steps[-1])
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    # WHEN it restarts
    assert run_training(workdir, dataset) == 0
    # THEN it resumed from the previous checkpoint and still matches the uninterrupted run
    log = (workdir / "stderr.log").read_text()
    assert "is unusable" in log
    assert f"resumed from {contract.checkpoint_name(steps[0])}" in log
    assert_bit_equal(final_weights(workdir), uninterrupted)


def tensor_record(base: Path) -> dict[str, object]:
    """What the rules read from a job's Debugger tensors: the steps of each mode and every saved loss
    and gradient summary, by global step."""
    os.environ.setdefault("SMDEBUG_TRAINING_END_DELAY_REFRESH", "0")
    trial = create_trial(str(base / "output" / "data" / contract.TENSORS_DIRNAME))
    values = {}
    for name in trial.tensor_names(collection="losses"):
        values[name] = {step: float(trial.tensor(name).value(step)) for step in trial.tensor(name).steps()}
    for name in trial.tensor_names(collection="gradients"):
        tensor = trial.tensor(name)
        values[name] = {step: float(tensor.reduction_value(step, "l2", abs=False)) for step in tensor.steps()}
    return {
        "steps": trial.steps(),
        "train": trial.steps(mode=modes.TRAIN),
        "eval": trial.steps(mode=modes.EVAL),
        "values": values,
    }


@pytest.fixture(scope="module")
def uninterrupted_hooked(tmp_path_factory: pytest.TempPathFactory, dataset: Path) -> Path:
    base = tmp_path_factory.mktemp("uninterrupted-hooked")
    assert run_training(base, dataset, args=HOOKED_ARGS, job_name=None) == 0
    return base


def test_restart_with_the_debug_hook_on_continues_its_tensors(
    workdir: Path, dataset: Path, uninterrupted: dict[str, torch.Tensor], uninterrupted_hooked: Path
) -> None:
    # GIVEN a container run outside SageMaker with the Debugger hook on, interrupted after its step-3
    # checkpoint: its tensors so far are on disk, and smdebug marked them ended when the process exited
    trigger = r"checkpoint ckpt-000000003\.pt written"
    assert run_training(workdir, dataset, sigterm_on=trigger, args=HOOKED_ARGS, job_name=None) == 143
    tensors = workdir / "output" / "data" / contract.TENSORS_DIRNAME
    assert (tensors / "training_job_end.ts").exists()
    # WHEN it restarts in the same directory
    assert run_training(workdir, dataset, args=HOOKED_ARGS, job_name=None) == 0
    # THEN its weights equal the uninterrupted run's, and so do the tensors the rules read
    assert "resumed from" in (workdir / "stderr.log").read_text()
    assert_bit_equal(final_weights(workdir), uninterrupted)
    assert tensor_record(workdir) == tensor_record(uninterrupted_hooked)


def test_killed_job_with_the_debug_hook_on_restarts(
    workdir: Path, dataset: Path, uninterrupted: dict[str, torch.Tensor], uninterrupted_hooked: Path
) -> None:
    # GIVEN a SageMaker job with the hook on killed without warning after its step-3 checkpoint:
    # tensors of steps past that checkpoint may be on disk, and smdebug's claim file is left behind
    trigger = r"checkpoint ckpt-000000003\.pt written"
    killed = run_training(workdir, dataset, sigterm_on=trigger, args=HOOKED_ARGS, signum=signal.SIGKILL)
    assert killed == -signal.SIGKILL
    newest = checkpoint_steps(workdir)[-1]
    assert newest >= 3
    before = len((workdir / "stderr.log").read_text())
    # WHEN it restarts in the same directory
    assert run_training(workdir, dataset, args=HOOKED_ARGS) == 0
    # THEN it resumed from the newest checkpoint the killed run left (a restart from scratch with the
    # same seed would end with the same weights), and ends as the uninterrupted run did, tensors included
    restart = (workdir / "stderr.log").read_text()[before:]
    resumed = re.findall(r"resumed from (ckpt-\d{9}\.pt) at epoch \d+ batch \d+ \(step (\d+)\)", restart)
    assert resumed == [(contract.checkpoint_name(newest), str(newest))], restart[-2000:]
    assert_bit_equal(final_weights(workdir), uninterrupted)
    assert tensor_record(workdir) == tensor_record(uninterrupted_hooked)


def test_finished_job_with_the_debug_hook_on_runs_again_in_place(
    workdir: Path, dataset: Path, uninterrupted: dict[str, torch.Tensor], uninterrupted_hooked: Path
) -> None:
    # GIVEN the /opt/ml of a container run outside SageMaker that finished with the hook on
    shutil.copytree(uninterrupted_hooked, workdir, dirs_exist_ok=True)
    assert (workdir / "output" / "data" / contract.TENSORS_DIRNAME / "training_job_end.ts").exists()
    # WHEN the container runs again there
    assert run_training(workdir, dataset, args=HOOKED_ARGS, job_name=None) == 0
    # THEN it resumes from the final checkpoint and leaves the same model and tensors
    assert "resumed from" in (workdir / "stderr.log").read_text()
    assert_bit_equal(final_weights(workdir), uninterrupted)
    assert tensor_record(workdir) == tensor_record(uninterrupted_hooked)


def test_a_prefetching_loader_trains_and_resumes_as_the_plain_one(
    workdir: Path, dataset: Path, uninterrupted: dict[str, torch.Tensor]
) -> None:
    # GIVEN the job with its batches prepared two ahead by a loader thread, interrupted mid-epoch while
    # that thread had batches ready that the step never took
    prefetching = [*ARGS, "--prefetch-batches", "2"]
    trigger = r"checkpoint ckpt-000000003\.pt written"
    assert run_training(workdir, dataset, sigterm_on=trigger, args=prefetching) == 143
    # WHEN it restarts
    assert run_training(workdir, dataset, args=prefetching) == 0
    # THEN it resumed at the step its checkpoint took, and ends bit for bit where the plain run did
    assert "resumed from" in (workdir / "stderr.log").read_text()
    assert_bit_equal(final_weights(workdir), uninterrupted)


def test_channels_last_trains_and_resumes_bit_for_bit(workdir: Path, dataset: Path, tmp_path: Path) -> None:
    # GIVEN the job with the model and its batches in channels-last memory (bfloat16 named for the GPU;
    # on a CPU mixed precision stays off), run once without a stop
    recipe = [*ARGS, "--channels-last", "true", "--amp-dtype", "bfloat16"]
    assert run_training(tmp_path / "uninterrupted", dataset, args=recipe) == 0
    # WHEN it is interrupted after a checkpoint and restarted
    trigger = r"checkpoint ckpt-000000003\.pt written"
    assert run_training(workdir, dataset, sigterm_on=trigger, args=recipe) == 143
    assert run_training(workdir, dataset, args=recipe) == 0
    # THEN it ends where the uninterrupted run did, and its weights load as any model's (NCHW for serving)
    assert_bit_equal(final_weights(workdir), final_weights(tmp_path / "uninterrupted"))
    assert all(t.is_contiguous() for t in final_weights(workdir).values())
