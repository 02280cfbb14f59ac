"""The job that freezes a run's manifest (training_image/retrain_training/freeze.py), on its own."""

from __future__ import annotations

from retrain_contract import balance, ledger
from retrain_training import freeze

CUT = "2026-01-01T12:00:00.000000Z"
WATERMARK = "2026-01-01T10:00:00.000000Z"


def _row(key, label, state=ledger.STATE_ACCEPTED, at="2026-01-01T11:00:00.000000Z", **extra):
    return {
        ledger.SK: f"data/pets/{label}/{key}",
        ledger.LABEL: label,
        ledger.STATE: state,
        ledger.RECORDED_AT: at,
        **extra,
    }


def test_the_manifest_holds_accepted_rows_recorded_before_the_cut_and_counts_the_new_ones():
    rows = [
        _row("a.jpg", "cat", at="2026-01-01T09:00:00.000000Z"),  # trained by the last run
        _row("b.jpg", "cat"),  # new
        _row("c.jpg", "dog"),  # new
        _row("d.jpg", "dog", at="2026-01-01T12:00:00.000000Z"),  # recorded at the cut: the next run's
        _row("e.jpg", "dog", state=ledger.STATE_REJECTED, **{ledger.PROBLEM: "content"}),
        _row("f.jpg", "dog", state=ledger.STATE_REMOVED),
        _row("g.jpg", "cat", state=ledger.LEGACY_TRAINED, at="2026-01-01T11:30:00.000000Z"),  # marked per run
        {ledger.SK: "#content/abc/12", "first_key": "data/pets/cat/a.jpg"},  # a claim row, not an upload
    ]
    frozen = freeze.freeze(rows, dataset="pets", cut=CUT, trained_through=WATERMARK, policy=balance.Policy())
    paths = sorted(path for path, _, _ in frozen.plan.lines)
    assert paths == ["cat/a.jpg", "cat/b.jpg", "cat/g.jpg", "dog/c.jpg"]
    summary = frozen.summary
    assert (summary["size"], summary["new"], summary["label_count"]) == (4, 2, 2)
    assert summary["new_labels"] == ["cat", "dog"] and summary["recorded_after_cut"] == 1
    assert summary["rejected_uploads"] == {"content": 1} and summary["rows_read"] == 8


def test_more_new_labels_than_fsx_takes_paths_name_none():
    rows = [_row(f"{i}-{j}.jpg", f"l{i:03d}") for i in range(101) for j in range(6)]
    frozen = freeze.freeze(rows, dataset="pets", cut=CUT, trained_through="", policy=balance.Policy())
    assert frozen.summary["new_labels"] is None and frozen.summary["new_label_count"] == 101


def test_the_job_reads_only_once_the_cut_is_the_fence_old():
    slept: list[float] = []
    cut = freeze.parse_time(CUT)
    assert (
        freeze.wait_for_fence(CUT, clock=lambda: cut + 5, sleep=slept.append)
        == ledger.RECORD_FENCE_SECONDS - 5
    )
    assert slept == [ledger.RECORD_FENCE_SECONDS - 5]
    assert freeze.wait_for_fence(CUT, clock=lambda: cut + 60, sleep=slept.append) == 0 and len(slept) == 1


def test_a_policy_that_is_not_json_fails_the_job_with_its_name(caplog, tmp_path):
    # GIVEN a --policy that is not JSON WHEN the job starts
    with caplog.at_level("ERROR", logger=freeze.log.name):
        code = freeze.main(
            ["--table", "t", "--dataset", "pets", "--cut", CUT, "--policy", "{oops"], client=object()
        )
    # THEN it fails before reading anything, and its log names the option, the value and why
    assert code == freeze.EXIT_FAILED
    [record] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.getMessage().startswith("--policy '{oops' is not a balance policy: ")


def test_the_validation_split_is_a_manifest_file_of_its_images_only(tmp_path):
    rows = [_row(f"{i}.jpg", label, **{ledger.SIZE: 1000 + i}) for i in range(40) for label in ("cat", "dog")]
    frozen = freeze.freeze(rows, dataset="pets", cut=CUT, trained_through="", policy=balance.Policy())
    freeze.write(
        frozen, manifest_dir=tmp_path / "m", frozen_dir=tmp_path / "f", data_uri="s3://data/data/pets/"
    )
    import json

    from retrain_contract import container

    prefix, *keys = json.loads((tmp_path / "f" / container.VALIDATION_MANIFEST_FILE).read_text())
    validation = [path for path, _, split in frozen.plan.lines if split == container.SPLIT_VALIDATION]
    assert prefix == {"prefix": "s3://data/data/pets/"} and keys == sorted(validation) and 0 < len(keys) < 80
    sizes = {f"{label}/{i}.jpg": 1000 + i for i in range(40) for label in ("cat", "dog")}
    assert frozen.summary["validation_bytes"] == sum(sizes[k] for k in keys)
    assert frozen.summary["data_bytes"] == sum(sizes.values())
