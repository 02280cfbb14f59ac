"""AWS's own clients read what the embedded SageMaker made, as they read AWS: boto3's paginators and waiters,
the SageMaker SDK's typed resources (sagemaker-core) and the AWS CLI, through the gated moto server, signed
as an IAM role whose policy allows SageMaker's List and Describe actions.

One run, made once for the module through the ordinary Create* calls: training, processing and tuning jobs
that really ran the stand-in programs, and a model registry, in two batches either side of `boundary`.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.sagemaker.models import sagemaker_backends

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.gatekeeper.gate import Gatekeeper
from retrain.embedded.gatekeeper.iam.evaluator import Policy, PolicyEvaluator
from retrain.embedded.gatekeeper.iam.principals import Credentials, Principals
from retrain.embedded.sagemaker import JobContext, SageMakerEmulator, SchedulerSettings, api_installed
from retrain.embedded.server import gated_moto_server

from .conftest import BUCKET, put_images, stand_in_image, training_request
from .test_channels_and_processing import processing_request
from .test_tuning import tuning_request

READER_ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/sagemaker-reader"
NARROW_ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/processing-job-reader"
READER = Policy(
    "reader",
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["sagemaker:List*", "sagemaker:Describe*"], "Resource": "*"}
        ],
    },
)
# ListProcessingJobs has no resource type: a statement naming processing jobs does not grant it.
NARROW = Policy(
    "narrow",
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "sagemaker:ListProcessingJobs",
                "Resource": f"arn:aws:sagemaker:{REGION}:{ACCOUNT_ID}:processing-job/*",
            }
        ],
    },
)
INFERENCE = {
    "Containers": [{"Image": "img", "ModelDataUrl": f"s3://{BUCKET}/model.tar.gz"}],
    "SupportedContentTypes": ["application/x-image"],
    "SupportedResponseMIMETypes": ["application/json"],
}
# What the run makes, in creation order, before and after the boundary.
EVALUATIONS = (["eval-1", "eval-2"], ["eval-3", "eval-fail", "eval-4"])
TRAININGS = (["train-a", "train-b"], ["train-fail"])
TUNINGS = (["tune-a"], ["tune-b", "tune-c"])
GROUPS = (["flowers", "birds"], ["cars"])
MODEL = botocore.session.get_session().get_service_model("sagemaker")
# ListModelPackages is called as the operator (held to the API's contract, not authorised): the gatekeeper
# cannot decide it for a role yet, as iam-simulate answers an action with a resource type (model-package,
# optional here) on "*" as "is any model package allowed?" rather than as one request.


@dataclass(frozen=True)
class Stack:
    endpoint: str
    emulator: SageMakerEmulator
    reader: Credentials
    narrow: Credentials
    boundary: datetime.datetime  # every job before it had ended when the second batch was created
    flowers: list[str]  # the ARNs of the flowers group's versions 1, 2, 3

    def client(self, credentials: Credentials | None = None) -> Any:
        key = credentials.access_key_id if credentials else "operator"
        secret = credentials.secret_access_key if credentials else "operator"
        return boto3.client(
            "sagemaker",
            region_name=REGION,
            endpoint_url=self.endpoint,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=Config(retries={"max_attempts": 1}),
        )

    def session(self, credentials: Credentials | None = None) -> boto3.Session:
        """A boto3 session for the SageMaker SDK, signed as the role of `credentials` or the operator."""
        return boto3.Session(
            aws_access_key_id=credentials.access_key_id if credentials else "operator",
            aws_secret_access_key=credentials.secret_access_key if credentials else "operator",
            region_name=REGION,
        )


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _first_batch(sagemaker: Any) -> list[str]:
    for name in GROUPS[0]:
        sagemaker.create_model_package_group(ModelPackageGroupName=name)
    versions = [
        sagemaker.create_model_package(
            ModelPackageGroupName="flowers", ModelApprovalStatus=status, InferenceSpecification=INFERENCE
        )["ModelPackageArn"]
        for status in ("Approved", "Rejected")
    ]
    sagemaker.create_model_package(
        ModelPackageName="standalone-model",
        ModelPackageDescription="an unversioned package",
        InferenceSpecification=INFERENCE,
    )
    for name in TRAININGS[0]:
        sagemaker.create_training_job(**training_request(name))
    for name in EVALUATIONS[0]:
        sagemaker.create_processing_job(**processing_request(name))
    sagemaker.create_hyper_parameter_tuning_job(**tuning_request("tune-a", jobs=3, parallel=2))
    return versions


def _second_batch(sagemaker: Any) -> str:
    sagemaker.create_model_package_group(ModelPackageGroupName="cars")
    version = sagemaker.create_model_package(
        ModelPackageGroupName="flowers",
        ModelApprovalStatus="PendingManualApproval",
        InferenceSpecification=INFERENCE,
    )["ModelPackageArn"]
    sagemaker.create_training_job(**training_request("train-fail", HyperParameters={"fail": "bad labels"}))
    for name in EVALUATIONS[1]:
        arguments = ("--fail", "no model") if name == "eval-fail" else ()
        sagemaker.create_processing_job(**processing_request(name, *arguments))
    sagemaker.create_hyper_parameter_tuning_job(**tuning_request("tune-b", jobs=1, parallel=1))
    sagemaker.create_hyper_parameter_tuning_job(
        **tuning_request("tune-c", strategy="Random", jobs=1, parallel=1)
    )
    return str(version)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    sagemaker_backends[ACCOUNT_ID][REGION].reset()
    principals = Principals()
    reader = principals.add(READER_ROLE, [READER])
    narrow = principals.add(NARROW_ROLE, [NARROW])
    root = tmp_path_factory.mktemp("aws-clients")
    image = stand_in_image(root / "image")
    with PolicyEvaluator(account=ACCOUNT_ID) as evaluator, pytest.MonkeyPatch.context() as env:
        port = _port()
        endpoint = f"http://127.0.0.1:{port}"
        # The SageMaker SDK makes its own boto3 clients: it reaches the stack as any AWS client does.
        env.setenv("AWS_ENDPOINT_URL", endpoint)
        server = gated_moto_server(
            Gatekeeper(principals, evaluator, region=REGION, account=ACCOUNT_ID),
            ip_address="127.0.0.1",
            port=port,
        )
        try:

            def operator(service: str) -> Any:
                return boto3.client(
                    service,
                    region_name=REGION,
                    endpoint_url=endpoint,
                    aws_access_key_id="operator",
                    aws_secret_access_key="operator",
                )

            s3, logs = operator("s3"), operator("logs")
            s3.create_bucket(Bucket=BUCKET)
            put_images(s3, "data/train")
            emulator = SageMakerEmulator(
                root / "sagemaker",
                JobContext(s3=s3, logs=logs, image=image, grace_seconds=3.0),
                settings=SchedulerSettings(tuning_seed=1),
            )
            try:
                with api_installed(emulator):
                    sagemaker = operator("sagemaker")
                    versions = _first_batch(sagemaker)
                    assert emulator.wait(180)
                    time.sleep(1.1)
                    boundary = datetime.datetime.now(datetime.UTC)
                    time.sleep(1.1)
                    versions.append(_second_batch(sagemaker))
                    assert emulator.wait(180)
                    yield Stack(endpoint, emulator, reader, narrow, boundary, versions)
            finally:
                emulator.close()
        finally:
            server.stop()
            sagemaker_backends[ACCOUNT_ID][REGION].reset()


def _names(summaries: list[dict[str, Any]], key: str) -> list[str]:
    return [str(s[key]) for s in summaries]


def missing_required(operation: str, response: dict[str, Any]) -> list[str]:
    """The members botocore's output shape of `operation` marks required that `response` lacks, at any
    depth, and the members of the wrong type (timestamps must be parsed, timezone-aware datetimes)."""
    found: list[str] = []
    types: dict[str, Any] = {
        "string": str,
        "integer": int,
        "long": int,
        "boolean": bool,
        "double": (int, float),
        "float": (int, float),
        "timestamp": datetime.datetime,
        "structure": dict,
        "map": dict,
        "list": list,
    }

    def walk(shape: Any, value: Any, path: str) -> None:
        wanted = types.get(shape.type_name)
        if wanted is not None and not isinstance(value, wanted):
            found.append(f"{path}: {type(value).__name__}, not {shape.type_name}")
            return
        if shape.type_name == "timestamp" and value.tzinfo is None:
            found.append(f"{path}: a naive datetime")
        if shape.type_name == "structure":
            found.extend(f"{path}.{name}: missing" for name in shape.required_members if name not in value)
            for name, member in value.items():
                if name in shape.members:
                    walk(shape.members[name], member, f"{path}.{name}")
        elif shape.type_name == "list":
            for index, item in enumerate(value):
                walk(shape.member, item, f"{path}[{index}]")
        elif shape.type_name == "map":
            for key, item in value.items():
                walk(shape.value, item, f"{path}[{key}]")

    walk(MODEL.operation_model(operation).output_shape, response, operation)
    return found


# -- boto3 paginators ---------------------------------------------------------------------------------


def test_the_processing_jobs_paginator_pages_through_every_processing_job_of_the_run(stack: Stack) -> None:
    # GIVEN the run's five evaluations, WHEN a role pages through ListProcessingJobs two at a time
    paginator = stack.client(stack.reader).get_paginator("list_processing_jobs")
    pages = list(paginator.paginate(NameContains="eval-", PaginationConfig={"PageSize": 2}))

    # THEN each job comes back once, oldest first (the service's default order), over three pages
    assert [len(page["ProcessingJobSummaries"]) for page in pages] == [2, 2, 1]
    summaries = [s for page in pages for s in page["ProcessingJobSummaries"]]
    assert _names(summaries, "ProcessingJobName") == [*EVALUATIONS[0], *EVALUATIONS[1]]


def test_the_training_jobs_paginator_pages_through_the_training_jobs_of_the_run(stack: Stack) -> None:
    # GIVEN three training jobs and the trials of three tuning jobs
    paginator = stack.client(stack.reader).get_paginator("list_training_jobs")

    # WHEN a role pages through ListTrainingJobs two at a time, newest first
    result = paginator.paginate(SortOrder="Descending", PaginationConfig={"PageSize": 2}).build_full_result()

    # THEN it sees every job the emulator ran, each once, newest first
    names = _names(result["TrainingJobSummaries"], "TrainingJobName")
    assert sorted(names) == sorted(name for name, _ in stack.emulator.jobs.snapshots("training"))
    assert len(names) == len(set(names)) >= 3 + 3 + 1 + 1
    created = [s["CreationTime"] for s in result["TrainingJobSummaries"]]
    assert created == sorted(created, reverse=True)


def test_the_tuning_jobs_paginator_lists_each_tuning_job_with_its_trial_counters(stack: Stack) -> None:
    # GIVEN three tuning jobs, WHEN a role pages through ListHyperParameterTuningJobs one at a time
    sagemaker = stack.client(stack.reader)
    pages = list(
        sagemaker.get_paginator("list_hyper_parameter_tuning_jobs").paginate(PaginationConfig={"PageSize": 1})
    )

    # THEN it gets them by name (the service's default order), each summary agreeing with its description
    summaries = [s for page in pages for s in page["HyperParameterTuningJobSummaries"]]
    assert len(pages) == 3
    assert _names(summaries, "HyperParameterTuningJobName") == ["tune-a", "tune-b", "tune-c"]
    for summary in summaries:
        job = sagemaker.describe_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=summary["HyperParameterTuningJobName"]
        )
        assert summary["Strategy"] == job["HyperParameterTuningJobConfig"]["Strategy"]
        assert summary["ResourceLimits"] == job["HyperParameterTuningJobConfig"]["ResourceLimits"]
        assert summary["TrainingJobStatusCounters"] == job["TrainingJobStatusCounters"]
        assert summary["ObjectiveStatusCounters"] == job["ObjectiveStatusCounters"]
        assert summary["HyperParameterTuningJobStatus"] == "Completed"


def test_the_model_packages_paginator_pages_through_every_version(stack: Stack) -> None:
    # GIVEN three versions in the flowers group and an unversioned package
    paginator = stack.client().get_paginator("list_model_packages")

    # WHEN the versions are paged through one at a time
    result = paginator.paginate(
        ModelPackageType="Versioned", PaginationConfig={"PageSize": 1}
    ).build_full_result()

    # THEN they come oldest first, each with its group and version
    summaries = result["ModelPackageSummaryList"]
    assert _names(summaries, "ModelPackageArn") == stack.flowers
    assert [(s["ModelPackageGroupName"], s["ModelPackageVersion"]) for s in summaries] == [
        ("flowers", 1),
        ("flowers", 2),
        ("flowers", 3),
    ]


def test_the_model_package_groups_paginator_sorts_groups_by_name(stack: Stack) -> None:
    # GIVEN three groups, WHEN a role pages through them two at a time by name
    paginator = stack.client(stack.reader).get_paginator("list_model_package_groups")
    pages = list(paginator.paginate(SortBy="Name", PaginationConfig={"PageSize": 2}))

    # THEN it gets them in name order over two pages
    summaries = [s for page in pages for s in page["ModelPackageGroupSummaryList"]]
    assert _names(summaries, "ModelPackageGroupName") == ["birds", "cars", "flowers"]
    assert len(pages) == 2
    assert {s["ModelPackageGroupStatus"] for s in summaries} == {"Completed"}


# -- filters and sorting ------------------------------------------------------------------------------


def test_processing_jobs_filter_by_status_and_carry_their_failure_reason(stack: Stack) -> None:
    # WHEN a role lists the failed processing jobs
    summaries = stack.client(stack.reader).list_processing_jobs(StatusEquals="Failed")[
        "ProcessingJobSummaries"
    ]

    # THEN it gets the one evaluation that failed, with its reason
    assert _names(summaries, "ProcessingJobName") == ["eval-fail"]
    assert summaries[0]["FailureReason"] == "AlgorithmError: RuntimeError: no model"


def test_processing_jobs_sort_by_name_descending(stack: Stack) -> None:
    # WHEN a role lists the evaluations by name, descending
    summaries = stack.client(stack.reader).list_processing_jobs(
        NameContains="eval-", SortBy="Name", SortOrder="Descending"
    )["ProcessingJobSummaries"]

    # THEN they come in reverse name order
    assert _names(summaries, "ProcessingJobName") == sorted([*EVALUATIONS[0], *EVALUATIONS[1]], reverse=True)


@pytest.mark.parametrize(
    ("method", "key", "name", "batches"),
    [
        ("list_processing_jobs", "ProcessingJobSummaries", "ProcessingJobName", EVALUATIONS),
        ("list_training_jobs", "TrainingJobSummaries", "TrainingJobName", TRAININGS),
        (
            "list_hyper_parameter_tuning_jobs",
            "HyperParameterTuningJobSummaries",
            "HyperParameterTuningJobName",
            TUNINGS,
        ),
    ],
)
def test_creation_and_modification_times_split_the_jobs_at_a_moment(
    stack: Stack, method: str, key: str, name: str, batches: tuple[list[str], list[str]]
) -> None:
    # GIVEN jobs that had all ended before the boundary and jobs created after it
    sagemaker = stack.client(stack.reader)

    def listed(**filters: Any) -> list[str]:
        found = getattr(sagemaker, method)(SortBy="CreationTime", MaxResults=100, **filters)[key]
        return [n for n in _names(found, name) if n in batches[0] + batches[1]]

    # WHEN a role lists them on either side of the boundary, by creation and by modification time
    # THEN each filter keeps its side
    assert listed(CreationTimeBefore=stack.boundary) == batches[0]
    assert listed(CreationTimeAfter=stack.boundary) == batches[1]
    assert listed(LastModifiedTimeBefore=stack.boundary) == batches[0]
    assert listed(LastModifiedTimeAfter=stack.boundary) == batches[1]


def test_tuning_jobs_filter_by_status_and_sort_by_creation_time(stack: Stack) -> None:
    # WHEN a role lists the completed tuning jobs, newest first
    summaries = stack.client(stack.reader).list_hyper_parameter_tuning_jobs(
        StatusEquals="Completed", SortBy="CreationTime", SortOrder="Descending"
    )["HyperParameterTuningJobSummaries"]

    # THEN they come newest first
    assert _names(summaries, "HyperParameterTuningJobName") == ["tune-c", "tune-b", "tune-a"]


def test_a_status_filter_with_max_results_filters_each_page_after_it_was_cut(stack: Stack) -> None:
    # GIVEN one failed training job, created after five that completed
    sagemaker = stack.client(stack.reader)

    # WHEN a role asks for failed jobs two at a time
    first = sagemaker.list_training_jobs(StatusEquals="Failed", MaxResults=2)
    every = (
        sagemaker.get_paginator("list_training_jobs")
        .paginate(StatusEquals="Failed", PaginationConfig={"PageSize": 2})
        .build_full_result()
    )

    # THEN, as the service documents, the first page holds the failed ones among the first two jobs (none)
    # and a token; the paginator, which follows the tokens, finds the failed job
    assert first["TrainingJobSummaries"] == []
    assert first["NextToken"]
    assert _names(every["TrainingJobSummaries"], "TrainingJobName") == ["train-fail"]
    assert every["TrainingJobSummaries"][0]["SecondaryStatus"] == "Failed"


def test_warm_pool_and_training_plan_filters_match_no_job_of_the_embedded_stack(stack: Stack) -> None:
    # GIVEN training jobs without warm pools or training plans (the embedded stack has neither)
    sagemaker = stack.client(stack.reader)
    plan = f"arn:aws:sagemaker:{REGION}:{ACCOUNT_ID}:training-plan/reserved-capacity-plan"

    # WHEN a role filters on them THEN no job matches
    assert sagemaker.list_training_jobs(WarmPoolStatusEquals="Available")["TrainingJobSummaries"] == []
    assert sagemaker.list_training_jobs(TrainingPlanArnEquals=plan)["TrainingJobSummaries"] == []


def test_model_packages_of_every_kind_filter_by_approval_status(stack: Stack) -> None:
    # WHEN the approved packages of every kind, and the rejected versions, are listed
    sagemaker = stack.client()
    approved = sagemaker.list_model_packages(ModelPackageType="Both", ModelApprovalStatus="Approved")
    rejected = sagemaker.list_model_packages(ModelPackageType="Versioned", ModelApprovalStatus="Rejected")

    # THEN version 1 is the approved one (the unversioned package has no approval status), version 2 rejected
    assert _names(approved["ModelPackageSummaryList"], "ModelPackageArn") == stack.flowers[:1]
    assert _names(rejected["ModelPackageSummaryList"], "ModelPackageArn") == stack.flowers[1:2]


def test_model_package_type_selects_unversioned_versioned_or_both(stack: Stack) -> None:
    # GIVEN one unversioned package and three versions
    sagemaker = stack.client()

    def arns(**request: Any) -> list[str]:
        return _names(sagemaker.list_model_packages(**request)["ModelPackageSummaryList"], "ModelPackageArn")

    standalone = f"arn:aws:sagemaker:{REGION}:{ACCOUNT_ID}:model-package/standalone-model"
    # WHEN a role lists them by type THEN unversioned is the default, and Both has all, oldest first
    assert arns() == [standalone]
    assert arns(ModelPackageType="Versioned") == stack.flowers
    assert arns(ModelPackageType="Both") == [*stack.flowers[:2], standalone, stack.flowers[2]]


def test_model_packages_and_groups_filter_by_creation_time(stack: Stack) -> None:
    # GIVEN a version and a group created after the boundary
    sagemaker = stack.client(stack.reader)

    # WHEN a role lists what was created after it
    packages = stack.client().list_model_packages(
        ModelPackageGroupName="flowers", CreationTimeAfter=stack.boundary
    )
    groups = sagemaker.list_model_package_groups(CreationTimeAfter=stack.boundary)

    # THEN it gets only those
    assert _names(packages["ModelPackageSummaryList"], "ModelPackageArn") == stack.flowers[2:]
    assert _names(groups["ModelPackageGroupSummaryList"], "ModelPackageGroupName") == GROUPS[1]


def test_cross_account_groups_are_none_as_no_other_account_shares_with_the_stack(stack: Stack) -> None:
    # WHEN a role lists the groups other accounts share with it, and its own
    sagemaker = stack.client(stack.reader)
    shared = sagemaker.list_model_package_groups(CrossAccountFilterOption="CrossAccount")
    own = sagemaker.list_model_package_groups(CrossAccountFilterOption="SameAccount")

    # THEN there are none shared, and its own are the run's, oldest first
    assert shared["ModelPackageGroupSummaryList"] == []
    assert _names(own["ModelPackageGroupSummaryList"], "ModelPackageGroupName") == [*GROUPS[0], *GROUPS[1]]


# -- shapes -------------------------------------------------------------------------------------------


def test_list_and_describe_responses_carry_every_member_botocore_requires(stack: Stack) -> None:
    # GIVEN one resource of each kind the run made
    sagemaker = stack.client(stack.reader)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("ListTrainingJobs", {"MaxResults": 100}),
        ("ListProcessingJobs", {"MaxResults": 100}),
        ("ListHyperParameterTuningJobs", {"MaxResults": 100}),
        ("ListTrainingJobsForHyperParameterTuningJob", {"HyperParameterTuningJobName": "tune-a"}),
        ("ListModelPackages", {"ModelPackageType": "Both", "MaxResults": 100}),
        ("ListModelPackageGroups", {}),
        ("DescribeTrainingJob", {"TrainingJobName": "train-fail"}),
        ("DescribeProcessingJob", {"ProcessingJobName": "eval-fail"}),
        ("DescribeHyperParameterTuningJob", {"HyperParameterTuningJobName": "tune-a"}),
        ("DescribeModelPackageGroup", {"ModelPackageGroupName": "flowers"}),
        ("DescribeModelPackage", {"ModelPackageName": stack.flowers[0]}),
        ("DescribeModelPackage", {"ModelPackageName": "standalone-model"}),
    ]

    # WHEN a role makes each call (the operator ListModelPackages)
    responses = {
        (operation, json.dumps(request)): getattr(
            stack.client() if operation == "ListModelPackages" else sagemaker, botocore.xform_name(operation)
        )(**request)
        for operation, request in calls
    }

    # THEN nothing botocore's model requires is missing, and every timestamp is parsed and aware
    problems = [
        p for (operation, _), response in responses.items() for p in missing_required(operation, response)
    ]
    assert problems == []
    # (and no list came back empty, so each summary shape was checked)
    listed = [r for (operation, _), r in responses.items() if operation.startswith("List")]
    assert all(any(isinstance(value, list) and value for value in r.values()) for r in listed)


# -- boto3 waiters --------------------------------------------------------------------------------------


def test_a_waiter_sees_each_running_processing_job_a_role_lists_end(stack: Stack) -> None:
    # GIVEN an evaluation that runs for a while
    stack.client().create_processing_job(**processing_request("wait-eval", "--sleep", "1.5"))
    sagemaker = stack.client(stack.reader)

    # WHEN a role lists the running ones and waits for each with boto3's waiter
    running = (
        sagemaker.get_paginator("list_processing_jobs")
        .paginate(StatusEquals="InProgress", NameContains="wait-")
        .build_full_result()["ProcessingJobSummaries"]
    )
    for summary in running:
        sagemaker.get_waiter("processing_job_completed_or_stopped").wait(
            ProcessingJobName=summary["ProcessingJobName"], WaiterConfig={"Delay": 0.5, "MaxAttempts": 60}
        )

    # THEN it found the job running, and the waiter returned once the job completed
    assert _names(running, "ProcessingJobName") == ["wait-eval"]
    assert (
        sagemaker.describe_processing_job(ProcessingJobName="wait-eval")["ProcessingJobStatus"] == "Completed"
    )


def test_a_waiter_sees_each_running_training_job_a_role_lists_end(stack: Stack) -> None:
    # GIVEN a training job that runs for a while
    slow = {"epochs": "2", "steps-per-epoch": "4", "step-seconds": "0.2"}
    stack.client().create_training_job(**training_request("wait-train", HyperParameters=slow))
    sagemaker = stack.client(stack.reader)

    # WHEN a role lists the running ones and waits for each with boto3's waiter
    running = (
        sagemaker.get_paginator("list_training_jobs")
        .paginate(StatusEquals="InProgress", NameContains="wait-")
        .build_full_result()["TrainingJobSummaries"]
    )
    for summary in running:
        sagemaker.get_waiter("training_job_completed_or_stopped").wait(
            TrainingJobName=summary["TrainingJobName"], WaiterConfig={"Delay": 0.5, "MaxAttempts": 60}
        )

    # THEN it found the job running, and the waiter returned once the job completed
    assert _names(running, "TrainingJobName") == ["wait-train"]
    assert sagemaker.describe_training_job(TrainingJobName="wait-train")["TrainingJobStatus"] == "Completed"


# -- the SageMaker SDK's typed resources (sagemaker-core) ------------------------------------------------


def test_sdk_processing_jobs_are_listed_as_typed_resources(stack: Stack) -> None:
    from sagemaker.core.resources import ProcessingJob

    # WHEN the SDK lists the completed evaluations as the reader role
    jobs = list(
        ProcessingJob.get_all(
            name_contains="eval-",
            status_equals="Completed",
            session=stack.session(stack.reader),
            region=REGION,
        )
    )

    # THEN each is a full ProcessingJob, described, as the run made it
    assert [job.processing_job_name for job in jobs] == ["eval-1", "eval-2", "eval-3", "eval-4"]
    assert {job.processing_job_status for job in jobs} == {"Completed"}
    assert jobs[0].processing_resources.cluster_config.instance_type == "ml.m5.large"
    assert jobs[0].processing_end_time.tzinfo is not None


def test_sdk_training_jobs_filter_by_creation_time(stack: Stack) -> None:
    from sagemaker.core.resources import TrainingJob

    # WHEN the SDK lists the training jobs created after the boundary, by name
    jobs = list(
        TrainingJob.get_all(
            creation_time_after=stack.boundary,
            name_contains="train-",
            session=stack.session(stack.reader),
            region=REGION,
        )
    )

    # THEN it gets the failed one, with its reason
    assert [job.training_job_name for job in jobs] == ["train-fail"]
    assert jobs[0].failure_reason == "AlgorithmError: ValueError: bad labels"


def test_sdk_tuning_jobs_and_their_trials_are_listed_as_typed_resources(stack: Stack) -> None:
    from sagemaker.core.resources import HyperParameterTuningJob

    # WHEN the SDK lists the tuning jobs newest first, and the first one's trials
    jobs = list(
        HyperParameterTuningJob.get_all(
            sort_by="CreationTime",
            sort_order="Descending",
            session=stack.session(stack.reader),
            region=REGION,
        )
    )
    oldest = jobs[-1]
    trials = list(oldest.get_all_training_jobs(sort_by="FinalObjectiveMetricValue", sort_order="Descending"))

    # THEN the jobs come newest first, and the best trial first, as the tuning job reports it
    assert [job.hyper_parameter_tuning_job_name for job in jobs] == ["tune-c", "tune-b", "tune-a"]
    assert jobs[0].hyper_parameter_tuning_job_config.strategy == "Random"
    assert len(trials) == 3
    assert trials[0].training_job_name == oldest.best_training_job.training_job_name


def test_sdk_model_package_groups_and_versions_are_listed_as_typed_resources(stack: Stack) -> None:
    from sagemaker.core.resources import ModelPackage, ModelPackageGroup

    # WHEN the SDK lists the groups by name and the flowers group's approved versions
    groups = list(
        ModelPackageGroup.get_all(sort_by="Name", session=stack.session(stack.reader), region=REGION)
    )
    approved = list(
        ModelPackage.get_all(
            model_package_group_name="flowers",
            model_approval_status="Approved",
            session=stack.session(),
            region=REGION,
        )
    )

    # THEN it gets every group, and version 1, named as the service names versions
    assert [group.model_package_group_name for group in groups] == ["birds", "cars", "flowers"]
    assert [package.model_package_arn for package in approved] == stack.flowers[:1]
    assert approved[0].model_package_name == "flowers"
    assert approved[0].model_package_version == 1


def test_sdk_gets_a_model_package_version_by_its_arn(stack: Stack) -> None:
    from sagemaker.core.resources import ModelPackage

    # WHEN the SDK gets version 3 of the flowers group
    package = ModelPackage.get(stack.flowers[2], session=stack.session(stack.reader), region=REGION)

    # THEN it has its group's name, as DescribeModelPackage requires, and its approval status
    assert package.model_package_name == "flowers"
    assert package.model_package_group_name == "flowers"
    assert package.model_approval_status == "PendingManualApproval"


# -- the AWS CLI -----------------------------------------------------------------------------------------


def aws(stack: Stack, tmp_path: Path, *arguments: str, as_reader: bool = True) -> Any:
    """`aws <arguments> --output json` as the reader role (or the operator), with no configuration but
    the environment's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID=stack.reader.access_key_id if as_reader else "operator",
        AWS_SECRET_ACCESS_KEY=stack.reader.secret_access_key if as_reader else "operator",
        AWS_DEFAULT_REGION=REGION,
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
        AWS_PAGER="",
    )
    done = subprocess.run(
        [sys.executable, "-m", "awscli", *arguments, "--endpoint-url", stack.endpoint, "--output", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_cli_lists_every_processing_job_page_by_page(stack: Stack, tmp_path: Path) -> None:
    # WHEN `aws sagemaker list-processing-jobs` pages through the evaluations two at a time
    listed = aws(
        stack, tmp_path, "sagemaker", "list-processing-jobs", "--name-contains", "eval-", "--page-size", "2"
    )

    # THEN it prints all five, oldest first
    assert _names(listed["ProcessingJobSummaries"], "ProcessingJobName") == [*EVALUATIONS[0], *EVALUATIONS[1]]


def test_the_cli_lists_the_tuning_jobs_by_status(stack: Stack, tmp_path: Path) -> None:
    # WHEN `aws sagemaker list-hyper-parameter-tuning-jobs` asks for the completed ones
    listed = aws(
        stack, tmp_path, "sagemaker", "list-hyper-parameter-tuning-jobs", "--status-equals", "Completed"
    )

    # THEN it prints the three tuning jobs by name, with their strategies
    summaries = listed["HyperParameterTuningJobSummaries"]
    assert _names(summaries, "HyperParameterTuningJobName") == ["tune-a", "tune-b", "tune-c"]
    assert [s["Strategy"] for s in summaries] == ["Bayesian", "Bayesian", "Random"]


def test_the_cli_lists_every_model_package_version_newest_first(stack: Stack, tmp_path: Path) -> None:
    # WHEN `aws sagemaker list-model-packages` asks for the versions, newest first
    listed = aws(
        stack,
        tmp_path,
        "sagemaker",
        "list-model-packages",
        "--model-package-type",
        "Versioned",
        "--sort-order",
        "Descending",
        as_reader=False,
    )

    # THEN it prints versions 3, 2 and 1
    assert _names(listed["ModelPackageSummaryList"], "ModelPackageArn") == stack.flowers[::-1]


# -- refusals ------------------------------------------------------------------------------------------


def test_a_role_whose_policy_names_processing_jobs_may_not_list_them(stack: Stack) -> None:
    # GIVEN a role allowed ListProcessingJobs on processing-job ARNs only (the action takes no resource)
    sagemaker = stack.client(stack.narrow)

    # WHEN it lists processing jobs THEN IAM refuses it on "*", as AWS does
    with pytest.raises(ClientError) as refused:
        sagemaker.list_processing_jobs()
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    assert (
        f"User: arn:aws:sts::{ACCOUNT_ID}:assumed-role/processing-job-reader/retrain-embedded "
        "is not authorized "
        "to perform: sagemaker:ListProcessingJobs on resource: *"
    ) in refused.value.response["Error"]["Message"]


def test_a_next_token_the_service_did_not_hand_out_is_refused(stack: Stack) -> None:
    # WHEN a role pages on with a token of its own making
    with pytest.raises(ClientError) as refused:
        stack.client(stack.reader).list_processing_jobs(NextToken="page-2")

    # THEN it is a validation error naming the token
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert refused.value.response["Error"]["Message"] == (
        "Invalid pagination token: 'page-2' was not returned by ListProcessingJobs"
    )


def test_the_emulator_holds_list_requests_to_the_services_contract(stack: Stack) -> None:
    # WHEN the emulator is asked in process (as the state machine's integrations call it) for more than
    # a page may hold, and for an order the service does not know
    with pytest.raises(ClientError) as too_many:
        stack.emulator.list_hyper_parameter_tuning_jobs(MaxResults=101)
    with pytest.raises(ClientError) as unknown_order:
        stack.emulator.list_model_package_groups(SortBy="Size")

    # THEN each is refused in the service's words
    assert too_many.value.response["Error"]["Code"] == "ValidationException"
    assert too_many.value.response["Error"]["Message"] == (
        "1 validation error detected: Value '101' at 'maxResults' failed to satisfy constraint: "
        "Member must have value less than or equal to 100"
    )
    assert unknown_order.value.response["Error"]["Message"] == (
        "1 validation error detected: Value 'Size' at 'sortBy' failed to satisfy constraint: "
        "Member must satisfy enum value set: [Name, CreationTime]"
    )
