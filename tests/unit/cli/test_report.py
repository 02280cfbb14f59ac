from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from controller import datasets, names, runs
from retrain.report.build import write_report
from retrain.report.collect import collect
from retrain.report.summary import SUMMARY_KEYS, summary
from retrain_contract import container as contract
from tests.unit.cli import recorded_run
from tests.unit.cli.conftest import make_stack, recorded_deployment

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One recorded run, collected and reported once for this module (collecting only reads)."""
    out_dir = tmp_path_factory.mktemp("run")
    with mock_aws():
        stack = make_stack()
        run = recorded_run.write(stack)
        deployment = recorded_deployment(stack)
        facts = collect(deployment, run, out_dir=out_dir)
    return facts, out_dir, write_report(facts, out_dir / "report")


@pytest.fixture
def facts(built):
    return built[0]


@pytest.fixture
def report(built):
    """(report.md's text, its folder)."""
    return built[2].read_text(), built[2].parent


def test_collect_reads_trials_spot_timings_and_interruptions(facts):
    # GIVEN a finished run with three spot trials, two of them interrupted once
    # WHEN its facts are collected
    # THEN every trial is there with its objective, and the spot numbers add up over the trials
    assert [t.objective for t in facts.trials] == [0.91, 0.95, 0.62]
    assert facts.best_job == recorded_run.BEST
    assert facts.interruptions == 2
    assert (facts.training_seconds, facts.billable_seconds) == (98, 30)
    assert facts.resumed_at_steps == [10, 10]


def test_collect_reads_the_loss_curves_from_the_job_logs(facts):
    # GIVEN job logs with metric lines in the contract's format
    # THEN the curves hold each metric's points in step order
    curve = facts.curves[recorded_run.BEST]
    assert [p.step for p in curve["train-loss"]] == [5, 10, 15, 20]
    assert [p.step for p in curve["val-loss"]] == [10, 20]


def test_collect_reads_uploads_evaluation_and_checkpoint_curve(facts):
    # GIVEN ledger rows recorded before the run's cut and a later wave after it, evaluation.json in S3 and
    # a run record with checkpoint evaluations
    # THEN the run's own uploads are counted, rejected ones keep their reasons; the later wave is the data
    # set's, counted apart
    assert (facts.accepted, facts.new_uploads, facts.refused) == (len(recorded_run.ACCEPTED_KEYS), 6, 4)
    assert {r.key: r.reason for r in facts.rejected} == recorded_run.REJECTED
    assert facts.dataset_accepted == len(recorded_run.ACCEPTED_KEYS) + len(recorded_run.LATER_ACCEPTED)
    assert facts.dataset_rejected == len(recorded_run.REJECTED) + len(recorded_run.LATER_REJECTED)
    # AND the evaluation comes from evaluation.json, the champion from its baseline
    assert facts.evaluation.labels == recorded_run.LABELS
    assert facts.evaluation.confusion_matrix[0] == [19, 1, 0]
    assert facts.evaluation.baseline_top1 == 0.9
    # AND only completed checkpoint evaluations are points of the curve
    assert [(p.step, p.top1) for p in facts.checkpoint_evaluations] == [(10, 0.4), (20, 0.8)]
    assert {p.training_job for p in facts.checkpoint_evaluations} == {recorded_run.BEST}


def test_collect_extracts_the_best_jobs_profile(built):
    facts, out_dir, _ = built
    # GIVEN the best job shipped a system profile in output.tar.gz
    # THEN it is extracted under the report folder for the utilisation report
    assert facts.profile_dir == out_dir / "jobs" / recorded_run.BEST / "profile"
    assert any(facts.profile_dir.glob("*.jsonl"))


def test_report_writes_markdown_and_real_pngs(facts, tmp_path):
    # WHEN the report is built from the recorded run
    path = write_report(facts, tmp_path / "report")
    # THEN each chart is a PNG file the markdown links
    text = path.read_text()
    for name in (
        "tuning_trials.png",
        "loss_curves.png",
        "checkpoint_evaluations.png",
        "confusion_matrix.png",
    ):
        png = tmp_path / "report" / name
        assert png.read_bytes()[:8] == PNG_MAGIC, name
        assert f"]({name})" in text
    # AND the tables carry the rule results, the gate decision, the rejected uploads and the cost
    assert "| CPUBottleneck | IssuesFound | warn | 12 | CPU p95 97% |" in text
    assert "- CPUBottleneck: the device waited for the input pipeline: raise num-workers" in text
    assert "**passed** — challenger top-1 0.950" in text
    assert "`data/digits/notes.txt`" in text
    assert "| `data/digits/one/fake.jpg` | content | the bytes are not an image" in text
    assert "4 refused (1 conflict, 1 content, 2 layout still refused)" in text


def test_report_shows_the_training_data_balanced_set_aside_and_unreadable(facts, report):
    # GIVEN a run that oversampled a rare class, set a small label aside and met an undecodable file
    text, _ = report
    # THEN per-class counts before and after balancing, the label set aside and the file are all there
    assert "Class balance: **oversample** (ratio 0.5, min_images_per_label 5, small_labels exclude)" in text
    assert "| two | 5 | 1 | 4 | 12 |" in text
    assert "| lynx | 2 image(s), below MinImagesPerLabel 5; upload more images of it |" in text
    assert "| `data/digits/zero/img-2.jpg` | image file is truncated |" in text
    # AND per-class accuracy is in the evaluation table
    assert "recall (class accuracy)" in text
    # AND a deleted upload is neither accepted nor rejected
    assert recorded_run.REMOVED_KEY not in {r.key for r in facts.rejected}
    assert "| **total** |  | 98 | 30 | 69.4 |" in text


def test_report_prices_jobs_from_the_price_table(report):
    # GIVEN trials on ml.g4dn.xlarge (0.7364 USD/h in the table)
    text, _ = report
    # THEN the best trial's on-demand cost is 38 s x 0.7364 / 3600 and its billed cost 12 s at that rate
    assert "$0.0078 | $0.0025 |" in text


def test_summary_has_exactly_the_issue_keys(facts):
    # WHEN the JSON summary is made
    document = json.loads(json.dumps(summary(facts)))
    # THEN it has the issue's keys and nested keys, with the run's numbers
    assert tuple(document) == SUMMARY_KEYS
    assert set(document["tuning"]) == {"jobs", "best_job", "best_hyperparameters", "objective"}
    assert set(document["training"]) == {
        "interruptions", "resumed_at_steps", "training_seconds", "billable_seconds", "spot_savings_pct"
    }  # fmt: skip
    assert set(document["evaluation"]) == {"top1", "top3", "per_class"}
    assert document["gate"] == {"passed": True, "reason": "challenger top-1 0.950 >= champion 0.900 + 0.010"}
    assert document["training"]["spot_savings_pct"] == 69.4
    assert document["rules"][1] == {
        "rule": "CPUBottleneck",
        "status": "IssuesFound",
        "action": "warn",
        "detail": "CPU p95 97%",
    }
    assert {"key", "problem", "reason"} == set(document["rejected"][0])


def test_report_includes_the_utilisation_heatmap_of_the_profiled_job(report):
    # GIVEN the best job's system profile, written by the container's profiler
    text, folder = report
    # THEN the Debugger helper's bottleneck report and its PNGs are linked from it
    pngs = sorted((folder / "utilisation").glob("*.png"))
    assert pngs, "no utilisation charts were written"
    for png in pngs:
        assert png.read_bytes()[:8] == PNG_MAGIC
        assert f"(utilisation/{png.name})" in text


def test_rule_results_and_evaluation_are_read_from_the_runs_prefix_when_the_record_lacks_them(tmp_path):
    with mock_aws():
        stack = make_stack()
        # GIVEN a run whose record has no rule results nor evaluation pointer yet (it failed right after)
        run = recorded_run.write(stack)
        for field in ("rule_results", "challenger"):
            run.pop(field)  # type: ignore[misc]
        s3 = boto3.client("s3")
        rules = [{"rule": "Overfit", "status": "IssuesFound", "step": 30, "detail": "val loss rose 3 times"}]
        bucket = stack.output("artifact_bucket")
        s3.put_object(
            Bucket=bucket,
            Key=names.rules_prefix("digits", "r1") + contract.RULE_RESULTS_FILE,
            Body=json.dumps(rules),
        )
        deployment = recorded_deployment(stack)
        # WHEN its facts are collected
        facts = collect(deployment, run)
    # THEN the rule check's and the evaluation's own files under the run's prefix are used
    assert [(r.rule, r.status, r.step) for r in facts.rules] == [("Overfit", "IssuesFound", 30)]
    assert facts.evaluation.top1 == 0.95 and facts.evaluation.labels == recorded_run.LABELS


def test_a_catalogues_report_lists_its_weakest_classes_and_most_frequent_confusions(facts, tmp_path):
    # GIVEN the evaluation of 300 classes, written with confusions instead of a matrix
    import dataclasses

    from retrain.report.build import REPORT_CLASS_ROWS
    from retrain.report.facts import Evaluation

    per_class = {f"c{i:03d}": {"precision": 1.0, "recall": 1.0 - i / 1000, "support": 2} for i in range(300)}
    catalogue = Evaluation(top1=0.8, top3=0.9, per_class=per_class, labels=sorted(per_class),
                           confusions=[("c299", "c001", 2), ("c298", "c002", 1)])  # fmt: skip
    # WHEN its report is written
    text = write_report(dataclasses.replace(facts, evaluation=catalogue), tmp_path / "report").read_text()
    # THEN it names the classes of lowest recall first, and no more than it says, and the confusions
    assert f"The {REPORT_CLASS_ROWS} classes of lowest recall, of 300" in text
    assert "| c299 |" in text and "| c000 |" not in text
    assert "| c299 | c001 | 2 |" in text and "no confusion matrix recorded" in text


def test_the_report_and_summary_say_where_the_run_is_in_mlflow_and_what_tracking_missed(facts, tmp_path):
    import dataclasses

    # GIVEN the run's parent run in MLflow, and a job's tracking that failed
    warning = "MLflow tracking of training job tune-002 failed: MlflowException: 503 Service Unavailable"
    tracked = dataclasses.replace(facts, mlflow_run_id="0a1b2c", tracking_warnings=[warning])
    # WHEN the report and the JSON summary are made
    text = write_report(tracked, tmp_path).read_text()
    document = summary(tracked)
    # THEN both name the MLflow run and the warning
    section = text.split("## Experiment tracking", 1)[1]
    assert "MLflow run `0a1b2c` in experiment `retrain/" in section
    assert f"- **Warning:** {warning}" in section
    assert document["mlflow"] == {"run_id": "0a1b2c", "warnings": [warning]}
    # AND a run that was not tracked has no such section
    assert "## Experiment tracking" not in write_report(facts, tmp_path / "untracked").read_text()


def test_a_runs_report_counts_its_own_uploads_whenever_it_is_written(tmp_path):
    # GIVEN a finished run whose report was written, its summary made
    with mock_aws():
        stack = make_stack()
        run = recorded_run.write(stack)
        deployment = recorded_deployment(stack)
        first = collect(deployment, run, out_dir=tmp_path / "a")
        before = summary(first)
        # WHEN two more waves arrive after its cut (accepted photos and refused copies), and the refused
        # copy of the run's own wave is fixed (its row rewritten after the cut), then it is written again
        recorded_run.write_later_wave(stack, "2026-11-22T05:00:00.000000Z", wave="b")
        recorded_run.write_later_wave(stack, "2026-11-22T06:00:00.000000Z", wave="c")
        fixed = f"data/{recorded_run.DATASET}/two/copy.jpg"
        parts = datasets.partitions(
            recorded_run.DATASET, table_name=stack.output("datasets_table"), client=boto3.client("dynamodb")
        )
        row = {names.LEDGER_PK: parts.of(fixed), names.LEDGER_SK: fixed, "state": names.STATE_ACCEPTED,
               "recorded_at": "2026-11-22T06:30:00.000000Z"}  # fmt: skip
        boto3.client("dynamodb").put_item(TableName=stack.output("ledger_table"), Item=runs.serialize(row))
        again = collect(deployment, run, out_dir=tmp_path / "b")
        text = write_report(again, tmp_path / "report").read_text()
    after = summary(again)
    # THEN the run's own intake is what it was: its accepted, new and refused counts; only the refusal
    # fixed since drops out of the list, said so; the data set's totals, labelled, grew
    assert (after["accepted"], after["new"]) == (before["accepted"], before["new"]) == (9, 6)
    assert [r["key"] for r in after["rejected"]] == [
        r["key"] for r in before["rejected"] if r["key"] != fixed
    ]
    assert "9 accepted (6 new since the previous run), 4 refused" in text
    assert "1 of them were replaced or removed since" in text
    assert after["dataset_uploads"] == {"accepted": 9 + 4 * 3 + 1, "rejected": 3 + 3}
    assert before["dataset_uploads"] == {"accepted": 9 + 4, "rejected": 4 + 1}
    assert "The data set now (later uploads included): 22 accepted, 6 rejected." in text


def test_a_run_that_froze_no_manifest_took_nothing_in(tmp_path):
    with mock_aws():
        stack = make_stack()
        run = recorded_run.write(stack, recorded_run.record(status="FAILED", cut=""))
        deployment = recorded_deployment(stack)
        facts = collect(deployment, run, out_dir=tmp_path)
        text = write_report(facts, tmp_path / "report").read_text()
    assert (facts.accepted, facts.rejected) == (0, [])
    assert "This run froze no manifest: it took no uploads in." in text
