"""Static check: the IAM roles of template.yaml against every AWS call the code and the state machine make.

No stack runs. The template is translated as SAM does; its intrinsics are resolved to stand-in names;
then, per role, every call is authorised with iam-simulate (:mod:`retrain.embedded.gatekeeper.iam`), and every
Task's static Parameters are held against the API's model (:mod:`retrain.embedded.gatekeeper.contracts`):

- each Lambda function's calls, found by reading its handler's source (:mod:`retrain.dev.calls`), with
  the resources its environment names (a table, a bucket);
- each Task of each state machine as its role: the call itself and, for ``.sync``, what Step Functions
  does behind it (describe, stop, tags, the managed EventBridge rule, ``iam:PassRole``); the role's
  permissions for the Logging configuration;
- the SageMaker execution role against the S3 layout the runs use (``controller.names``), and as the
  execution role of a registered package's model: its model data and the serving image it pulls.

A value only known at run time (a job name, the bucket of an ``s3://`` URI in an event) stands as '*':
the role must allow the action on some matching resource. ``python -m retrain.dev.iam_check`` prints
what is missing and exits 1; ``make test`` runs it.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from retrain.dev import base_image, calls
from retrain.dev.template_model import REPO, Role, Template, function_environment, load
from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.gatekeeper import contracts
from retrain.embedded.gatekeeper.iam.actions import (
    LOG_DELIVERY_ACTIONS,
    Access,
    UnknownOperationError,
    accesses,
    sync_accesses,
)
from retrain.embedded.gatekeeper.iam.evaluator import AuthzRequest, PolicyEvaluator
from retrain_contract import container

UNKNOWN: Final = "*"  # a part of a request known only at run time
# Parameters the template is checked with: every optional resource on (a stack-made MLflow app and the
# tracking function), so their roles are checked too; the other values are the defaults.
CHECKED_PARAMETERS: Final = {"MlflowTracking": "create"}
# A name the code builds from an environment variable and a run-time value: <variable's value>*.
NAME_PREFIXES: Final = {"ModelPackageGroupName": "MODEL_PACKAGE_GROUP_PREFIX"}


class Dynamic:
    """A Task parameter whose value a JSONPath gives at run time (``Name.$``)."""

    def __repr__(self) -> str:
        return "<run-time value>"


DYNAMIC: Final = Dynamic()


@dataclass(frozen=True)
class Finding:
    who: str  # the function or state machine, and its role
    what: str  # the action and resource, or the contract violation
    where: str  # the call site or the state
    why: str

    def __str__(self) -> str:
        return f"{self.who}: {self.what}\n    at {self.where}\n    {self.why}"


# --- authorisation --------------------------------------------------------------------------------------


class Checker:
    def __init__(self, template: Template, evaluator: PolicyEvaluator) -> None:
        self.template = template
        self.evaluator = evaluator

    def denied(
        self, role: Role, access: Access, resource_policy: Mapping[str, Any] | None = None
    ) -> str | None:
        """Why the role may not do it; None when it may. Parts known only at run time ('*') are
        "some resource" and "a condition the run-time value may meet"."""
        known = {key: value for key, value in access.context.items() if UNKNOWN not in value}
        decision = self.evaluator.evaluate(
            AuthzRequest(role.arn, access.action, access.resource, known),
            role.policies,
            resource_policy,
            any_match=UNKNOWN in access.resource or known != dict(access.context),
        )
        return None if decision.allowed else decision.reason

    def check(
        self,
        who: str,
        role: Role,
        needed: list[Access],
        where: str,
        resource_policy: Mapping[str, Any] | None = None,
    ) -> list[Finding]:
        return [
            Finding(who, f"{access.action} on {access.resource}", where, reason)
            for access in needed
            if (reason := self.denied(role, access, resource_policy)) is not None
        ]


def _role_of(template: Template, resource: Mapping[str, Any]) -> Role:
    arn = str(template.resolve(resource["Properties"].get("Role") or resource["Properties"].get("RoleArn")))
    return template.roles[arn]


def _value(source: calls.ValueSource, param: str, environment: Mapping[str, Any]) -> Any:
    if isinstance(source, calls.Const):
        return source.value
    if isinstance(source, calls.Env):
        return environment.get(source.variable, UNKNOWN)
    if param in NAME_PREFIXES and NAME_PREFIXES[param] in environment:
        return f"{environment[NAME_PREFIXES[param]]}{UNKNOWN}"
    return UNKNOWN


def lambda_findings(checker: Checker, functions_dir: Path = REPO / "functions") -> list[Finding]:
    """Every call reachable from each function's handler, as the function's role."""
    template = checker.template
    found: list[Finding] = []
    for logical_id, resource in template.resources("AWS::Lambda::Function"):
        props = resource["Properties"]
        role = _role_of(template, resource)
        environment = template.resolve(copy.deepcopy((props.get("Environment") or {}).get("Variables", {})))
        who = f"{logical_id} (role {role.logical_id})"
        for call in calls.handler_calls(functions_dir, str(props["Handler"])):
            missing = [
                s.variable
                for s in call.params.values()
                if isinstance(s, calls.Env) and s.variable not in environment
            ]
            if missing:
                found.append(
                    Finding(
                        who,
                        f"{call.service}:{call.operation}",
                        call.where,
                        f"reads {missing}, which the template does not set",
                    )
                )
            params = {name: _value(source, name, environment) for name, source in call.params.items()}
            try:
                needed = accesses(call.service, call.operation, params, region=REGION, account=ACCOUNT_ID)
            except (UnknownOperationError, KeyError) as error:
                found.append(
                    Finding(who, f"{call.service}:{call.operation}", call.where, f"no IAM mapping ({error})")
                )
                continue
            found += checker.check(who, role, needed, f"{call.where} ({' > '.join(call.chain)})")
    return found


# --- the state machines -----------------------------------------------------------------------------


def _states(states: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in states.items():
        yield name, state
        for branch in state.get("Branches", []):
            yield from _states(branch["States"])
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            yield from _states(processor["States"])


def _static_parameters(node: Any, resolve: Any) -> Any:
    """A Task's Parameters with ``Name.$`` as ``Name``: DYNAMIC, and substitutions resolved."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key.endswith(".$"):
                out[key[:-2]] = DYNAMIC
            else:
                out[key] = _static_parameters(value, resolve)
        return out
    if isinstance(node, list):
        return [_static_parameters(item, resolve) for item in node]
    if isinstance(node, str):
        return resolve(node)
    return node


def _task_call(resource: str) -> tuple[str, str, bool] | None:
    """(boto3 service, operation, .sync) of a Task's resource; None for an activity or a function ARN."""
    if not resource.startswith("arn:aws:states:::"):
        return None
    integration = resource.removeprefix("arn:aws:states:::")
    sync = integration.endswith(".sync")
    integration = integration.removesuffix(".sync")
    if integration.startswith("aws-sdk:"):
        _, service, action = integration.split(":")
    else:
        service, action = integration.split(":")
    service = {"states": "stepfunctions", "sfn": "stepfunctions"}.get(service, service)
    return service, action[:1].upper() + action[1:], sync


def _concrete(value: Any) -> Any:
    if value is DYNAMIC:
        return UNKNOWN
    if isinstance(value, dict):
        return {k: _concrete(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_concrete(v) for v in value]
    return value


def state_machine_findings(checker: Checker) -> list[Finding]:
    template = checker.template
    found: list[Finding] = []
    for logical_id, resource in template.resources("AWS::StepFunctions::StateMachine"):
        props = resource["Properties"]
        role = _role_of(template, resource)
        who = f"{logical_id} (role {role.logical_id})"
        if (props.get("LoggingConfiguration") or {}).get("Destinations"):
            found += checker.check(
                who, role, [Access(a, "*") for a in LOG_DELIVERY_ACTIONS], "LoggingConfiguration (deploy)"
            )
        definition = props["DefinitionString"]
        text = definition if isinstance(definition, str) else str(template.resolve(definition))
        machine = json.loads(text)
        for name, state in _states(machine["States"]):
            if state.get("Type") != "Task":
                continue
            task = _task_call(str(state["Resource"]))
            if task is None:
                continue
            service, operation, sync = task
            where = f"state {name!r}"
            params = _static_parameters(state.get("Parameters", {}), lambda value: value)
            if service == "lambda" and operation == "Invoke":
                params["Payload"] = DYNAMIC
            found += _contract_findings(who, where, service, operation, params)
            concrete = _concrete(params)
            try:
                needed = accesses(service, operation, concrete, region=REGION, account=ACCOUNT_ID)
                if sync:
                    needed += sync_accesses(operation, concrete, region=REGION, account=ACCOUNT_ID)
            except (UnknownOperationError, KeyError) as error:
                found.append(Finding(who, f"{service}:{operation}", where, f"no IAM mapping ({error})"))
                continue
            found += checker.check(who, role, needed, where)
    return found


def _contract_findings(
    who: str, where: str, service: str, operation: str, params: dict[str, Any]
) -> list[Finding]:
    try:
        problems = contracts.violations(service, operation, params, unknown=lambda value: value is DYNAMIC)
    except ValueError as error:
        return [Finding(who, f"{service}:{operation}", where, str(error))]
    return [Finding(who, f"Parameters of {service}:{operation}", where, v.describe()) for v in problems]


# --- the SageMaker jobs' role ------------------------------------------------------------------------------


def sagemaker_role_findings(checker: Checker) -> list[Finding]:
    """The execution role the state machine passes to SageMaker, against the S3 layout of a run."""
    from controller import names  # the control plane's names, installed with the project (pyproject.toml)

    template = checker.template
    buckets = {
        logical: str(template.resolve({"Ref": logical}))
        for logical, _ in template.resources("AWS::S3::Bucket")
    }
    data, artifacts = buckets.get("DataBucket"), buckets.get("ArtifactBucket")
    found: list[Finding] = []
    app_roles = {str(template.resolve(r["Properties"]["RoleArn"])) for _, r in template.resources(MLFLOW_APP)}
    for role in template.roles.values():
        if role.arn in app_roles:
            continue
        trusted = json.dumps(
            template.resolve(
                template.translated["Resources"][role.logical_id]["Properties"]["AssumeRolePolicyDocument"]
            )
        )
        if "sagemaker.amazonaws.com" not in trusted or data is None or artifacts is None:
            continue
        dataset, run = "flowers", "flowers-00001"

        def obj(bucket: str, key: str) -> str:
            return f"arn:aws:s3:::{bucket}/{key}"

        needed = [
            Access("s3:ListBucket", f"arn:aws:s3:::{data}", {"s3:prefix": names.dataset_prefix(dataset)}),
            Access("s3:GetObject", obj(data, names.upload_key(dataset, "daisy", "a.jpg"))),
            Access(
                "s3:GetObject", obj(artifacts, names.manifest_prefix(dataset, run) + container.MANIFEST_FILE)
            ),
            Access(
                "s3:PutObject", obj(artifacts, names.output_prefix(dataset, run) + "job/output/model.tar.gz")
            ),
            Access(
                "s3:GetObject", obj(artifacts, names.checkpoint_prefix(dataset, run) + "job/algo-1/ckpt.pt")
            ),
            Access(
                "s3:PutObject", obj(artifacts, names.checkpoint_prefix(dataset, run) + "job/algo-1/ckpt.pt")
            ),
            Access(
                "s3:PutObject", obj(artifacts, names.evaluation_prefix(dataset, run, "challenger") + "e.json")
            ),
            Access(
                "logs:CreateLogStream",
                f"arn:aws:logs:{REGION}:{ACCOUNT_ID}:log-group:/aws/sagemaker/TrainingJobs:log-stream:job/algo-1",
            ),
            Access(
                "logs:PutLogEvents",
                f"arn:aws:logs:{REGION}:{ACCOUNT_ID}:log-group:/aws/sagemaker/TrainingJobs:log-stream:job/algo-1",
            ),
        ]
        found += checker.check(
            f"SageMaker jobs (role {role.logical_id})",
            role,
            needed,
            "the S3 layout of a run (controller.names)",
        )
        model_key = names.output_prefix(dataset, run) + "job/output/model.tar.gz"
        serving, pull = _serving_accesses(template, artifacts, model_key)
        where = "a registered package's container (register.py, `retrain predict`)"
        found += checker.check(f"SageMaker endpoints (role {role.logical_id})", role, serving, where)
        found += checker.check(
            f"SageMaker endpoints (role {role.logical_id})",
            role,
            pull,
            where + ", from AWS's DLC registry",
            base_image.DLC_REPOSITORY_POLICY,
        )
    return found


def _serving_accesses(
    template: Template, artifacts: str, model_key: str
) -> tuple[list[Access], list[Access]]:
    """What an endpoint of a registered package does as its model's execution role (the stack's
    SageMaker role, as `retrain predict` and docs/serving.md deploy it): read the model data and write the
    endpoint's logs; and pull the serving image the register function names, from AWS's account."""
    image = function_environment(template, "RegisterModelFunction").get("INFERENCE_IMAGE_URI", "")
    group = f"arn:aws:logs:{REGION}:{ACCOUNT_ID}:log-group:/aws/sagemaker/Endpoints/endpoint"
    needed = [
        Access("s3:GetObject", f"arn:aws:s3:::{artifacts}/{model_key}"),
        Access("logs:PutLogEvents", f"{group}:log-stream:AllTraffic/i-1"),
        Access("ecr:GetAuthorizationToken", "*"),
    ]
    pull: list[Access] = []
    if image:
        registry, repository = image.split("/", 1)
        account, region = registry.split(".")[0], registry.split(".")[3]
        arn = f"arn:aws:ecr:{region}:{account}:repository/{repository.split(':')[0]}"
        pull = [Access(action, arn) for action in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")]
    return needed, pull


# --- experiment tracking ---------------------------------------------------------------------------------
MLFLOW_APP: Final = "AWS::SageMaker::MlflowApp"
# The MLflow REST operations controller.tracking calls; a tracking server authorises each as
# sagemaker-mlflow:<operation>, an MLflow app all of them as sagemaker:CallMlflowAppApi (Service
# Authorization Reference: Amazon SageMaker with MLflow; Amazon SageMaker, resource type mlflow-app).
MLFLOW_OPERATIONS: Final = (
    "GetExperimentByName",
    "CreateExperiment",
    "CreateRun",
    "DeleteRun",
    "SearchRuns",
    "LogBatch",
    "UpdateRun",
    "GetRun",  # set_terminated and log_dict read the run
)


def mlflow_findings(checker: Checker) -> list[Finding]:
    """MLflow's client is no boto3 call the source reader sees: each function with MLFLOW_TRACKING_URI
    must be allowed the REST API of that app or tracking server, and to write run artifacts to a stack-made
    app's artifact store; each app's own role must read and write that store (the UI shows artifacts)."""
    template = checker.template
    found: list[Finding] = []
    stores: list[str] = []
    for logical_id, resource in template.resources(MLFLOW_APP):
        props = template.resolve(copy.deepcopy(resource["Properties"]))
        store = str(props["ArtifactStoreUri"]).removeprefix("s3://").rstrip("/")
        stores.append(store)
        artifact = f"arn:aws:s3:::{store}/1/run/artifacts/evaluation/challenger.json"
        role = template.roles[str(props["RoleArn"])]
        needed = [Access("s3:GetObject", artifact), Access("s3:PutObject", artifact)]
        found += checker.check(
            f"{logical_id} (role {role.logical_id})", role, needed, "the app's artifact store"
        )
    for logical_id, resource in template.resources("AWS::Lambda::Function"):
        props = resource["Properties"]
        environment = template.resolve(copy.deepcopy((props.get("Environment") or {}).get("Variables", {})))
        uri = str(environment.get("MLFLOW_TRACKING_URI", ""))
        if not uri:
            continue
        role = _role_of(template, resource)
        if ":mlflow-app/" in uri:
            needed = [Access("sagemaker:CallMlflowAppApi", uri)]
        else:
            needed = [Access(f"sagemaker-mlflow:{operation}", uri) for operation in MLFLOW_OPERATIONS]
        needed += [
            Access("s3:PutObject", f"arn:aws:s3:::{s}/1/run/artifacts/evaluation/challenger.json")
            for s in stores
        ]
        found += checker.check(
            f"{logical_id} (role {role.logical_id})", role, needed, "MLflow's client (tracking.py)"
        )
    return found


def findings(checker: Checker) -> list[Finding]:
    return (
        lambda_findings(checker)
        + state_machine_findings(checker)
        + sagemaker_role_findings(checker)
        + mlflow_findings(checker)
    )


def run(template_path: Path = REPO / "template.yaml") -> list[Finding]:
    with PolicyEvaluator(account=ACCOUNT_ID) as evaluator:
        return findings(Checker(load(template_path, CHECKED_PARAMETERS), evaluator))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    template = Path(args[0]) if args else REPO / "template.yaml"
    findings = run(template)
    for finding in findings:
        print(finding)
    if findings:
        print(f"iam_check: {len(findings)} problem(s) in {template}", file=sys.stderr)
        return 1
    print(f"iam_check: every role in {template.name} allows what its code and state machine call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
