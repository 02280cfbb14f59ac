"""Done-when test of the embedded runtime: an upload, and nothing else, runs the whole retraining flow.

The project's own template.yaml, state machine, Lambda handlers and training_image/ run on the embedded
stack: ingest -> dispatch -> FSx import -> tuning (2 trials, in parallel, each interrupted once on
spot and resumed from its checkpoint) -> rule check -> evaluation (also of checkpoints) -> gate ->
registry -> notification. The first run starts from the stack's PretrainedModelUri (its trials read the
weights as the pretrained channel, and resume from their checkpoints after the interruption). Then the
stack stops, a new one starts from the same state directory, and a second upload, with a new label,
starts a run that fine-tunes from the first run's model (the champion) and warm-starts its tuning from the
first run's tuning job. The injected faults are test_e2e_faults.py's subject.
"""

from __future__ import annotations

import io
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow import MlflowClient
from PIL import Image

from controller import names, runs, tracking
from retrain.demo import data as demo_data
from retrain.demo.flow import DEMO_PARAMETERS
from retrain.embedded.faults import REDELIVERY_SECONDS, Faults
from retrain.embedded.mlflow_app import store_uri
from retrain.embedded.sagemaker import INTERRUPTIONS_FIELD
from retrain.local import connect_local
from retrain.report.build import write_report
from retrain.report.collect import collect, read_json_object
from retrain.serve import predict
from retrain_contract import container as contract
from retrain_training import data, evaluate, models, rules
from tests.integration.embedded.flow import DATASET, IMAGES, Finished, Uploads, lock_holder, run_to_the_end

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LATER_IMAGES = 60
# The second run's subjects are the warm start and the template's default FinalTraining=true (the final
# training job runs the real container): one epoch, two trials at once, no checkpoint evaluations. Its
# gate takes any challenger (one epoch may not beat the champion, or a rule may find an issue: the gate's
# own tests decide those), so the run ends registered and the test knows it does.
QUICK = {
    "CheckpointEvaluationEvery": "0",
    "Epochs": "1",
    "MaxTuningJobs": "2",
    "FinalTraining": "true",
    "MinImprovement": "-1.0",
    "BlockingRules": "",
}
# Weights of the demo's architecture in a bucket of the user's (not the stack's): the first run's start.
WEIGHTS_BUCKET, WEIGHTS_KEY = "retrain-e2e-weights", "imagenet-shaped/resnet18.pth"
PRETRAINED = {"PretrainedModelUri": f"s3://{WEIGHTS_BUCKET}/{WEIGHTS_KEY}"}
# The first run's subjects are the path and its events, not the model: three epochs of the demo's five
# (each epoch's end is a 134 MB checkpoint through the stack's S3, its restore after the interruption
# fetches the newest ones), every 2nd checkpoint evaluated, so each trial still has its evaluations.
FIRST = {**PRETRAINED, "Epochs": "3", "CheckpointEvaluationEvery": "2"}
NEW_LABEL, NEW_LABEL_IMAGES = "cross", 8


def _put_weights(stack, outputs) -> None:  # type: ignore[no-untyped-def]
    buffer = io.BytesIO()
    torch.save(models.build_model("resnet18", 1000).state_dict(), buffer)
    s3 = stack.client("s3")
    s3.create_bucket(Bucket=WEIGHTS_BUCKET)
    s3.put_object(Bucket=WEIGHTS_BUCKET, Key=WEIGHTS_KEY, Body=buffer.getvalue())


def _with_a_new_label(images: Path) -> Uploads:
    """LATER_IMAGES more digits, and a label the first run never saw."""
    written = demo_data.write_digits(images, limit=LATER_IMAGES, start=IMAGES).files
    files = {f"{p.parent.name}/{p.name}": p.read_bytes() for p in written}
    for i in range(NEW_LABEL_IMAGES):
        picture = Image.new("RGB", (32, 32), (255, 255, 255))
        for x in range(32):
            picture.putpixel((x, (x + i) % 32), (0, 0, 0))
            picture.putpixel((31 - x, (x + i) % 32), (0, 0, 0))
        buffer = io.BytesIO()
        picture.save(buffer, format="JPEG")
        files[f"{NEW_LABEL}/{i:03d}.jpg"] = buffer.getvalue()
    return Uploads(images, count=len(files), files=files)


def test_an_upload_alone_runs_the_whole_flow_and_a_later_run_warm_starts_after_a_restart(
    tmp_path: Path,
) -> None:
    # One test, one stack at a time (a module-scoped stack could outlive its tests beside other stacks'
    # tests under xdist): the first three checks read the same finished run.
    # The first run's events come as EventBridge may deliver them: each twice, the copy late (the
    # duplicate-events fault); the second run's once.
    with run_to_the_end(
        tmp_path / "state",
        Uploads(tmp_path / "images"),
        Faults.parse(["duplicate-events"]),
        overrides=FIRST,
        keep_state=True,
        before_upload=_put_weights,
    ) as happy:
        _every_event_came_twice_and_each_counted_once(happy)
        _ends_registered_with_the_lock_released(happy)
        _started_from_the_stacks_pretrained_weights(happy)
        _tuning_ran_its_trials_two_at_a_time_each_resumed_after_a_spot_interruption(happy)
        _the_run_record_holds_every_field(happy)
        _the_champion_deploys_and_answers_what_evaluate_scores(happy, tmp_path / "held-out")
        _every_role_was_authorised_and_none_was_refused(happy)
    first = happy.record
    # The saved state keeps no checkpoint whose reader is gone: the trials' own (their jobs ended) and the
    # copies the checkpoint evaluations read (they ended too).
    assert _saved_checkpoints(tmp_path / "state") == []

    # A new stack process from the same state directory (a second `retrain demo`), more digits uploaded.
    with run_to_the_end(
        tmp_path / "state",
        _with_a_new_label(tmp_path / "more"),
        Faults(),
        overrides=QUICK,
    ) as later:
        tuning = later.stack.client("sagemaker").describe_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=later.record["tuning_job"]
        )
        known = {
            r["run_id"]
            for r in runs.list_runs(
                table_name=later.outputs[names.STACK_OUTPUTS["runs_table"]],
                dataset=DATASET,
                client=later.stack.client("dynamodb"),
            )
        }
        final = later.stack.client("sagemaker").describe_training_job(
            TrainingJobName=later.record["final_training_job"]
        )
        evaluations = {side: _evaluation(later, side) for side in ("challenger", "champion")}
        arrived = later.stack.client("sagemaker").describe_processing_job(
            ProcessingJobName=later.record["arrivals"]["job"]
        )
        arrivals_report = read_json_object(
            later.stack.client("s3"), later.record["arrivals"]["report_uri"], contract.ARRIVALS_FILE
        )
        labels = read_json_object(later.stack.client("s3"), later.record["labels_uri"], "")
        package = later.stack.client("sagemaker").describe_model_package(
            ModelPackageName=later.record["model_package_arn"]
        )
        checkpoints_left = _checkpoints_once_the_end_events_are_handled(later)
        tracked = _tracked_in_mlflow(later)
        later_report = _report_of(later, tmp_path / "later-report")
        assert later.stack.gatekeeper.denied() == []

    assert later.record["status"] == "SUCCEEDED", later.record.get("failure") or later.record.get("gate")
    assert later.record["gate"]["decision"] == "accepted"
    # It registered the next version of the first run's package group, with the final job's model.
    group, version = later.record["model_package_arn"].rsplit("/", 1)
    assert (group, int(version)) == (first["model_package_arn"].rsplit("/", 1)[0], 2)
    assert package["InferenceSpecification"]["Containers"][0]["ModelDataUrl"] == later.record["model_data"]
    assert later.record["new_images"] == LATER_IMAGES + NEW_LABEL_IMAGES
    # It fine-tuned from the champion (the first run's model): the record says so, and the final training
    # job read that model.tar.gz as its pretrained channel, with the new label among its labels.
    assert later.record["started_from"]["kind"] == "champion"
    assert later.record["started_from"]["uri"] == first["model_data"]
    assert later.record["started_from"]["model_package_arn"] == first["model_package_arn"]
    assert NEW_LABEL in labels
    assert _channel(final, "pretrained") == first["model_data"]
    assert final["HyperParameters"]["pretrained"] == "model.tar.gz"
    assert first["run_id"] in known  # the first run's record outlived its stack
    # The gate held the champion to the challenger's images: the new label's count against it.
    challenger, champion = evaluations["challenger"], evaluations["champion"]
    assert champion["samples"] == challenger["samples"]
    assert sorted(champion["labels"]) == sorted(challenger["labels"])
    assert champion["labels_the_model_lacks"] == [NEW_LABEL]
    assert champion["per_class"][NEW_LABEL]["recall"] == 0.0
    _the_champion_was_checked_on_the_new_uploads_beside_tuning(
        later.record, arrived, tuning, arrivals_report, later_report
    )
    parents = tuning["WarmStartConfig"]["ParentHyperParameterTuningJobs"]
    assert [p["HyperParameterTuningJobName"] for p in parents] == [first["tuning_job"]]
    assert later.record["tuning_job"] != first["tuning_job"]
    # The final training job ran the container with the best trial's hyperparameters, and its model is
    # the one the gate judged.
    assert final["TrainingJobStatus"] == "Completed"
    assert final["HyperParameters"]["lr"] == later.record["best_hyperparameters"]["lr"]
    assert later.record["model_data"] == final["ModelArtifacts"]["S3ModelArtifacts"]
    # The trials' checkpoints were dropped once their tuning job had ended, the final job's once it had.
    assert checkpoints_left == []
    _every_run_trial_and_model_is_in_mlflow(tracked, first, later)


def _the_champion_was_checked_on_the_new_uploads_beside_tuning(
    record: runs.RunRecord,
    job: dict[str, Any],
    tuning: dict[str, Any],
    report: dict[str, Any] | None,
    report_md: str,
) -> None:
    # The champion's processing job on the run's new uploads started before tuning did (the flow started
    # it and went on) and completed; the run records its figures on every new upload.
    assert job["ProcessingJobStatus"] == "Completed", job.get("FailureReason")
    assert job["CreationTime"] < tuning["CreationTime"]
    figures = record["arrivals"]
    assert figures["status"] == "Completed" and figures["decision"] == "train"
    assert figures["checked"] == figures["new_images"] == LATER_IMAGES + NEW_LABEL_IMAGES
    assert not figures["sampled"]
    # The label it never learnt counts against it, and it is named; its top-1 is the new uploads' share
    # it got right (the report's own count), beside its top-1 on validation images that are not new.
    assert figures["labels_the_model_lacks"] == [NEW_LABEL]
    assert report is not None
    new = report["new"]
    assert new["per_class"][NEW_LABEL]["recall"] == 0.0
    right = sum(round(c["recall"] * c["support"]) for c in new["per_class"].values())
    assert figures["top1"] == pytest.approx(right / figures["checked"])
    assert figures["top1"] <= LATER_IMAGES / (LATER_IMAGES + NEW_LABEL_IMAGES)
    assert figures["validation_images"] > 0
    assert figures["drift"] == pytest.approx(figures["validation_top1"] - figures["top1"])
    assert 0 <= figures["suspect_count"] <= figures["checked"]
    # The run's report says it all: the figures on the new uploads, the label it lacks, the suspects.
    section = report_md.split("## The champion on the new uploads", 1)[1].split("\n## ", 1)[0]
    assert f"| {figures['checked']} |" in section and f"{figures['top1']:.4f}" in section, section
    assert NEW_LABEL in section and "Suspected label errors" in section


def _report_of(finished: Finished, out_dir: Path) -> str:
    """The run's report.md as `retrain report` writes it, from the stack the run ran on."""
    deployment = connect_local(str(finished.stack.endpoint_url), finished.stack.stack_name)
    facts = collect(deployment, finished.record, out_dir=out_dir, upload_keys=None)
    return write_report(facts, out_dir).read_text(encoding="utf-8")


def _saved_checkpoints(state_dir: Path) -> list[str]:
    """The checkpoint files (contract.CHECKPOINT_REGEX) in the stack's saved snapshot."""
    return [
        entry["Key"]
        for index in sorted((state_dir / "snapshot" / "s3").glob("*/index.json"))
        for entry in json.loads(index.read_text(encoding="utf-8"))
        if re.search(contract.CHECKPOINT_REGEX, entry["Key"])
    ]


def _tracked_in_mlflow(finished: Finished, wait_seconds: float = 120.0) -> dict[str, Any]:
    """The data set's MLflow experiment as MLflow's client reads the stack's store, once the run's parent
    has ended (the execution's end event reaches the tracking function a little after the run ends)."""
    client = MlflowClient(tracking_uri=store_uri(finished.stack.state_dir))
    deadline = time.monotonic() + wait_seconds
    while True:
        experiment = client.get_experiment_by_name(tracking.experiment_name(DATASET))
        every = client.search_runs([experiment.experiment_id]) if experiment is not None else []
        parents = {
            r.data.tags.get(tracking.TAG_RUN): r for r in every if tracking.TAG_PARENT not in r.data.tags
        }
        parent = parents.get(finished.record["run_id"])
        if (parent is not None and parent.info.status != "RUNNING") or time.monotonic() > deadline:
            break
        time.sleep(2)
    parent_count = Counter(
        r.data.tags.get(tracking.TAG_RUN) for r in every if tracking.TAG_PARENT not in r.data.tags
    )
    children: dict[str, list[Any]] = {}
    for run in every:
        if tracking.TAG_PARENT in run.data.tags:
            children.setdefault(run.data.tags[tracking.TAG_PARENT], []).append(run)
    histories = {
        run.data.tags[tracking.TAG_JOB]: client.get_metric_history(
            run.info.run_id, contract.METRIC_VAL_ACCURACY
        )
        for runs_of in children.values()
        for run in runs_of
    }
    return {"parents": parents, "parent_count": parent_count, "children": children, "histories": histories}


def _every_run_trial_and_model_is_in_mlflow(
    tracked: dict[str, Any], first: runs.RunRecord, later: Finished
) -> None:
    # One parent per run (the first run's outlived its stack), each named by its run record.
    parents = tracked["parents"]
    assert tracked["parent_count"] == {first["run_id"]: 1, later.record["run_id"]: 1}
    parent = parents[later.record["run_id"]]
    assert parent.info.run_id == later.record["mlflow_run_id"]
    assert "tracking_warnings" not in later.record
    # The parent holds the run's lineage, its gate's decision and the model package it registered.
    assert parent.info.status == "FINISHED"
    assert parent.data.params["started_from"] == "champion"
    assert parent.data.params["started_from_uri"] == first["model_data"]
    assert parent.data.params["manifest_size"] == str(later.record["manifest_size"])
    assert parent.data.params["new_images"] == str(LATER_IMAGES + NEW_LABEL_IMAGES)
    assert parent.data.tags["retrain.gate.decision"] == "accepted"
    assert parent.data.tags[tracking.TAG_PACKAGE] == later.record["model_package_arn"]
    assert parent.data.metrics["challenger.top1"] == later.record["challenger"]["top1"]
    # A child per trial and one for the final job, each with its hyperparameters and per-epoch history.
    per_job = Counter(c.data.tags[tracking.TAG_JOB] for c in tracked["children"][parent.info.run_id])
    assert set(per_job.values()) == {1}, per_job  # one child per job: a second one would vanish below
    children = {c.data.tags[tracking.TAG_JOB]: c for c in tracked["children"][parent.info.run_id]}
    roles = sorted(c.data.tags[tracking.TAG_ROLE] for c in children.values())
    assert roles == ["final", "trial", "trial"]
    final = children[later.record["final_training_job"]]
    assert final.data.params["lr"] == later.record["best_hyperparameters"]["lr"]
    assert all(len(tracked["histories"][job]) == int(QUICK["Epochs"]) for job in children)
    assert children[later.record["best_training_job"]].data.metrics[
        contract.METRIC_VAL_ACCURACY
    ] == pytest.approx(later.record["best_objective"])


def _the_champion_deploys_and_answers_what_evaluate_scores(happy: Finished, folder: Path) -> None:
    # GIVEN digits no run saw (past every upload of this test) and the run's champion, approved and
    # deployed by `retrain predict --approve` (CreateModel from its package, endpoint config, endpoint)
    held_out = list(demo_data.write_digits(folder, limit=6, start=1700).files)
    deployment = connect_local(str(happy.stack.endpoint_url), happy.stack.stack_name)
    arn, endpoint, answers = predict.predict(
        deployment, held_out, dataset=DATASET, package_arn=None, approve_package=True
    )
    assert arn == happy.record["model_package_arn"]
    # THEN each answer ranks the labels as evaluate.py's forward pass of the run's model.tar.gz does
    archive = folder / "model.tar.gz"
    bucket, key = happy.record["model_data"].removeprefix("s3://").split("/", 1)
    archive.write_bytes(happy.stack.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    artifact = evaluate.load_artifact(archive, folder)
    logits = evaluate.predict(
        evaluate.build(artifact, torch.device("cpu")),
        [data.Sample(path, 0, path.name) for path in held_out],
        image_size=artifact.image_size,
        batch_size=8,
        num_workers=0,
        device=torch.device("cpu"),
    )
    for answer, row in zip(answers, torch.softmax(logits, dim=1), strict=True):
        expected = row.topk(len(answer.predictions))
        assert [p["label"] for p in answer.predictions] == [artifact.labels[int(i)] for i in expected.indices]
        assert [p["probability"] for p in answer.predictions] == pytest.approx(
            expected.values.tolist(), abs=1e-5
        )
    # AND the endpoint is the package's, in service, its container started by the SageMaker role
    sagemaker = happy.stack.client("sagemaker")
    assert sagemaker.describe_endpoint(EndpointName=endpoint)["EndpointStatus"] == "InService"
    sagemaker.delete_endpoint(EndpointName=endpoint)


def _checkpoints_once_the_end_events_are_handled(finished: Finished, wait_seconds: float = 60.0) -> list[str]:
    """The keys left under the run's checkpoint prefix, once it is empty or `wait_seconds` passed (the
    jobs' end events reach the Lambda a little after the jobs end)."""
    s3 = finished.stack.client("s3")
    bucket = finished.outputs[names.STACK_OUTPUTS["artifact_bucket"]]
    prefix = names.checkpoint_prefix(DATASET, finished.record["run_id"])
    deadline = time.monotonic() + wait_seconds
    while True:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
        keys = [o["Key"] for o in listed.get("Contents", [])]
        if not keys or time.monotonic() > deadline:
            return keys
        time.sleep(1)


def _evaluation(finished: Finished, side: str) -> dict:  # type: ignore[type-arg]
    """The evaluation.json the gate read for the run's challenger or champion."""
    uri = finished.record[side]["report_uri"]  # type: ignore[literal-required]
    evaluation = read_json_object(finished.stack.client("s3"), uri, contract.EVALUATION_FILE)
    assert evaluation is not None, f"no {contract.EVALUATION_FILE} at {uri}"
    return evaluation  # type: ignore[no-any-return]


def _channel(job: dict, name: str) -> str:  # type: ignore[type-arg]
    """The S3 URI of a training job's channel, or "" when the job has no such channel."""
    found = [c for c in job["InputDataConfig"] if c["ChannelName"] == name]
    return str(found[0]["DataSource"]["S3DataSource"]["S3Uri"]) if found else ""


def _started_from_the_stacks_pretrained_weights(happy: Finished) -> None:
    assert happy.record["started_from"]["kind"] == "pretrained"
    best = happy.stack.client("sagemaker").describe_training_job(
        TrainingJobName=happy.record["best_training_job"]
    )
    assert _channel(best, "pretrained") == PRETRAINED["PretrainedModelUri"]
    assert best["HyperParameters"]["pretrained"] == "resnet18.pth"


def _every_role_was_authorised_and_none_was_refused(happy: Finished) -> None:
    decided = {role.rsplit("/", 1)[-1].split("-")[1] for role in happy.stack.gatekeeper.roles_seen}
    assert {"IngestFunctionRole", "PrepareRunFunctionRole", "TrainingStateMachineRole"} <= decided
    assert "SageMakerExecutionRole" in decided
    assert happy.stack.gatekeeper.denied() == []


def _every_event_came_twice_and_each_counted_once(happy: Finished) -> None:
    """With every event delivered a second time 0.5-4 s late (uploads, jobs, checkpoints, the execution's
    end), the run ends as with single delivery: one run of every upload, one package, each checkpoint
    evaluation recorded once, one MLflow parent and one child per trial."""
    stack, dynamodb = happy.stack, happy.stack.client("dynamodb")
    table = happy.outputs[names.STACK_OUTPUTS["runs_table"]]
    deadline = time.monotonic() + 120
    record = happy.record
    while names.RUN_TRACKING_DONE_AT not in record and time.monotonic() < deadline:
        time.sleep(2)
        record = runs.get_run(DATASET, record["run_id"], table_name=table, client=dynamodb) or record
    time.sleep(max(REDELIVERY_SECONDS) + 4)  # the last copies arrive and are handled
    record = runs.get_run(DATASET, record["run_id"], table_name=table, client=dynamodb) or record
    assert stack.faults.redelivered > IMAGES
    assert [r["run_id"] for r in runs.list_runs(table_name=table, dataset=DATASET, client=dynamodb)] == [
        record["run_id"]
    ]
    assert record["manifest_size"] == IMAGES
    group = record["model_package_arn"].rsplit("/", 1)[0].split(":model-package/", 1)[1]
    packages = stack.client("sagemaker").list_model_packages(ModelPackageGroupName=group)
    assert [p["ModelPackageArn"] for p in packages["ModelPackageSummaryList"]] == [
        record["model_package_arn"]
    ]
    jobs = [point["job"] for point in record["checkpoint_evaluations"]]
    assert jobs and len(jobs) == len(set(jobs)) and record["checkpoint_evaluation_jobs"] == jobs
    client = MlflowClient(tracking_uri=store_uri(stack.state_dir))
    experiment = client.get_experiment_by_name(tracking.experiment_name(DATASET))
    assert experiment is not None
    every = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in every if tracking.TAG_PARENT not in r.data.tags] == [
        record["mlflow_run_id"]
    ]
    trials = stack.client("sagemaker").list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=record["tuning_job"]
    )["TrainingJobSummaries"]
    per_job = Counter(r.data.tags[tracking.TAG_JOB] for r in every if tracking.TAG_PARENT in r.data.tags)
    assert per_job == {t["TrainingJobName"]: 1 for t in trials}
    assert record["mlflow_children"].keys() == per_job.keys()


def _ends_registered_with_the_lock_released(happy: Finished) -> None:
    record = happy.record

    assert record["status"] == "SUCCEEDED", record.get("failure")
    assert record["trigger"] in ("upload", "schedule")
    assert record["data_source"] == "fsx"
    assert record["gate"]["decision"] == "accepted"
    assert record["model_package_arn"].startswith("arn:aws:sagemaker:")
    assert lock_holder(happy) is None


def _tuning_ran_its_trials_two_at_a_time_each_resumed_after_a_spot_interruption(happy: Finished) -> None:
    sagemaker = happy.stack.client("sagemaker")
    tuning = sagemaker.describe_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=happy.record["tuning_job"]
    )
    trials = sagemaker.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=happy.record["tuning_job"]
    )["TrainingJobSummaries"]

    # Two trials, and they ran at the same time (each started before the other ended).
    assert tuning["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxParallelTrainingJobs"] == 2
    assert len(trials) == int(DEMO_PARAMETERS["MaxTuningJobs"]) == 2
    windows = [(t["TrainingStartTime"], t["TrainingEndTime"]) for t in trials]
    assert max(sum(s <= start < e for s, e in windows) for start, _ in windows) == 2, windows
    # Each was interrupted once by the spot schedule and its next attempt resumed from the newest
    # checkpoint that had reached S3, at that checkpoint's step.
    emulator = happy.stack.sagemaker
    for trial in trials:
        job = emulator.describe_training_job(TrainingJobName=trial["TrainingJobName"])
        assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
        assert job["EnableManagedSpotTraining"] is True
        [interruption] = job[INTERRUPTIONS_FIELD]
        assert interruption["Cause"] == "spot"
        step = interruption["NewestCheckpointStep"]
        logs = emulator.workdir / "training" / job["TrainingJobName"] / "logs"
        resumed = (logs / f"attempt-{interruption['Attempt'] + 1}.log").read_text(encoding="utf-8")
        pattern = rf"resumed from {contract.checkpoint_name(step)} at epoch \d+ batch \d+ \(step {step}\)"
        assert re.search(pattern, resumed), resumed[-2000:]
    assert happy.record["billable_seconds"] < happy.record["training_seconds"]


def _the_run_record_holds_every_field(happy: Finished) -> None:
    record = happy.record

    for field in (
        "execution_arn",
        "created_at",
        "finished_at",
        "manifest_uri",
        "new_images",
        "label_count",
        "labels_uri",
        "class_counts_uri",
        "cut",
        "data_source",
        "import_task",
        "tuning_job",
        "best_training_job",
        "best_hyperparameters",
        "best_objective",
        "model_data",
        "training_seconds",
        "billable_seconds",
        "spot_saving",
        "rule_results",
        "challenger",
        "checkpoint_evaluations",
        "gate",
        "model_package_arn",
    ):
        assert field in record, f"run record lacks {field}: {sorted(record)}"
    assert record["new_images"] == IMAGES
    # Every rule of the rule check was evaluated (none failed; a rule short of data says so).
    results = record["rule_results"]
    assert sorted(r["rule"] for r in results) == sorted(rules.RULE_NAMES)
    evaluated = {rules.NO_ISSUES, rules.ISSUES, rules.SUSPECTED, rules.INSUFFICIENT_DATA}
    assert {r["status"] for r in results} <= evaluated, results
    assert record["challenger"]["top1"] > 0
    assert any(point.get("status") == "Completed" for point in record["checkpoint_evaluations"])
