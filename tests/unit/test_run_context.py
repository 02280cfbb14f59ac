"""Every JSONPath the state machine reads from `$.run` names a key of the declared run (`Run`)."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any, get_origin, is_typeddict

import pytest

from retrain_contract.run import Run

ASL = Path(__file__).resolve().parents[2] / "statemachine" / "training.asl.json"
RUN_PATH = re.compile(r"\$\.run((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def unknown_part(path: str, root: Any = Run) -> str | None:
    """The first segment of `path` (".a.b") the declared type lacks, or None when it resolves.
    Below a plain dict or list (a request body the run passes through) any key is accepted."""
    kind = root
    for segment in path.strip(".").split("."):
        if not is_typeddict(kind):
            return None if get_origin(kind) in (dict, list) or kind is Any else segment
        hints = typing.get_type_hints(kind)
        if segment not in hints:
            return segment
        kind = hints[segment]
    return None


def test_every_run_path_in_the_state_machine_is_declared() -> None:
    paths = sorted(set(RUN_PATH.findall(ASL.read_text(encoding="utf-8"))))
    assert len(paths) > 40  # the ASL reads the run everywhere: a broken regex must not pass
    assert [p for p in paths if unknown_part(p) is not None] == []


@pytest.mark.parametrize("path", [".no_such_key", ".jobs.no_such_job", ".container.evaluation.no_such"])
def test_an_unknown_key_is_found(path: str) -> None:
    assert unknown_part(path) == path.rsplit(".", 1)[-1]


def test_a_pass_through_body_accepts_any_key() -> None:
    assert unknown_part(".train_data_source.S3DataSource.S3Uri") is None
