"""Code finds its imports through the installed project (pyproject.toml), never by editing sys.path; only
the emulation of AWS's runtimes does, as they do (Lambda's search path, the serving container's code dir)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EDIT = re.compile(r"sys\.path\s*(\.(insert|append|extend)\s*\(|\[[^\]]*\]\s*=)")
# What emulates a runtime's own search path: the embedded Lambda runtime and SageMaker serving toolkit,
# and the serving test's script, which runs as the inference container's entry does.
ALLOWED = ("retrain/embedded/", "tests/unit/training/test_serving.py", "tests/unit/test_no_path_edits.py")
SKIPPED = {".venv", "node_modules", ".aws-sam", "build", ".git", ".retrain", "runs"}


def test_no_sys_path_edit_outside_the_emulation_of_aws_runtimes() -> None:
    edits = []
    for path in sorted(REPO.rglob("*.py")):
        relative = path.relative_to(REPO)
        if relative.parts[0] in SKIPPED or relative.as_posix().startswith(ALLOWED):
            continue
        edits += [
            f"{relative}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if EDIT.search(line)
        ]
    assert edits == []
