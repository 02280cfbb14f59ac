"""The optional resources live in nested stacks: a region that lacks their types never reads them unless
asked, and the embedded stack creates their resources in place (retrain.embedded.provisioning.nested)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from retrain.dev import regions
from retrain.embedded.provisioning.nested import NestedStackError, inline_nested_stacks
from retrain.embedded.provisioning.sam import load_template

REPO = Path(__file__).resolve().parents[3]
OPTIONAL = {"AWS::SageMaker::MlflowApp", "AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation"}


def test_the_stack_itself_names_only_types_every_sagemaker_region_offers() -> None:
    # GIVEN the template as CloudFormation reads it in any region, before any nested stack is made
    template = load_template(REPO / "template.yaml")
    own = {resource["Type"] for resource in template["Resources"].values()}
    # THEN the optional types are not among its own (each is in a nested template, made only when asked) ...
    assert own & OPTIONAL == set()
    nested = {
        r["Type"]
        for path in sorted((REPO / "nested").glob("*.yaml"))
        for r in load_template(path)["Resources"].values()
    }
    assert nested >= OPTIONAL
    # ... and every type the stack itself names, SAM's included, is offered in every region it claims
    # (cfn-lint's per-region lists; SAM's own types are its transform's, translated in every region)
    plain = {t for t in own if not t.startswith("AWS::Serverless::")}
    missing = {
        region: sorted(plain - regions.offered_types(region))
        for region in regions.claimed_regions()
        if regions.has_own_type_list(region) and plain - regions.offered_types(region)
    }
    assert missing == {}


def test_a_nested_stacks_resources_are_made_in_place_under_its_condition() -> None:
    template = load_template(REPO / "template.yaml")
    inlined = inline_nested_stacks(template, REPO)["Resources"]
    # the nested stacks are gone, their resources in their place under the nested stack's Condition
    assert "FileSystemStack" not in inlined and "MlflowAppStack" not in inlined
    assert {inlined[n]["Condition"] for n in ("FileSystem", "DataRepositoryAssociation")} == {
        "CreateFileSystem"
    }
    assert {inlined[n]["Condition"] for n in ("MlflowApp", "MlflowAppRole")} == {"CreateMlflowApp"}
    # the parameters the parent passes replace the nested template's: a joined list passed whole, a
    # string named in an Fn::Sub through Fn::Sub's own variables
    fs = inlined["FileSystem"]["Properties"]
    assert fs["SecurityGroupIds"] == {"Ref": "SecurityGroupIds"}
    assert fs["SubnetIds"] == [{"Fn::Select": [0, {"Ref": "SubnetIds"}]}]
    assert inlined["DataRepositoryAssociation"]["Properties"]["DataRepositoryPath"] == {
        "Fn::Sub": ["s3://${DataBucket}/data/", {"DataBucket": {"Ref": "DataBucket"}}]
    }
    assert inlined["MlflowApp"]["Properties"]["Name"] == {"Ref": "AWS::StackName"}
    assert inlined["MlflowApp"]["DeletionPolicy"] == "Retain"
    # and every output the parent reads is the nested resource's own attribute
    tracking = inlined["TrackingFunction"]["Properties"]["Environment"]["Variables"]["MLFLOW_TRACKING_URI"]
    assert tracking == {
        "Fn::If": ["CreateMlflowApp", {"Fn::GetAtt": ["MlflowApp", "Arn"]}, {"Ref": "MlflowTracking"}]
    }
    text = repr(inlined)
    assert "Outputs." not in text and "'FileSystemStack'" not in text


def _parent(
    tmp_path: Path, child: str, parameters: dict[str, Any], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    (tmp_path / "child.yaml").write_text(child)
    properties = {"TemplateURL": "child.yaml", "Parameters": parameters}
    resources = {
        "Child": {"Type": "AWS::CloudFormation::Stack", "Condition": "Yes", "Properties": properties}
    }
    return {"Resources": {**resources, **(extra or {})}}


CHILD = """
Parameters:
  Name: {Type: String}
  Size: {Type: Number, Default: 3}
Resources:
  Topic:
    Type: AWS::SNS::Topic
    Properties: {TopicName: !Sub "${Name}-${AWS::Region}", DisplayName: !Ref Size}
Outputs:
  Arn: {Value: !Ref Topic}
"""


def test_a_default_fills_a_parameter_the_parent_does_not_pass(tmp_path: Path) -> None:
    parent = _parent(tmp_path, CHILD, {"Name": "n"})
    parent["Resources"]["Reader"] = {
        "Type": "AWS::SQS::Queue",
        "Properties": {"QueueName": {"Fn::GetAtt": ["Child", "Outputs.Arn"]}},
    }
    out = inline_nested_stacks(parent, tmp_path)["Resources"]
    topic_name = {"Fn::Sub": ["${Name}-${AWS::Region}", {"Name": "n"}]}
    assert out["Topic"] == {
        "Type": "AWS::SNS::Topic",
        "Condition": "Yes",
        "Properties": {"TopicName": topic_name, "DisplayName": 3},
    }
    assert out["Reader"]["Properties"]["QueueName"] == {"Ref": "Topic"}


@pytest.mark.parametrize(
    ("parameters", "extra", "read", "message"),
    [
        ({}, None, "Arn", "parameter Name is not given"),
        ({"Name": "n", "Colour": "red"}, None, "Arn", "has no parameter ['Colour']"),
        ({"Name": "n"}, {"Topic": {"Type": "AWS::SNS::Topic"}}, "Arn", "Topic is one of the parent's too"),
        ({"Name": "n"}, None, "Url", "Child has no output Outputs.Url"),
    ],
)
def test_a_nested_stack_that_cannot_be_made_in_place_is_named(
    tmp_path: Path, parameters: dict[str, Any], extra: dict[str, Any] | None, read: str, message: str
) -> None:
    parent = _parent(tmp_path, CHILD, parameters, extra)
    parent["Resources"]["Reader"] = {
        "Type": "AWS::SQS::Queue",
        "Properties": {"QueueName": {"Fn::GetAtt": ["Child", f"Outputs.{read}"]}},
    }
    with pytest.raises(NestedStackError, match=message.replace("[", r"\[").replace("]", r"\]")):
        inline_nested_stacks(parent, tmp_path)
