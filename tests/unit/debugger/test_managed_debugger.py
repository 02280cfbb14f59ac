from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from retrain import managed_debugger
from retrain.embedded.provisioning.sam import load_template
from retrain_contract import container

REPO = Path(__file__).resolve().parents[3]


class _CfnLoader(yaml.SafeLoader):
    """Reads CloudFormation's short-form tags (!Sub, !Ref, ...) as plain values."""


def _any_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


_CfnLoader.add_multi_constructor("!", _any_tag)


def test_configs_name_every_mirrored_rule_with_the_regions_evaluator_image() -> None:
    # WHEN the managed configs are built for eu-west-1
    configs = managed_debugger.build_configs("eu-west-1", s3_output_path="s3://bucket/runs/r1/debug")

    # THEN the four tensor rules and four profiler rules use eu-west-1's evaluator image
    image = managed_debugger.rule_evaluator_image("eu-west-1")
    assert image.endswith(".dkr.ecr.eu-west-1.amazonaws.com/sagemaker-debugger-rules:latest")
    tensor = configs["DebugRuleConfigurations"]
    profiler = configs["ProfilerRuleConfigurations"]
    assert [r["RuleConfigurationName"] for r in tensor] == list(managed_debugger.TENSOR_RULES)
    assert [r["RuleConfigurationName"] for r in profiler] == list(managed_debugger.PROFILER_RULES)
    assert {r["RuleEvaluatorImage"] for r in tensor + profiler} == {image}
    assert configs["DebugHookConfig"]["S3OutputPath"] == "s3://bucket/runs/r1/debug"
    assert configs["ProfilerConfig"]["ProfilingIntervalInMilliseconds"] == 500


def test_profiler_rule_parameters_are_the_defaults_our_open_rules_use() -> None:
    from retrain_training.rules import system as system_rules

    # GIVEN the managed CPUBottleneck parameters WHEN compared with our rule's defaults
    (cpu,) = [
        r
        for r in managed_debugger.build_configs("us-east-1")["ProfilerRuleConfigurations"]
        if r["RuleConfigurationName"] == "CPUBottleneck"
    ]
    import inspect

    ours = inspect.signature(system_rules.CPUBottleneck).parameters
    # THEN every managed parameter has the same default in ours
    for name, value in cpu["RuleParameters"].items():
        if name != "rule_to_invoke":
            assert float(ours[name].default) == float(value), name


def test_without_an_output_path_the_state_machine_fills_it_in() -> None:
    configs = managed_debugger.build_configs("us-east-1")
    assert "S3OutputPath" not in configs["DebugHookConfig"]
    assert "S3OutputPath" not in configs["ProfilerConfig"]


def test_an_unknown_region_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="xx-nowhere-1"):
        managed_debugger.rule_evaluator_image("xx-nowhere-1")


def test_the_command_prints_the_configs_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert managed_debugger.main(["--region", "us-west-2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(managed_debugger.build_configs("us-west-2")))


def test_the_templates_rule_image_mapping_covers_every_sagemaker_region_from_data() -> None:
    # GIVEN the template's DebuggerRuleImages mapping, the image string it builds, and its managed-mode rule
    template = load_template(REPO / "template.yaml")
    mapping = template["Mappings"]["DebuggerRuleImages"]
    substitution = template["Resources"]["TrainingStateMachine"]["Properties"]["DefinitionSubstitutions"]
    pattern = substitution["DebuggerRuleImage"]["Fn::Sub"][0]
    [assertion] = template["Rules"]["ManagedDebuggerNeedsARuleImage"]["Assertions"]
    allowed_regions = assertion["Assert"]["Fn::Contains"][0]

    # WHEN each region's URI is built the way CloudFormation builds it
    def built(region: str) -> str:
        suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
        uri = pattern.replace("${Account}", mapping[region]["Account"]).replace("${AWS::Region}", region)
        return str(uri.replace("${AWS::URLSuffix}", suffix))

    # THEN every region botocore lists for SageMaker has a row (so the stack deploys there), the rows are
    # sagemaker-core's accounts, and managed mode is allowed exactly where an image exists
    assert set(mapping) == set(managed_debugger.sagemaker_regions())
    with_image = [region for region, row in mapping.items() if row["Account"]]
    expected = managed_debugger.rule_evaluator_images(with_image)
    assert {region: built(region) for region in with_image} == expected
    assert sorted(allowed_regions) == sorted(with_image)
    assert len(with_image) < len(mapping)  # the data still has regions without a rule image


def test_the_mapping_the_command_prints_is_the_templates() -> None:
    text = (REPO / "template.yaml").read_text()
    printed = managed_debugger.template_mapping().splitlines()
    assert all(line in text for line in printed if not line.startswith("#"))


def test_the_state_machines_managed_rules_match_the_configs() -> None:
    # GIVEN the state machine, whose DebuggerMode=managed branch configures the final training job
    text = (REPO / "statemachine" / "training.asl.json").read_text()
    found: dict[str, Any] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in (
                "DebugRuleConfigurations",
                "ProfilerRuleConfigurations",
                "DebugHookConfig",
                "ProfilerConfig",
            ):
                if key in node:
                    found[key] = node[key]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    # WHEN its Debugger configurations are collected
    walk(json.loads(text))
    # THEN all four are there (a state machine that lost its managed branch fails here), and they are
    # the configurations `retrain` builds, with the rule image and the run's paths as parameters
    assert sorted(found) == [
        "DebugHookConfig",
        "DebugRuleConfigurations",
        "ProfilerConfig",
        "ProfilerRuleConfigurations",
    ]
    expected = managed_debugger.build_configs("us-east-1")
    for key in ("DebugRuleConfigurations", "ProfilerRuleConfigurations"):
        ours = [{k: v for k, v in r.items() if k != "RuleEvaluatorImage"} for r in expected[key]]  # type: ignore[literal-required]
        theirs = [{k: v for k, v in r.items() if not re.match(r"RuleEvaluatorImage", k)} for r in found[key]]
        assert theirs == ours, key
        assert all(str(r.get("RuleEvaluatorImage")) == "${DebuggerRuleImage}" for r in found[key]), key
    for key in ("DebugHookConfig", "ProfilerConfig"):
        # S3OutputPath is per run: the state machine fills it from the run (S3OutputPath.$)
        theirs_config = {k: v for k, v in found[key].items() if k != "S3OutputPath.$"}
        if "LocalPath.$" in theirs_config:  # the contract's path, from the run (no copy in the ASL)
            assert theirs_config.pop("LocalPath.$") == "$.run.container.debug_hook_local_path"
            theirs_config["LocalPath"] = container.state_machine_spec(system_rule_patience=1)[
                "debug_hook_local_path"
            ]
        assert theirs_config == expected[key], key  # type: ignore[literal-required]
        assert "S3OutputPath.$" in found[key], key
