"""train.py and evaluate.py end to end as SageMaker runs them: outputs, metric lines, failures."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from retrain_contract import container as contract
from retrain_contract import serving
from retrain_training import models

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CODE = REPO / "training_image"
HYPERPARAMETERS = {
    "model": "resnet18",
    "pretrained": "resnet18-imagenet.pth",
    "epochs": "2",
    "batch-size": "8",
    "image-size": "32",
    "checkpoint-every-steps": "2",
    "freeze-backbone-epochs": "1",
    "debug-interval": "1",
    "profile-interval-ms": "100",
}


def write_images(root: Path) -> None:
    """Red, green and blue squares with noise: learnable, so accuracy means something."""
    rng = np.random.default_rng(0)
    for channel, label in enumerate(("blue", "green", "red")[::-1]):
        (root / label).mkdir(parents=True)
        for i in range(12):
            pixels = rng.integers(0, 80, size=(32, 40, 3), dtype=np.uint8)
            pixels[..., channel] += 170
            Image.fromarray(pixels).save(root / label / f"{i:02d}.jpg")


def run(program: str, base: Path, args: list[str], **channels: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        contract.BASE_DIR_ENV: str(base),
        contract.JOB_NAME_ENV: "outputs-test",
        "OMP_NUM_THREADS": "1",
    }
    env.update({contract.CHANNEL_ENV_PREFIX + name.upper(): str(path) for name, path in channels.items()})
    return subprocess.run(
        [sys.executable, str(CODE / program), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def as_args(hyperparameters: dict[str, str]) -> list[str]:
    return [part for name, value in hyperparameters.items() for part in (f"--{name}", value)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    base = tmp_path_factory.mktemp("job")
    data = base / "input" / "data" / "train"
    write_images(data)
    pretrained = base / "input" / "data" / "pretrained"
    pretrained.mkdir()
    torch.save(models.build_model("resnet18", 1000).state_dict(), pretrained / HYPERPARAMETERS["pretrained"])
    result = run("train.py", base, as_args(HYPERPARAMETERS))
    return base, data, result


def test_training_writes_the_model_labels_config_and_handler_only_in_the_model_dir(trained) -> None:  # type: ignore[no-untyped-def]
    base, _, result = trained
    assert result.returncode == 0, result.stderr[-3000:]
    model_dir = base / "model"
    assert sorted(p.name for p in model_dir.iterdir()) == sorted(
        [contract.MODEL_FILE, contract.LABELS_FILE, contract.CONFIG_FILE, serving.CODE_DIR]
    )
    assert (model_dir / serving.CODE_DIR / serving.PROGRAM).is_file()
    artifact = torch.load(model_dir / contract.MODEL_FILE, weights_only=True)
    assert (artifact["arch"], artifact["labels"]) == ("resnet18", ["blue", "green", "red"])
    assert artifact["state_dict"]["fc.weight"].shape == (3, 512)
    assert json.loads((model_dir / contract.LABELS_FILE).read_text()) == ["blue", "green", "red"]
    config = json.loads((model_dir / contract.CONFIG_FILE).read_text())
    assert set(config["hyperparameters"]) == set(contract.HYPERPARAMETER_NAMES)
    assert config["hyperparameters"]["freeze-backbone-epochs"] == 1
    assert not (base / "output" / contract.FAILURE_FILE).exists()


def test_every_metric_is_printed_in_a_line_tuning_can_parse(trained) -> None:  # type: ignore[no-untyped-def]
    _, _, result = trained
    lines = result.stdout.splitlines()
    for definition in contract.METRIC_DEFINITIONS:
        values = [float(m.group(1)) for line in lines if (m := re.search(definition["Regex"], line))]
        assert len(values) >= 2, definition["Name"]  # one per epoch at least
    # (smdebug logs to stdout too; the regexes must pick out only our lines, each with epoch and step)
    matched = [
        line for line in lines if any(re.search(d["Regex"], line) for d in contract.METRIC_DEFINITIONS)
    ]
    assert [line for line in matched if not re.match(r"^epoch=\d+ step=\d+ [a-z0-9-]+: \S+$", line)] == []


PHASES = re.compile(r"job phases \(s\): (?P<phases>.+); fixed cost (?P<fixed>[\d.]+) of (?P<total>[\d.]+)$")


def test_the_job_logs_what_each_phase_cost_besides_its_training(trained) -> None:  # type: ignore[no-untyped-def]
    _, _, result = trained
    found = [m for line in result.stderr.splitlines() if (m := PHASES.search(line))]
    assert len(found) == 1, result.stderr[-3000:]
    phases = {
        name: float(seconds)
        for name, seconds in (part.rsplit(" ", 1) for part in found[0]["phases"].split(", "))
    }
    # every phase of a job, in the order it ran
    assert list(phases) == [
        "start-up",
        "process group",
        "data",
        "model",
        "loaders",
        "resume",
        "first step",
        "checkpoints",
        "validation",
        "training",
        "model write",
    ]
    assert all(seconds >= 0 for seconds in phases.values())
    assert phases["start-up"] > 0.5  # the interpreter and torch's import, at least
    fixed, total = float(found[0]["fixed"]), float(found[0]["total"])
    rounding = 0.005 * (len(phases) + 1)  # each figure is rounded to 0.01 on its own
    assert fixed == pytest.approx(total - phases["training"], abs=rounding)
    assert total == pytest.approx(sum(phases.values()), abs=rounding)


def test_debugger_tensors_and_system_profile_are_written(trained) -> None:  # type: ignore[no-untyped-def]
    base, _, _ = trained
    assert any((base / "output" / "data" / contract.TENSORS_DIRNAME).rglob("*.tfevents"))
    assert any((base / "output" / "data" / contract.PROFILE_DIRNAME).iterdir())


def test_evaluation_of_the_model_archive_against_a_checkpoint_baseline(trained, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the job's model.tar.gz (as SageMaker uploads it) and one of its checkpoints as baseline
    base, data, _ = trained
    with tarfile.open(tmp_path / "model.tar.gz", "w:gz") as tar:
        for file in (base / "model").iterdir():
            tar.add(file, arcname=file.name)
    checkpoint = sorted((base / "checkpoints" / "outputs-test" / contract.DEFAULT_HOST).glob("ckpt-*.pt"))[0]
    # WHEN evaluate.py runs on every image
    out = tmp_path / "evaluation"
    args = ["--model", str(tmp_path), "--data", str(data), "--split", "all", "--baseline", str(checkpoint)]
    result = run("evaluate.py", base, [*args, "--output", str(out)])
    # THEN it reports the contract's keys for both models over the same 36 images, and a chart
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / contract.EVALUATION_FILE).read_text())
    assert report["samples"] == report["baseline"]["samples"] == 36
    assert report["labels"] == ["blue", "green", "red"]
    assert sum(map(sum, report["confusion_matrix"])) == 36
    assert set(report["per_class"]["red"]) == {"precision", "recall", "support"}
    assert 0 <= report["top1"] <= report["top3"] <= 1
    assert report["checkpoint_step"] is None
    assert (out / contract.CONFUSION_MATRIX_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_images_of_a_label_the_model_lacks_count_as_wrong(trained, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the trained model (blue, green, red) and its data plus a label it never saw, as when a data set
    # gains a label after its champion was trained
    base, data, _ = trained
    grown = tmp_path / "data"
    shutil.copytree(data, grown)
    (grown / "yellow").mkdir()
    for i in range(4):
        Image.new("RGB", (32, 32), (230, 230, 20)).save(grown / "yellow" / f"{i}.jpg")
    # WHEN evaluate.py scores it on every image
    out = tmp_path / "evaluation"
    args = ["--model", str(base / "model"), "--data", str(grown), "--split", "all", "--output", str(out)]
    result = run("evaluate.py", base, args)
    # THEN the new label's images are scored, and can only be wrong
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / contract.EVALUATION_FILE).read_text())
    assert report["samples"] == 40
    assert report["labels"] == ["blue", "green", "red", "yellow"]
    assert report["labels_the_model_lacks"] == ["yellow"]
    assert report["per_class"]["yellow"] == {"precision": 0.0, "recall": 0.0, "support": 4}
    assert report["top1"] <= 36 / 40
    assert "count as wrong" in result.stderr


def test_evaluation_of_a_checkpoint_reports_its_step(trained, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base, data, _ = trained
    checkpoint = sorted((base / "checkpoints" / "outputs-test" / contract.DEFAULT_HOST).glob("ckpt-*.pt"))[-1]
    result = run(
        "evaluate.py", base, ["--model", str(checkpoint), "--data", str(data), "--output", str(tmp_path)]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / contract.EVALUATION_FILE).read_text())
    assert report["checkpoint_step"] == int(checkpoint.name[5:14])
    assert report["baseline"] is None
    assert report["split"] == "validation"
    assert 0 < report["samples"] < 36


def test_one_label_fails_with_a_reason_in_the_failure_file(tmp_path: Path) -> None:
    # GIVEN a train channel with a single label
    data = tmp_path / "input" / "data" / "train"
    write_images(data)
    for label in ("blue", "green"):
        for file in (data / label).iterdir():
            file.unlink()
        (data / label).rmdir()
    # WHEN training runs THEN it exits non-zero with a one-line reason for FailureReason
    result = run("train.py", tmp_path, ["--epochs", "1", "--debug-hook", "false"])
    assert result.returncode == 1
    reason = (tmp_path / "output" / contract.FAILURE_FILE).read_text()
    assert "at least two labels" in reason
    assert reason.count("\n") == 1


def test_an_invalid_hyperparameter_fails_with_a_reason(tmp_path: Path) -> None:
    result = run("train.py", tmp_path, ["--model", "vgg16"])
    assert result.returncode != 0
    assert "invalid hyperparameters" in (tmp_path / "output" / contract.FAILURE_FILE).read_text()


def test_evaluating_a_missing_model_fails_with_a_reason(tmp_path: Path) -> None:
    result = run("evaluate.py", tmp_path, ["--model", str(tmp_path / "absent"), "--data", str(tmp_path)])
    assert result.returncode == 1
    assert "does not exist" in (tmp_path / "output" / contract.FAILURE_FILE).read_text()


def test_no_validation_images_fails_before_training(tmp_path: Path) -> None:
    # GIVEN images but a val-fraction of 0 and no validation channel
    write_images(tmp_path / "input" / "data" / "train")
    # WHEN training runs THEN it refuses: tuning's objective metric would never be printed
    result = run("train.py", tmp_path, ["--val-fraction", "0", "--debug-hook", "false"])
    assert result.returncode == 1
    assert "no validation images" in (tmp_path / "output" / contract.FAILURE_FILE).read_text()


def _champion_archive(model_dir: Path, into: Path) -> Path:
    """The model dir as SageMaker packs it: model.tar.gz (a data set's champion)."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(into / "model.tar.gz", "w:gz") as tar:
        for path in sorted(model_dir.iterdir()):
            tar.add(path, arcname=path.name)
    return into


def test_a_run_with_a_new_label_fine_tunes_from_the_champion(trained, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the trained job's model.tar.gz as the pretrained channel, and data with a fourth label
    base, _, result = trained
    assert result.returncode == 0, result.stderr[-3000:]
    champion = torch.load(base / "model" / contract.MODEL_FILE, weights_only=True)
    job = tmp_path / "job"
    train = job / "input" / "data" / "train"
    write_images(train)
    (train / "yellow").mkdir()
    for i in range(12):
        Image.new("RGB", (32, 40), (230, 230, 20 + i)).save(train / "yellow" / f"{i:02d}.jpg")
    _champion_archive(base / "model", job / "input" / "data" / "pretrained")
    # WHEN the next run starts from it with the backbone frozen for its only epoch
    args = {**HYPERPARAMETERS, "pretrained": "model.tar.gz", "epochs": "1", "freeze-backbone-epochs": "1"}
    finished = run("train.py", job, as_args(args))
    # THEN it trains four labels, the backbone is the champion's, and the old classes kept their rows
    # in the head (they trained on, so they moved from the champion's only a little)
    assert finished.returncode == 0, finished.stderr[-3000:]
    artifact = torch.load(job / "model" / contract.MODEL_FILE, weights_only=True)
    assert artifact["labels"] == ["blue", "green", "red", "yellow"]
    state, old = artifact["state_dict"], champion["state_dict"]
    assert torch.equal(state["layer1.0.conv1.weight"], old["layer1.0.conv1.weight"])
    kept = torch.nn.functional.cosine_similarity(state["fc.weight"][:3], old["fc.weight"], dim=1)
    assert bool((kept > 0.9).all()), kept


def test_weights_of_another_architecture_fail_the_job_naming_both(trained, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base, _, result = trained
    assert result.returncode == 0, result.stderr[-3000:]
    job = tmp_path / "job"
    write_images(job / "input" / "data" / "train")
    _champion_archive(base / "model", job / "input" / "data" / "pretrained")
    args = {**HYPERPARAMETERS, "model": "resnet34", "pretrained": "model.tar.gz", "epochs": "1"}
    finished = run("train.py", job, as_args(args))
    assert finished.returncode != 0
    failure = (job / "output" / contract.FAILURE_FILE).read_text()
    assert "are a resnet18 and this job trains a resnet34" in failure


def test_a_first_run_fine_tunes_the_images_imagenet_weights_for_at_least_min_steps(tmp_path: Path) -> None:
    # GIVEN 36 images in three labels, no pretrained channel, and the recipe of a run from ImageNet:
    # the image's own weights, the backbone's BatchNorm statistics kept, at least 12 optimizer steps
    job = tmp_path / "job"
    write_images(job / "input" / "data" / "train")
    args = {
        **HYPERPARAMETERS,
        "model": contract.MODEL_EFFICIENTNET_LITE0,
        "pretrained": contract.PRETRAINED_IMAGENET,
        "freeze-backbone-epochs": "0",
        "backbone-lr-factor": "0.1",
        "batchnorm": contract.BATCHNORM_FROZEN,
        "min-steps": "12",
        "debug-hook": "false",
    }
    # WHEN the job trains its 2 epochs
    finished = run("train.py", job, as_args(args))
    # THEN each epoch passed over its images twice: once makes 3 steps of 8 (6 in the job), twice 7
    assert finished.returncode == 0, finished.stderr[-3000:]
    config = json.loads((job / "model" / contract.CONFIG_FILE).read_text())
    assert (config["train_images"], config["train_repeats"], config["steps"]) == (29, 2, 14)
    # AND it started from the installed ImageNet backbone: its weights trained on, its BatchNorm
    # statistics are ImageNet's still, and the head is new (three labels, not ImageNet's 1,000)
    imagenet = models.read_state_dict(models.imagenet_weights(contract.MODEL_EFFICIENTNET_LITE0))
    state = torch.load(job / "model" / contract.MODEL_FILE, weights_only=True)["state_dict"]
    statistics = [k for k in imagenet if k.endswith(("running_mean", "running_var"))]
    assert statistics and all(torch.equal(state[k], imagenet[k]) for k in statistics)
    convolution = "_conv_stem.weight"
    assert not torch.equal(state[convolution], imagenet[convolution])
    assert torch.allclose(state[convolution], imagenet[convolution], atol=0.05)
    assert state["_fc.weight"].shape[0] == 3


def test_imagenet_weights_of_an_architecture_the_image_lacks_fail_the_job_naming_it(tmp_path: Path) -> None:
    job = tmp_path / "job"
    write_images(job / "input" / "data" / "train")
    args = {**HYPERPARAMETERS, "pretrained": contract.PRETRAINED_IMAGENET, "epochs": "1"}
    finished = run("train.py", job, as_args(args))
    assert finished.returncode != 0
    failure = (job / "output" / contract.FAILURE_FILE).read_text()
    assert "no ImageNet weights of resnet18" in failure and contract.MODEL_EFFICIENTNET_LITE0 in failure
