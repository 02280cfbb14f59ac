"""The embedded Lambda runtime: handlers in their own processes, on the template's runtime, importing
only their build and layers, with the template's environment."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from retrain.embedded.awslambda.interpreters import RuntimeUnavailableError, interpreter, python_version
from retrain.embedded.awslambda.runtime import (
    TIMEOUT_ERROR,
    FunctionNotFoundError,
    FunctionSpec,
    LambdaRuntime,
)
from retrain.embedded.provisioning.sam import load_template
from retrain.embedded.stepfunctions.errors import TaskFailed
from retrain.embedded.stepfunctions.integrations import installed

REPO_ROOT = Path(__file__).resolve().parents[3]
# What template.yaml's functions run on (Globals.Function.Runtime): python3.13.
RUNTIME = load_template(REPO_ROOT / "template.yaml")["Globals"]["Function"]["Runtime"]

HANDLERS = """
import os, time
STAGE = os.environ.get("STAGE", "unset")  # read once at import, like controller.config

def whoami(event, context):
    return {"stage": STAGE, "function": context.function_name, "endpoint": os.environ["AWS_ENDPOINT_URL"],
            "event": event, "remaining_ok": context.get_remaining_time_in_millis() > 0}

def boom(event, context):
    print("about to fail")
    raise ValueError(f"bad event: {event}")

def slow(event, context):
    if event.get("warm"):
        return "warm"
    time.sleep(30)
"""


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LambdaRuntime]:
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(HANDLERS)
    functions = {
        "ingest": FunctionSpec(
            "ingest",
            "app.whoami",
            code,
            {"STAGE": "ingest-env"},
            logical_id="IngestFunction",
            runtime=RUNTIME,
        ),
        "dispatch": FunctionSpec("dispatch", "app.whoami", code, {"STAGE": "dispatch-env"}, runtime=RUNTIME),
        "boom": FunctionSpec("boom", "app.boom", code, runtime=RUNTIME),
        "slow": FunctionSpec("slow", "app.slow", code, timeout_seconds=0.5, runtime=RUNTIME),
    }
    runtime = LambdaRuntime(functions, endpoint_url="http://127.0.0.1:5999", log_dir=tmp_path / "logs")
    yield runtime
    runtime.close()


def test_each_function_sees_its_own_environment(runtime: LambdaRuntime) -> None:
    ingest = runtime.invoke("ingest", {"n": 1})
    dispatch = runtime.invoke("arn:aws:lambda:us-east-1:123456789012:function:dispatch", {"n": 2})

    assert (ingest["stage"], ingest["function"], ingest["event"]) == ("ingest-env", "ingest", {"n": 1})
    assert (dispatch["stage"], dispatch["function"]) == ("dispatch-env", "dispatch")
    assert ingest["endpoint"] == "http://127.0.0.1:5999"
    assert ingest["remaining_ok"] is True


def test_a_function_is_found_by_its_logical_id(runtime: LambdaRuntime) -> None:
    assert runtime.invoke("IngestFunction", {})["function"] == "ingest"


def test_handler_error_raises_its_type_and_message_and_logs(runtime: LambdaRuntime, tmp_path: Path) -> None:
    with pytest.raises(TaskFailed) as raised:
        runtime.invoke("boom", {"x": 1})

    assert raised.value.error == "ValueError"
    assert "bad event" in raised.value.cause
    log = (tmp_path / "logs" / "boom.log").read_text()
    assert "about to fail" in log
    assert "Traceback" in log


def test_an_invocation_past_the_timeout_fails_and_the_next_one_gets_a_fresh_worker(
    runtime: LambdaRuntime,
) -> None:
    runtime.invoke("slow", {"warm": True})  # the first call only imports: the handler returns at once

    with pytest.raises(TaskFailed) as raised:
        runtime.invoke("slow", {})

    assert raised.value.error == TIMEOUT_ERROR
    assert runtime.invoke("slow", {"warm": True}) == "warm"


def test_unknown_function_names_the_declared_ones(runtime: LambdaRuntime) -> None:
    with pytest.raises(FunctionNotFoundError, match="dispatch"):
        runtime.invoke("nope", {})


PROBE = """
import importlib.util, os, sys

def probe(event, context):
    return {
        "version": list(sys.version_info[:2]),
        "base_prefix": sys.base_prefix,
        "path": sys.path,
        "isolated": sys.flags.isolated,
        "no_site": sys.flags.no_site,
        "cwd": os.getcwd(),
        "task_root": os.environ["LAMBDA_TASK_ROOT"],
        "execution_env": os.environ["AWS_EXECUTION_ENV"],
        "importable": {name: importlib.util.find_spec(name) is not None for name in event["modules"]},
        "arn": context.invoked_function_arn,
    }
"""


def test_a_function_runs_on_the_template_runtime_with_only_its_task_root_and_layers(tmp_path: Path) -> None:
    # GIVEN a function's build (its task root) and one layer, each with a module of its own
    task_root, layer = tmp_path / "task", tmp_path / "layer"
    (task_root).mkdir()
    (task_root / "app.py").write_text(PROBE)
    (layer / "python").mkdir(parents=True)
    (layer / "python" / "shared_from_layer.py").write_text("X = 1\n")
    spec = FunctionSpec("probe", "app.probe", task_root, layers=(layer,), runtime=RUNTIME)
    runtime = LambdaRuntime({"probe": spec}, endpoint_url="http://127.0.0.1:5999", log_dir=tmp_path / "logs")
    modules = [
        "shared_from_layer",
        "boto3",
        "retrain",
        "controller",
        "retrain_contract",
        "moto",
        "yaml",
        "pytest",
    ]

    # WHEN it is invoked
    try:
        seen = runtime.invoke("probe", {"modules": modules})
    finally:
        runtime.close()

    # THEN it ran on the template's Python, isolated, with Lambda's search path: the task root, the
    # layer's site-packages and python/ (/opt), then the interpreter's standard library, nothing else
    assert tuple(seen["version"]) == python_version(RUNTIME)
    assert (seen["isolated"], seen["no_site"]) == (1, 1)
    version = f"python{seen['version'][0]}.{seen['version'][1]}"
    assert seen["path"][:3] == [
        str(task_root),
        str(layer / "python" / "lib" / version / "site-packages"),
        str(layer / "python"),
    ]
    stdlib = seen["path"][3:]
    assert stdlib and all(entry.startswith(seen["base_prefix"]) for entry in stdlib), stdlib
    assert not [entry for entry in stdlib if "site-packages" in entry]
    assert seen["base_prefix"] != sys.base_prefix  # not the interpreter running these tests
    assert not [entry for entry in seen["path"] if entry.startswith((sys.prefix, str(REPO_ROOT)))]
    # ... so the layer's module imports, and neither the dev environment nor the source tree does
    assert seen["importable"] == {name: name == "shared_from_layer" for name in modules}
    assert seen["cwd"] == seen["task_root"] == str(task_root)
    assert seen["execution_env"] == f"AWS_Lambda_{RUNTIME}"
    assert seen["arn"] == "arn:aws:lambda:us-east-1:123456789012:function:probe"


MISSING_IMPORT = """
import yaml  # installed where the tests run, absent from the function's build

def handler(event, context):
    return "imported"
"""


def _missing_import(tmp_path: Path) -> LambdaRuntime:
    task_root = tmp_path / "task"
    task_root.mkdir()
    (task_root / "app.py").write_text(MISSING_IMPORT)
    spec = FunctionSpec("needs-yaml", "app.handler", task_root, runtime=RUNTIME)
    return LambdaRuntime(
        {"needs-yaml": spec}, endpoint_url="http://127.0.0.1:5999", log_dir=tmp_path / "logs"
    )


def test_an_import_missing_from_the_build_fails_as_runtime_import_module_error(tmp_path: Path) -> None:
    runtime = _missing_import(tmp_path)
    try:
        with pytest.raises(TaskFailed) as first:
            runtime.invoke("needs-yaml", {})
        # the failed environment is discarded: the next invocation initialises a new one and fails alike
        with pytest.raises(TaskFailed) as second:
            runtime.invoke("needs-yaml", {})
    finally:
        runtime.close()

    for raised in (first, second):
        assert raised.value.error == "Runtime.ImportModuleError"
        assert raised.value.cause == "Unable to import module 'app': No module named 'yaml'"
    log = (tmp_path / "logs" / "needs-yaml.log").read_text()
    assert log.count("[ERROR] Runtime.ImportModuleError: Unable to import module 'app'") == 2


def test_the_task_state_of_a_handler_that_cannot_import_fails_with_runtime_import_module_error(
    tmp_path: Path,
) -> None:
    runtime = _missing_import(tmp_path)
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        installed(lambda_invoker=runtime.invoke),
    ):
        role = boto3.client("iam").create_role(RoleName="fn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        boto3.client("lambda").create_function(
            FunctionName="needs-yaml",
            Runtime=RUNTIME,
            Role=role,
            Handler="app.handler",
            Code={"ZipFile": b"x"},
        )
        sfn = boto3.client("stepfunctions")
        definition = {
            "StartAt": "Call",
            "States": {
                "Call": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::lambda:invoke",
                    "Parameters": {"FunctionName": "needs-yaml", "Payload": {}},
                    "End": True,
                }
            },
        }
        arn = sfn.create_state_machine(
            name="calls", definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/sfn"
        )["stateMachineArn"]
        execution = sfn.start_execution(stateMachineArn=arn, input="{}")["executionArn"]
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution)
        deadline = time.monotonic() + 60
        while described["status"] == "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.1)
            described = sfn.describe_execution(executionArn=execution)
    runtime.close()

    assert described["status"] == "FAILED"
    assert described["error"] == "Runtime.ImportModuleError"
    assert json.loads(described["cause"])["errorMessage"] == (
        "Unable to import module 'app': No module named 'yaml'"
    )


def test_the_runtime_interpreter_is_this_machines_python_of_the_template_runtime() -> None:
    found = interpreter(RUNTIME)

    assert found.version == ".".join(map(str, python_version(RUNTIME)))
    assert found.executable.is_file()
    assert found.executable != Path(sys.executable)


def test_a_runtime_missing_on_this_machine_is_an_error_that_says_how_to_install_it() -> None:
    with pytest.raises(RuntimeUnavailableError, match=r"Runtime python3\.99 .*pyenv install 3\.99"):
        interpreter("python3.99")
    with pytest.raises(RuntimeUnavailableError, match=r"nodejs22\.x"):
        interpreter("nodejs22.x")
