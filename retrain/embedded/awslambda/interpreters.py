"""The interpreter a function runs on: the one its template ``Runtime`` names (python3.13), never ours.

On AWS a ``python3.13`` function runs on Lambda's Python 3.13; here it runs on this machine's Python 3.13,
found on ``PATH`` as ``python3.13`` or among pyenv's versions (whose ``python3.13`` shim answers only when
that version is active, so the shim is tried and the versions folder after it). Each candidate is asked
for its version before it is trusted. There is no fallback to the interpreter running the stack: a
missing runtime is an error that says how to install it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

_PYTHON_RUNTIME: Final = re.compile(r"^python(?P<major>\d+)\.(?P<minor>\d+)$")
_PROBE: Final = (
    "import sys; print('%d.%d' % sys.version_info[:2]); print(sys.version.split()[0]); print(sys.executable)"
)


class RuntimeUnavailableError(RuntimeError):
    """The template's runtime cannot run on this machine; the message says what to install."""


@dataclass(frozen=True)
class Interpreter:
    """A Python interpreter of this machine: its executable, ``X.Y`` and full version."""

    executable: Path
    version: str
    full_version: str


def python_version(runtime: str) -> tuple[int, int]:
    """(3, 13) for ``python3.13``; any other runtime is refused (the embedded Lambda runs Python only)."""
    match = _PYTHON_RUNTIME.match(runtime)
    if match is None:
        raise RuntimeUnavailableError(
            f"Runtime {runtime!r}: the embedded Lambda runtime runs the template's Python runtimes "
            "(pythonX.Y) only"
        )
    return int(match["major"]), int(match["minor"])


@functools.cache
def interpreter(runtime: str) -> Interpreter:
    """This machine's interpreter for ``runtime`` (cached for the process)."""
    major, minor = python_version(runtime)
    name = f"python{major}.{minor}"
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates: list[str] = []
    on_path = shutil.which(name)
    if on_path:
        candidates.append(on_path)
    versions = pyenv_root.glob(f"versions/{major}.{minor}.*/bin/{name}")
    candidates += [str(path) for path in sorted(versions, key=_version_key, reverse=True)]
    for candidate in candidates:
        found = _probe(candidate, f"{major}.{minor}")
        if found is not None:
            return found
    raise RuntimeUnavailableError(
        f"the template's Runtime {runtime} needs Python {major}.{minor} on this machine and none was found "
        f"(looked for {name} on PATH and under {pyenv_root}/versions/{major}.{minor}.*): install it, e.g. "
        f"`pyenv install {major}.{minor}` or your system's {name} package, and run again"
    )


def _probe(candidate: str, version: str) -> Interpreter | None:
    """The interpreter behind ``candidate`` when it runs and is ``version``; None otherwise (a pyenv
    shim of an inactive version exits with an error)."""
    try:
        done = subprocess.run(
            [candidate, "-I", "-S", "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 3 or lines[0] != version:
        return None
    return Interpreter(Path(lines[2]), lines[0], lines[1])


def _version_key(path: Path) -> tuple[int, ...]:
    """3.13.10 after 3.13.9: the versions folder name as numbers (a pre-release sorts as its digits)."""
    return tuple(int(part) for part in re.findall(r"\d+", path.parents[1].name))
