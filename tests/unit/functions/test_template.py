"""template.yaml against the code it deploys: names, wiring and the security settings the issue asks for."""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller import names

REPO = Path(__file__).resolve().parents[3]
ASL = REPO / "statemachine" / "training.asl.json"


class _CfnLoader(yaml.SafeLoader):
    pass


def _tag(loader: _CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _tag)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return yaml.load((REPO / "template.yaml").read_text(), Loader=_CfnLoader)


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def test_outputs_are_the_names_the_cli_reads(template):
    # GIVEN the stack outputs the CLI looks up by name
    # THEN the template declares exactly those outputs
    assert set(template["Outputs"]) == set(names.STACK_OUTPUTS.values())


def test_every_function_handler_is_an_importable_handler(template):
    # GIVEN every function of the template
    functions = _resources(template, "AWS::Serverless::Function")
    assert functions
    for logical_id, resource in functions.items():
        module, _, attribute = resource["Properties"]["Handler"].rpartition(".")
        # THEN its handler names a callable in the Lambda package
        assert callable(getattr(importlib.import_module(module), attribute)), logical_id


def test_the_state_machine_substitutions_match_the_asl_placeholders(template):
    # GIVEN the placeholders of the ASL file and the substitutions of the template
    placeholders = set(re.findall(r"\$\{([A-Za-z0-9_]+)\}", ASL.read_text()))
    machine = template["Resources"]["TrainingStateMachine"]["Properties"]
    # THEN each placeholder is substituted and no substitution is unused
    assert placeholders == set(machine["DefinitionSubstitutions"])
    assert machine["DefinitionUri"] == "statemachine/training.asl.json" and machine["Type"] == "STANDARD"


def test_the_ingest_queue_outlasts_six_ingest_timeouts_and_has_a_dead_letter_queue(template):
    resources = template["Resources"]
    timeout = resources["IngestFunction"]["Properties"].get(
        "Timeout", template["Globals"]["Function"]["Timeout"]
    )
    queue = resources["IngestQueue"]["Properties"]
    assert queue["VisibilityTimeout"] >= 6 * timeout
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": ["IngestDeadLetterQueue", "Arn"]}
    event = resources["IngestFunction"]["Properties"]["Events"]["Uploads"]["Properties"]
    assert event["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_uploads_reach_the_queue_through_eventbridge_only(template):
    # GIVEN the data bucket: its notifications go to EventBridge (FSx auto-import keeps its own)
    bucket = template["Resources"]["DataBucket"]["Properties"]
    assert bucket["NotificationConfiguration"] == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}
    # AND the rule forwards object-created events under data/ to the ingest queue
    rule = template["Resources"]["UploadsRule"]["Properties"]
    assert rule["EventPattern"]["detail"]["object"]["key"] == [{"prefix": names.DATA_PREFIX}]
    assert rule["Targets"][0]["Arn"] == {"Fn::GetAtt": ["IngestQueue", "Arn"]}


@pytest.mark.parametrize("bucket", ["DataBucket", "ArtifactBucket"])
def test_buckets_are_versioned_encrypted_private_and_tls_only(template, bucket):
    props = template["Resources"][bucket]["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert all(props["PublicAccessBlockConfiguration"].values())
    [policy] = [
        r
        for r in _resources(template, "AWS::S3::BucketPolicy").values()
        if r["Properties"]["Bucket"] == {"Ref": bucket}
    ]
    [statement] = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Deny" and statement["Condition"] == {
        "Bool": {"aws:SecureTransport": "false"}
    }


def test_pass_role_is_limited_to_the_sagemaker_role_and_service(template):
    # GIVEN every statement that grants iam:PassRole
    grants = []
    for resource in template["Resources"].values():
        for policy in resource.get("Properties", {}).get("Policies", []) or []:
            for statement in policy.get("Statement", []) if isinstance(policy, dict) else []:
                if "iam:PassRole" in json.dumps(statement.get("Action")):
                    grants.append(statement)
    # THEN each names only the SageMaker execution role, passed to SageMaker only
    assert grants
    for statement in grants:
        assert statement["Resource"] == {"Fn::GetAtt": ["SageMakerExecutionRole", "Arn"]}
        assert statement["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}


def test_function_environment_variables_are_the_names_the_code_reads(template):
    # GIVEN the environment variables the template sets
    declared = set(template["Globals"]["Function"]["Environment"]["Variables"])
    for resource in _resources(template, "AWS::Serverless::Function").values():
        declared |= set(resource["Properties"].get("Environment", {}).get("Variables", {}))
    # THEN every one the code does not read is a Powertools setting
    known = {getattr(names, n) for n in dir(names) if n.startswith("ENV_")}
    assert {v for v in declared - known if not v.startswith("POWERTOOLS_")} == set()


def _render_settings(text: str, values: dict[str, str]) -> dict[str, Any]:
    rendered = re.sub(r"\$\{([A-Za-z0-9]+)\}", lambda m: values.get(m.group(1), "x"), text)
    return json.loads(rendered)


def _settings_parameters(template) -> dict[str, str]:
    """RUN_SETTINGS key -> the template parameter it renders ("epochs": ${Epochs})."""
    sub = template["Globals"]["Function"]["Environment"]["Variables"][names.ENV_SETTINGS]["Fn::Sub"]
    pairs = dict(re.findall(r'"([a-z_]+)": "?\$\{([A-Za-z0-9]+)\}', sub[0]))
    aliases = {
        alias: next(iter(v.values()))["Ref"]
        if isinstance(v, dict) and "Ref" in next(iter(v.values()), {})
        else alias
        for alias, v in sub[1].items()
    }
    return {key: aliases.get(param, param) for key, param in pairs.items()}


def test_run_settings_render_every_setting_the_run_reads_from_the_parameter_defaults():
    from retrain.dev.template_model import default_environment
    from retrain_contract.run import RunSettings, parse_settings

    # WHEN the template's RUN_SETTINGS renders with every parameter at its default
    rendered = default_environment("PrepareRunFunction")[names.ENV_SETTINGS]
    # THEN it holds every key of RunSettings, each of its type (parse_settings raises otherwise)
    assert parse_settings(rendered).keys() == RunSettings.__annotations__.keys()


def test_a_setting_the_template_does_not_render_is_refused():
    from retrain.dev.template_model import default_environment
    from retrain_contract.run import SettingsError, parse_settings

    settings = json.loads(default_environment("PrepareRunFunction")[names.ENV_SETTINGS])
    del settings["epochs"]
    with pytest.raises(SettingsError, match="lacks epochs"):
        parse_settings(settings)
    with pytest.raises(SettingsError, match="epochs='ten'"):
        parse_settings({**settings, "epochs": "ten"})


def test_every_function_gets_the_stacks_parameters_and_no_code_default_remains(template):
    from controller import config

    # every function's environment (Globals included) configures it without a fallback
    from retrain.dev.template_model import default_environment

    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::Serverless::Function":
            config.from_environ(default_environment(logical_id))
    fields = {f.name: f for f in dataclasses.fields(config.Config)}
    defaulted = {n for n, f in fields.items() if f.default is not dataclasses.MISSING}
    # resources, not parameters; the serving image is the region's (a mapping), not a parameter
    assert defaulted == {"state_machine_arn", "sagemaker_role_arn", "inference_image_uri", "ingest_queue_url"}
    # the resources are set where they are used: ingest sends throttled notices back to its queue
    environment = template["Resources"]["IngestFunction"]["Properties"]["Environment"]["Variables"]
    assert environment[names.ENV_INGEST_QUEUE_URL] == {"Ref": "IngestQueue"}


def test_the_manual_start_overrides_admit_what_the_template_parameters_admit(template):
    from controller import run_request

    parameters = _settings_parameters(template)
    overrides = run_request.OVERRIDES_SCHEMA["properties"]
    # THEN every override is a run setting (or the fixed hyperparameters)
    assert set(overrides) - {"hyperparameters", "start_from"} <= set(parameters)
    compared = []
    for key, schema in overrides.items():
        declared = template["Parameters"].get(parameters.get(key, ""), {})
        if "enum" in schema and "AllowedValues" in declared:
            assert sorted(map(str, schema["enum"])) == sorted(map(str, declared["AllowedValues"])), key
            compared.append(key)
    assert {"model", "tuning_strategy", "data_source", "class_balance", "small_labels"} <= set(compared)
    declared_uri = template["Parameters"][parameters["pretrained_model_uri"]]["AllowedPattern"]
    assert overrides["pretrained_model_uri"]["pattern"] == declared_uri


def test_the_optimizers_parameter_admits_the_containers_optimizers_only(template):
    from controller import prepare
    from retrain_contract import container

    parameter = template["Parameters"]["Optimizers"]
    pattern = re.compile(parameter["AllowedPattern"])
    admitted = [
        *container.OPTIMIZERS,
        ",".join(container.OPTIMIZERS),
        ",".join(reversed(container.OPTIMIZERS)),
    ]
    assert all(pattern.fullmatch(value) for value in admitted)
    assert not any(pattern.fullmatch(value) for value in ("", "lion", "sgd,lion", "sgd;adamw", "SGD"))
    # the default is every optimizer, and prepare reads it as the tuning job's categorical values
    assert prepare.optimizers({"optimizers": parameter["Default"]}) == list(container.OPTIMIZERS)


def test_the_blocking_rules_parameter_admits_rule_names_only_and_the_code_reads_it(template):
    from controller import config
    from controller.errors import ConfigurationError
    from retrain.dev.template_model import default_environment
    from retrain_contract import rules

    parameter = template["Parameters"][rules.BLOCKING_RULES_PARAMETER]
    pattern = re.compile(parameter["AllowedPattern"])
    # GIVEN the values a deployer may give: none, one, several, every rule
    admitted = ["", "Overfit", "Overfit,CPUBottleneck", ",".join(rules.RULE_NAMES)]
    assert all(pattern.fullmatch(value) for value in admitted)
    assert not any(pattern.fullmatch(v) for v in ("Overfit,", "overfit", "Overfit, StepOutlier", "DeadRelu"))
    # THEN the default blocks on the rules that find a training that does not learn, and warns on Overfit
    # and on the rules that judge the machine (bench/rules.py measured why)
    environment = default_environment("GateFunction")
    blocking = ("VanishingGradient", "ExplodingTensor", "LossNotDecreasing")
    assert config.from_environ(environment).blocking_rules == blocking
    # AND a name the pattern would not admit is refused by the code too, naming the parameter
    with pytest.raises(ConfigurationError, match=r"BlockingRules\) names unknown rule\(s\) DeadRelu"):
        config.from_environ({**environment, names.ENV_BLOCKING_RULES: "Overfit,DeadRelu"})
    assert config.from_environ({**environment, names.ENV_BLOCKING_RULES: ""}).blocking_rules == ()


def test_alarms_watch_the_dead_letter_queue_failed_runs_and_stuck_runs(template):
    alarms = _resources(template, "AWS::CloudWatch::Alarm")
    metrics = {a["Properties"]["MetricName"] for a in alarms.values()}
    assert {"ApproximateNumberOfMessagesVisible", "ExecutionsFailed", names.METRIC_STUCK_RUNS} <= metrics


PSEUDO = {"AWS::Partition": "aws", "AWS::Region": "us-east-1", "AWS::AccountId": "123456789012"}


def _filled(pattern: dict[str, Any], bucket: str) -> str:
    """The pattern as CloudFormation renders it in us-east-1 of the test account, `bucket` for buckets."""
    text = re.sub(r'\{"Ref": "[A-Za-z]+Bucket"\}', json.dumps(bucket), json.dumps(pattern))
    return re.sub(
        r'\{"Fn::Sub": "([^"]*)"\}',
        lambda m: json.dumps(re.sub(r"\$\{([^}]+)\}", lambda p: PSEUDO[p.group(1)], m.group(1))),
        text,
    )


def _event(detail_type: str, source: str, detail: dict[str, Any]) -> str:
    return json.dumps(
        {
            "id": "1",
            "account": "123456789012",
            "region": "us-east-1",
            "time": "2026-01-01T00:00:00Z",
            "resources": [],
            "detail-type": detail_type,
            "source": source,
            "detail": detail,
        }
    )


def test_the_checkpoint_rules_match_checkpoints_and_ended_evaluation_jobs_as_sagemaker_sends_them(template):
    from moto.events.models import EventPattern  # the matcher the emulated EventBridge applies

    rules = template["Resources"]["CheckpointEvaluationFunction"]["Properties"]["Events"]
    checkpoints = _filled(rules["Checkpoints"]["Properties"]["Pattern"], "artifacts")
    done = _filled(rules["EvaluationsDone"]["Properties"]["Pattern"], "artifacts")

    def matches(pattern: str, event: str | dict[str, Any]) -> bool:
        return bool(
            EventPattern.load(pattern).matches_event(event if isinstance(event, dict) else json.loads(event))
        )

    key = names.checkpoint_prefix("flowers", "flowers-00001") + "job/algo-1/ckpt-000000050.pt"
    created = {"bucket": {"name": "artifacts"}, "object": {"key": key}}
    elsewhere = {"bucket": {"name": "artifacts"}, "object": {"key": "runs/flowers/x/manifest/manifest.jsonl"}}
    assert matches(checkpoints, _event("Object Created", "aws.s3", created))
    assert not matches(checkpoints, _event("Object Created", "aws.s3", elsewhere))
    # GIVEN a checkpoint evaluation's end as SageMaker sends it: AWS's documented sample, which has no Tags
    sample = json.loads(
        (REPO / "tests" / "events" / "sagemaker_processing_job_state_change.json").read_text()
    )
    assert "Tags" not in sample["detail"]
    ours = "arn:aws:sagemaker:us-east-1:123456789012:processing-job/" + names.CHECKPOINT_EVAL_JOB_PREFIX
    assert sample["resources"][0].startswith(ours)
    # THEN the rule matches it ended, not running, and not another processing job (the run's own evaluation)
    assert matches(done, sample)
    for status in ("Failed", "Stopped"):
        assert matches(done, {**sample, "detail": {**sample["detail"], "ProcessingJobStatus": status}})
    assert not matches(done, {**sample, "detail": {**sample["detail"], "ProcessingJobStatus": "InProgress"}})
    other = "arn:aws:sagemaker:us-east-1:123456789012:processing-job/rt-1a2b3c4d-flowers-eval-new"
    assert not matches(done, {**sample, "resources": [other]})
    # AND a checkpoint's copy (what an evaluation reads) starts no evaluation of its own
    copy = {
        "bucket": {"name": "artifacts"},
        "object": {"key": names.checkpoint_copy_key("flowers", "r", "job", 50)},
    }
    assert not matches(checkpoints, _event("Object Created", "aws.s3", copy))


def test_the_ended_jobs_rule_matches_ended_training_jobs_of_a_run_only(template):
    from moto.events.models import EventPattern

    rule = template["Resources"]["CheckpointEvaluationFunction"]["Properties"]["Events"]["TrainingJobsEnded"]
    pattern = EventPattern.load(json.dumps(rule["Properties"]["Pattern"]))

    def ended(status: str, tags: dict[str, str]) -> bool:
        detail = {"TrainingJobName": "tune-001", "TrainingJobStatus": status, "Tags": tags}
        event = _event("SageMaker Training Job State Change", "aws.sagemaker", detail)
        return bool(pattern.matches_event(json.loads(event)))

    of_a_run = {names.TAG_DATASET: "flowers", names.TAG_RUN_ID: "flowers-00001"}
    assert all(ended(status, of_a_run) for status in ("Completed", "Failed", "Stopped"))
    assert not ended("InProgress", of_a_run)
    assert not ended("Completed", {})


def test_the_ended_tuning_jobs_rule_matches_ended_tuning_jobs_of_a_run_only(template):
    from moto.events.models import EventPattern

    rule = template["Resources"]["CheckpointEvaluationFunction"]["Properties"]["Events"]["TuningJobsEnded"]
    pattern = EventPattern.load(json.dumps(rule["Properties"]["Pattern"]))

    def ended(status: str, tags: dict[str, str]) -> bool:
        detail = {
            "HyperParameterTuningJobName": "tune",
            "HyperParameterTuningJobStatus": status,
            "Tags": tags,
        }
        event = _event("SageMaker HyperParameter Tuning Job State Change", "aws.sagemaker", detail)
        return bool(pattern.matches_event(json.loads(event)))

    of_a_run = {names.TAG_DATASET: "flowers", names.TAG_RUN_ID: "flowers-00001"}
    assert all(ended(status, of_a_run) for status in ("Completed", "Failed", "Stopped"))
    assert not ended("InProgress", of_a_run) and not ended("Stopping", of_a_run)
    assert not ended("Completed", {})


def test_the_guides_configuration_page_documents_every_parameter_with_the_templates_default(template):
    page = (Path(__file__).resolve().parents[3] / "docs" / "parameters.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([A-Za-z0-9]+)` \| `([^`]*)` \|", page, flags=re.M))
    declared = template["Parameters"]
    assert set(rows) == set(declared)
    for name, parameter in declared.items():
        default = str(parameter.get("Default", ""))
        shown = {"(empty)": "", "(required)": ""}.get(rows[name], rows[name])
        assert shown == (",".join(default) if isinstance(parameter.get("Default"), list) else default), name


def test_the_manual_start_documentation_names_every_override():
    from controller import run_request

    documented = (Path(__file__).resolve().parents[3] / "functions" / "README.md").read_text(encoding="utf-8")
    assert [k for k in run_request.OVERRIDES_SCHEMA["properties"] if f"`{k}`" not in documented] == []


def test_the_ledger_is_pre_warmed_only_when_asked_for(template):
    # pre-warming is billed and can never be lowered: the default stack asks for none, on the table and on
    # its index alike, and a value names both
    parameter = template["Parameters"]["LedgerWarmWriteUnits"]
    assert parameter["Default"] == 0 and 0 in parameter["AllowedValues"]
    assert template["Conditions"]["WarmLedger"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "LedgerWarmWriteUnits"}, 0]}]
    }
    ledger = template["Resources"]["LedgerTable"]["Properties"]
    asked = {
        "Fn::If": [
            "WarmLedger",
            {"WriteUnitsPerSecond": {"Ref": "LedgerWarmWriteUnits"}},
            {"Ref": "AWS::NoValue"},
        ]
    }
    assert ledger["WarmThroughput"] == asked
    assert [index["WarmThroughput"] for index in ledger["GlobalSecondaryIndexes"]] == [asked]


def test_what_holds_users_records_outlives_the_stack(template):
    # deleting or replacing the stack keeps the uploads, the artifacts, the ledger, the runs and the data sets
    for name in ("DataBucket", "ArtifactBucket", "LedgerTable", "RunsTable", "DatasetsTable"):
        resource = template["Resources"][name]
        assert (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) == (
            "Retain",
            "Retain",
        ), name
