"""Every command the README and the user guide (docs/) tell a person to run exists: each `retrain` command
and its options in the CLI, each `make` target in the Makefile, each `python -m` module in the repository,
each `sam` command and its options in the SAM CLI, each `aws` command in the AWS CLI; and every path of
the repository they name is there."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
import typer.main

from retrain.cli import app
from tests.unit.docs.guide import REPO, Command, commands, commands_in, documents, options, snippets

WORD = re.compile(r"^[a-z][a-z0-9-]*$")


def retrain_problems(command: Command) -> list[str]:
    """What is wrong with a `retrain ...` command: a subcommand the CLI lacks, an option its command lacks."""
    # typer builds its commands on a click of its own (typer._click): its groups are known by their commands
    current: Any = typer.main.get_command(app)
    words = list(command.words)
    while isinstance(getattr(current, "commands", None), dict) and words and WORD.match(words[0]):
        found = current.commands.get(words[0])
        if found is None:
            return [f"{command}: the CLI has no command {words[0]!r} (it has {sorted(current.commands)})"]
        current, words = found, words[1:]
    return _unknown_options(command, current, words)


def _unknown_options(command: Command, current: Any, words: list[str]) -> list[str]:
    known = {"--help"} | {name for p in current.params for name in (*p.opts, *p.secondary_opts)}
    return [
        f"{command}: {current.name} has no option {name}"
        for name in options(tuple(words))
        if name not in known
    ]


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return {
        target
        for line in re.findall(r"^([A-Za-z0-9_. -]+?)\s*:(?!=)", text, flags=re.M)
        for target in line.split()
    }


def make_problems(command: Command) -> list[str]:
    targets = [w for w in command.words if not w.startswith("-") and "=" not in w]
    return [f"{command}: the Makefile has no target {t!r}" for t in targets if t not in make_targets()]


def module_problems(command: Command) -> list[str]:
    module = command.words[0]
    path = REPO.joinpath(*module.split("."))
    if path.with_suffix(".py").is_file() or (path / "__main__.py").is_file():
        return []
    return [f"{command}: no module {module} in the repository"]


@cache
def sam_commands() -> dict[str, str]:
    """The SAM CLI's commands and the module of each (it imports a command's module only to run it)."""
    from samcli.cli.main import cli

    return dict(cli._commands)


def sam_problems(command: Command) -> list[str]:
    name, *rest = command.words
    if name not in sam_commands():
        return [f"{command}: the SAM CLI has no command {name!r}"]
    return _unknown_options(command, importlib.import_module(sam_commands()[name]).cli, rest)


@cache
def aws_cli() -> dict[str, Any]:
    from awscli.clidriver import create_clidriver

    return dict(create_clidriver()._get_command_table())


def _subcommands(command: Any) -> dict[str, Any]:
    if hasattr(command, "_get_command_table"):
        return dict(command._get_command_table())
    return dict(getattr(command, "subcommand_table", {}) or {})


def aws_problems(command: Command) -> list[str]:
    """`aws SERVICE OPERATION` (and `aws SERVICE wait WAITER`): each word a command of the one before."""
    table, path = aws_cli(), ["aws"]
    for word in command.words[:3]:
        if not WORD.match(word) or not table:
            break
        if word not in table:
            return [f"{command}: `{' '.join(path)}` has no command {word!r}"]
        table, path = _subcommands(table[word]), [*path, word]
    return []


CHECKS: dict[str, Callable[[Command], list[str]]] = {
    "retrain": retrain_problems,
    "make": make_problems,
    "python -m": module_problems,
    "sam": sam_problems,
    "aws": aws_problems,
}


def problems(found: list[Command]) -> list[str]:
    return [problem for command in found for problem in CHECKS[command.program](command)]


def test_the_readme_and_the_guide_name_commands_to_check() -> None:
    # GIVEN the README and docs/ WHEN their commands are read THEN each kind is there (the reader works)
    programs = {command.program for command in commands()}
    assert programs == set(CHECKS)
    assert any(c.program == "retrain" and c.words[:1] == ("upload",) for c in commands())


def test_every_command_in_the_readme_and_the_guide_exists() -> None:
    # GIVEN every command in a code block or span of the README and docs/*.md
    # THEN the CLI, the Makefile, the repository, the SAM CLI and the AWS CLI have each, with its options
    assert problems(commands()) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```bash\nretrain deploy --dataset x\n```", "the CLI has no command 'deploy'"),
        ("Run `.venv/bin/retrain upload DIR --datset NAME`.", "upload has no option --datset"),
        ("`retrain local start`", "the CLI has no command 'start'"),
        ("```bash\nmake publish  # ship it\n```", "the Makefile has no target 'publish'"),
        ("`python -m retrain.dev.no_such_module`", "no module retrain.dev.no_such_module"),
        ("```bash\nsam build && sam deploy --guidde\n```", "deploy has no option --guidde"),
        ("`aws sagemaker create-endpoint-configuration`", "has no command 'create-endpoint-configuration'"),
        ("```bash\nX=$(aws sagemaker wait endpoint-ready)\n```", "no command 'endpoint-ready'"),
    ],
    ids=[
        "retrain-command",
        "retrain-option",
        "retrain-subcommand",
        "make-target",
        "python-module",
        "sam-option",
        "aws-operation",
        "aws-waiter",
    ],
)
def test_a_command_that_does_not_exist_is_found(text: str, expected: str) -> None:
    # GIVEN a page naming a made-up command or option THEN the check names it
    found = problems(commands_in(text, "page.md"))
    assert len(found) == 1 and expected in found[0], found


def test_commands_that_exist_pass() -> None:
    # GIVEN real commands written as the guide writes them (usage brackets, placeholders, pipes, comments)
    text = (
        "```bash\nretrain local up -p ModelArchitecture=resnet18   # the background stack\n"
        "aws ecr get-login-password --region <region> | docker login --password-stdin \\\n"
        '  "$(.venv/bin/python -m retrain.dev.base_image --region <region> | cut -d/ -f1)"\n```\n'
        "`retrain start --dataset NAME [--stack STACK] --no-spot`, `make image REGION=<region>`, "
        "`aws sagemaker wait endpoint-in-service`"
    )
    assert [c.program for c in commands_in(text, "page.md")] == [
        "retrain", "aws", "python -m", "retrain", "make", "aws",
    ]  # fmt: skip
    assert problems(commands_in(text, "page.md")) == []


def named_paths(text: str) -> set[str]:
    """The repository paths a page's code names: words under a top-level entry of the repository
    (`retrain/dev/regions.py`, `training_image/`, `template.yaml`), placeholders (`<run-id>`) left out."""
    tops = {p.name for p in REPO.iterdir() if not p.name.startswith(".")} - {"build", "node_modules", "runs"}
    named = set()
    for snippet in snippets(text):
        for split in re.split(r"[\s,;()\"'=`]+", snippet):
            word = split.rstrip(".:")
            if word.split("/")[0] in tops and ("/" in word or "." in word) and not re.search(r"[<>*$]", word):
                named.add(word)
    return named


def test_every_repository_path_in_the_readme_and_the_guide_exists() -> None:
    # GIVEN the paths in the code of the README and docs/*.md THEN each is in the repository
    missing = [
        f"{path.relative_to(REPO)}: {named}"
        for path in documents()
        for named in sorted(named_paths(path.read_text(encoding="utf-8")))
        if not (REPO / named).exists()
    ]
    assert missing == []
    assert "retrain/dev/regions.py" not in named_paths("`.retrain/dev/regions.py`")
    assert named_paths("see `retrain/no_such.py`, `bench/<name>.py`.") == {"retrain/no_such.py"}
