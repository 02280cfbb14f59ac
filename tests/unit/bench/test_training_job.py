"""bench.training_job: the one way the benchmarks run train.py as SageMaker does."""

from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path

import pytest

from bench import training_job
from retrain_contract import container as contract

# A stand-in for train.py: prints a metric line per epoch and what it was given, logs to stderr.
FAKE_PROGRAM = """
import json, os, sys, time
from retrain_contract import container as contract
for epoch in range(2):
    print(contract.format_metric(contract.METRIC_VAL_ACCURACY, 0.5 + epoch / 4, epoch=epoch, step=3 * epoch))
print(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}))
print("a log line", file=sys.stderr)
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@pytest.fixture
def fake_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    program = tmp_path / "code" / contract.PROGRAM
    program.parent.mkdir()
    program.write_text(FAKE_PROGRAM, encoding="utf-8")
    monkeypatch.setattr(training_job, "PROGRAM", program)
    return program


def test_the_job_gets_sagemakers_environment_flags_and_paths(tmp_path: Path) -> None:
    # GIVEN a job with two channels, an instance of one CPU and one thread
    job = training_job.TrainingJob(
        tmp_path / "ml",
        {contract.HP_EPOCHS: "2", contract.HP_LR: "0.01"},
        {contract.CHANNEL_TRAIN: tmp_path / "data", contract.CHANNEL_PRETRAINED: tmp_path / "start"},
        name="bench-test",
        cpus=1,
        threads=1,
        environment={"EXTRA": "yes"},
    )
    # WHEN its environment and command are built
    env = job.env()
    # THEN SageMaker's variables name its directories, the image's code comes first on PYTHONPATH
    assert env[contract.BASE_DIR_ENV] == str(tmp_path / "ml")
    assert env[contract.JOB_NAME_ENV] == "bench-test"
    assert env["SM_CHANNEL_TRAIN"] == str(tmp_path / "data")
    assert env["SM_CHANNEL_PRETRAINED"] == str(tmp_path / "start")
    assert env[contract.NUM_CPUS_ENV] == "1"
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["EXTRA"] == "yes"
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(d) for d in training_job.CODE_DIRS]
    # AND the hyperparameters are flags in their order, after train.py, held to one CPU on a larger machine
    command = job.command()
    assert command[-5:] == [str(training_job.PROGRAM), "--epochs", "2", "--lr", "0.01"]
    assert (command[:3] == ["taskset", "-c", "0-0"]) == ((os.cpu_count() or 1) > 1) == job.pinned
    # AND its paths are the contract's, under its base
    assert job.paths.model_dir == tmp_path / "ml" / "model"
    assert job.paths.output_data_dir == tmp_path / "ml" / "output" / "data"
    assert job.paths.channels[contract.CHANNEL_TRAIN] == tmp_path / "data"


def test_a_job_without_cpus_or_threads_leaves_them_to_the_caller(tmp_path: Path) -> None:
    job = training_job.TrainingJob(tmp_path, {})
    assert job.env().get(contract.NUM_CPUS_ENV) == os.environ.get(contract.NUM_CPUS_ENV)
    assert job.env().get("OMP_NUM_THREADS") == os.environ.get("OMP_NUM_THREADS")
    assert job.command() == [sys.executable, str(training_job.PROGRAM)]
    assert job.env()[contract.JOB_NAME_ENV] == contract.DEFAULT_JOB_NAME


def test_run_returns_the_output_metrics_and_time(tmp_path: Path, fake_program: Path) -> None:
    job = training_job.TrainingJob(tmp_path / "ml", {contract.HP_SEED: "7"}, name="bench-test")
    seen: list[int] = []
    done = training_job.run(job, watch=lambda process: seen.append(process.pid))
    assert done.check("fake") is done and not done.failed
    assert [p.value for p in done.metrics()[contract.METRIC_VAL_ACCURACY]] == [0.5, 0.75]
    assert [p.step for p in done.metrics()[contract.METRIC_VAL_ACCURACY]] == [0, 3]
    assert '"argv": ["--seed", "7"]' in done.stdout
    assert "a log line" in done.stderr
    assert done.seconds > 0 and len(seen) == 1


def test_a_failed_job_raises_with_the_end_of_its_log(
    tmp_path: Path, fake_program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_EXIT", "3")
    done = training_job.run(training_job.TrainingJob(tmp_path, {}))
    assert done.failed and done.returncode == 3
    with pytest.raises(RuntimeError, match=r"job x: train.py exited 3:\na log line"):
        done.check("job x")


def test_a_job_past_its_time_cap_is_stopped(
    tmp_path: Path, fake_program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SLEEP", "60")
    done = training_job.run(training_job.TrainingJob(tmp_path, {}, max_runtime_s=3))
    assert done.timed_out and done.failed and done.seconds < 30
    with pytest.raises(RuntimeError, match="ran past 3 s"):
        done.check("slow")


def test_pack_makes_the_model_archive_of_a_model_dir(tmp_path: Path) -> None:
    model = tmp_path / "model"
    (model / "code").mkdir(parents=True)
    (model / contract.MODEL_FILE).write_bytes(b"weights")
    (model / "code" / "inference.py").write_text("", encoding="utf-8")
    archive = training_job.pack(model, tmp_path / "channel")
    assert archive == tmp_path / "channel" / "model.tar.gz"
    with tarfile.open(archive) as tar:
        assert {m.name for m in tar.getmembers() if m.isfile()} == {contract.MODEL_FILE, "code/inference.py"}
