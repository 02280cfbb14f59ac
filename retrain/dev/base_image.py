"""The training image's base: which AWS PyTorch training Deep Learning Container, resolved per region.

Chosen deliberately (2026-11): PyTorch 2.13 on Amazon Linux 2023, Python 3.12, CUDA 13 (torch's wheels
are cu130), a SageMaker image with the training toolkit, GA 2026-07-20, patches until 2027-07-20
(aws/deep-learning-containers, docs/src/data/pytorch/). Its torch is the version the project pins and
tests against (training_image/requirements.txt), so the launcher's torchrun flags and every torch API
the code uses are the image's. 2.9 (the former base) left patch support on 2026-10-15; 2.10 runs
Python 3.13, where smdebug's profiler dependency (pyinstrument-cext) does not import.

The registry account differs by region, so the URI comes from sagemaker-core's image-URI data, never a
literal: `python -m retrain.dev.base_image --region eu-south-1` prints it; `--build-args` prints the
`docker build` arguments `make image` passes.

The serving image of a registered model package is the AWS PyTorch *inference* DLC (TorchServe and the
SageMaker PyTorch inference toolkit, which runs the handler train.py writes into model.tar.gz). AWS
publishes no inference DLC for 2.13: the AL2023 `pytorch` images are training images, and the newest
inference DLC that sagemaker-core 2.27 (and aws/deep-learning-containers) knows is 2.6 (Python 3.12,
AWS's patches until 2026-06-30). It loads train.py's state_dict (the handler uses only torch.load with
weights_only, nn modules and Pillow). `--inference-mapping` prints template.yaml's InferenceImages
mapping; a test holds the template to `inference_uri` in every SageMaker region.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from retrain.managed_debugger import sagemaker_regions
from retrain_contract import serving

FRAMEWORK = "pytorch-amzn2023"  # sagemaker-core's name for the AL2023 PyTorch DLCs (repository `pytorch`)
VERSION = "2.13"
PYTHON = "3.12"
PATCHED_UNTIL = datetime.date(2027, 7, 20)  # AWS's end of patch support for this DLC
TORCH = "2.13.0"
# An instance type with a GPU selects the CUDA variant of the image (a CPU type, the `cpu` one).
GPU_INSTANCE_TYPE = "ml.g5.xlarge"
# DALI built for the CUDA major version of the image's torch wheels (cu130).
DALI_PACKAGE = "nvidia-dali-cuda130==2.4.0"
# What the image's torch brings with it in the base (the closure of torch in the base image's lock
# file): the image's own packages must agree with these versions (training_image/environment/).
BASE_PACKAGES = Path(__file__).resolve().parents[2] / "training_image" / "environment" / "base-image.txt"


# The serving image: the newest PyTorch inference DLC sagemaker-core knows, its CPU variant (the package
# declares CPU instance types, retrain_contract.serving).
INFERENCE_FRAMEWORK = "pytorch"
INFERENCE_VERSION = "2.6"
INFERENCE_PYTHON = "py312"
INFERENCE_PATCHED_UNTIL = datetime.date(2026, 6, 30)


# The repository policy of AWS's Deep Learning Container images as it acts on another account's role:
# any AWS account may pull them (AWS's DLC guide logs in to the DLC registry with the caller's own
# account). The static IAM check and the embedded stack authorise a cross-account pull against it.
DLC_REPOSITORY_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "AnyAccountMayPull",
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
        }
    ],
}


# template.yaml's mapping of region -> the serving image's registry account (`inference_mapping` writes it).
INFERENCE_MAPPING = "InferenceImages"


def mapped_accounts(template: Mapping[str, Any]) -> frozenset[str]:
    """The serving image's registry accounts that `template`'s mapping names: AWS's DLC registries, which
    the embedded stack's image pulls are authorised against (reading them from sagemaker-core's data
    instead took 4 s of CPU in every process that started a job)."""
    rows = template.get("Mappings", {}).get(INFERENCE_MAPPING, {})
    return frozenset(str(row["Account"]) for row in rows.values() if row.get("Account"))


def uri(region: str) -> str:
    """The base image in `region`'s registry."""
    from sagemaker.core import image_uris  # type: ignore[import-untyped]

    resolved: str = image_uris.retrieve(
        framework=FRAMEWORK,
        region=region,
        version=VERSION,
        instance_type=GPU_INSTANCE_TYPE,
        image_scope="training",
    )
    return resolved


def inference_uri(region: str) -> str:
    """The serving image of the region's model packages (ValueError where sagemaker-core has none)."""
    from sagemaker.core import image_uris

    resolved: str = image_uris.retrieve(
        framework=INFERENCE_FRAMEWORK,
        region=region,
        version=INFERENCE_VERSION,
        py_version=INFERENCE_PYTHON,
        instance_type=serving.DEFAULT_INSTANCE_TYPE,
        image_scope="inference",
    )
    return resolved


def inference_accounts() -> dict[str, str]:
    """Region -> registry account of its serving image, for every SageMaker region ('' where none)."""
    accounts: dict[str, str] = {}
    for region in sagemaker_regions():
        try:
            accounts[region] = inference_uri(region).split(".", 1)[0]
        except ValueError:
            accounts[region] = ""
    return accounts


def inference_mapping() -> str:
    """template.yaml's InferenceImages mapping, as YAML lines."""
    rows = [f'    {region}: {{Account: "{account}"}}' for region, account in inference_accounts().items()]
    return "\n".join([f"  {INFERENCE_MAPPING}:", *rows])


def build_args(region: str) -> list[str]:
    return ["--build-arg", f"BASE_IMAGE={uri(region)}", "--build-arg", f"DALI_PACKAGE={DALI_PACKAGE}"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--region")
    parser.add_argument("--build-args", action="store_true", help="print docker build's --build-arg options")
    parser.add_argument("--inference", action="store_true", help="print the region's serving image")
    parser.add_argument(
        "--inference-mapping", action="store_true", help="print template.yaml's InferenceImages mapping"
    )
    args = parser.parse_args(argv)
    if args.inference_mapping:
        print(inference_mapping())
        return 0
    if not args.region:
        parser.error("give --region REGION (or --inference-mapping)")
    if args.inference:
        try:
            print(inference_uri(args.region))
        except ValueError as error:
            missing = f"no {INFERENCE_FRAMEWORK} {INFERENCE_VERSION} inference image in {args.region}"
            print(f"{missing}: {error}", file=sys.stderr)
            return 1
        return 0
    try:
        words = build_args(args.region) if args.build_args else [uri(args.region)]
    except ValueError as error:
        print(f"no {FRAMEWORK} {VERSION} training image in region {args.region}: {error}", file=sys.stderr)
        return 1
    print(" ".join(words))
    return 0


if __name__ == "__main__":
    sys.exit(main())
