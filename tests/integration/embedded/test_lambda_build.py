"""The embedded Lambda runtime runs each function from `sam build`'s output of its CodeUri and layers,
built once per content, never from the source tree and never from a stale build."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from retrain.embedded.awslambda.runtime import FunctionSpec, LambdaRuntime
from retrain.embedded.provisioning import build
from retrain.embedded.provisioning.build import FunctionBuild, build_functions
from retrain.embedded.provisioning.sam import load_template
from retrain.embedded.stepfunctions.errors import TaskFailed

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = load_template(REPO_ROOT / "template.yaml")
RUNTIME = TEMPLATE["Globals"]["Function"]["Runtime"]


def _functions_template(tmp_path: Path, *, mutate: dict[str, str]) -> Path:
    """A copy of functions/ and contract/ (with ``mutate``'s lines appended to its files), under a template
    with template.yaml's Globals, its ContractLayer and two of its functions."""
    folder = tmp_path / "copy"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO_ROOT / "functions", folder / "functions", ignore=ignore)
    shutil.copytree(REPO_ROOT / "contract", folder / "contract", ignore=ignore)
    for relative, line in mutate.items():
        with (folder / "functions" / relative).open("a", encoding="utf-8") as source:
            source.write(f"\n{line}\n")
    resources = TEMPLATE["Resources"]
    globals_ = TEMPLATE["Globals"]["Function"]
    return _write(
        folder,
        {
            "Globals": {
                "Function": {k: globals_[k] for k in ("CodeUri", "Runtime", "Architectures", "Layers")}
            },
            "Resources": {
                "ContractLayer": resources["ContractLayer"],
                **{
                    name: {
                        "Type": resources[name]["Type"],
                        "Properties": {"Handler": resources[name]["Properties"]["Handler"]},
                    }
                    for name in ("GateFunction", "PickBestCandidateFunction")
                },
            },
        },
    )


def _write(folder: Path, template: dict[str, Any]) -> Path:
    path = folder / "template.yaml"
    path.write_text(yaml.safe_dump(template), encoding="utf-8")
    return path


def _invoke(tmp_path: Path, handler: str, function: FunctionBuild) -> Any:
    spec = FunctionSpec(
        "fn",
        handler,
        function.task_root,
        layers=function.layers,
        runtime=function.runtime,
        timeout_seconds=30,
    )
    runtime = LambdaRuntime({"fn": spec}, endpoint_url="http://127.0.0.1:5999", log_dir=tmp_path / "logs")
    try:
        return runtime.invoke("fn", {})
    finally:
        runtime.close()


def test_a_function_importing_a_package_missing_from_requirements_txt_fails_its_invocation(
    tmp_path: Path,
) -> None:
    # GIVEN functions/ where gate.py also imports yaml: installed where the tests run, absent from
    # functions/requirements.txt
    template = _functions_template(tmp_path, mutate={"controller/gate.py": "import yaml  # noqa"})

    # WHEN it is built as the stack builds it, and the gate function is invoked
    builds = build_functions(load_template(template), template.parent, root=tmp_path / "builds")
    with pytest.raises(TaskFailed) as raised:
        _invoke(tmp_path, "controller.gate.handler", builds["GateFunction"])

    # THEN the invocation fails as on Lambda: the module cannot be imported from the package
    assert raised.value.error == "Runtime.ImportModuleError"
    assert raised.value.cause == "Unable to import module 'controller.gate': No module named 'yaml'"
    # ... while a function of the same build that does not import gate.py gets past its imports
    # (boto3, Powertools, PIL from requirements.txt, retrain_contract from the layer) into its handler,
    # which reads its configuration (none is given here)
    with pytest.raises(TaskFailed) as control:
        _invoke(tmp_path, "controller.best_candidate.handler", builds["PickBestCandidateFunction"])
    assert control.value.error == "ConfigurationError"


def one_function(source: Path, answer: str) -> dict[str, Any]:
    """A template of one function, `source` (a folder beside it) returning `answer`."""
    source.mkdir()
    (source / "app.py").write_text(f"def handler(event, context):\n    return {answer!r}\n")
    return {
        "Globals": {"Function": {"Runtime": RUNTIME, "CodeUri": f"{source.name}/"}},
        "Resources": {"Fn": {"Type": "AWS::Serverless::Function", "Properties": {"Handler": "app.handler"}}},
    }


def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per `sam build` the build module runs (each still runs for real)."""
    builds: list[int] = []
    sam_build = build._sam_build
    monkeypatch.setattr(build, "_sam_build", lambda *args: (builds.append(1), sam_build(*args))[1])
    return builds


def test_a_changed_source_is_built_again_and_an_unchanged_one_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "fn"
    template = one_function(source, "first")
    builds = count_builds(monkeypatch)
    root = tmp_path / "builds"

    first = build_functions(template, tmp_path, root=root)["Fn"]
    again = build_functions(template, tmp_path, root=root)["Fn"]
    (source / "app.py").write_text("def handler(event, context):\n    return 'second'\n")
    changed = build_functions(template, tmp_path, root=root)["Fn"]

    assert len(builds) == 2
    assert again == first
    assert changed.task_root != first.task_root
    assert first.task_root != source and first.task_root.is_relative_to(root)
    assert "'first'" in (first.task_root / "app.py").read_text()
    assert "'second'" in (changed.task_root / "app.py").read_text()


def test_builds_of_one_root_at_once_wait_for_each_other_and_build_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a build that, once started, holds on until a second build of the same root has been asked for
    template = one_function(tmp_path / "fn", "ok")
    builds = count_builds(monkeypatch)
    first_building, second_asked = threading.Event(), threading.Event()
    counted = build._sam_build

    def overlapping(*args: Any) -> Any:
        first_building.set()
        assert second_asked.wait(30), "the second build was never asked for"
        time.sleep(0.5)  # the second call is inside build_functions by now
        return counted(*args)

    monkeypatch.setattr(build, "_sam_build", overlapping)
    results: list[FunctionBuild] = []

    def run(signal: threading.Event | None) -> None:
        if signal is not None:
            signal.set()
        results.append(build_functions(template, tmp_path, root=tmp_path / "b")["Fn"])

    # WHEN two builds of that root run at once
    first = threading.Thread(target=run, args=(None,))
    first.start()
    assert first_building.wait(120), "the first build never started"
    second = threading.Thread(target=run, args=(second_asked,))
    second.start()
    for thread in (first, second):
        thread.join()

    # THEN one `sam build` ran, and both got its result
    assert len(builds) == 1
    assert len(results) == 2 and results[0] == results[1]
