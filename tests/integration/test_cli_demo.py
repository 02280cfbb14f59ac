"""`retrain demo --json` end to end on the embedded stack, as `make demo` runs it (a small image set)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from retrain.demo import DEMO_PARAMETERS
from retrain.demo_data import write_digits, write_mistakes
from retrain.summary import SUMMARY_KEYS

pytestmark = [pytest.mark.slow, pytest.mark.integration]
REPO_ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_demo_runs_the_whole_flow_and_prints_the_summary(tmp_path):
    # GIVEN a small labelled image set with two user mistakes in it
    images = tmp_path / "images"
    write_digits(images, limit=60)
    note, empty = write_mistakes(images)
    # WHEN the demo runs on it with one spot interruption per training job
    result = subprocess.run(
        [sys.executable, "-m", "retrain.cli", "demo", "--images", str(images), "--json", "--interrupt", "1",
         "--timeout", "20", "--state-dir", str(tmp_path / "state")],
        cwd=tmp_path, capture_output=True, text=True, timeout=25 * 60, check=False,
    )  # fmt: skip
    # THEN the run finished (gate passed or not) and the one JSON object has the keys
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert tuple(summary) == SUMMARY_KEYS
    assert summary["status"] in ("SUCCEEDED", "REJECTED")
    # AND the uploads were judged: 60 accepted, the two mistakes rejected with reasons
    assert summary["accepted"] == 60
    rejected = {r["key"]: r["reason"] for r in summary["rejected"]}
    assert set(rejected) == {f"data/digits/{p.relative_to(images).as_posix()}" for p in (note, empty)}
    assert all(rejected.values())
    # AND tuning ran trials, spot interrupted them and they resumed from checkpoints
    assert (
        summary["tuning"]["jobs"] == int(DEMO_PARAMETERS["MaxTuningJobs"]) and summary["tuning"]["best_job"]
    )
    assert summary["training"]["interruptions"] >= 1
    assert summary["training"]["resumed_at_steps"]
    assert summary["training"]["billable_seconds"] <= summary["training"]["training_seconds"]
    # AND the rules, evaluation and gate are reported, with the report and its charts on disk
    assert summary["rules"] and summary["evaluation"]["top1"] is not None
    assert summary["gate"]["reason"]
    report = tmp_path / summary["report"]
    assert report.is_file()
    assert (report.parent / "loss_curves.png").read_bytes()[:8] == PNG_MAGIC
