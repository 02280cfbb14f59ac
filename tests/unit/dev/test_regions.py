"""The regions the stack claims, against the resource types CloudFormation offers there (cfn-lint's
provider schema lists): every type a documented parameter combination creates where the region lacks it is
refused before deployment by a template Rule that names the parameter and the region.

RETRAIN_REGIONS_TEMPLATE names another template to hold to this (e.g. a patched copy); default template.yaml.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from retrain.dev import regions
from retrain.embedded.provisioning.parameters import check_parameters, check_rules
from retrain.embedded.provisioning.sam import ProvisioningError, embedded_parameters

TEMPLATE = Path(os.environ.get("RETRAIN_REGIONS_TEMPLATE") or regions.TEMPLATE)
CLAIMED = regions.claimed_regions()


def _deploy_values(combination: regions.Combination, region: str) -> dict[str, str]:
    """Every parameter's value for a deploy of `combination` in `region` (Defaults, stand-ins, its own)."""
    source = regions.stack_template(TEMPLATE).source
    declared = source["Parameters"]
    values = {name: str(p["Default"]) for name, p in declared.items() if "Default" in p}
    values.update({k: v for k, v in embedded_parameters(region).items() if k not in values})
    values.update(combination.parameters)
    return values


def _refused_by_the_deploy(source: dict[str, Any], combination: regions.Combination, region: str) -> bool:
    """Whether the embedded deploy's Rules check (as CloudFormation's, before anything is made) refuses it."""
    try:
        check_rules(source, _deploy_values(combination, region), region=region, stack_name="retrain")
    except ProvisioningError:
        return True
    return False


def test_the_combinations_vary_every_parameter_that_decides_which_resources_exist() -> None:
    # GIVEN the parameters the resources' Conditions read (through the Conditions they use)
    deciding = regions.condition_parameters(TEMPLATE)
    varied = {name for combination in regions.COMBINATIONS for name in combination.parameters}
    declared = regions.stack_template(TEMPLATE).source["Parameters"]
    # THEN the documented combinations set each of them, every allowed value included and empty and not
    assert deciding <= varied, sorted(deciding - varied)
    for name in deciding:
        values = {c.parameters[name] for c in regions.COMBINATIONS if name in c.parameters}
        assert set(map(str, declared[name].get("AllowedValues", []))) <= values, name
        if "AllowedValues" not in declared[name]:
            assert "" in values and values - {""}, name


def test_the_combinations_are_values_the_deploy_accepts() -> None:
    # GIVEN every documented combination, in us-east-1
    source = regions.stack_template(TEMPLATE).source
    for combination in regions.COMBINATIONS:
        # WHEN its values are checked against the parameters' constraints
        # THEN none is refused (a combination that cannot deploy anywhere documents nothing)
        check_parameters(source, _deploy_values(combination, "us-east-1"))


def test_sam_types_count_as_the_types_the_transform_generates() -> None:
    # GIVEN the defaults in us-east-1
    # WHEN the created types are listed
    created = regions.created_types(regions.DEFAULTS.parameters, "us-east-1", TEMPLATE)
    # THEN no SAM type is left, and the functions, their events, the layer and the state machine are there
    assert not [kind for kind in created if kind.startswith("AWS::Serverless::")]
    assert "IngestFunction" in created["AWS::Lambda::Function"]
    assert "IngestFunctionRole" in created["AWS::IAM::Role"]
    assert "IngestFunctionUploads" in created["AWS::Lambda::EventSourceMapping"]
    assert "DispatchFunctionSchedule" in created["AWS::Events::Rule"]
    assert "DispatchFunctionSchedulePermission" in created["AWS::Lambda::Permission"]
    assert created["AWS::StepFunctions::StateMachine"] == ["TrainingStateMachine"]
    assert "TrainingStateMachineRole" in created["AWS::IAM::Role"]
    assert [i for i in created["AWS::Lambda::LayerVersion"] if i.startswith("ContractLayer")]


def test_a_resource_exists_only_where_its_condition_holds() -> None:
    # GIVEN the defaults, and the same with MlflowTracking=create and DataSource=s3
    defaults = regions.created_types(regions.DEFAULTS.parameters, "us-east-1", TEMPLATE)
    tracked = regions.created_types(
        {**regions.DEFAULTS.parameters, "MlflowTracking": "create", "DataSource": "s3"}, "us-east-1", TEMPLATE
    )
    # THEN the defaults make a file system and no MLflow app; the other makes the app and no file system
    assert defaults["AWS::FSx::FileSystem"] == ["FileSystem"]
    assert "AWS::SageMaker::MlflowApp" not in defaults
    assert tracked["AWS::SageMaker::MlflowApp"] == ["MlflowApp"]
    assert "AWS::FSx::FileSystem" not in tracked
    assert "TrackingFunction" in tracked["AWS::Lambda::Function"]


def test_a_region_without_a_type_list_of_its_own_reads_us_east_1s(tmp_path: Path) -> None:
    # GIVEN provider lists of us-east-1, a region lacking a type, a copy of us-east-1's, and SAM's
    (tmp_path / "us-east-1.json").write_text(json.dumps({"AWS::S3::Bucket": "a", "AWS::X::Y": "b"}))
    (tmp_path / "xx-east-1.json").write_text(json.dumps({"AWS::S3::Bucket": "a"}))
    (tmp_path / "xx-iso-1.json").write_text(json.dumps({"AWS::S3::Bucket": "a", "AWS::X::Y": "b"}))
    (tmp_path / "sam.json").write_text(json.dumps({"AWS::Serverless::Function": "c"}))
    # WHEN the offered types and their origin are read
    # THEN a region's own list counts, SAM's types are everywhere, a region without a file reads us-east-1's
    assert regions.offered_types("xx-east-1", tmp_path) == {"AWS::S3::Bucket", "AWS::Serverless::Function"}
    assert "AWS::X::Y" in regions.offered_types("xx-none-1", tmp_path)
    assert regions.has_own_type_list("xx-east-1", tmp_path)
    assert regions.has_own_type_list("us-east-1", tmp_path)
    assert not regions.has_own_type_list("xx-none-1", tmp_path)
    assert not regions.has_own_type_list("xx-iso-1", tmp_path)


def test_each_missing_type_is_refused_by_a_rule_naming_its_parameters_and_the_region() -> None:
    # GIVEN every documented combination in every region the stack claims
    source = regions.stack_template(TEMPLATE).source
    unrefused = []
    for combination in regions.COMBINATIONS:
        for region in CLAIMED:
            # WHEN a type it creates is missing from the region's provider schemas
            missing = regions.missing_types(combination.parameters, region, TEMPLATE)
            if not missing:
                continue
            # THEN the deploy's Rules check refuses it, with an assertion that reads the region and the
            # parameters that make the type, names the region, and says which type and parameters
            failed = regions.refusals(combination.parameters, region, TEMPLATE)
            if not _refused_by_the_deploy(source, combination, region):
                failed = []
            for kind, ids in missing.items():
                deciding = regions.deciding_parameters(ids, TEMPLATE)
                if not any(regions.names_the_refusal(r, kind, deciding, region) for r in failed):
                    unrefused.append(
                        f"{combination.label} in {region}: {kind} ({', '.join(sorted(deciding))})"
                    )
    assert not unrefused, f"{len(unrefused)} not refused by a Rule, e.g.:\n" + "\n".join(unrefused[:10])


def test_a_combination_with_nothing_missing_is_not_refused() -> None:
    # GIVEN every documented combination in every region the stack claims
    source = regions.stack_template(TEMPLATE).source
    refused = []
    for combination in regions.COMBINATIONS:
        for region in CLAIMED:
            # WHEN the region offers every type it creates
            if regions.missing_types(combination.parameters, region, TEMPLATE):
                continue
            # THEN no Rule refuses it
            failed = regions.refusals(combination.parameters, region, TEMPLATE)
            refused += [f"{combination.label} in {region}: {r.rule}" for r in failed]
            if not failed and _refused_by_the_deploy(source, combination, region):
                refused.append(f"{combination.label} in {region}: refused by the deploy's Rules check")
    assert not refused, f"{len(refused)} refused, e.g.:\n" + "\n".join(refused[:10])


def test_the_command_prints_each_combination_with_its_missing_types(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # WHEN the command runs on the template
    assert regions.main(["--template", str(TEMPLATE)]) == 0
    printed = capsys.readouterr().out
    # THEN it names the schema data, and each combination with the types missing and their regions
    assert f"cfn-lint {regions.cfn_lint_version()}" in printed
    for combination in regions.COMBINATIONS:
        assert f"\n{combination.label}" in printed
    for finding in regions.findings(TEMPLATE, CLAIMED):
        for kind in finding.missing:
            assert f"missing {kind}" in printed and finding.region in printed
