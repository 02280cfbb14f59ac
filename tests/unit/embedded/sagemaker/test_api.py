"""The moto SageMaker HTTP API answering from the emulator, persistence, and the moto pin guard."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.sagemaker.responses import SageMakerResponse

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.sagemaker import SageMakerEmulator, api_installed, install_api
from retrain.embedded.sagemaker.api import ADDED, REPLACED

from .conftest import BUCKET, put_images, training_request, wait_until


@pytest.fixture
def api(aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]) -> Iterator[Any]:
    emulator = make_emulator()
    with api_installed(emulator):
        yield boto3.client("sagemaker", region_name="us-east-1")


def test_boto3_training_job_calls_reach_the_emulator(aws: dict[str, Any], api: Any) -> None:
    # GIVEN the API installed over moto and data in S3
    put_images(aws["s3"], "data/train")

    # WHEN a client creates a training job and polls it
    api.create_training_job(**training_request("via-http"))
    first = api.describe_training_job(TrainingJobName="via-http")
    wait_until(
        lambda: api.describe_training_job(TrainingJobName="via-http")["TrainingJobStatus"] == "Completed",
        60,
        "the job to complete over HTTP",
    )
    job = api.describe_training_job(TrainingJobName="via-http")

    # THEN it really ran (moto alone records jobs as Completed at once), with boto3's shapes
    assert first["TrainingJobStatus"] == "InProgress"
    assert job["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://{BUCKET}/output/via-http/output/model.tar.gz"
    assert {m["MetricName"] for m in job["FinalMetricDataList"]} == {"val-accuracy", "train-loss"}
    assert job["SecondaryStatusTransitions"][-1]["Status"] == "Completed"
    assert job["TrainingEndTime"].tzinfo is not None
    summaries = api.list_training_jobs(NameContains="via-http")["TrainingJobSummaries"]
    assert [s["TrainingJobName"] for s in summaries] == ["via-http"]


def test_operations_moto_lacks_are_added(aws: dict[str, Any], api: Any) -> None:
    # GIVEN a slow job started over HTTP
    put_images(aws["s3"], "data/train")
    api.create_training_job(
        **training_request("stop-http", HyperParameters={"epochs": "50", "step-seconds": "0.1"})
    )

    # WHEN StopTrainingJob (absent from moto 5.2.5) is called over HTTP
    api.stop_training_job(TrainingJobName="stop-http")

    # THEN the job stops
    wait_until(
        lambda: api.describe_training_job(TrainingJobName="stop-http")["TrainingJobStatus"] == "Stopped", 30
    )


def test_boto3_sees_the_service_error_codes(api: Any) -> None:
    # WHEN a client asks for a tuning job that does not exist, and sends an invalid training job
    with pytest.raises(ClientError) as missing:
        api.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="nothing")
    with pytest.raises(ClientError) as invalid:
        api.create_training_job(**training_request("bad", EnableManagedSpotTraining=True))

    # THEN the codes and messages are the emulator's
    assert missing.value.response["Error"]["Code"] == "ResourceNotFound"
    assert invalid.value.response["Error"]["Code"] == "ValidationException"
    assert "Invalid MaxWaitTimeInSeconds" in invalid.value.response["Error"]["Message"]


def test_model_registry_over_http_uses_moto_and_survives_a_restart(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator], tmp_path: Any
) -> None:
    # GIVEN a model package group and an approved version created over HTTP
    workdir = tmp_path / "registry"
    with api_installed(make_emulator(workdir=workdir)):
        client = boto3.client("sagemaker", region_name="us-east-1")
        client.create_model_package_group(ModelPackageGroupName="retrain-models")
        arn = client.create_model_package(
            ModelPackageGroupName="retrain-models",
            ModelApprovalStatus="PendingManualApproval",
            InferenceSpecification={
                "Containers": [{"Image": "img", "ModelDataUrl": f"s3://{BUCKET}/m.tar.gz"}],
                "SupportedContentTypes": ["application/x-image"],
                "SupportedResponseMIMETypes": ["application/json"],
            },
        )["ModelPackageArn"]
        client.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Approved")

    # WHEN moto's state is lost (a new process) and a new emulator starts on the same work dir
    from moto.sagemaker.models import sagemaker_backends

    sagemaker_backends[ACCOUNT_ID][REGION].reset()
    restarted = make_emulator(workdir=workdir)

    # THEN the registry is back with the version and its approval
    packages = restarted.list_model_packages(ModelPackageGroupName="retrain-models")[
        "ModelPackageSummaryList"
    ]
    assert [(p["ModelPackageVersion"], p["ModelApprovalStatus"]) for p in packages] == [(1, "Approved")]
    assert restarted.describe_model_package(ModelPackageName=arn)["ModelPackageArn"] == arn


def test_a_restarted_emulator_describes_old_jobs_and_fails_orphans(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator], tmp_path: Any
) -> None:
    # GIVEN one finished job and one that was running when the runtime went away
    put_images(aws["s3"], "data/train")
    workdir = tmp_path / "restart"
    first = make_emulator(workdir=workdir)
    first.create_training_job(**training_request("finished"))
    wait_until(
        lambda: first.describe_training_job(TrainingJobName="finished")["TrainingJobStatus"] == "Completed",
        60,
    )
    record = first._training["finished"]
    orphan = {**record, "TrainingJobStatus": "InProgress", "SecondaryStatus": "Training"}
    orphan["TrainingJobArn"] = orphan["TrainingJobArn"].replace("finished", "orphan")
    first.store.save("training", orphan, "orphan")

    # WHEN a new emulator starts on the same work directory
    second = make_emulator(workdir=workdir)

    # THEN it describes the finished job as it was and ends the orphan Failed with a reason
    assert second.describe_training_job(TrainingJobName="finished")["TrainingJobStatus"] == "Completed"
    lost = second.describe_training_job(TrainingJobName="orphan")
    assert lost["TrainingJobStatus"] == "Failed"
    assert "embedded runtime stopped while this job ran" in lost["FailureReason"]


def test_install_api_fails_loudly_when_moto_moves_a_patched_method(
    monkeypatch: pytest.MonkeyPatch, make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN a moto whose SageMakerResponse lost one of the operations the emulator replaces
    monkeypatch.delattr(SageMakerResponse, "describe_training_job")

    # WHEN the API is installed THEN it refuses, naming the method and the tested moto version
    with pytest.raises(RuntimeError, match=r"SageMakerResponse\.describe_training_job.*moto 5\.2\.5"):
        install_api(make_emulator())


def test_pinned_moto_has_every_operation_the_emulator_replaces_and_lacks_those_it_adds() -> None:
    # GIVEN the moto this project pins, THEN each replaced operation is a SageMakerResponse method and
    # each added one is not (if moto grows one, ADDED should move to REPLACED)
    assert [op for op in REPLACED if not callable(getattr(SageMakerResponse, op, None))] == []
    assert [op for op in ADDED if hasattr(SageMakerResponse, op)] == []


def test_uninstall_restores_moto(make_emulator: Callable[..., SageMakerEmulator]) -> None:
    # GIVEN moto's own method, WHEN the API is installed and removed, THEN moto's method is back
    original = SageMakerResponse.describe_training_job
    with api_installed(make_emulator()):
        assert SageMakerResponse.describe_training_job is not original
    assert SageMakerResponse.describe_training_job is original
