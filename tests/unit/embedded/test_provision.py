"""Provisioning pieces: CloudFormation YAML, substitutions moto mishandles, what moto cannot create."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from retrain.embedded.provisioning.external import create_external
from retrain.embedded.provisioning.intrinsics import Intrinsics
from retrain.embedded.provisioning.sam import ProvisioningError, definition_with_substitutions, load_template
from retrain.embedded.provisioning.wiring import Wiring, unwired


def test_short_form_tags_load_as_long_forms(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "Resources:\n  B:\n    Type: AWS::S3::Bucket\n    Properties:\n"
        "      A: !Ref X\n      B: !GetAtt Q.Arn\n      C: !Sub '${X}-y'\n      D: !Equals [a, b]\n"
    )

    props = load_template(path)["Resources"]["B"]["Properties"]

    assert props == {
        "A": {"Ref": "X"},
        "B": {"Fn::GetAtt": ["Q", "Arn"]},
        "C": {"Fn::Sub": "${X}-y"},
        "D": {"Fn::Equals": ["a", "b"]},
    }


def test_a_file_without_resources_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("a: 1\n")

    with pytest.raises(ProvisioningError, match="no Resources"):
        load_template(path)


def test_definition_substitutions_keep_the_context_paths_intact() -> None:
    text = '{"Arn": "${FnArn}", "Id.$": "$$.Execution.Id", "Other": "${NotMine}"}'

    joined = definition_with_substitutions(text, {"FnArn": {"Fn::GetAtt": ["Fn", "Arn"]}})

    assert joined == {
        "Fn::Join": [
            "",
            [
                '{"Arn": "',
                {"Fn::GetAtt": ["Fn", "Arn"]},
                '", "Id.$": "$$.Execution.Id", "Other": "${NotMine}"}',
            ],
        ]
    }


def test_intrinsics_resolve_conditions_selects_and_subs() -> None:
    intrinsics = Intrinsics(
        {"Ids": ["subnet-a", "subnet-b"], "Bucket": "data-bucket", "Mode": "fsx"},
        {},
        conditions={"UseFsx": {"Fn::Equals": [{"Ref": "Mode"}, "fsx"]}},
    )

    assert intrinsics.resolve({"Fn::Select": [1, {"Ref": "Ids"}]}) == "subnet-b"
    assert intrinsics.resolve({"Fn::Sub": "s3://${Bucket}/data/"}) == "s3://data-bucket/data/"
    assert intrinsics.resolve({"Fn::If": ["UseFsx", "yes", "no"]}) == "yes"


def test_an_intrinsic_that_resolves_to_no_value_is_left_out() -> None:
    # GIVEN a policy statement only when a parameter is set (!If [cond, statement, !Ref AWS::NoValue])
    intrinsics = Intrinsics(
        {"AWS::NoValue": None, "Uri": ""},
        {},
        conditions={"HasUri": {"Fn::Not": [{"Fn::Equals": [{"Ref": "Uri"}, ""]}]}},
    )
    statements = [{"Effect": "Allow"}, {"Fn::If": ["HasUri", {"Effect": "Deny"}, {"Ref": "AWS::NoValue"}]}]
    # THEN the list and the object leave the item out, as CloudFormation does
    assert intrinsics.resolve(statements) == [{"Effect": "Allow"}]
    assert intrinsics.resolve({"A": 1, "B": {"Ref": "AWS::NoValue"}}) == {"A": 1}


def test_moto_never_sees_a_no_value_item() -> None:
    from retrain.embedded.provisioning.intrinsics import without_no_value

    # GIVEN a conditional policy statement, its condition on a parameter left at its empty default
    template = {
        "Parameters": {"Uri": {"Type": "String", "Default": ""}},
        "Conditions": {"HasUri": {"Fn::Not": [{"Fn::Equals": [{"Ref": "Uri"}, ""]}]}},
        "Resources": {
            "Role": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "Statement": [
                        {"Effect": "Allow"},
                        {"Fn::If": ["HasUri", {"Effect": "Deny"}, {"Ref": "AWS::NoValue"}]},
                    ]
                },
            }
        },
    }
    # THEN the statement is gone without a value, and kept (as an Fn::If moto resolves) with one
    assert without_no_value(template, {})["Resources"]["Role"]["Properties"]["Statement"] == [
        {"Effect": "Allow"}
    ]
    kept = without_no_value(template, {"Uri": "s3://b/k"})["Resources"]["Role"]["Properties"]["Statement"]
    assert len(kept) == 2


def test_a_condition_on_the_regions_mapping_row_decides_before_the_stack_exists() -> None:
    from retrain.embedded.provisioning.intrinsics import without_no_value

    # GIVEN a statement kept only where the region's mapping row names an account (template.yaml's
    # InferenceImages: the SageMaker role's pull of the serving image)
    region = {"Fn::FindInMap": ["Images", {"Ref": "AWS::Region"}, "Account"]}
    template = {
        "Mappings": {"Images": {"us-east-1": {"Account": "763104351884"}, "eu-isoe-west-1": {"Account": ""}}},
        "Conditions": {"HasImage": {"Fn::Not": [{"Fn::Equals": [region, ""]}]}},
        "Resources": {
            "Role": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "Statement": [{"Fn::If": ["HasImage", {"Effect": "Allow"}, {"Ref": "AWS::NoValue"}]}]
                },
            }
        },
    }

    # THEN the condition reads the stack's region: kept in one, left out in the other
    def statements(region: str) -> Any:
        return without_no_value(template, {}, region=region)["Resources"]["Role"]["Properties"]["Statement"]

    assert len(statements("us-east-1")) == 1
    assert statements("eu-isoe-west-1") == []


def _template(**resources: Any) -> dict[str, Any]:
    return {
        "Conditions": {"Never": {"Fn::Equals": ["a", "b"]}},
        "Resources": {
            "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {}},
            "Reader": {
                "Type": "AWS::SQS::Queue",
                "Properties": {"Tags": [{"Key": "fs", "Value": {"Ref": "Fs"}}]},
            },
            **resources,
        },
    }


def test_external_resources_are_created_and_their_refs_replaced() -> None:
    created: list[dict[str, Any]] = []

    def make_fs(logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, str]]:
        created.append(props)
        return "fs-0123", {"LustreMountName": "abcd"}

    fs = {"Type": "AWS::FSx::FileSystem", "Properties": {"ImportPath": {"Fn::Sub": "s3://${Bucket}/data"}}}
    body, external = create_external(
        _template(Fs=fs),
        {"AWS::FSx::FileSystem": make_fs},
        {"AWS::S3::Bucket", "AWS::SQS::Queue"},
        stack_name="s",
        parameters={},
        region="us-east-1",
    )

    assert external == {"Fs": "AWS::FSx::FileSystem"}
    assert "Fs" not in body["Resources"]
    assert body["Resources"]["Reader"]["Properties"]["Tags"][0]["Value"] == "fs-0123"
    assert created[0]["ImportPath"].startswith("s3://s-bucket-")


def test_an_external_resource_whose_condition_is_false_is_not_created() -> None:
    fs = {"Type": "AWS::FSx::FileSystem", "Condition": "Never", "Properties": {}}

    body, external = create_external(
        _template(Fs=fs),
        {"AWS::FSx::FileSystem": lambda *_: ("x", {})},
        {"AWS::S3::Bucket", "AWS::SQS::Queue"},
        stack_name="s",
        parameters={},
        region="us-east-1",
    )

    assert external == {}
    assert "Fs" not in body["Resources"]


def test_a_type_nothing_can_create_names_itself_and_the_fix() -> None:
    with pytest.raises(
        ProvisioningError, match=r"Thing has type AWS::Kendra::Index.*provisioning/external.py"
    ):
        create_external(
            _template(Thing={"Type": "AWS::Kendra::Index"}),
            {},
            {"AWS::S3::Bucket", "AWS::SQS::Queue"},
            stack_name="s",
            parameters={},
            region="us-east-1",
        )


def test_unwired_lists_declared_runtime_resources_the_wiring_lacks() -> None:
    template = {
        "Resources": {
            "Fn": {"Type": "AWS::Lambda::Function"},
            "Q": {"Type": "AWS::SQS::Queue"},
            "Rule": {"Type": "AWS::Events::Rule"},
            "Policy": {"Type": "AWS::SQS::QueuePolicy"},
        }
    }
    wiring = Wiring(logical_ids={"Fn": "AWS::Lambda::Function"})

    assert unwired(template, wiring) == ["Q (AWS::SQS::Queue)", "Rule (AWS::Events::Rule)"]
