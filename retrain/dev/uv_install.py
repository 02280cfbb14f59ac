"""`uv pip install ARGS` into this interpreter's environment, from the package indexes pip is configured with.

uv installs the pinned development set in seconds where pip takes over a minute on one core (BENCHMARKS.md,
"The suite again"), but it reads no pip.conf: a machine whose pip is pointed at a mirror, a local wheel
directory (this project's CPU torch wheel) or a private CA would resolve elsewhere. So pip's own settings
(`pip config list`: its files and PIP_* variables) are handed to uv as flags, and uv, like pip, considers
every index for every package. Standard library only: it runs before the project is installed.

    .venv/bin/python retrain/dev/uv_install.py -r requirements-dev.txt -c constraints.txt
"""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys
from pathlib import Path

# pip's option -> uv's flag.
FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links"}
# What `pip install` reads, lowest precedence first: its files' [global], then their [install], then PIP_*.
SECTIONS = ("global", "install", ":env:")


def pip_settings(python: str = sys.executable) -> dict[str, str]:
    """Each option's value for `pip install`, from `pip config list` (sorted: `global.find-links='/x'`)."""
    listing = subprocess.run(
        [python, "-m", "pip", "config", "list"], check=True, capture_output=True, text=True
    ).stdout
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        section, _, option = key.rpartition(".")
        if sep and section in SECTIONS:
            rank = SECTIONS.index(section)
            if rank >= found.get(option, (-1, ""))[0]:
                found[option] = (rank, str(ast.literal_eval(value)))
    return {option: value for option, (_, value) in found.items()}


def uv_command(settings: dict[str, str], args: list[str], python: str = sys.executable) -> list[str]:
    uv = Path(python).with_name("uv")
    command = [str(uv), "pip", "install", "--python", python, "--index-strategy", "unsafe-best-match"]
    for option, flag in FLAGS.items():
        for value in settings.get(option, "").split():
            command += [flag, value]
    return command + args


def main(args: list[str]) -> int:
    settings = pip_settings()
    env = dict(os.environ)
    if "cert" in settings:
        env["SSL_CERT_FILE"] = settings["cert"]
    command = uv_command(settings, args)
    print(shlex.join(command), flush=True)
    return subprocess.run(command, check=False, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
