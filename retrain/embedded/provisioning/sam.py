"""Provisioning the embedded stack from ``template.yaml``: the same template ``sam deploy`` ships to AWS.

The SAM template is translated with aws-sam-translator (as CloudFormation's SAM transform does), after the
two steps ``sam package`` would do: function code is zipped to a deployment bucket and the state machine's
DefinitionUri is read inline. The result is created as a CloudFormation stack in the moto server, so
``describe_stacks`` returns the template's Outputs to the CLI exactly as on AWS. What moto's CloudFormation
does not implement is filled in around it, each in one place:

- FSx file systems and SageMaker model package groups are created in the embedded services first, and
  every ``Ref``/``Fn::GetAtt``/``${}`` to them is replaced by the real values before the stack is created
  (:mod:`.external`, evaluating intrinsics with :mod:`.intrinsics`);
- state machine ``DefinitionSubstitutions`` become an ``Fn::Sub`` moto resolves (here);
- the template's parameters and Rules are checked first (:mod:`.parameters`);
- nested stacks' resources are created in the one stack, under the nested stack's Condition (:mod:`.nested`);
- bucket versioning and notification configuration (S3 -> EventBridge/SQS) are applied after creation;
- Lambda functions, SQS event-source mappings and scheduled rules are wired to the embedded Lambda
  runtime (:mod:`.wiring`), and moto's own inline SQS -> Lambda delivery is switched off; the runtime
  runs each function from ``sam build``'s output of its CodeUri and layers (:mod:`.build`).

:func:`.wiring.unwired` lists any function, event source, rule, queue, table or state machine the template
declares that the runtime did not wire, so a test fails when the template grows something new.
"""

from __future__ import annotations

import copy
import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any, Final

import yaml

from retrain.embedded.account import ACCOUNT_ID
from retrain.embedded.provisioning.nested import inline_nested_stacks

DEPLOY_BUCKET: Final = "retrain-embedded-deployment"


def embedded_parameters(region: str) -> dict[str, str]:
    """Values of the template's parameters without a Default, as AWS would accept them: the emulation
    runs training_image/ itself and needs no VPC."""
    return {
        "TrainingImageUri": f"{ACCOUNT_ID}.dkr.ecr.{region}.amazonaws.com/retrain-training:latest",
        "SubnetIds": "subnet-0e0b0e0d0e0d0e0b0",
        "SecurityGroupIds": "sg-0e0b0e0d0e0d0e0b0",
    }


class ProvisioningError(RuntimeError):
    """The template declares something the embedded runtime cannot create; the message says what."""


class _CfnLoader(yaml.SafeLoader):  # type: ignore[misc,unused-ignore]
    """YAML with CloudFormation's short-form tags (``!Ref``, ``!GetAtt``, ``!Sub`` ...) as long forms."""


def _tag(loader: _CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        return {"Fn::GetAtt": value.split(".", 1)}
    if suffix == "Condition":
        return {"Condition": value}
    return {f"Fn::{suffix}": value}


_CfnLoader.add_multi_constructor("!", _tag)


def load_template(path: Path) -> dict[str, Any]:
    loaded = yaml.load(path.read_text(encoding="utf-8"), Loader=_CfnLoader)
    if not isinstance(loaded, dict) or "Resources" not in loaded:
        raise ProvisioningError(f"{path} is not a CloudFormation/SAM template (no Resources)")
    return loaded


def _zip_dir(directory: Path, *, prefix: str = "") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*.py")):
            if "__pycache__" not in path.parts:
                archive.write(path, prefix + path.relative_to(directory).as_posix())
    return buffer.getvalue()


def package(template: dict[str, Any], base_dir: Path, s3_client: Any) -> dict[str, Any]:
    """What ``sam package`` does: code to S3, state machine definitions inline, nested stacks' templates
    (created in place here, :mod:`.nested`).

    The archives hold the CodeUri and ContentUri sources (moto keeps them as the functions' code, and
    nothing runs them): what the Lambda runtime runs is ``sam build``'s output (:mod:`.build`)."""
    out = inline_nested_stacks(template, base_dir)
    global_code = out.get("Globals", {}).get("Function", {}).get("CodeUri")
    uploaded: dict[Path, str] = {}
    for logical_id, resource in out["Resources"].items():
        props = resource.setdefault("Properties", {})
        if resource.get("Type") == "AWS::Serverless::Function":
            code_uri = props.get("CodeUri", global_code)
            if not isinstance(code_uri, str) or code_uri.startswith("s3://"):
                raise ProvisioningError(
                    f"{logical_id}: CodeUri must be a local folder for the embedded stack"
                )
            directory = (base_dir / code_uri).resolve()
            if not directory.is_dir():
                raise ProvisioningError(
                    f"{logical_id}: CodeUri {code_uri!r} is not a folder next to the template"
                )
            if directory not in uploaded:
                key = f"code/{directory.name}-{len(uploaded)}.zip"
                s3_client.put_object(Bucket=DEPLOY_BUCKET, Key=key, Body=_zip_dir(directory))
                uploaded[directory] = key
            props["CodeUri"] = f"s3://{DEPLOY_BUCKET}/{uploaded[directory]}"
        elif resource.get("Type") == "AWS::Serverless::LayerVersion":
            content = (base_dir / str(props.get("ContentUri", ""))).resolve()
            if not content.is_dir():
                raise ProvisioningError(
                    f"{logical_id}: ContentUri {content} is not a folder next to the template"
                )
            key = f"layers/{logical_id}.zip"
            # a Python layer's code sits under python/ in the archive, as `sam build` lays it out
            s3_client.put_object(Bucket=DEPLOY_BUCKET, Key=key, Body=_zip_dir(content, prefix="python/"))
            props["ContentUri"] = f"s3://{DEPLOY_BUCKET}/{key}"
        elif resource.get("Type") == "AWS::Serverless::StateMachine" and isinstance(
            props.get("DefinitionUri"), str
        ):
            definition_path = base_dir / props.pop("DefinitionUri")
            props["Definition"] = json.loads(definition_path.read_text(encoding="utf-8"))
    return out


def translate(packaged: dict[str, Any], parameters: dict[str, str], region: str) -> dict[str, Any]:
    """SAM -> CloudFormation, with state machine substitutions as an Fn::Sub moto resolves."""
    import boto3
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    values: dict[str, Any] = {
        "AWS::Region": region,
        "AWS::AccountId": ACCOUNT_ID,
        "AWS::Partition": "aws",
        **parameters,
    }
    translator = Translator({}, Parser(), boto_session=boto3.session.Session(region_name=region))
    translated: dict[str, Any] = translator.translate(
        copy.deepcopy(packaged), parameter_values=values, get_managed_policy_map=dict
    )
    for resource in translated["Resources"].values():
        props = resource.get("Properties", {})
        if resource.get("Type") == "AWS::StepFunctions::StateMachine":
            definition = props.pop("Definition", None)
            substitutions = props.pop("DefinitionSubstitutions", None) or {}
            if definition is not None:
                props["DefinitionString"] = json.dumps(definition, indent=1)
            if substitutions:
                text = props["DefinitionString"]
                if not isinstance(text, str):
                    text = _join_literal(text)
                props["DefinitionString"] = definition_with_substitutions(text, substitutions)
    return translated


def definition_with_substitutions(text: str, substitutions: dict[str, Any]) -> dict[str, Any]:
    """DefinitionSubstitutions as an Fn::Join of literal text and the substituted values.

    Not an Fn::Sub: moto resolves that with string.Template, which turns the ASL's ``$$.Execution``
    context paths into ``$.Execution``. Placeholders the substitutions do not name stay as written."""
    parts: list[Any] = []
    last = 0
    for match in re.finditer(r"\$\{([^}]+)\}", text):
        if match.group(1) not in substitutions:
            continue
        parts += [text[last : match.start()], substitutions[match.group(1)]]
        last = match.end()
    parts.append(text[last:])
    return {"Fn::Join": ["", parts]}


def _join_literal(value: Any) -> str:
    """SAM renders an inline definition as Fn::Join of literal lines; turn it back into the text."""
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        if all(isinstance(part, str) for part in parts):
            return str(sep).join(parts)
    raise ProvisioningError(f"state machine DefinitionString {str(value)[:80]!r} is not literal text")
