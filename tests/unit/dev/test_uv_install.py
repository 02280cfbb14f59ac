"""`make setup` installs with uv from the indexes pip is configured with (retrain/dev/uv_install.py)."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

from retrain.dev import uv_install


def test_pips_files_and_variables_become_uvs_flags_env_over_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\n"
        "index-url = https://mirror.example/simple\n"
        "extra-index-url = file:///srv/a/simple file:///srv/b/simple\n"
        "find-links = /srv/from-file\n"
        "cert = /srv/ca.pem\n"
    )
    # Only this file and this variable: none of the machine's own settings.
    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_FIND_LINKS", "/srv/wheels")

    settings = uv_install.pip_settings()
    command = uv_install.uv_command(settings, ["-r", "requirements-dev.txt"], python=sys.executable)

    assert settings["cert"] == "/srv/ca.pem"
    assert command[:3] == [str(Path(sys.executable).with_name("uv")), "pip", "install"]
    flags = command[3:]
    assert flags[flags.index("--python") + 1] == sys.executable
    assert flags[flags.index("--index-strategy") + 1] == "unsafe-best-match"
    pairs = list(itertools.pairwise(flags))
    assert ("--index-url", "https://mirror.example/simple") in pairs
    assert ("--extra-index-url", "file:///srv/a/simple") in pairs
    assert ("--extra-index-url", "file:///srv/b/simple") in pairs
    # PIP_FIND_LINKS overrides the file's value, as it does for pip.
    assert ("--find-links", "/srv/wheels") in pairs
    assert "/srv/from-file" not in flags
    assert flags[-2:] == ["-r", "requirements-dev.txt"]


def test_setup_compiled_the_installed_packages_bytecode() -> None:
    # `make setup` asks uv for the bytecode at install: where PYTHONDONTWRITEBYTECODE is set no process
    # writes it, and every training job and worker compiled torch again (Makefile). torch's show_pickle
    # is a command-line tool that nothing here imports, so its bytecode is there only if install made it.
    import importlib.util

    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).parent / "utils" / "show_pickle.py"
    compiled = Path(importlib.util.cache_from_source(str(source)))
    assert compiled.is_file(), f"no bytecode at {compiled}: set up again with `rm -rf .venv && make setup`"
