"""Every name that crosses the container boundary is defined once, in retrain_contract.container.

The training image, the Lambdas, the CLI and the embedded runtime import it; the state machine reads it
from the run (`$.run.container`, `$.run.parameter_ranges`, `$.run.tags`). A copy anywhere else fails here.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import names, prepare
from retrain_contract import container

ROOT = Path(__file__).resolve().parents[2]
ASL = ROOT / "statemachine" / "training.asl.json"
# The code that must import the contract rather than spell it out.
CODE_DIRS = ("functions", "retrain", "training_image", "bench")


def contract_literals() -> set[str]:
    """The contract's distinctive string values: program and file names, metric names and regexes,
    /opt/ml paths, hyperparameter names with a dash (one-word names like "lr" are too common to scan)."""
    values: set[str] = set()
    for name, value in vars(container).items():
        if name.isupper() and isinstance(value, str) and len(value) > 1:
            values.add(value)
        elif name.isupper() and isinstance(value, tuple):
            values.update(v for v in value if isinstance(v, str))
    values.update(container.metric_regex(m) for m in container.METRICS)
    values.update(h for h in container.HYPERPARAMETER_NAMES if "-" in h)
    # Plain words (train, model, label) are everyday English and a lone extension names any file;
    # the list of extensions is checked as a whole (test_the_image_extensions_are_listed_once).
    distinctive = re.compile(r"[./_-]")
    extension = re.compile(r"^\.\w+$")
    return {
        v
        for v in values
        if distinctive.search(v) and not extension.match(v) and v != container.DEFAULT_BASE_DIR
    }


def string_constants(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """String constants outside docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def python_files() -> Iterator[Path]:
    for folder in CODE_DIRS:
        yield from (ROOT / folder).rglob("*.py")


def test_no_module_outside_the_contract_spells_a_contract_name() -> None:
    literals = contract_literals()
    assert "train.py" in literals and container.metric_regex(container.METRIC_VAL_ACCURACY) in literals
    copies = [
        f"{path.relative_to(ROOT)}:{line}: {value!r}"
        for path in python_files()
        for line, value in string_constants(ast.parse(path.read_text(encoding="utf-8")))
        if value in literals
    ]
    assert copies == [], "import retrain_contract.container instead of copying:\n" + "\n".join(copies)


def test_the_image_extensions_are_listed_once() -> None:
    listed = set(container.IMAGE_EXTENSIONS)
    copies = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in python_files()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Tuple | ast.List | ast.Set)
        and {e.value for e in node.elts if isinstance(e, ast.Constant)} == listed
    ]
    assert copies == []


def asl_literals(node: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    """The ASL's literal strings (not JSONPaths: a key ending in .$ names where the value comes from)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not key.endswith(".$"):
                yield from asl_literals(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from asl_literals(value, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


def test_the_state_machine_keeps_no_copy_of_the_contract() -> None:
    literals = contract_literals() | {container.OBJECTIVE_TYPE, *container.HYPERPARAMETER_NAMES}
    literals |= {container.CHANNEL_TRAIN, container.CHANNEL_MANIFEST, names.TAG_DATASET, names.TAG_RUN_ID}
    copies = [
        f"{where}: {value!r}"
        for where, value in asl_literals(json.loads(ASL.read_text()))
        if value in literals
    ]
    assert copies == []


@pytest.mark.parametrize("copy", [container.PROGRAM, container.metric_regex(container.METRIC_VAL_ACCURACY)])
def test_a_copy_is_found(copy: str) -> None:
    # GIVEN a module that names a contract value in its docstring and copies it into a constant
    source = f'r"""Runs {copy}."""\nPROGRAM = {copy!r}\n'
    # THEN the scan finds the constant, not the docstring
    assert [value for _, value in string_constants(ast.parse(source)) if value in contract_literals()] == [
        copy
    ]


def test_the_state_machine_spec_is_the_contract() -> None:
    spec = container.state_machine_spec(system_rule_patience=7)
    assert spec["metric_definitions"] == [dict(d) for d in container.METRIC_DEFINITIONS]
    assert spec["objective"] == {"Type": container.OBJECTIVE_TYPE, "MetricName": container.OBJECTIVE_METRIC}
    assert spec["training_environment"] == {container.PROGRAM_ENV: container.PROGRAM}
    assert spec["evaluation"]["entrypoint"][-1].endswith("/" + container.EVALUATE_PROGRAM)
    assert spec["rule_check"]["entrypoint"][-1].endswith("/" + container.RULE_CHECK_PROGRAM)
    assert spec["rule_check"]["arguments"][-2:] == ["--system-rule-patience", "7"]


def test_tuned_ranges_name_contract_hyperparameters() -> None:
    ranges = prepare.parameter_ranges(
        {
            "optimizers": "sgd",
            "lr_min": "0.001",
            "lr_max": "0.1",
            "weight_decay_min": "0",
            "weight_decay_max": "0",
        }
    )
    tuned = {r["Name"] for kind in ranges.values() for r in kind}
    assert tuned == set(container.TUNED_HYPERPARAMETERS) <= set(container.HYPERPARAMETER_NAMES)


def test_checkpoint_keys_parse_like_the_contract_names_them() -> None:
    # GIVEN a checkpoint key as the container writes it under a run's checkpoint prefix
    key = (
        names.checkpoint_prefix("flowers", "flowers-00001") + f"job-1/algo-1/{container.checkpoint_name(150)}"
    )
    # THEN the control plane finds the run and the step in it
    match = names.CHECKPOINT_KEY_RE.match(key)
    assert match is not None
    assert (match["dataset"], match["run_id"], match["job"], int(match["step"])) == (
        "flowers",
        "flowers-00001",
        "job-1",
        150,
    )


def test_job_tags_come_from_the_run() -> None:
    definition = json.loads(ASL.read_text())
    text = json.dumps(definition)
    assert text.count('"Tags.$": "$.run.tags"') >= 7
