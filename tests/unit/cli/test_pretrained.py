"""retrain pretrained upload: weights into the stack's artifact bucket, where training jobs read them."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from controller import names
from retrain.data import pretrained
from retrain.deployment import Deployment
from retrain.errors import UsageError


@pytest.fixture
def deployment():  # type: ignore[no-untyped-def]
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1")
        session.client("s3").create_bucket(Bucket="retrain-artifacts")
        yield Deployment("retrain", {names.STACK_OUTPUTS["artifact_bucket"]: "retrain-artifacts"}, session)


def test_the_imagenet_weights_land_under_pretrained_in_the_artifact_bucket(deployment) -> None:  # type: ignore[no-untyped-def]
    path = pretrained.imagenet_efficientnet_lite0()
    uri = pretrained.upload(deployment, path)
    assert uri == f"s3://retrain-artifacts/{names.PRETRAINED_PREFIX}{path.name}"
    head = deployment.client("s3").head_object(Bucket="retrain-artifacts", Key=uri.split("/", 3)[3])
    assert head["ContentLength"] == path.stat().st_size
    assert pretrained.architecture_of(path) == "efficientnet-lite0"


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("absent.pth", None, "does not exist"),
        ("notes.txt", b"x", "is not a weights file"),
        ("empty.pth", b"", "is not"),
    ],
)
def test_a_file_that_cannot_be_weights_is_refused_by_name(
    deployment, tmp_path: Path, name, content, words
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UsageError, match=words):
        pretrained.upload(deployment, path)
