"""Embedded hosting: a registered package deploys as SageMaker deploys it and answers InvokeEndpoint.

Through the gated moto server, as boto3 reaches AWS: CreateModel from the package, CreateEndpointConfig,
CreateEndpoint and the endpoint_in_service waiter, InvokeEndpoint with the model's own handler in its
serving container, and the errors SageMaker Runtime answers with.
"""

from __future__ import annotations

import io
import json
import socket
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import torch
from botocore.config import Config
from botocore.exceptions import ClientError, WaiterError
from moto.sagemaker.models import sagemaker_backends
from PIL import Image

from controller import names
from controller.register import inference_specification
from retrain.deployment import Deployment
from retrain.dev import base_image
from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.gatekeeper.gate import Gatekeeper
from retrain.embedded.gatekeeper.iam.evaluator import Policy, PolicyEvaluator
from retrain.embedded.gatekeeper.iam.principals import Credentials, Principals
from retrain.embedded.sagemaker import JobContext, SageMakerEmulator, api_installed
from retrain.embedded.server import gated_moto_server
from retrain.errors import UsageError
from retrain.serve import predict
from retrain_contract import container as contract
from retrain_contract import serving
from retrain_training import data, evaluate, models, train

from .conftest import BUCKET, stand_in_image

LABELS = ["ant", "bee", "cat", "dog", "eel", "fox"]
IMAGE_SIZE = 32
ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/retrain-sagemaker"
CALLER_ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/app-without-invoke"
NO_INVOKE = Policy(
    "describe-only",
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "sagemaker:Describe*", "Resource": "*"}],
    },
)
WAIT = {"Delay": 1, "MaxAttempts": 300}


@dataclass(frozen=True)
class Hosted:
    endpoint: str
    emulator: SageMakerEmulator
    caller: Credentials
    package: str
    pending: str
    model_dir: Path

    def client(self, service: str, credentials: Credentials | None = None) -> Any:
        return boto3.client(
            service,
            region_name=REGION,
            endpoint_url=self.endpoint,
            aws_access_key_id=credentials.access_key_id if credentials else "operator",
            aws_secret_access_key=credentials.secret_access_key if credentials else "operator",
            config=Config(retries={"max_attempts": 1}),
        )


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _model_archive(root: Path) -> tuple[Path, bytes]:
    """A model directory as train.py leaves it (seeded weights), and its model.tar.gz as SageMaker packs
    it."""
    torch.manual_seed(5)
    args = train.get_args_parser().parse_args(["--model", "resnet18", "--image-size", str(IMAGE_SIZE)])
    paths = contract.resolve_paths({contract.BASE_DIR_ENV: str(root / "ml")})
    train.write_model(paths, args, models.build_model("resnet18", len(LABELS)).eval(), LABELS, {})
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for path in sorted(paths.model_dir.iterdir()):
            archive.add(path, arcname=path.name)
    return paths.model_dir, out.getvalue()


def image_bytes(seed: int, fmt: str = "JPEG") -> bytes:
    array = torch.randint(
        0, 256, (30, 40, 3), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8
    )
    out = io.BytesIO()
    Image.fromarray(array.numpy()).save(out, format=fmt)
    return out.getvalue()


@pytest.fixture(scope="module")
def hosted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosted]:
    sagemaker_backends[ACCOUNT_ID][REGION].reset()
    principals = Principals()
    caller = principals.add(CALLER_ROLE, [NO_INVOKE])
    root = tmp_path_factory.mktemp("hosting")
    model_dir, archive = _model_archive(root / "model")
    with PolicyEvaluator(account=ACCOUNT_ID) as evaluator:
        port = _port()
        endpoint = f"http://127.0.0.1:{port}"
        server = gated_moto_server(
            Gatekeeper(principals, evaluator, region=REGION, account=ACCOUNT_ID),
            ip_address="127.0.0.1",
            port=port,
        )
        emulator = None
        try:
            operator = Hosted(endpoint, None, caller, "", "", model_dir).client  # type: ignore[arg-type]
            s3 = operator("s3")
            s3.create_bucket(Bucket=BUCKET)
            s3.put_object(Bucket=BUCKET, Key="run-1/output/model.tar.gz", Body=archive)
            emulator = SageMakerEmulator(
                root / "sagemaker", JobContext(s3=s3, logs=None, image=stand_in_image(root / "image"))
            )
            with api_installed(emulator):
                sagemaker = operator("sagemaker")
                sagemaker.create_model_package_group(ModelPackageGroupName="digits")
                spec: Any = inference_specification(
                    base_image.inference_uri(REGION), f"s3://{BUCKET}/run-1/output/model.tar.gz"
                )
                package, pending = (
                    sagemaker.create_model_package(
                        ModelPackageGroupName="digits",
                        ModelApprovalStatus=status,
                        InferenceSpecification=spec,
                    )["ModelPackageArn"]
                    for status in ("Approved", "PendingManualApproval")
                )
                sagemaker.create_model(
                    ModelName="digits-v1",
                    ExecutionRoleArn=ROLE,
                    PrimaryContainer={"ModelPackageName": package},
                )
                sagemaker.create_endpoint_config(
                    EndpointConfigName="digits-v1",
                    ProductionVariants=[
                        {
                            "VariantName": serving.VARIANT_NAME,
                            "ModelName": "digits-v1",
                            "InstanceType": serving.DEFAULT_INSTANCE_TYPE,
                            "InitialInstanceCount": 1,
                        }
                    ],
                )
                sagemaker.create_endpoint(EndpointName="digits-v1", EndpointConfigName="digits-v1")
                yield Hosted(endpoint, emulator, caller, package, pending, model_dir)
        finally:
            if emulator is not None:
                emulator.close()
            server.stop()
            sagemaker_backends[ACCOUNT_ID][REGION].reset()


def test_a_registered_package_deploys_and_answers_what_evaluate_scores(
    hosted: Hosted, tmp_path: Path
) -> None:
    # GIVEN the endpoint of an approved package, created from its ModelPackageName
    sagemaker, runtime = hosted.client("sagemaker"), hosted.client("sagemaker-runtime")
    assert sagemaker.describe_endpoint(EndpointName="digits-v1")["EndpointStatus"] in (
        "Creating",
        "InService",
    )
    sagemaker.get_waiter("endpoint_in_service").wait(EndpointName="digits-v1", WaiterConfig=WAIT)
    described = sagemaker.describe_endpoint(EndpointName="digits-v1")
    assert described["ProductionVariants"][0]["DeployedImages"][0][
        "SpecifiedImage"
    ] == base_image.inference_uri(REGION)
    # WHEN images are classified through InvokeEndpoint
    paths, answers = [], []
    for seed, fmt in enumerate(("JPEG", "PNG", "JPEG")):
        body = image_bytes(seed, fmt)
        path = tmp_path / f"{seed}.{fmt.lower()}"
        path.write_bytes(body)
        paths.append(path)
        response = runtime.invoke_endpoint(
            EndpointName="digits-v1",
            Body=body,
            ContentType=serving.CONTENT_TYPE_ANY_IMAGE,
            Accept="application/json",
        )
        assert response["ContentType"] == serving.RESPONSE_TYPE
        assert response["InvokedProductionVariant"] == serving.VARIANT_NAME
        answers.append(json.loads(response["Body"].read())[serving.PREDICTIONS_KEY])
    # THEN each answer is the top-k that evaluate.py's forward pass gives the same image
    artifact = evaluate.load_artifact(hosted.model_dir, tmp_path)
    logits = evaluate.predict(
        evaluate.build(artifact, torch.device("cpu")),
        [data.Sample(p, 0, p.name) for p in paths],
        image_size=IMAGE_SIZE,
        batch_size=4,
        num_workers=0,
        device=torch.device("cpu"),
    )
    for answer, row in zip(answers, torch.softmax(logits, dim=1), strict=True):
        expected = row.topk(serving.TOP_K)
        assert [p["label"] for p in answer] == [LABELS[int(i)] for i in expected.indices]
        assert [p["probability"] for p in answer] == pytest.approx(expected.values.tolist(), abs=1e-5)


@pytest.mark.parametrize(
    ("body", "content_type", "status", "words"),
    [
        (b"label,pixels\n1,2\n", "text/csv", 415, "content type 'text/csv' is not supported"),
        (b"GIF89a but not really", "application/x-image", 400, "is not a readable image"),
    ],
)
def test_bad_input_gets_the_model_error_with_the_handlers_status_and_message(
    hosted: Hosted, body: bytes, content_type: str, status: int, words: str
) -> None:
    hosted.client("sagemaker").get_waiter("endpoint_in_service").wait(
        EndpointName="digits-v1", WaiterConfig=WAIT
    )
    with pytest.raises(ClientError) as refused:
        hosted.client("sagemaker-runtime").invoke_endpoint(
            EndpointName="digits-v1", Body=body, ContentType=content_type
        )
    error = refused.value.response
    assert error["Error"]["Code"] == "ModelError"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert error["OriginalStatusCode"] == status
    assert words in error["OriginalMessage"]
    assert f"Received client error ({status}) from primary with message" in error["Error"]["Message"]
    assert "/aws/sagemaker/Endpoints/digits-v1" in error["LogStreamArn"]


def test_an_empty_body_is_refused_before_the_model_as_a_missing_one(hosted: Hosted) -> None:
    # GIVEN an empty body: on the wire it is no payload at all, which InvokeEndpoint requires
    with pytest.raises(ClientError) as refused:
        hosted.client("sagemaker-runtime").invoke_endpoint(
            EndpointName="digits-v1", Body=b"", ContentType="image/jpeg"
        )
    assert refused.value.response["Error"]["Code"] == "ValidationError"
    assert (
        "at 'body' failed to satisfy constraint: Member must not be null"
        in refused.value.response["Error"]["Message"]
    )


def test_an_unknown_endpoint_is_a_validation_error(hosted: Hosted) -> None:
    with pytest.raises(ClientError) as refused:
        hosted.client("sagemaker-runtime").invoke_endpoint(
            EndpointName="no-such-endpoint", Body=image_bytes(1), ContentType="image/jpeg"
        )
    assert refused.value.response["Error"]["Code"] == "ValidationError"
    assert "no-such-endpoint" in refused.value.response["Error"]["Message"]


def test_a_role_without_invoke_endpoint_is_refused(hosted: Hosted) -> None:
    with pytest.raises(ClientError) as refused:
        hosted.client("sagemaker-runtime", hosted.caller).invoke_endpoint(
            EndpointName="digits-v1", Body=image_bytes(1), ContentType="image/jpeg"
        )
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    assert "sagemaker:InvokeEndpoint" in refused.value.response["Error"]["Message"]


def test_a_package_waiting_for_approval_does_not_deploy(hosted: Hosted) -> None:
    with pytest.raises(ClientError) as refused:
        hosted.client("sagemaker").create_model(
            ModelName="digits-v2",
            ExecutionRoleArn=ROLE,
            PrimaryContainer={"ModelPackageName": hosted.pending},
        )
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "must be Approved" in refused.value.response["Error"]["Message"]
    assert "update-model-package" in refused.value.response["Error"]["Message"]


def test_a_deleted_endpoint_stops_its_container_and_is_gone(hosted: Hosted) -> None:
    # GIVEN a second endpoint of the same model, in service
    sagemaker = hosted.client("sagemaker")
    sagemaker.create_endpoint(EndpointName="digits-v1-b", EndpointConfigName="digits-v1")
    sagemaker.get_waiter("endpoint_in_service").wait(EndpointName="digits-v1-b", WaiterConfig=WAIT)
    container = hosted.emulator.hosting.endpoints["digits-v1-b"].container
    assert container is not None and container.poll() is None
    listed = sagemaker.list_endpoints(NameContains="digits-v1-b")["Endpoints"]
    assert [e["EndpointName"] for e in listed] == ["digits-v1-b"]
    # WHEN it is deleted THEN its container ended on the SIGTERM (as `docker stop` sends it), not on the
    # SIGKILL after the grace period, and the waiter sees it gone
    sagemaker.delete_endpoint(EndpointName="digits-v1-b")
    assert container.poll() == 0, f"the serving container ended with {container.poll()}"
    sagemaker.get_waiter("endpoint_deleted").wait(EndpointName="digits-v1-b", WaiterConfig=WAIT)


def test_retrain_predict_on_the_embedded_stack_approves_deploys_and_classifies(
    hosted: Hosted, tmp_path: Path
) -> None:
    # GIVEN a package waiting for approval, with no endpoint, and two image files
    session = boto3.Session(
        aws_access_key_id="operator", aws_secret_access_key="operator", region_name=REGION
    )
    deployment = Deployment(
        "embedded", {names.STACK_OUTPUTS["sagemaker_role"]: ROLE}, session, endpoint_url=hosted.endpoint
    )
    images = []
    for seed, suffix in ((7, "jpg"), (8, "png")):
        images.append(tmp_path / f"{seed}.{suffix}")
        images[-1].write_bytes(image_bytes(seed, "PNG" if suffix == "png" else "JPEG"))
    # WHEN `retrain predict --model-package ARN` runs without --approve, then with it
    with pytest.raises(UsageError, match="pass --approve"):
        predict.predict(deployment, images, dataset=None, package_arn=hosted.pending)
    arn, endpoint, answers = predict.predict(
        deployment, images, dataset=None, package_arn=hosted.pending, approve_package=True
    )
    # THEN the package was approved and deployed under its conventional name, and each image answered
    sagemaker = hosted.client("sagemaker")
    assert sagemaker.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "Approved"
    assert endpoint == serving.endpoint_name("digits", 2)
    assert sagemaker.describe_endpoint(EndpointName=endpoint)["EndpointStatus"] == "InService"
    assert [a.image for a in answers] == images
    assert all(len(a.predictions) == serving.TOP_K for a in answers)
    # AND a second call finds that endpoint instead of deploying another
    again = predict.predict(deployment, images[:1], dataset=None, package_arn=arn)
    assert again[1] == endpoint and again[2][0].predictions == answers[0].predictions


def test_a_model_without_its_handler_fails_to_deploy_with_the_containers_reason(hosted: Hosted) -> None:
    # GIVEN model data of weights alone (no code/inference.py), deployed on the serving image
    sagemaker, s3 = hosted.client("sagemaker"), hosted.client("s3")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        archive.add(hosted.model_dir / contract.MODEL_FILE, arcname=contract.MODEL_FILE)
    s3.put_object(Bucket=BUCKET, Key="bare/model.tar.gz", Body=out.getvalue())
    sagemaker.create_model(
        ModelName="bare",
        ExecutionRoleArn=ROLE,
        PrimaryContainer={
            "Image": base_image.inference_uri(REGION),
            "ModelDataUrl": f"s3://{BUCKET}/bare/model.tar.gz",
            "Environment": dict(serving.ENVIRONMENT),
        },
    )
    variant = {"VariantName": "AllTraffic", "ModelName": "bare", "InstanceType": "ml.m5.large"}
    sagemaker.create_endpoint_config(EndpointConfigName="bare", ProductionVariants=[variant])
    # WHEN its endpoint is created THEN it fails, saying why the container did not come up
    sagemaker.create_endpoint(EndpointName="bare", EndpointConfigName="bare")
    with pytest.raises(WaiterError):
        sagemaker.get_waiter("endpoint_in_service").wait(EndpointName="bare", WaiterConfig=WAIT)
    described = sagemaker.describe_endpoint(EndpointName="bare")
    assert described["EndpointStatus"] == "Failed"
    assert "did not pass the ping health check" in described["FailureReason"]
    assert "No module named 'inference'" in described["FailureReason"]
