"""template.yaml as a deploy sees it: parameters, Rules and every intrinsic, in every SageMaker region."""

from __future__ import annotations

import pytest

from retrain import managed_debugger
from retrain.dev import regions
from retrain.dev.template_model import load, resolved_resources
from retrain.embedded.provisioning.sam import ProvisioningError

SAGEMAKER_REGIONS = managed_debugger.sagemaker_regions()


@pytest.mark.parametrize("region", SAGEMAKER_REGIONS)
def test_the_stack_resolves_in_every_region_that_offers_sagemaker(region: str) -> None:
    # GIVEN a region botocore's endpoint data lists for SageMaker
    # WHEN the template is loaded there with its defaults (parameters, Rules, mappings, every intrinsic),
    # or with DataSource=s3 where CloudFormation offers no type of the defaults (an FSx file system)
    parameters = {"DataSource": "s3"} if regions.missing_types(regions.DEFAULTS.parameters, region) else {}
    resources = resolved_resources(load(parameters=parameters, region=region))
    # THEN nothing refuses it, and the state machine's rule image is the region's own
    definition = str(resources["TrainingStateMachine"]["Properties"]["DefinitionString"])
    assert f".dkr.ecr.{region}." in definition


def test_managed_debugger_is_refused_where_no_rule_image_exists() -> None:
    without_image = next(r for r, account in managed_debugger.rule_image_accounts().items() if not account)
    with pytest.raises(ProvisioningError, match=r"ManagedDebuggerNeedsARuleImage.*DebuggerMode open"):
        load(parameters={"DebuggerMode": "managed"}, region=without_image)
    resolved_resources(load(parameters={"DebuggerMode": "managed"}, region="eu-west-1"))


def test_an_image_uri_without_its_registry_is_refused_with_the_constraint() -> None:
    with pytest.raises(
        ProvisioningError, match=r"Parameter 'TrainingImageUri' failed to satisfy constraint: must"
    ):
        load(parameters={"TrainingImageUri": "retrain-training:latest"})


def test_an_existing_file_system_without_its_mount_name_is_refused() -> None:
    # GIVEN FileSystemId of an existing file system and no FileSystemMountName
    # THEN the deploy stops before anything is created, saying what to give
    with pytest.raises(
        ProvisioningError, match=r"ExistingFileSystemNeedsItsMountName.*FileSystemMountName must be"
    ):
        load(parameters={"FileSystemId": "fs-0123456789abcdef0"})
    load(parameters={"FileSystemId": "fs-0123456789abcdef0", "FileSystemMountName": "abcdefgh"})
    load(
        parameters={"FileSystemId": "fs-0123456789abcdef0", "DataSource": "s3"}
    )  # no FSx: the rule does not apply


def _sagemaker_statements(template) -> list[dict]:  # type: ignore[no-untyped-def, type-arg]
    role = next(r for r in template.roles.values() if r.logical_id == "SageMakerExecutionRole")
    return [s for policy in role.policies for s in policy.document["Statement"]]


def test_the_sagemaker_role_reads_the_pretrained_weights_only_when_a_uri_is_given() -> None:
    # GIVEN no PretrainedModelUri: no statement for it (the artifact bucket holds uploaded weights)
    default = _sagemaker_statements(load())
    assert not any("weights" in str(s.get("Resource")) for s in default)
    # WHEN a URI is given THEN the role may read that one object
    given = _sagemaker_statements(load(parameters={"PretrainedModelUri": "s3://weights/imagenet/r18.pth"}))
    assert {
        "Effect": "Allow",
        "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::weights/imagenet/r18.pth",
    } in given
    assert {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::weights"} in given
    assert len(given) == len(default) + 2


def test_a_pretrained_uri_that_is_not_one_s3_object_is_refused_with_the_constraint() -> None:
    with pytest.raises(
        ProvisioningError, match=r"Parameter 'PretrainedModelUri' failed to satisfy constraint"
    ):
        load(parameters={"PretrainedModelUri": "s3://weights/folder/"})
