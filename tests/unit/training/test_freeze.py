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


# --- The arrivals: the images the champion is evaluated on when the run starts -----------------------


def _arrivals(frozen, split):
    from retrain_contract import container

    wanted = {"new": container.SPLIT_NEW, "validation": container.SPLIT_VALIDATION}[split]
    return [(path, label) for path, label, s in frozen.arrivals if s == wanted]


def test_the_arrivals_are_the_new_uploads_of_trained_labels_and_the_validation_images_that_are_not_new():
    from retrain_contract import container

    # GIVEN cat and dog, 20 images each trained by the last run and 20 new; 2 new fox images (fewer than
    # MinImagesPerLabel: excluded); a new rejected dog, a new removed cat, a dog recorded at the cut
    old_at, new_at = "2026-01-01T09:00:00.000000Z", "2026-01-01T11:00:00.000000Z"
    rows = [
        _row(f"{age}-{i:02d}.jpg", label, at=at, **{ledger.SIZE: 100 + i})
        for label in ("cat", "dog")
        for age, at in (("old", old_at), ("new", new_at))
        for i in range(20)
    ]
    rows += [_row(f"new-{i}.jpg", "fox") for i in range(2)]
    rows += [
        _row("bad.jpg", "dog", state=ledger.STATE_REJECTED, **{ledger.PROBLEM: "content"}),
        _row("gone.jpg", "cat", state=ledger.STATE_REMOVED),
        _row("late.jpg", "dog", at=CUT),
        _row("legacy.jpg", "cat", state=ledger.LEGACY_TRAINED, at=new_at),  # trained: not new
    ]
    policy = balance.Policy(min_images=3)
    # WHEN the run's manifest is frozen
    frozen = freeze.freeze(rows, dataset="pets", cut=CUT, trained_through=WATERMARK, policy=policy)
    # THEN the new images are every new accepted cat and dog, and no fox (a label the run does not train)
    assert "fox" in frozen.plan.excluded
    expected_new = sorted((f"{label}/new-{i:02d}.jpg", label) for label in ("cat", "dog") for i in range(20))
    assert _arrivals(frozen, "new") == expected_new
    # AND the validation images are those of the validation split that are not new, legacy.jpg's included
    in_validation = [path for path, _, split in frozen.plan.lines if split == container.SPLIT_VALIDATION]
    new_in_validation = [path for path in in_validation if "/new-" in path]
    expected_validation = sorted(
        (path, path.split("/")[0]) for path in in_validation if path not in new_in_validation
    )
    assert new_in_validation and len(expected_validation) >= 2  # the case holds both kinds
    assert _arrivals(frozen, "validation") == expected_validation
    # AND the summary counts them, and their bytes
    summary = frozen.summary
    assert (summary["arrivals_new"], summary["arrivals_validation"]) == (40, len(expected_validation))
    assert summary["arrivals_sampled"] is False
    sizes = {f"{label}/{age}-{i:02d}.jpg": 100 + i for label in ("cat", "dog") for age in ("old", "new")
             for i in range(20)}  # fmt: skip
    selected = [path for path, _ in (*expected_new, *expected_validation)]
    assert summary["arrivals_bytes"] == sum(sizes.get(path, 0) for path in selected)


def test_the_new_uploads_over_the_bound_are_a_stratified_sample_the_same_every_time():
    from retrain_contract import container

    # GIVEN 30,000, 10,000 and 10 new images of three labels, more than the bound together
    counts = {"ant": 30_000, "bee": 10_000, "cow": 10}
    rows = [_row(f"{i:05d}.jpg", label) for label, n in counts.items() for i in range(n)]
    # WHEN frozen (twice, the ledger's rows read in another order the second time)
    frozen = freeze.freeze(rows, dataset="pets", cut=CUT, trained_through="", policy=balance.Policy())
    again = freeze.freeze(rows[::-1], dataset="pets", cut=CUT, trained_through="", policy=balance.Policy())
    # THEN the sample fills the bound with distinct new images, each label within one image of its share
    new = _arrivals(frozen, "new")
    bound = container.ARRIVALS_NEW_MAX
    assert len(new) == len({path for path, _ in new}) == bound
    total = sum(counts.values())
    for label, n in counts.items():
        taken = sum(1 for _, lab in new if lab == label)
        assert abs(taken - bound * n / total) <= 1, (label, taken)
    assert all(path.startswith(f"{label}/") for path, label in new)
    # AND the tiny label is in it, the summary says it was sampled, and the same rows give the same sample
    assert any(label == "cow" for _, label in new)
    assert frozen.summary["arrivals_sampled"] is True and frozen.summary["arrivals_new"] == bound
    assert again.arrivals == frozen.arrivals
    # AND a first run (no watermark: everything new) has no validation image that is not new
    assert _arrivals(frozen, "validation") == []


def test_quotas_give_every_label_one_where_the_bound_allows():
    # the floors of the shares leave the rare labels nothing; each still gets one, taken from the largest
    assert freeze.quotas({"a": 1000, "b": 1, "c": 1}, 10) == {"a": 8, "b": 1, "c": 1}
    assert freeze.quotas({"a": 3, "b": 2}, 10) == {"a": 3, "b": 2}  # within the bound: all
    taken = freeze.quotas({f"l{i}": 1 for i in range(5)}, 3)  # more labels than the bound
    assert sum(taken.values()) == 3 and set(taken.values()) <= {0, 1}
    # a path repeated (balance's boost) counts once
    paths = {"a": ["a/1", "a/2", "a/1"], "b": ["b/1"]}
    assert freeze.stratified_sample(paths, 5) == [("a/1", "a"), ("a/2", "a"), ("b/1", "b")]
    assert [label for _, label in freeze.stratified_sample(paths, 2)] == ["a", "b"]


def test_the_arrivals_are_written_as_a_manifest_file_and_as_manifest_lines(tmp_path):
    import json

    from retrain_contract import container

    old_at = "2026-01-01T09:00:00.000000Z"
    rows = [_row(f"old-{i:02d}.jpg", label, at=old_at) for i in range(30) for label in ("cat", "dog")]
    rows += [_row(f"new-{i}.jpg", label) for i in range(3) for label in ("cat", "dog")]
    frozen = freeze.freeze(rows, dataset="pets", cut=CUT, trained_through=WATERMARK, policy=balance.Policy())
    # WHEN written with the data set's prefix
    freeze.write(frozen, manifest_dir=tmp_path / "m", frozen_dir=tmp_path / "f", data_uri="s3://d/data/pets/")
    # THEN the ManifestFile names the prefix, then each image's key, the new first
    prefix, *keys = json.loads((tmp_path / "f" / container.ARRIVALS_MANIFEST_FILE).read_text())
    assert prefix == {"prefix": "s3://d/data/pets/"}
    new = [path for path, _ in _arrivals(frozen, "new")]
    validation = [path for path, _ in _arrivals(frozen, "validation")]
    assert keys == new + validation and len(new) == 6 and validation
    # AND the lines file holds each image's path, label and split
    text = (tmp_path / "f" / container.ARRIVALS_LINES_DIR / container.MANIFEST_FILE).read_text()
    records = [json.loads(line) for line in text.splitlines()]
    assert records == [
        {
            container.MANIFEST_PATH_KEY: path,
            container.MANIFEST_LABEL_KEY: label,
            container.MANIFEST_SPLIT_KEY: split,
        }
        for path, label, split in frozen.arrivals
    ]
    assert {r["split"] for r in records} == {container.SPLIT_NEW, container.SPLIT_VALIDATION}
    assert all(r["label"] == r["path"].split("/")[0] for r in records)
    # AND without a prefix, or without new images, the lines file is still written (validation lines only)
    nothing_new = freeze.freeze(rows, dataset="pets", cut=CUT, trained_through=CUT, policy=balance.Policy())
    freeze.write(nothing_new, manifest_dir=tmp_path / "m2", frozen_dir=tmp_path / "f2")
    assert not (tmp_path / "f2" / container.ARRIVALS_MANIFEST_FILE).exists()
    lines = (tmp_path / "f2" / container.ARRIVALS_LINES_DIR / container.MANIFEST_FILE).read_text()
    assert all(json.loads(line)["split"] == container.SPLIT_VALIDATION for line in lines.splitlines())
    assert nothing_new.summary["arrivals_new"] == 0


def test_the_sample_is_the_same_in_every_process():
    # a sample chosen by Python's hash() would change with each process's PYTHONHASHSEED
    import os
    import subprocess
    import sys

    code = (
        "from retrain_training import freeze; "
        "print(freeze.stratified_sample({'a': [f'a/{i}' for i in range(200)], 'b': ['b/0', 'b/1']}, 10))"
    )
    samples = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": os.pathsep.join(sys.path)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(samples) == 1 and samples.pop().count("'a/") == 9
