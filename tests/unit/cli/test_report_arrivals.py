"""The champion on a run's new uploads in the run's report and `--json` summary, and a run that ends
NOT_NEEDED (TrainWhen=drift) everywhere the CLI reads a run's status."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json

import boto3
import pytest
from moto import mock_aws
from PIL import Image
from rich.console import Console

from controller import names, runs
from retrain.commands._shared import console_for
from retrain.commands.report import finish
from retrain.demo import flow as demo
from retrain.deployment import connect
from retrain.errors import RunFailedError
from retrain.report.build import SUSPECTS_DIR, write_report
from retrain.report.collect import collect
from retrain.report.facts import REPORT_SUSPECTS
from retrain.report.summary import summary
from retrain_contract import container as contract
from tests.unit.cli import recorded_run
from tests.unit.cli.conftest import make_stack, recorded_deployment

DATASET, RUN_ID = recorded_run.DATASET, recorded_run.RUN_ID
ARRIVALS_PREFIX = names.evaluation_prefix(DATASET, RUN_ID, "arrivals")
ARTIFACTS = "retrain-artifacts-test"
JPEG_MAGIC = b"\xff\xd8\xff"
# the ranked suspects: two whose images are in the data bucket, then ones relabelled or deleted since
SHOWN = [
    {
        "key": "two/new-1.jpg",
        "given": "two",
        "suggested": "seven",
        "confidence": 0.97,
        "given_probability": 0.01,
    },
    {
        "key": "two/new-2.jpg",
        "given": "two",
        "suggested": "one",
        "confidence": 0.91,
        "given_probability": 0.04,
    },
]
GONE = [
    {"key": f"one/gone-{i:02d}.jpg", "given": "one", "suggested": "zero", "confidence": 0.8 - i / 1000,
     "given_probability": 0.1}
    for i in range(58)
]  # fmt: skip
SUSPECT_COUNT = len(SHOWN) + len(GONE)
REASON = (
    "drift: the champion's top-1 on 80 new uploads is 0.7500 (95% CI 0.5980-0.8580) against 0.9500 on "
    "60 validation images"
)


def arrivals(**changes: object) -> dict[str, object]:
    """The run record's `arrivals` as controller.arrivals writes it: a completed check, a sample."""
    section: dict[str, object] = {
        "job": "digits-r1-arrivals",
        "status": "Completed",
        "train_when": "drift",
        "suspect_labels": "keep",
        "decision": "train",
        "reason": REASON,
        "new_images": 120,
        "checked": 80,
        "sampled": True,
        "top1": 0.75,
        "top1_interval": [0.598, 0.858],
        "top3": 0.9,
        "validation_top1": 0.95,
        "validation_interval": [0.862, 0.983],
        "validation_images": 60,
        "drift": 0.2,
        "labels_the_model_lacks": [],
        "suspect_count": SUSPECT_COUNT,
        "suspect_rate": 0.75,
        "per_label": {
            "two": {"images": 10, "top1": 0.5, "suspects": 2},
            "one": {"images": 30, "top1": 0.8333, "suspects": 58},
        },
        "held": 0,
        "report_uri": f"s3://{ARTIFACTS}/{ARRIVALS_PREFIX}{contract.ARRIVALS_FILE}",
        "suspects_uri": f"s3://{ARTIFACTS}/{ARRIVALS_PREFIX}{contract.SUSPECTS_FILE}",
    }
    return {**section, **changes}


def _jpeg(size: tuple[int, int], colour: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="JPEG")
    return out.getvalue()


def _write_arrivals(stack: object, status: str = "SUCCEEDED", **changes: object) -> runs.RunRecord:
    """The recorded run with the champion's check on its new uploads: the record's section, suspects.json
    and the suspects' images in the data bucket."""
    run = recorded_run.write(stack, recorded_run.record(status, arrivals=arrivals(**changes)))
    s3 = boto3.client("s3")
    document = {"method": "confident learning", "images_checked": 80, "suspect_count": SUSPECT_COUNT,
                "suspects": SHOWN + GONE, "per_label": {}}  # fmt: skip
    s3.put_object(Bucket=ARTIFACTS, Key=ARRIVALS_PREFIX + contract.SUSPECTS_FILE, Body=json.dumps(document))
    for index, suspect in enumerate(SHOWN):
        body = _jpeg((640, 480), (200, 40 * index, 10))
        s3.put_object(
            Bucket="retrain-data-test", Key=names.dataset_prefix(DATASET) + suspect["key"], Body=body
        )
    return run


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The run collected and reported once for this module (collecting only reads)."""
    out_dir = tmp_path_factory.mktemp("arrivals")
    with mock_aws():
        stack = make_stack()
        run = _write_arrivals(stack)
        deployment = recorded_deployment(stack)
        facts = collect(deployment, run, out_dir=out_dir)
    path = write_report(facts, out_dir / "report")
    return facts, path.read_text(), path.parent


def _section(text: str) -> str:
    return text.split("## The champion on the new uploads", 1)[1].split("\n## ", 1)[0]


def test_the_report_shows_the_champions_figures_on_the_new_uploads_and_trainwhens_decision(built):
    # GIVEN a run whose champion was checked on a sample of its new uploads (TrainWhen=drift)
    _, text, _ = built
    # WHEN its report is written THEN a section gives top-1 with its interval, top-3, the validation top-1
    # beside it and the drift, says the figures are a sample's, and gives TrainWhen's decision and why
    section = _section(text)
    assert "Processing job `digits-r1-arrivals` (Completed)" in section
    assert (
        "| 80 of 120 | 0.7500 (95% CI 0.5980-0.8580) | 0.9000 | 0.9500 (95% CI 0.8620-0.9830) on 60 images "
        "| +0.2000 |" in section
    )
    assert "A stratified sample of 80 of the run's 120 new uploads was checked" in section
    assert f"**TrainWhen=drift: the run trains** — {REASON}." in section
    # AND the per-label table, in the record's order (the labels most in need of a look first)
    assert "| two | 10 | 0.5000 | 2 |\n| one | 30 | 0.8333 | 58 |" in section
    # AND it comes before what the run trained on
    assert text.index("## The champion on the new uploads") < text.index("## Training data")


def test_the_report_lists_the_first_suspected_label_errors_with_thumbnails_of_their_images(built):
    facts, text, folder = built
    section = _section(text)
    # THEN the first REPORT_SUSPECTS of suspects.json are listed, ranked, each with its key, given and
    # suggested label and confidence, and what became of it (SuspectLabels=keep: kept)
    assert len(facts.suspects) == REPORT_SUSPECTS < SUSPECT_COUNT
    assert f"{SUSPECT_COUNT} of the checked new uploads (75.0%) look mislabelled" in section
    assert "kept in this run's training as labelled (SuspectLabels=keep)" in section
    assert f"The first {REPORT_SUSPECTS} of {SUSPECT_COUNT}, the most confident first:" in section
    assert f"The full list: `s3://{ARTIFACTS}/{ARRIVALS_PREFIX}suspects.json`" in section
    rows = [line for line in section.splitlines() if line.startswith("| ![") or line.startswith("| —")]
    assert len(rows) == REPORT_SUSPECTS
    assert rows[0] == (
        f"| ![two/new-1.jpg]({SUSPECTS_DIR}/001.jpg) | `two/new-1.jpg` | two | seven | 0.970 | kept |"
    )
    assert rows[1].startswith(f"| ![two/new-2.jpg]({SUSPECTS_DIR}/002.jpg) | `two/new-2.jpg` | two | one |")
    # AND a thumbnail beside the report for each image still in the data bucket: a small JPEG of it;
    # one relabelled or deleted since has none
    assert rows[2] == "| — | `one/gone-00.jpg` | one | zero | 0.800 | kept |"
    thumbnails = sorted((folder / SUSPECTS_DIR).iterdir())
    assert [p.name for p in thumbnails] == ["001.jpg", "002.jpg"]
    for path in thumbnails:
        assert path.read_bytes()[:3] == JPEG_MAGIC
        with Image.open(path) as image:
            assert max(image.size) <= 96


def test_held_suspects_are_said_held_out_of_training(built, tmp_path):
    facts, _, _ = built
    # GIVEN the same check under SuspectLabels=hold, every suspect held out of the run's manifest
    held = dataclasses.replace(facts, arrivals=arrivals(suspect_labels="hold", held=SUSPECT_COUNT))
    # WHEN its report is written THEN it says so, and each listed suspect is held out
    section = _section(write_report(held, tmp_path).read_text())
    assert f"{SUSPECT_COUNT} held out of this run's training (SuspectLabels=hold)" in section
    assert "| two | seven | 0.970 | held out |" in section and "| kept |" not in section


def test_a_check_that_gave_no_figures_is_one_line(built, tmp_path):
    facts, _, _ = built
    # GIVEN a check whose job failed (the run trains all the same)
    failed = {"job": "digits-r1-arrivals", "status": "Failed", "train_when": "drift",
              "suspect_labels": "keep", "decision": "train",
              "reason": "the champion's check on the new uploads gave no figures",
              "problem": "States.TaskFailed: AlgorithmError: out of memory"}  # fmt: skip
    # WHEN its report is written
    section = _section(
        write_report(dataclasses.replace(facts, arrivals=failed, suspects=[]), tmp_path).read_text()
    )
    # THEN the section says why there are no figures, and the decision, and nothing more
    assert (
        "Processing job `digits-r1-arrivals` (Failed): no figures — "
        "States.TaskFailed: AlgorithmError: out of memory." in section
    )
    assert "gave no figures." in section
    assert "| top-1 |" not in section and "Suspected label errors" not in section
    assert not (tmp_path / SUSPECTS_DIR).exists()


def test_a_run_without_the_check_has_no_section_and_no_arrivals_in_its_summary(tmp_path):
    # GIVEN a run of a data set without a champion (the record has no `arrivals`)
    with mock_aws():
        stack = make_stack()
        run = recorded_run.write(stack)
        deployment = recorded_deployment(stack)
        facts = collect(deployment, run, out_dir=tmp_path)
    # THEN its report has no such section, and its summary says None
    assert "The champion on the new uploads" not in write_report(facts, tmp_path / "report").read_text()
    assert summary(facts)["arrivals"] is None


def test_the_summary_carries_the_records_section_as_is_without_the_suspects_list(built):
    facts, _, _ = built
    # WHEN the JSON summary is made
    document = json.loads(json.dumps(summary(facts)))
    # THEN `arrivals` is the record's section, its numbers numbers; the list stays in suspects.json
    assert document["arrivals"] == arrivals()
    assert isinstance(document["arrivals"]["top1"], float) and document["arrivals"]["checked"] == 80
    assert "suspects" not in document["arrivals"]


def test_a_not_needed_run_is_a_success_that_says_no_retraining_was_needed(
    stack, recorded_sagemaker, monkeypatch, tmp_path, capsys
):
    # GIVEN a run of TrainWhen=drift whose champion did as well on its new uploads: NOT_NEEDED, no gate
    monkeypatch.chdir(tmp_path)
    reason = "no retraining needed: the champion's top-1 on 40 new uploads is 0.9400 (95% CI 0.8-0.98)"
    run = _write_arrivals(stack, "NOT_NEEDED", decision="not_needed", reason=reason, suspect_count=0)
    run = {**run, "gate": {"decision": "not_needed", "reason": reason}}  # type: ignore[typeddict-item]
    for field in ("tuning_job", "best_training_job", "model_package_arn"):
        run.pop(field)  # type: ignore[misc]
    runs.put_run(run, table_name=stack.output("runs_table"), client=boto3.client("dynamodb"))
    deployment = connect(stack.name)
    deployment.clients["sagemaker"] = recorded_sagemaker
    # WHEN its end is reported, as JSON and as text
    finish(deployment, run, json_output=True, console=console_for(True))
    document = json.loads(capsys.readouterr().out)
    console = Console(record=True, width=300)
    finish(deployment, run, json_output=False, console=console)
    # THEN nothing fails: the gate was not reached, the champion stays, and the decision is there
    assert (document["status"], document["gate"]) == ("NOT_NEEDED", {"passed": None, "reason": reason})
    assert document["arrivals"]["decision"] == "not_needed"
    assert "gate not reached, no retraining needed (the champion stays)" in console.export_text()
    text = (tmp_path / "runs" / RUN_ID / "report.md").read_text()
    assert f"**no retraining needed, the champion stays** — {reason}" in text
    assert "**TrainWhen=drift: no retraining needed, the champion stays**" in text
    # AND a run that failed still fails
    failed = {**run, "status": "FAILED", "failure": {"error": "E", "cause": "c"}}
    with pytest.raises(RunFailedError):
        finish(deployment, failed, json_output=False, console=console)  # type: ignore[arg-type]


def test_the_demo_goes_on_after_a_run_that_was_not_needed(monkeypatch, tmp_path):
    # GIVEN a demo of two waves whose first run ends NOT_NEEDED
    ended: list[str] = []

    class Waves:
        def __init__(self, *args: object) -> None:
            self.started = 0

        def until_training(self, training: object) -> None:
            return None

        def upload(self, wave: object, beside: object = None) -> set[str]:
            return set()

        def start(self) -> dict[str, str]:
            self.started += 1
            return {"run_id": f"r{self.started}"}

        def finish(self, training: dict[str, str]) -> dict[str, str]:
            ended.append(training["run_id"])
            return {**training, "status": "NOT_NEEDED" if training["run_id"] == "r1" else "SUCCEEDED"}

    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.jpg").write_bytes(b"")
    monkeypatch.setattr(demo, "_write_digits", lambda folder, *a, **k: tmp_path)
    monkeypatch.setattr(demo, "waves", lambda files, label: [[], []])
    monkeypatch.setattr(demo, "_start_stack", lambda *a: contextlib.nullcontext(object()))
    monkeypatch.setattr(demo, "_WaveRun", Waves)
    # WHEN it runs
    with demo.run_demo(demo.DemoOptions(), console=Console(), quiet=True) as ran:
        statuses = [r["status"] for r in ran.records]
    # THEN the second wave's run follows: not needed is no failure
    assert ended == ["r1", "r2"] and statuses == ["NOT_NEEDED", "SUCCEEDED"]


def test_following_a_run_says_what_the_champions_check_decided(stack, recorded_sagemaker):
    # GIVEN a run that ended NOT_NEEDED after the champion's check on its new uploads
    from rich.console import Console

    from retrain.run.follow import plain_line, render, snapshot

    reason = "no retraining needed: the champion's top-1 on 80 new uploads is 0.9400"
    run = recorded_run.record("NOT_NEEDED", arrivals=arrivals(decision="not_needed", reason=reason))
    runs.put_run(run, table_name=stack.output("runs_table"), client=boto3.client("dynamodb"))
    deployment = connect(stack.name)
    deployment.clients["sagemaker"] = recorded_sagemaker
    # WHEN its status is read
    shot = snapshot(deployment, run)
    console = Console(record=True, width=300)
    console.print(render(shot))
    # THEN it has ended, its plain line names the decision, and the view has the notification's lines
    assert shot.finished and plain_line(shot).endswith(" arrivals=not_needed")
    text = console.export_text()
    assert "The champion on a sample of 80 new uploads: top-1 0.7500" in text
    assert f"TrainWhen=drift: {reason}." in text
