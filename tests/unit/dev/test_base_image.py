"""The training image's base: chosen in one place, resolved per region, the torch the code is tested on;
and the pure parts of `make image-check`."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version
from sagemaker.core import image_uris  # type: ignore[import-untyped]

from retrain.dev import base_image
from retrain.dev.image_check import ImageCheckError, PackageSet, broken, check_support, needing_stack
from retrain.embedded.provisioning.sam import load_template
from retrain.managed_debugger import sagemaker_regions

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "training_image" / "Dockerfile"


@pytest.mark.parametrize(
    ("region", "registry"),
    [
        ("us-east-1", "763104351884.dkr.ecr.us-east-1.amazonaws.com"),
        ("eu-south-1", "692866216735.dkr.ecr.eu-south-1.amazonaws.com"),
        ("il-central-1", "780543022126.dkr.ecr.il-central-1.amazonaws.com"),
        ("cn-north-1", "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn"),
    ],
)
def test_the_base_image_is_the_regions_pytorch_training_dlc(region: str, registry: str) -> None:
    # GIVEN a region WHEN the base is resolved THEN it is that region's registry (the account differs
    # by region) and the CUDA SageMaker variant of the chosen PyTorch DLC
    assert base_image.uri(region) == f"{registry}/pytorch:{base_image.VERSION}-cu133-amzn2023-sagemaker"


def test_the_dockerfile_names_no_registry_and_no_base_version() -> None:
    # GIVEN the Dockerfile THEN its base comes in as a build argument, never as a literal account or tag
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert not re.search(r"\d{12}\.dkr\.ecr", text)
    assert re.search(r"^ARG BASE_IMAGE$", text, re.MULTILINE)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.MULTILINE)


def test_make_image_passes_the_resolved_base_and_dali_for_its_cuda() -> None:
    assert base_image.build_args("eu-west-1") == [
        "--build-arg",
        "BASE_IMAGE=763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch:2.13-cu133-amzn2023-sagemaker",
        "--build-arg",
        f"DALI_PACKAGE={base_image.DALI_PACKAGE}",
    ]


def test_the_code_is_tested_against_the_base_images_torch() -> None:
    # GIVEN the base's torch, the image's pin and the torch these tests run on
    packages = PackageSet.read()
    pins = {r.name: r for r in packages.requirements}

    # THEN all three are one version (the local build is the CPU one, the base's cu130)
    assert packages.base["torch"].public == base_image.TORCH
    assert pins["torch"].specifier.contains(packages.base["torch"])
    assert Version(torch.__version__).public == base_image.TORCH
    packages.check_torch()


def test_a_pin_that_disagrees_with_the_base_is_refused_naming_both() -> None:
    packages = PackageSet.read()
    moved = PackageSet(packages.base, [Requirement("torch==2.9.0"), *packages.requirements[1:]])
    with pytest.raises(
        ImageCheckError, match=r"asks torch==2\.9\.0, but the base image .* has torch 2\.13\.0"
    ):
        moved.check_torch()


def test_the_image_installs_dali_for_the_bases_cuda_not_the_local_one() -> None:
    names = {r.name for r in PackageSet.read().requirements}
    assert "nvidia-dali-cuda130" in names and "nvidia-dali-cuda120" not in names


def test_only_the_bases_cuda_stack_may_be_missing_in_pip_check() -> None:
    stack = {"torch", "triton"}
    output = (
        "efficientnet-lite-pytorch 0.1.0 requires torch, which is not installed.\n"
        "smdebug 1.0.34 has requirement protobuf<=3.20.3,>=3.20.0, but you have protobuf 6.33.6.\n"
        "nvidia-dali-cuda130 2.4.0 requires gast, which is not installed.\n"
    )
    assert broken(output, stack) == [
        "smdebug 1.0.34 has requirement protobuf<=3.20.3,>=3.20.0, but you have protobuf 6.33.6.",
        "nvidia-dali-cuda130 2.4.0 requires gast, which is not installed.",
    ]


def test_requirements_on_the_cuda_stack_are_found_in_pips_report() -> None:
    report = [
        {"metadata": {"name": "efficientnet-lite-pytorch", "version": "0.1.0", "requires_dist": ["torch"]}},
        {"metadata": {"name": "smdebug", "version": "1.0.34", "requires_dist": ["numpy>=1.16"]}},
        {"metadata": {"name": "x", "version": "1", "requires_dist": ["torch; extra == 'gpu'"]}},
    ]
    assert needing_stack(report, {"torch"}) == ["efficientnet-lite-pytorch==0.1.0"]


def test_a_base_past_its_patch_support_fails_the_check() -> None:
    assert "patched until" in check_support(base_image.PATCHED_UNTIL)
    with pytest.raises(ImageCheckError, match="left AWS's patch support"):
        check_support(base_image.PATCHED_UNTIL + datetime.timedelta(days=1))


def test_the_image_build_step_links_a_closure_and_freezes_its_versions(tmp_path: Path) -> None:
    # GIVEN a new virtualenv WHEN the Dockerfile's link step links a requirement into it
    import subprocess
    import sys
    from importlib import metadata

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    script = REPO / "training_image" / "environment" / "link_packages.py"
    frozen = tmp_path / "linked.txt"
    subprocess.run(
        [sys.executable, str(script), "--into", str(venv), "--freeze", str(frozen), "python-dateutil"],
        check=True,
        capture_output=True,
    )

    # THEN it and what it requires import there, and their versions are the constraints for what follows
    assert frozen.read_text().splitlines() == sorted(
        [f"python-dateutil=={metadata.version('python-dateutil')}", f"six=={metadata.version('six')}"]
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import dateutil, six; import yaml"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert "No module named 'yaml'" in done.stderr


def test_sagemaker_core_knows_no_inference_image_for_the_pinned_torch_so_the_newest_serves() -> None:
    # GIVEN sagemaker-core's image table THEN there is no PyTorch inference DLC of the training torch, and
    # the serving version is the newest inference DLC it lists (raise INFERENCE_VERSION when one appears)
    with pytest.raises(ValueError, match="Unsupported pytorch version"):
        image_uris.retrieve(
            framework=base_image.INFERENCE_FRAMEWORK,
            region="us-east-1",
            version=base_image.VERSION,
            py_version=base_image.INFERENCE_PYTHON,
            instance_type="ml.m5.large",
            image_scope="inference",
        )
    config = image_uris.config_for_framework(base_image.INFERENCE_FRAMEWORK)["inference"]
    newest = max(config["versions"], key=Version)
    assert config["version_aliases"][base_image.INFERENCE_VERSION] == newest


def test_the_templates_inference_images_are_sagemaker_cores_in_every_region() -> None:
    # GIVEN the template's InferenceImages mapping and the image string the register function gets
    template = load_template(REPO / "template.yaml")
    mapping = template["Mappings"][base_image.INFERENCE_MAPPING]
    variable = template["Resources"]["RegisterModelFunction"]["Properties"]["Environment"]["Variables"]
    pattern = variable["INFERENCE_IMAGE_URI"]["Fn::If"][1]["Fn::Sub"][0]

    def built(region: str) -> str:
        suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
        uri = pattern.replace("${Account}", mapping[region]["Account"]).replace("${AWS::Region}", region)
        return str(uri.replace("${AWS::URLSuffix}", suffix))

    # THEN every SageMaker region has a row, and each one with an account builds sagemaker-core's URI
    assert set(mapping) == set(sagemaker_regions())
    with_image = [region for region, row in mapping.items() if row["Account"]]
    assert {region: built(region) for region in with_image} == {
        region: base_image.inference_uri(region) for region in with_image
    }
    text = (REPO / "template.yaml").read_text()
    assert all(line in text for line in base_image.inference_mapping().splitlines())
    # and the accounts the embedded stack reads from it (its image pulls' AWS registries) are those
    assert base_image.mapped_accounts(template) == {
        account for account in base_image.inference_accounts().values() if account
    }
