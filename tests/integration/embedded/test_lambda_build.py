"""`sam build`'s output of each function's CodeUri and layers, built once per content, never stale."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from retrain.embedded.provisioning import build
from retrain.embedded.provisioning.build import FunctionBuild, build_functions
from retrain.embedded.provisioning.sam import load_template

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[3]
RUNTIME = load_template(REPO_ROOT / "template.yaml")["Globals"]["Function"]["Runtime"]


def test_a_changed_source_is_built_again_and_an_unchanged_one_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "fn"
    source.mkdir()
    (source / "app.py").write_text("def handler(event, context):\n    return 'first'\n")
    template = {
        "Globals": {"Function": {"Runtime": RUNTIME, "CodeUri": "fn/"}},
        "Resources": {"Fn": {"Type": "AWS::Serverless::Function", "Properties": {"Handler": "app.handler"}}},
    }
    builds: list[int] = []
    sam_build = build._sam_build
    monkeypatch.setattr(build, "_sam_build", lambda *args: (builds.append(1), sam_build(*args))[1])
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
    (tmp_path / "fn").mkdir()
    (tmp_path / "fn" / "app.py").write_text("def handler(event, context):\n    return 'ok'\n")
    template = {
        "Globals": {"Function": {"Runtime": RUNTIME, "CodeUri": "fn/"}},
        "Resources": {"Fn": {"Type": "AWS::Serverless::Function", "Properties": {"Handler": "app.handler"}}},
    }
    builds: list[int] = []
    sam_build = build._sam_build
    monkeypatch.setattr(build, "_sam_build", lambda *args: (builds.append(1), sam_build(*args))[1])
    results: list[FunctionBuild] = []

    threads = [
        threading.Thread(
            target=lambda: results.append(build_functions(template, tmp_path, root=tmp_path / "b")["Fn"])
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(builds) == 1
    assert len(results) == 2 and results[0] == results[1]
