"""Training jobs: the container contract, S3 artifacts, metrics, statuses, failures and limits."""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from retrain.embedded.sagemaker import SageMakerEmulator

from .conftest import BUCKET, ClockFromLine, container_processes, put_images, training_request, wait_training


def _tar_members(s3: Any, key: str) -> dict[str, bytes]:
    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_training_job_completes_with_model_metrics_and_artifacts(
    aws: dict[str, Any], emulator: SageMakerEmulator
) -> None:
    # GIVEN images under an S3 prefix and a training job over them
    # WHEN the job runs to the end
    arn = emulator.create_training_job(**training_request("job-ok"))["TrainingJobArn"]
    job = wait_training(emulator, "job-ok")

    # THEN it completed like SageMaker reports it, with model.tar.gz, output.tar.gz and final metrics
    assert arn == "arn:aws:sagemaker:us-east-1:123456789012:training-job/job-ok"
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert [t["Status"] for t in job["SecondaryStatusTransitions"]] == [
        "Starting",
        "Downloading",
        "Training",
        "Uploading",
        "Completed",
    ]
    assert job["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://{BUCKET}/output/job-ok/output/model.tar.gz"
    assert json.loads(_tar_members(aws["s3"], "output/job-ok/output/model.tar.gz")["model.pt"]) == {
        "steps": 8
    }
    seen = json.loads(_tar_members(aws["s3"], "output/job-ok/output/output.tar.gz")["tensors/seen.json"])
    assert seen["argv"] == ["--epochs", "2", "--lr", "0.05", "--steps-per-epoch", "4"]
    assert seen["channels"] == ["train"]
    metrics = {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}
    assert metrics == {"val-accuracy": pytest.approx(1.0), "train-loss": pytest.approx(1 / 8)}
    assert job["TrainingTimeInSeconds"] >= 1 and job["BillableTimeInSeconds"] == job["TrainingTimeInSeconds"]


def test_training_job_logs_go_to_the_sagemaker_log_group(
    aws: dict[str, Any], emulator: SageMakerEmulator
) -> None:
    # GIVEN a completed job
    emulator.create_training_job(**training_request("job-logs"))
    wait_training(emulator, "job-logs")

    # WHEN its log streams are listed
    streams = aws["logs"].describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs")["logStreams"]

    # THEN the stream is <job>/algo-1-<epoch seconds> and holds the metric lines
    names = [s["logStreamName"] for s in streams]
    assert len(names) == 1 and re.fullmatch(r"job-logs/algo-1-\d{10}", names[0])
    events = aws["logs"].get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=names[0])
    assert any("val-accuracy: " in e["message"] for e in events["events"])


def test_failing_job_reports_the_failure_file_as_failure_reason(emulator: SageMakerEmulator) -> None:
    # GIVEN a job whose program writes <base>/output/failure and exits non-zero
    request = training_request("job-fails", HyperParameters={"fail": "bad labels"})

    # WHEN it runs
    emulator.create_training_job(**request)
    job = wait_training(emulator, "job-fails")

    # THEN it is Failed with the file's text as FailureReason, and no model artifact
    assert job["TrainingJobStatus"] == "Failed"
    assert job["SecondaryStatus"] == "Failed"
    assert job["FailureReason"] == "AlgorithmError: ValueError: bad labels"
    assert job["ModelArtifacts"]["S3ModelArtifacts"] == ""


def test_missing_input_data_fails_the_job_with_a_client_error(
    make_emulator: Callable[..., SageMakerEmulator],
) -> None:
    # GIVEN a channel whose prefix holds no object
    emulator = make_emulator()

    # WHEN the job starts
    emulator.create_training_job(**training_request("job-nodata"))
    job = wait_training(emulator, "job-nodata")

    # THEN it fails in Downloading the way SageMaker words it
    assert job["TrainingJobStatus"] == "Failed"
    assert job["FailureReason"].startswith("ClientError: Data download failed:No S3 objects found")


def test_stop_training_job_ends_it_stopped(emulator: SageMakerEmulator) -> None:
    # GIVEN a slow running job
    request = training_request("job-stop", HyperParameters={"epochs": "50", "step-seconds": "0.1"})
    emulator.create_training_job(**request)

    # WHEN it is stopped
    emulator.stop_training_job(TrainingJobName="job-stop")
    job = wait_training(emulator, "job-stop")

    # THEN it ends Stopped, and stopping it again is refused
    assert job["TrainingJobStatus"] == "Stopped"
    assert job["SecondaryStatus"] == "Stopped"
    with pytest.raises(ClientError) as error:
        emulator.stop_training_job(TrainingJobName="job-stop")
    assert error.value.response["Error"]["Code"] == "ValidationException"


def test_max_runtime_stops_the_job_and_sigkills_a_container_that_ignores_sigterm(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator], tmp_path: Path
) -> None:
    # GIVEN a job longer than its MaxRuntimeInSeconds that ignores SIGTERM, its runtime counted from its
    # program's first line (then it ignores SIGTERM; a SIGTERM before would end it at once, with no SIGKILL
    # needed, and how long the toolkit takes to start it depends on the machine's load)
    put_images(aws["s3"], "data/train")
    clock = ClockFromLine(tmp_path / "sagemaker", "job-runtime", r"starting at step")
    emulator = make_emulator(grace_seconds=0.5, limit_clock=clock)
    request = training_request(
        "job-runtime",
        HyperParameters={"epochs": "100", "step-seconds": "0.1", "ignore-sigterm": "true"},
        StoppingCondition={"MaxRuntimeInSeconds": 2},
    )

    # WHEN it runs
    emulator.create_training_job(**request)
    job = wait_training(emulator, "job-runtime", timeout=60)

    # THEN SageMaker's MaxRuntimeExceeded ends it Stopped
    assert job["TrainingJobStatus"] == "Stopped"
    assert job["SecondaryStatus"] == "MaxRuntimeExceeded"
    # AND the container got SIGTERM, trained on, and was killed: it never ended on its own (400 steps
    # of 0.1 s), and no process of it is left
    log = (emulator.workdir / "training" / "job-runtime" / "logs" / "attempt-1.log").read_text()
    _, sigterm, after = log.partition("SIGTERM received: ignored")
    assert sigterm, f"the job was stopped before its program ignored SIGTERM: {log[-2000:]}"
    assert re.search(r"step=\d+ train-loss", after), after
    assert "finished at step" not in after and "interrupted at step" not in after
    assert max(int(step) for step in re.findall(r"step=(\d+) train-loss", log)) < 400
    assert container_processes() == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"RoleArn": None}, "Value null at 'roleArn'"),
        ({"TrainingJobName": "bad_name"}, "Member must satisfy regular expression pattern"),
        ({"EnableManagedSpotTraining": True}, "Invalid MaxWaitTimeInSeconds"),
        (
            {
                "EnableManagedSpotTraining": True,
                "StoppingCondition": {"MaxRuntimeInSeconds": 60, "MaxWaitTimeInSeconds": 30},
            },
            "greater than or equal to MaxRuntimeInSeconds",
        ),
        ({"HyperParameters": {"epochs": 2}}, "must be a string"),
        (
            {"ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 2, "VolumeSizeInGB": 5}},
            "one instance",
        ),
    ],
)
def test_invalid_requests_are_refused_with_validation_exception(
    make_emulator: Callable[..., SageMakerEmulator], change: dict[str, Any], message: str
) -> None:
    # GIVEN a request with one invalid field
    emulator = make_emulator()
    request = {k: v for k, v in {**training_request("job-invalid"), **change}.items() if v is not None}

    # WHEN it is submitted THEN SageMaker's ValidationException names the problem
    with pytest.raises(ClientError) as error:
        emulator.create_training_job(**request)
    assert error.value.response["Error"]["Code"] == "ValidationException"
    assert message in error.value.response["Error"]["Message"]


def test_duplicate_job_name_is_refused(emulator: SageMakerEmulator) -> None:
    # GIVEN a job that exists
    emulator.create_training_job(**training_request("job-twice"))

    # WHEN the same name is submitted again THEN it is refused
    with pytest.raises(ClientError) as error:
        emulator.create_training_job(**training_request("job-twice"))
    assert "already exists" in error.value.response["Error"]["Message"]
    wait_training(emulator, "job-twice")


def test_describe_unknown_job_is_a_validation_exception(
    make_emulator: Callable[..., SageMakerEmulator],
) -> None:
    with pytest.raises(ClientError) as error:
        make_emulator().describe_training_job(TrainingJobName="nobody")
    assert error.value.response["Error"]["Code"] == "ValidationException"
    assert "Requested resource not found" in error.value.response["Error"]["Message"]


def test_concurrent_job_limit_answers_resource_limit_exceeded(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN an account limit of one concurrent job, and one running
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(max_concurrent_training_jobs=1)
    emulator.create_training_job(
        **training_request("job-a", HyperParameters={"epochs": "20", "step-seconds": "0.1"})
    )

    # WHEN a second job is created THEN ResourceLimitExceeded
    with pytest.raises(ClientError) as error:
        emulator.create_training_job(**training_request("job-b"))
    assert error.value.response["Error"]["Code"] == "ResourceLimitExceeded"
    emulator.stop_training_job(TrainingJobName="job-a")


def test_injected_create_error_is_raised_once(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN the runtime's fault config asking for one ThrottlingException
    from retrain.embedded.faults import Faults

    put_images(aws["s3"], "data/train")
    emulator = make_emulator(faults=Faults.parse(["throttle:1"]))

    # WHEN CreateTrainingJob is called twice
    with pytest.raises(ClientError) as error:
        emulator.create_training_job(**training_request("job-throttled"))

    # THEN the first call is throttled and the retry is accepted
    assert error.value.response["Error"]["Code"] == "ThrottlingException"
    emulator.create_training_job(**training_request("job-throttled"))
    assert wait_training(emulator, "job-throttled")["TrainingJobStatus"] == "Completed"


def test_list_training_jobs_filters_and_sorts(emulator: SageMakerEmulator) -> None:
    # GIVEN a completed job and a failed job
    emulator.create_training_job(**training_request("list-ok"))
    emulator.create_training_job(**training_request("list-bad", HyperParameters={"fail": "x"}))
    wait_training(emulator, "list-ok")
    wait_training(emulator, "list-bad")

    # WHEN listing by status and by name
    failed = emulator.list_training_jobs(StatusEquals="Failed")["TrainingJobSummaries"]
    named = emulator.list_training_jobs(NameContains="list-", SortBy="Name")["TrainingJobSummaries"]

    # THEN the filters and order hold
    assert [s["TrainingJobName"] for s in failed] == ["list-bad"]
    assert [s["TrainingJobName"] for s in named] == ["list-bad", "list-ok"]


def test_sagemaker_program_environment_picks_the_entry_script_and_null_members_are_ignored(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator], code_dir: Any
) -> None:
    # GIVEN an image whose entry script is only reachable through SAGEMAKER_PROGRAM, and a request
    # with a member that a Step Functions path resolved to null
    put_images(aws["s3"], "data/train")
    (code_dir / "train.py").rename(code_dir / "entry.py")
    emulator = make_emulator()
    request = training_request("program-env", Environment={"SAGEMAKER_PROGRAM": "entry.py"}, VpcConfig=None)

    # WHEN the job runs
    emulator.create_training_job(**request)
    job = wait_training(emulator, "program-env")

    # THEN entry.py ran and the null member is absent from the description
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert "VpcConfig" not in job


def test_a_job_runs_with_one_intra_op_thread_unless_its_environment_says_otherwise(
    emulator: SageMakerEmulator,
) -> None:
    # GIVEN two jobs on one machine, one of which sets its own thread count
    emulator.create_training_job(**training_request("threads-default"))
    emulator.create_training_job(**training_request("threads-own", Environment={"OMP_NUM_THREADS": "3"}))
    # WHEN they run THEN the first gets one thread (concurrent jobs share the cores), the second its own
    for name, threads in (("threads-default", "1"), ("threads-own", "3")):
        assert wait_training(emulator, name)["TrainingJobStatus"] == "Completed"
        log = (emulator.workdir / "training" / name / "logs" / "attempt-1.log").read_text()
        assert f"OMP_NUM_THREADS={threads}\n" in log


def managed_debugger_request(name: str) -> dict[str, Any]:
    return training_request(
        name,
        DebugHookConfig={
            "LocalPath": "/opt/ml/output/tensors",
            "S3OutputPath": f"s3://{BUCKET}/debug",
            "HookParameters": {"save_interval": "2"},
        },
        DebugRuleConfigurations=[
            {
                "RuleConfigurationName": "LossNotDecreasing",
                "RuleEvaluatorImage": "img",
                "RuleParameters": {"rule_to_invoke": "LossNotDecreasing"},
            },
            {
                "RuleConfigurationName": "Gradients",
                "RuleEvaluatorImage": "img",
                "RuleParameters": {"rule_to_invoke": "VanishingGradient"},
            },
        ],
        ProfilerRuleConfigurations=[
            {
                "RuleConfigurationName": "CPUBottleneck",
                "RuleEvaluatorImage": "img",
                "RuleParameters": {"rule_to_invoke": "CPUBottleneck"},
            },
        ],
    )


def test_managed_debugger_writes_the_hook_config_runs_the_rules_and_uploads_tensors(
    aws: dict[str, Any], emulator: SageMakerEmulator
) -> None:
    # GIVEN a job with DebugHookConfig and Debugger/profiler rules
    # WHEN it runs
    emulator.create_training_job(**managed_debugger_request("managed-dbg"))
    first = emulator.describe_training_job(TrainingJobName="managed-dbg")
    job = wait_training(emulator, "managed-dbg")

    # THEN rules were InProgress, then report the image's rule check per configuration, and the
    # hook's tensors reached <S3OutputPath>/<job>/debug-output
    assert [s["RuleEvaluationStatus"] for s in first["DebugRuleEvaluationStatuses"]] == ["InProgress"] * 2
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    debug = {s["RuleConfigurationName"]: s for s in job["DebugRuleEvaluationStatuses"]}
    assert debug["LossNotDecreasing"]["RuleEvaluationStatus"] == "IssuesFound"
    assert debug["LossNotDecreasing"]["StatusDetails"] == "checked 1 files at step 4"
    assert debug["Gradients"]["RuleEvaluationStatus"] == "NoIssuesFound"
    assert [s["RuleEvaluationStatus"] for s in job["ProfilerRuleEvaluationStatuses"]] == ["NoIssuesFound"]
    assert all(
        re.fullmatch(
            r"arn:aws:sagemaker:us-east-1:123456789012:processing-job/managed-dbg-.+-[0-9a-f]{8}", arn
        )
        for arn in (s["RuleEvaluationJobArn"] for s in job["DebugRuleEvaluationStatuses"])
    )
    key = "debug/managed-dbg/debug-output/events/000000000000.tfevents"
    assert aws["s3"].get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"tensors"


def test_rules_of_a_failed_job_are_stopped(emulator: SageMakerEmulator) -> None:
    # GIVEN a managed-Debugger job whose container fails
    request = managed_debugger_request("managed-fails")
    request["HyperParameters"] = {"fail": "boom"}

    # WHEN it ends THEN its rules are Stopped, not left InProgress
    emulator.create_training_job(**request)
    job = wait_training(emulator, "managed-fails")
    assert job["TrainingJobStatus"] == "Failed"
    assert {s["RuleEvaluationStatus"] for s in job["DebugRuleEvaluationStatuses"]} == {"Stopped"}
