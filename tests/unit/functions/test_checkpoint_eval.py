"""Checkpoint evaluations and ended training jobs (checkpoint_eval.py, job_ended.py), against moto."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent
from botocore.exceptions import ClientError, ReadTimeoutError

from controller import checkpoint_eval, names, runs
from retrain_contract import container
from tests.unit.functions.support import processing_job_ended, training_job_ended

DATASET, RUN = "flowers", "flowers-00001"
_job_ended = functools.partial(training_job_ended, dataset=DATASET, run_id=RUN)


def _running_run(aws: Any) -> None:
    runs.put_run(
        {"dataset": DATASET, "run_id": RUN, "status": "RUNNING"},
        table_name=aws.runs_table,
        client=aws.dynamodb,
    )


def _config(config: Any, *, every: int = 1, most: int = 20) -> Any:
    return dataclasses.replace(
        config,
        checkpoint_eval_every=every,
        checkpoint_eval_max_per_run=most,
        settings={**config.settings, "training_image": "img", "evaluation_instance_type": "ml.m5.large"},
    )


def _write_checkpoint(aws: Any, job: str, step: int, body: bytes = b"weights") -> EventBridgeEvent:
    """A checkpoint object as SageMaker syncs it, and S3's Object Created event for it."""
    key = f"{names.job_checkpoint_prefix(DATASET, RUN, job)}algo-1/{container.checkpoint_name(step)}"
    put = aws.s3.put_object(Bucket=aws.artifact_bucket, Key=key, Body=body)
    detail = {"key": key, "size": len(body), "version-id": put["VersionId"]}
    return EventBridgeEvent(
        {
            "detail-type": "Object Created",
            "source": "aws.s3",
            "detail": {"bucket": {"name": aws.artifact_bucket}, "object": detail},
        }
    )


def _handle(event: EventBridgeEvent, aws: Any, config: Any, sagemaker: Any = None) -> dict[str, Any]:
    return checkpoint_eval.evaluate_checkpoints(
        event, config=config, dynamodb=aws.dynamodb, sagemaker=sagemaker or aws.sagemaker, s3=aws.s3
    )


def _record(aws: Any) -> runs.RunRecord:
    record = runs.get_run(DATASET, RUN, table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None
    return record


def test_a_checkpoint_the_trainer_pruned_before_its_evaluation_started_is_evaluated_from_a_copy(aws, config):
    # GIVEN a running run and a checkpoint whose Object Created event is on its way
    _running_run(aws)
    event = _write_checkpoint(aws, "job-1", 100, b"the weights of step 100")
    key = event.detail["object"]["key"]
    # AND the trainer pruned it meanwhile (SageMaker deletes the S3 copy of a deleted checkpoint)
    aws.s3.delete_object(Bucket=aws.artifact_bucket, Key=key)
    # WHEN the event is handled
    result = _handle(event, aws, _config(config))
    # THEN the evaluation started, reading a copy outside the checkpoint prefix with the checkpoint's bytes
    assert result["action"] == "started"
    job = aws.sagemaker.describe_processing_job(ProcessingJobName=result["job"])
    (model,) = [i for i in job["ProcessingInputs"] if i["InputName"] == container.EVALUATION_INPUT_MODEL]
    copy = names.checkpoint_copy_key(DATASET, RUN, "job-1", 100)
    assert model["S3Input"]["S3Uri"] == f"s3://{aws.artifact_bucket}/{copy}"
    assert not copy.startswith(names.CHECKPOINTS_PREFIX)
    body = aws.s3.get_object(Bucket=aws.artifact_bucket, Key=copy)["Body"].read()
    assert body == b"the weights of step 100"


def test_a_checkpoint_gone_for_good_is_skipped_and_gives_its_place_back(aws, config):
    # GIVEN a running run whose only evaluation place is free, and a checkpoint event with no such version
    _running_run(aws)
    event = _write_checkpoint(aws, "job-1", 100)
    event.raw_event["detail"]["object"]["version-id"] = "no-such-version"
    cfg = _config(config, most=1)
    # WHEN it is handled, then a later checkpoint
    gone = _handle(event, aws, cfg)
    later = _handle(_write_checkpoint(aws, "job-1", 200), aws, cfg)
    # THEN the first is skipped with why, and the later one still gets the run's one evaluation
    assert gone["action"] == "skipped" and "gone" in gone["reason"]
    assert later["action"] == "started"
    assert _record(aws)["checkpoint_evaluations_started"] == 1


def test_a_run_starts_at_most_checkpoint_evaluation_max_per_run_jobs(aws, config):
    # GIVEN a running run allowed 3 checkpoint evaluations, each checkpoint due for one
    _running_run(aws)
    cfg = _config(config, every=1, most=3)
    # WHEN three trials write three checkpoints each
    actions = [
        _handle(_write_checkpoint(aws, f"job-{trial}", step), aws, cfg)
        for trial in (1, 2, 3)
        for step in (100, 200, 300)
    ]
    # THEN three evaluations start and the other six are skipped, naming the parameter
    assert [a["action"] for a in actions].count("started") == 3
    skipped = [a for a in actions if a["action"] == "skipped"]
    assert len(skipped) == 6 and all("CheckpointEvaluationMaxPerRun" in a["reason"] for a in skipped)
    assert len(aws.sagemaker.list_processing_jobs()["ProcessingJobSummaries"]) == 3
    assert _record(aws)["checkpoint_evaluations_started"] == 3


class _QuotaFull:
    """SageMaker whose account has no Processing job left (ResourceLimitExceeded), else moto's."""

    def __init__(self, sagemaker: Any) -> None:
        self._sagemaker = sagemaker

    def create_processing_job(self, **request: Any) -> dict[str, Any]:
        error = {"Code": "ResourceLimitExceeded", "Message": "The account-level service limit was exceeded"}
        raise ClientError({"Error": error}, "CreateProcessingJob")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sagemaker, name)


def test_a_full_processing_quota_leaves_the_checkpoint_unevaluated_and_the_place_free(aws, config):
    # GIVEN a running run and an account whose Processing quota is full
    _running_run(aws)
    # WHEN a checkpoint is due for evaluation
    result = _handle(_write_checkpoint(aws, "job-1", 100), aws, _config(config), _QuotaFull(aws.sagemaker))
    # THEN no job starts, the handler says why instead of failing (a retry would count it twice), and
    # the run's count is given back
    assert result["action"] == "not-started" and "ResourceLimitExceeded" in result["reason"]
    assert _record(aws)["checkpoint_evaluations_started"] == 0


class _LambdaStoppedError(Exception):
    """The function's time ran out (Lambda stops it; the event is delivered again)."""


class _SageMakerNames:
    """SageMaker's CreateProcessingJob as AWS answers it: a name in use is refused (ResourceInUse; moto
    replaces the job), and the first call may fail; else moto's SageMaker. `made` counts the jobs made."""

    def __init__(self, sagemaker: Any, *, fault: str = "", before: Any = None) -> None:
        self._sagemaker = sagemaker
        self.fault, self.before, self.made = fault, before, 0

    def create_processing_job(self, **request: Any) -> dict[str, Any]:
        if self.before is not None:  # something that happens just before the first call
            before, self.before = self.before, None
            before()
        fault, self.fault = self.fault, ""
        if fault == "throttled":
            error = {"Code": "ThrottlingException", "Message": "Rate exceeded"}
            raise ClientError({"Error": error}, "CreateProcessingJob")
        if fault == "crashed":
            raise _LambdaStoppedError
        name = request["ProcessingJobName"]
        known = self._sagemaker.list_processing_jobs()["ProcessingJobSummaries"]
        if name in {j["ProcessingJobName"] for j in known}:
            error = {"Code": "ResourceInUse", "Message": f"Processing job {name} already exists"}
            raise ClientError({"Error": error}, "CreateProcessingJob")
        made = self._sagemaker.create_processing_job(**request)
        self.made += 1
        if fault == "answer-lost":  # the job is made, its answer lost to a read time-out
            raise ReadTimeoutError(endpoint_url="https://api.sagemaker.us-east-1.amazonaws.com")
        return dict(made)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sagemaker, name)


def _jobs(aws: Any) -> list[str]:
    return [j["ProcessingJobName"] for j in aws.sagemaker.list_processing_jobs()["ProcessingJobSummaries"]]


@pytest.mark.parametrize(
    ("fault", "raised", "retried"),
    [
        ("throttled", ClientError, "started"),  # refused: no job
        ("crashed", _LambdaStoppedError, "started"),  # stopped between counting the step and making its job
        ("answer-lost", ReadTimeoutError, "duplicate"),  # the job made, the answer lost
    ],
)
def test_a_checkpoint_whose_job_was_not_made_is_evaluated_by_the_events_redelivery(
    aws, config, fault, raised, retried
):
    # GIVEN a running run evaluating every checkpoint, and SageMaker whose first CreateProcessingJob fails
    _running_run(aws)
    cfg = _config(config)
    sagemaker = _SageMakerNames(aws.sagemaker, fault=fault)
    event = _write_checkpoint(aws, "job-1", 100)
    # WHEN the checkpoint's event fails, and Lambda delivers it again (then once more)
    with pytest.raises(raised):
        _handle(event, aws, cfg, sagemaker)
    actions = [_handle(event, aws, cfg, sagemaker)["action"] for _ in range(2)]
    # THEN the checkpoint has its one evaluation job, holding one place of the run's, and nothing pending
    assert actions == [retried, "duplicate"]
    assert (_jobs(aws), sagemaker.made) == ([checkpoint_eval.job_name("job-1", 100)], 1)
    record = _record(aws)
    assert record["checkpoint_evaluations_started"] == 1
    assert record.get("checkpoint_evaluations_pending", []) == []


def test_a_checkpoint_event_delivered_again_after_its_job_started_makes_no_second_one(aws, config):
    # GIVEN a running run evaluating every checkpoint, a place left for each
    _running_run(aws)
    cfg = _config(config)
    sagemaker = _SageMakerNames(aws.sagemaker)
    event = _write_checkpoint(aws, "job-1", 100)
    # WHEN its event comes three times
    actions = [_handle(event, aws, cfg, sagemaker)["action"] for _ in range(3)]
    # THEN one job is made, and one place taken
    assert actions == ["started", "duplicate", "duplicate"]
    assert (_jobs(aws), sagemaker.made) == ([checkpoint_eval.job_name("job-1", 100)], 1)
    assert _record(aws)["checkpoint_evaluations_started"] == 1


def test_a_copy_handled_while_the_first_makes_the_job_makes_it_once(aws, config):
    # GIVEN a checkpoint's event delivered twice, the copy handled entirely after the first delivery
    # claimed the checkpoint's place and before it makes the job
    _running_run(aws)
    cfg = _config(config)
    event = _write_checkpoint(aws, "job-1", 100)
    copies: list[dict[str, Any]] = []
    sagemaker = _SageMakerNames(aws.sagemaker)
    sagemaker.before = lambda: copies.append(_handle(event, aws, cfg, sagemaker))
    # WHEN the first goes on
    first = _handle(event, aws, cfg, sagemaker)
    # THEN one of the two made the job, the other found it made; one place is taken
    assert sorted([first["action"], copies[0]["action"]]) == ["duplicate", "started"]
    assert (_jobs(aws), sagemaker.made) == ([checkpoint_eval.job_name("job-1", 100)], 1)
    assert _record(aws)["checkpoint_evaluations_started"] == 1


def test_a_job_made_before_its_checkpoint_was_pruned_keeps_its_place(aws, config):
    # GIVEN a run allowed one evaluation, whose first checkpoint's job was made but its answer lost
    _running_run(aws)
    cfg = _config(config, most=1)
    sagemaker = _SageMakerNames(aws.sagemaker, fault="answer-lost")
    event = _write_checkpoint(aws, "job-1", 100)
    with pytest.raises(ReadTimeoutError):
        _handle(event, aws, cfg, sagemaker)
    # AND the trainer pruned that checkpoint for good before the event came again
    detail = event.detail["object"]
    aws.s3.delete_object(Bucket=aws.artifact_bucket, Key=detail["key"], VersionId=detail["version-id"])
    # WHEN the event comes again, then a later checkpoint's
    again = _handle(event, aws, cfg, sagemaker)
    later = _handle(_write_checkpoint(aws, "job-1", 200), aws, cfg, sagemaker)
    # THEN the retry finds the job made (from the copy it read), and the run's one place stays taken
    assert (again["action"], later["action"]) == ("duplicate", "skipped")
    assert _jobs(aws) == [checkpoint_eval.job_name("job-1", 100)]
    assert _record(aws)["checkpoint_evaluations_started"] == 1


def _evaluation_failed(aws: Any, step: int) -> EventBridgeEvent:
    """The failed evaluation's state change as SageMaker sends it (no tags: the job has them)."""
    name = checkpoint_eval.job_name("job-1", step)
    known = {j["ProcessingJobName"] for j in aws.sagemaker.list_processing_jobs()["ProcessingJobSummaries"]}
    tags = {
        names.TAG_DATASET: DATASET,
        names.TAG_RUN_ID: RUN,
        names.TAG_CHECKPOINT_STEP: str(step),
        names.TAG_TRAINING_JOB: "job-1",
    }
    return EventBridgeEvent(processing_job_ended(aws, name, "Failed", None if name in known else tags))


def test_the_runs_curve_holds_at_most_checkpoint_evaluation_max_per_run_points(aws, config):
    # GIVEN a running run allowed 3 checkpoint evaluations
    _running_run(aws)
    cfg = _config(config, most=3)
    # WHEN five evaluations end (failures too, and repeated deliveries of an event)
    results = [_handle(_evaluation_failed(aws, step), aws, cfg) for step in (100, 200, 300, 300, 400)]
    # THEN the record keeps three points and says the others were not recorded
    assert [r["action"] for r in results] == ["recorded"] * 3 + ["not-recorded"] * 2
    assert [p["step"] for p in _record(aws)["checkpoint_evaluations"]] == [100, 200, 300]


def test_an_evaluations_end_delivered_twice_is_one_point_of_the_curve(aws, config):
    # GIVEN a running run whose curve has room for three points
    _running_run(aws)
    cfg = _config(config, most=3)
    # WHEN an evaluation's end comes twice, before another's (the curve is not full for the copy)
    results = [_handle(_evaluation_failed(aws, step), aws, cfg) for step in (100, 100, 200)]
    # THEN the copy adds no point
    assert [r["action"] for r in results] == ["recorded", "not-recorded", "recorded"]
    assert [p["step"] for p in _record(aws)["checkpoint_evaluations"]] == [100, 200]


class _Trials:
    """DescribeTrainingJob of a run's training jobs and ListTrainingJobsForHyperParameterTuningJob of its
    tuning job as SageMaker answers them (moto has neither), else moto's SageMaker."""

    TUNING = "tune"

    def __init__(self, sagemaker: Any, seconds: dict[str, tuple[int, int]], *, final: str = "") -> None:
        self._sagemaker = sagemaker
        self.seconds = seconds
        self.final = final
        self.described: list[str] = []
        self.pages = 0

    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]:  # noqa: N803 (boto3's name)
        self.described.append(TrainingJobName)
        training, billable = self.seconds[TrainingJobName]
        description: dict[str, Any] = {
            "TrainingJobName": TrainingJobName,
            "TrainingJobStatus": "Completed",
            "TrainingTimeInSeconds": training,
            "BillableTimeInSeconds": billable,
        }
        if TrainingJobName != self.final:
            arn = "arn:aws:sagemaker:us-east-1:123456789012:hyper-parameter-tuning-job/"
            description["TuningJobArn"] = arn + self.TUNING
        return description

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        assert request["HyperParameterTuningJobName"] == self.TUNING and request["MaxResults"] <= 100
        trials = sorted(job for job in self.seconds if job != self.final)
        start = int(request.get("NextToken", 0))
        end = start + request["MaxResults"]
        self.pages += 1
        page: dict[str, Any] = {"TrainingJobSummaries": [{"TrainingJobName": j} for j in trials[start:end]]}
        if end < len(trials):
            page["NextToken"] = str(end)
        return page

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sagemaker, name)


def _tuning_ended(status: str = "Completed") -> EventBridgeEvent:
    return EventBridgeEvent(
        {
            "detail-type": "SageMaker HyperParameter Tuning Job State Change",
            "source": "aws.sagemaker",
            "detail": {
                "HyperParameterTuningJobName": _Trials.TUNING,
                "HyperParameterTuningJobStatus": status,
                "Tags": {names.TAG_DATASET: DATASET, names.TAG_RUN_ID: RUN},
            },
        }
    )


def _checkpoint_keys(aws: Any) -> list[str]:
    listed = aws.s3.list_objects_v2(Bucket=aws.artifact_bucket, Prefix=names.checkpoint_prefix(DATASET, RUN))
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_an_ended_trial_empties_its_checkpoints_in_place_for_the_trials_that_start_meanwhile(aws, config):
    # GIVEN two trials of the run's tuning job with checkpoints under the trials' shared prefix, and the
    # listing a trial starting now takes of that prefix (SageMaker then reads every object it lists)
    _running_run(aws)
    for job in ("tune-001", "tune-002"):
        for step in (100, 200):
            _write_checkpoint(aws, job, step)
    listed = _checkpoint_keys(aws)
    sagemaker = _Trials(aws.sagemaker, {"tune-001": (100, 30), "tune-002": (100, 30)})
    # WHEN the first trial ends (the tuning job starts its next trial in the slot it frees)
    result = _handle(_job_ended("tune-001"), aws, _config(config), sagemaker)
    # THEN every listed object can still be read: the ended trial's are empty, the running one's whole
    sizes = {
        key: len(aws.s3.get_object(Bucket=aws.artifact_bucket, Key=key)["Body"].read()) for key in listed
    }
    assert result["checkpoints_emptied"] == 2
    assert {key.split("/")[3]: size for key, size in sizes.items()} == {"tune-001": 0, "tune-002": 7}


def test_a_trials_end_handled_while_its_tuning_job_ends_does_not_bring_deleted_checkpoints_back(aws, config):
    # GIVEN a trial's checkpoints, and its end event and its tuning job's arriving together: the tuning
    # job's end is handled between the trial's listing of its checkpoints and its emptying of them
    _running_run(aws)
    for step in (100, 200):
        _write_checkpoint(aws, "tune-001", step)
    sagemaker = _Trials(aws.sagemaker, {"tune-001": (100, 30)})
    interleaved: list[dict[str, Any]] = []
    listings = []

    def tuning_job_ends_now(**_: Any) -> None:
        listings.append(1)
        if len(listings) == 1:  # after the trial's own listing only (the tuning job's lists too)
            interleaved.append(_handle(_tuning_ended(), aws, _config(config), sagemaker))

    aws.s3.meta.events.register("after-call.s3.ListObjectsV2", tuning_job_ends_now)
    # WHEN the trial's end is handled
    result = _handle(_job_ended("tune-001"), aws, _config(config), sagemaker)
    # THEN the tuning job's end deleted both, and the trial emptied none back into existence
    assert interleaved[0]["checkpoints_dropped"] == 2
    assert result["checkpoints_emptied"] == 0
    assert _checkpoint_keys(aws) == []


def test_an_emptied_checkpoint_starts_no_evaluation(aws, config):
    # GIVEN a running run whose trial ended, its checkpoint emptied in place (S3 sends Object Created)
    _running_run(aws)
    _write_checkpoint(aws, "tune-001", 100)
    emptied = _write_checkpoint(aws, "tune-001", 100, body=b"")
    # WHEN that event arrives
    result = _handle(emptied, aws, _config(config))
    # THEN it is no checkpoint to evaluate, and takes no place of the run's evaluations
    assert result["action"] == "ignored"
    assert _record(aws).get("checkpoint_evaluations_started", 0) == 0


def test_an_ended_tuning_job_drops_every_trials_checkpoints_and_not_the_final_jobs(aws, config):
    # GIVEN 150 trials (two pages of the trial listing) and the final job, already writing checkpoints
    _running_run(aws)
    trials = [f"tune-{n:03d}" for n in range(1, 151)]
    for job in trials:
        _write_checkpoint(aws, job, 100)
    _write_checkpoint(aws, "final-job", 100)
    sagemaker = _Trials(aws.sagemaker, dict.fromkeys([*trials, "final-job"], (100, 30)), final="final-job")
    # WHEN the tuning job's end event arrives
    result = _handle(_tuning_ended("Stopped"), aws, _config(config), sagemaker)
    # THEN every trial's checkpoints are gone, the final job's stay
    assert (result["trials"], result["checkpoints_dropped"], sagemaker.pages) == (150, 150, 2)
    assert [key.split("/")[3] for key in _checkpoint_keys(aws)] == ["final-job"]


def test_the_final_job_drops_its_own_checkpoints_when_it_ends(aws, config):
    # GIVEN the final job's checkpoints (a prefix of its own) and a trial's
    _running_run(aws)
    _write_checkpoint(aws, "final-job", 100)
    _write_checkpoint(aws, "tune-001", 100)
    sagemaker = _Trials(aws.sagemaker, {"final-job": (100, 30), "tune-001": (100, 30)}, final="final-job")
    # WHEN the final job ends
    result = _handle(_job_ended("final-job"), aws, _config(config), sagemaker)
    # THEN its checkpoints are gone, its time is not a trial's, and the trial's checkpoints stay
    assert (result["checkpoints_dropped"], result["timed"]) == (1, False)
    assert [key.split("/")[3] for key in _checkpoint_keys(aws)] == ["tune-001"]


def test_an_ended_trial_adds_its_seconds_to_the_run_once(aws, config):
    # GIVEN a running run and two trials that ended
    _running_run(aws)
    sagemaker = _Trials(aws.sagemaker, {"tune-001": (100, 30), "tune-002": (300, 90)})
    # WHEN their end events arrive, the first one twice (EventBridge delivers at least once)
    for job in ("tune-001", "tune-002", "tune-001"):
        _handle(_job_ended(job), aws, _config(config), sagemaker)
    # THEN the run's totals hold each trial once
    record = _record(aws)
    assert (record["training_seconds"], record["billable_seconds"]) == (400, 120)
    assert record["timed_jobs"] == ["tune-001", "tune-002"]


def test_a_training_job_of_no_run_or_still_running_is_ignored(aws, config):
    _running_run(aws)
    running = _handle(_job_ended("tune-001", "InProgress"), aws, _config(config))
    untagged_event = _job_ended("other")
    untagged_event.raw_event["detail"]["Tags"] = {}
    untagged = _handle(untagged_event, aws, _config(config))
    assert (running["action"], untagged["action"]) == ("ignored", "ignored")


def test_a_checkpoint_s_event_delivered_twice_or_late_counts_once(aws, config):
    # GIVEN a running run evaluating every 2nd checkpoint
    _running_run(aws)
    cfg = _config(config, every=2)
    step_50, step_100 = _write_checkpoint(aws, "job-1", 50), _write_checkpoint(aws, "job-1", 100)
    # WHEN step 50's Object Created comes twice, then step 100's, then step 50's once more (late)
    actions = [_handle(event, aws, cfg)["action"] for event in (step_50, step_50, step_100, step_50)]
    # THEN the copies count for nothing: step 100 is the job's 2nd checkpoint and the one evaluated
    assert actions == ["skipped", "duplicate", "started", "duplicate"]
    assert _record(aws)["checkpoint_counts"] == {"job-1": 2}
    jobs = aws.sagemaker.list_processing_jobs()["ProcessingJobSummaries"]
    assert [j["ProcessingJobName"] for j in jobs] == [checkpoint_eval.job_name("job-1", 100)]
