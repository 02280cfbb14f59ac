"""`retrain demo --images DIR --json` end to end on the embedded stack: a user's small folder of photos,
with files the control plane refuses for their place or their content."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from controller import tracking
from retrain.demo.data import write_mistakes, write_photos
from retrain.demo.flow import PHOTO_PARAMETERS
from retrain.embedded.mlflow_app import store_uri
from retrain.report.summary import SUMMARY_KEYS
from retrain_contract import rules

pytestmark = [pytest.mark.slow, pytest.mark.integration]
REPO_ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LABELS = ("cat", "coffee", "rocket")


def _refused_for_content(images: Path) -> list[Path]:
    """Two files that look like images by their names: a cut-off JPEG and text named .jpg."""
    truncated, text = images / "cat" / "cut-off.jpg", images / "coffee" / "notes.jpg"
    truncated.write_bytes((images / "cat" / "crop-000.jpg").read_bytes()[:300])
    text.write_text("not a photo\n", encoding="utf-8")
    return [truncated, text]


def test_demo_runs_the_whole_flow_and_prints_the_summary(tmp_path):
    # GIVEN a small folder of photos in three labels, two misplaced files and two that look like images
    # but are not (the demo counts 38 likely images; the control plane accepts 36)
    images = tmp_path / "images"
    write_photos(images, per_class=12, size=64, classes=LABELS)
    mistakes = [*write_mistakes(images), *_refused_for_content(images)]
    # WHEN the demo runs on it with one spot interruption per training job, at 64 pixels
    result = subprocess.run(
        [sys.executable, "-m", "retrain.cli", "demo", "--images", str(images), "--json", "--interrupt", "1",
         "--parameter", "ImageSize=64", "--timeout", "20", "--state-dir", str(tmp_path / "state")],
        cwd=tmp_path, capture_output=True, text=True, timeout=25 * 60, check=False,
    )  # fmt: skip
    # THEN the run started once every upload was recorded (by hand: fewer than the likely images were
    # accepted), finished, and the one JSON object has the issue's keys and the run's lineage
    assert result.returncode == 0, result.stderr[-3000:]
    assert "4 of 40 uploads were refused, so fewer than MinNewImages (38) are pending" in result.stderr
    document = json.loads(result.stdout)
    runs = document.pop("runs")
    assert tuple(document) == SUMMARY_KEYS
    summary = document
    assert summary["run_id"].startswith("manual-digits-")
    assert summary["started_from"]["kind"] == "imagenet"
    assert [(r["run_id"], r["started_from"]["kind"]) for r in runs] == [(summary["run_id"], "imagenet")]
    # AND the uploads were judged: 36 accepted, the four mistakes rejected with reasons
    assert summary["accepted"] == 36
    rejected = {r["key"]: r["reason"] for r in summary["rejected"]}
    assert set(rejected) == {f"data/digits/{p.relative_to(images).as_posix()}" for p in mistakes}
    assert all(rejected.values())
    # AND tuning ran trials, spot interrupted them and they resumed from checkpoints
    assert (
        summary["tuning"]["jobs"] == int(PHOTO_PARAMETERS["MaxTuningJobs"]) and summary["tuning"]["best_job"]
    )
    assert summary["training"]["interruptions"] >= 1
    assert summary["training"]["resumed_at_steps"]
    assert summary["training"]["billable_seconds"] <= summary["training"]["training_seconds"]
    # AND the stack's default gate (BlockingRules at the template's default) registered the model: a
    # fine-tune from ImageNet converges, and its rules judge the training, not its convergence
    assert summary["status"] == "SUCCEEDED", (summary["gate"], summary["rules"])
    assert summary["gate"]["passed"] and summary["model_package"]
    assert not [r for r in summary["rules"] if r["status"] != rules.NO_ISSUES and r["action"] == rules.BLOCK]
    assert summary["evaluation"]["top1"] is not None
    report = tmp_path / summary["report"]
    assert report.is_file()
    assert (report.parent / "loss_curves.png").read_bytes()[:8] == PNG_MAGIC
    # AND the run is in MLflow: its parent run, whose artifacts hold the report and its charts, a child per
    # trial, read with MLflow's client from the state directory's store; nothing was left untracked
    assert summary["mlflow"]["warnings"] == []
    _the_run_and_its_report_are_in_mlflow(tmp_path / "state", summary)
    # AND the registered model serves: its endpoint names new crops of the three photographs
    _the_champion_names_photos_it_never_saw(tmp_path, summary["model_package"])


def _the_champion_names_photos_it_never_saw(tmp_path: Path, package: str) -> None:
    unseen = write_photos(tmp_path / "unseen", per_class=2, size=64, classes=LABELS, seed=7)
    result = subprocess.run(
        [sys.executable, "-m", "retrain.cli", "predict", "--approve", "--json", "--top-k", "1",
         "--dataset", "digits", "--state-dir", str(tmp_path / "state"), *map(str, unseen.files)],
        cwd=tmp_path, capture_output=True, text=True, timeout=10 * 60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    answered = json.loads(result.stdout)
    assert answered["model_package_arn"] == package
    named = [Path(a["image"]).parent.name == a["predictions"][0]["label"] for a in answered["images"]]
    assert sum(named) >= len(named) - 1, answered["images"]


def _the_run_and_its_report_are_in_mlflow(state: Path, summary: dict) -> None:  # type: ignore[type-arg]
    client = MlflowClient(tracking_uri=store_uri(state))
    parent = client.get_run(summary["mlflow"]["run_id"])
    assert parent.data.tags[tracking.TAG_RUN] == summary["run_id"]
    assert parent.data.params["started_from"] == "imagenet"
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.`{tracking.TAG_PARENT}` = '{parent.info.run_id}'"
    )
    assert len(children) == int(PHOTO_PARAMETERS["MaxTuningJobs"])
    # the artifacts live in the stack's S3 (the app's artifact store), saved with the state directory
    bucket = parent.info.artifact_uri.removeprefix("s3://").split("/", 1)[0]
    prefix = parent.info.artifact_uri.removeprefix(f"s3://{bucket}/")
    index = json.loads((state / "snapshot" / "s3" / bucket / "index.json").read_text(encoding="utf-8"))
    logged = {e["Key"].removeprefix(prefix + "/") for e in index if e["Key"].startswith(prefix + "/")}
    assert {"report/report.md", "report/loss_curves.png", tracking.EVALUATION_ARTIFACT} <= logged


def test_a_demo_of_files_the_control_plane_refuses_all_ends_at_once_with_their_reasons(tmp_path):
    # GIVEN a folder whose every file looks like an image by its name but is not one
    images = tmp_path / "images"
    (images / "cat").mkdir(parents=True)
    (images / "cat" / "a.jpg").write_bytes(b"\xff\xd8\xff\xe0 cut off")
    (images / "cat" / "b.png").write_text("a note, named like a picture\n", encoding="utf-8")
    # WHEN the demo runs on it
    result = subprocess.run(
        [sys.executable, "-m", "retrain.cli", "demo", "--images", str(images), "--json",
         "--state-dir", str(tmp_path / "state")],
        cwd=tmp_path, capture_output=True, text=True, timeout=10 * 60, check=False,
    )  # fmt: skip
    # THEN it fails once both uploads are recorded, naming each and why, with nothing on stdout
    assert result.returncode != 0 and result.stdout == ""
    assert "none of the 2 uploads to data set 'digits' was accepted" in result.stderr
    assert "data/digits/cat/a.jpg: " in result.stderr and "data/digits/cat/b.png: " in result.stderr
