"""The demo's two upload waves, and the lineage it prints from the two runs."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from retrain.data.upload import find_files, likely_images
from retrain.demo import data as demo_data
from retrain.demo import flow as demo
from retrain.report.facts import Evaluation, RunFacts
from retrain.report.job_logs import MetricPoint


def _labels(files: list) -> Counter[str]:
    return Counter(f.relative.split("/")[0] for f in files)


def test_the_digits_come_in_two_waves_of_the_same_size_with_the_new_label_in_the_second(
    tmp_path: Path,
) -> None:
    demo_data.write_digits(tmp_path, limit=300)
    mistakes = demo_data.write_mistakes(tmp_path)
    files = find_files(tmp_path)
    first, second = demo.waves(files, "nine")
    # Each wave's images reach the same MinNewImages, so each run starts with its whole wave.
    assert len(likely_images(first)) == len(likely_images(second)) == 150
    assert "nine" not in _labels(first)
    assert _labels(second)["nine"] == _labels(files)["nine"]
    # Every old label is in both waves, and no file is uploaded twice.
    assert set(_labels(first)) == set(_labels(second)) - {"nine"}
    assert not {f.relative for f in first} & {f.relative for f in second}
    # The user's mistakes go with the first wave, to be rejected there.
    assert {m.relative_to(tmp_path).as_posix() for m in mistakes} <= {f.relative for f in first}


def test_a_new_label_missing_or_more_than_half_the_images_makes_one_wave(tmp_path: Path) -> None:
    for index in range(4):
        demo_data.write_digits(tmp_path, limit=1, start=index)  # one each of zero, one, two, three
    files = find_files(tmp_path)
    assert demo.waves(files, "seven") == [files]  # no image of the new label
    first, second = demo.waves(files, "zero")  # 2 and 2: one old label left for the second wave
    assert len(first) == len(second) == 2 and _labels(second)["zero"] == 1
    (tmp_path / "three" / "digit-0003.jpg").rename(tmp_path / "zero" / "extra-a.jpg")
    (tmp_path / "two" / "digit-0002.jpg").rename(tmp_path / "zero" / "extra-b.jpg")
    files = find_files(tmp_path)  # three zeros and a one: the second wave cannot hold the zeros
    assert demo.waves(files, "zero") == [files]


def _facts(run_id: str, kind: str, accuracies: list[float], top1: float) -> RunFacts:
    facts = RunFacts(run_id=run_id, dataset="digits", status="SUCCEEDED", best_job=f"{run_id}-job")
    facts.started_from = {"kind": kind}
    facts.curves = {
        facts.best_job: {"val-accuracy": [MetricPoint(e, 10 * e, a) for e, a in enumerate(accuracies)]}
    }
    facts.evaluation = Evaluation(top1=top1, labels=["a", "b"])
    return facts


def test_the_lineage_table_says_how_many_epochs_each_run_took_to_reach_the_first_runs_accuracy() -> None:
    from rich.console import Console

    first = _facts("digits-00001", "scratch", [0.5, 0.8, 0.9], 0.91)
    second = _facts("digits-00002", "champion", [0.93, 0.95, 0.96], 0.97)
    assert demo.epochs_to_reach(demo.best_curve(second), 0.9) == 1
    assert demo.epochs_to_reach(demo.best_curve(first), 0.9) == 3
    assert demo.epochs_to_reach(demo.best_curve(first), 0.99) is None
    console = Console(width=160, record=True)
    console.print(demo.lineage_table([first, second]))
    text = console.export_text()
    second_row = next(line for line in text.splitlines() if "digits-00002" in line)
    assert "champion" in second_row and ".93 .95 .96" in second_row and "0.970" in second_row
    assert re.split(r"\s{2,}", second_row.strip())[4:6] == ["1", "1"]  # to 0.90, to run 1's 0.90
    first_row = next(line for line in text.splitlines() if "digits-00001" in line)
    assert re.split(r"\s{2,}", first_row.strip())[4:6] == ["3", "3"]


def test_one_digit_of_each_held_out_label_stays_out_of_every_upload(tmp_path: Path) -> None:
    # GIVEN the digits with the user's mistakes among them
    demo_data.write_digits(tmp_path, limit=300)
    mistakes = demo_data.write_mistakes(tmp_path)
    files = find_files(tmp_path)
    # WHEN the demo holds out its digits for the champion to classify at the end
    uploaded, held = demo.hold_out(files, demo.HELD_OUT_LABELS)
    # THEN one image of each of those labels (its last) is kept back, and nothing else
    assert [f.relative.split("/")[0] for f in held] == list(demo.HELD_OUT_LABELS)
    assert all(f.path.suffix == ".jpg" for f in held)
    assert not {f.relative for f in held} & {f.relative for f in uploaded}
    assert len(uploaded) + len(held) == len(files)
    assert {m.relative_to(tmp_path).as_posix() for m in mistakes} <= {f.relative for f in uploaded}
    assert "nine" not in demo.HELD_OUT_LABELS  # the second wave's new label is uploaded whole


def test_the_demos_json_lists_every_run_with_what_it_started_from() -> None:
    from retrain.report.summary import SUMMARY_KEYS, demo_summary

    first = _facts("digits-00001", "scratch", [0.5, 0.8, 0.9], 0.91)
    second = _facts("digits-00002", "champion", [0.93, 0.95, 0.96], 0.97)
    second.started_from = {"kind": "champion", "uri": "s3://a/m.tar.gz", "model_package_arn": "arn:p/1"}
    document = demo_summary([first, second])
    assert tuple(document) == (*SUMMARY_KEYS, "runs")
    assert document["run_id"] == "digits-00002"
    assert document["runs"] == [
        {"run_id": "digits-00001", "status": "SUCCEEDED",
         "started_from": {"kind": "scratch", "uri": "", "model_package_arn": "", "reason": ""}},
        {"run_id": "digits-00002", "status": "SUCCEEDED",
         "started_from": {"kind": "champion", "uri": "s3://a/m.tar.gz", "model_package_arn": "arn:p/1",
                          "reason": ""}},
    ]  # fmt: skip


def test_a_folder_of_photos_gets_the_stacks_architecture_and_recipe_and_the_users_parameters_last() -> None:
    photos = demo.DemoOptions(images=Path("photos"), parameters=(("Epochs", "7"),))
    digits = demo.DemoOptions()
    # The digits train ResNet-18 at 32 px from random weights; photos the stack's architecture (from ImageNet)
    assert demo.demo_parameters(digits, 898)["ModelArchitecture"] == "resnet18"
    chosen = demo.demo_parameters(photos, 40)
    assert "ModelArchitecture" not in chosen and "CropScaleMin" not in chosen
    assert (chosen["ImageSize"], chosen["MinNewImages"], chosen["Epochs"]) == ("128", "40", "7")
