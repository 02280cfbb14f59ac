from __future__ import annotations

from controller import runs
from controller.runs import RunRecord


def _record(run_id: str, created_at: str, **extra: object) -> RunRecord:
    record: RunRecord = {
        "dataset": "flowers",
        "run_id": run_id,
        "status": "RUNNING",
        "created_at": created_at,
    }
    record.update(extra)  # type: ignore[typeddict-item]
    return record


def test_a_run_record_reads_back_with_plain_numbers(aws):
    # GIVEN a run record holding floats, ints and nested lists
    record = _record("flowers-0001", "2026-01-01T00:00:00Z", spot_saving=0.7, manifest_size=12)
    record["rule_results"] = [{"rule": "LossNotDecreasing", "status": "NoIssuesFound", "step": 40}]
    assert runs.put_run(record, table_name=aws.runs_table, client=aws.dynamodb)

    # WHEN the CLI reads it
    got = runs.get_run("flowers", "flowers-0001", table_name=aws.runs_table, client=aws.dynamodb)

    # THEN it is the same record, with int and float rather than Decimal
    assert got == record
    assert type(got["spot_saving"]) is float and type(got["manifest_size"]) is int


def test_a_second_put_of_the_same_run_is_refused(aws):
    # GIVEN a run that exists
    assert runs.put_run(_record("flowers-0001", "t1"), table_name=aws.runs_table, client=aws.dynamodb)
    # WHEN a retried start writes it again
    again = runs.put_run(_record("flowers-0001", "t2"), table_name=aws.runs_table, client=aws.dynamodb)
    # THEN the write is refused and the first record kept
    assert again is False
    kept = runs.get_run("flowers", "flowers-0001", table_name=aws.runs_table, client=aws.dynamodb)
    assert kept is not None and kept["created_at"] == "t1"


def test_list_runs_is_newest_first_and_filters_by_dataset(aws):
    # GIVEN runs of two data sets
    for record in (_record("flowers-0001", "2026-01-01"), _record("flowers-0002", "2026-01-02")):
        runs.put_run(record, table_name=aws.runs_table, client=aws.dynamodb)
    other: RunRecord = {
        "dataset": "digits",
        "run_id": "digits-0001",
        "status": "FAILED",
        "created_at": "2026-01-03",
    }
    runs.put_run(other, table_name=aws.runs_table, client=aws.dynamodb)

    # WHEN listing one data set, and all
    flowers = runs.list_runs(table_name=aws.runs_table, dataset="flowers", client=aws.dynamodb)
    every = runs.list_runs(table_name=aws.runs_table, client=aws.dynamodb)

    # THEN each list is newest first
    assert [r["run_id"] for r in flowers] == ["flowers-0002", "flowers-0001"]
    assert [r["run_id"] for r in every] == ["digits-0001", "flowers-0002", "flowers-0001"]


def test_checkpoint_evaluations_accumulate_as_a_curve(aws):
    # GIVEN a run
    runs.put_run(_record("flowers-0001", "t"), table_name=aws.runs_table, client=aws.dynamodb)
    # WHEN two checkpoint evaluations complete, the first one's end event delivered again late
    added = []
    for step, top1 in ((50, 0.4), (100, 0.6), (50, 0.4)):
        point: runs.CheckpointEvaluation = {
            "step": step,
            "top1": top1,
            "status": "Completed",
            "job": f"rt-ckpt-0123456789-{step:09d}",
        }
        added.append(
            runs.append_checkpoint_evaluation(
                "flowers", "flowers-0001", point, limit=3, table_name=aws.runs_table, client=aws.dynamodb
            )
        )
    # THEN the run holds both points in order, each once, though the curve had room for the repeat
    assert added == [True, True, False]
    got = runs.get_run("flowers", "flowers-0001", table_name=aws.runs_table, client=aws.dynamodb)
    assert got is not None
    assert [(p["step"], p["top1"]) for p in got["checkpoint_evaluations"]] == [(50, 0.4), (100, 0.6)]


def test_the_lineage_phrase_names_each_kind_of_start() -> None:
    from controller import notes

    champion = {"kind": "champion", "model_package_arn": "arn:p/2", "uri": "s3://a/m.tar.gz"}
    assert notes.lineage(champion) == "the champion arn:p/2"
    assert notes.lineage({"kind": "pretrained", "uri": "s3://w/x.pth"}) == "pretrained weights s3://w/x.pth"
    assert notes.lineage({"kind": "imagenet", "uri": ""}) == "ImageNet weights (the training image's)"
    assert notes.lineage({"kind": "scratch", "reason": "asked"}) == "random weights (asked)"
