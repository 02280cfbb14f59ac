"""What the README and the user guide (docs/*.md) say to run: every command in their code blocks and code
spans, split into the simple commands a shell would run, for the tests beside this module to hold against
the CLI, the Makefile, the SAM CLI and the AWS CLI."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
DOCS = REPO / "docs"

FENCE = re.compile(r"^(`{3,})[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)
SPAN = re.compile(r"`([^`]+)`")
# What ends one simple command and starts the next: a list, a pipe, a command substitution's edges.
SEPARATOR = re.compile(r"&&|\|\||;|\||\$\(|\)")
COMMENT = re.compile(r"(^|\s)#.*$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTHON = re.compile(r"^python[0-9.]*$")
PROGRAMS = ("retrain", "make", "sam", "aws")


def documents() -> list[Path]:
    """The README and every page of the guide."""
    return [README, *sorted(DOCS.glob("*.md"))]


@dataclass(frozen=True)
class Command:
    """One simple command: its program (retrain, make, sam, aws or python -m), its words, where it is."""

    program: str
    words: tuple[str, ...]
    where: str

    def __str__(self) -> str:
        return f"{self.where}: {' '.join((self.program, *self.words))}"


def snippets(text: str) -> list[str]:
    """The code of a Markdown text: each line of its fenced blocks (a backslash continues a line, comments
    dropped) and each inline code span of the prose around them."""
    blocks: list[str] = []

    def keep(match: re.Match[str]) -> str:
        blocks.append(match.group(2))
        return "\n"

    prose = FENCE.sub(keep, text)
    lines = [
        COMMENT.sub("", line) for block in blocks for line in re.sub(r"\\\n\s*", " ", block).splitlines()
    ]
    return [line for line in lines if line.strip()] + [" ".join(span.split()) for span in SPAN.findall(prose)]


def commands_in(text: str, where: str) -> list[Command]:
    """Every simple command of the text's code whose program is retrain, make, sam, aws or `python -m`."""
    found = []
    for snippet in snippets(text):
        for part in SEPARATOR.split(snippet):
            words = [w.strip("\"'") for w in part.split()]
            while words and ASSIGNMENT.match(words[0]):
                words = words[1:]
            if not words:
                continue
            program = words[0].rsplit("/", 1)[-1]
            if program in PROGRAMS and len(words) > 1:
                found.append(Command(program, tuple(words[1:]), where))
            elif PYTHON.match(program) and len(words) > 2 and words[1] == "-m":
                found.append(Command("python -m", tuple(words[2:]), where))
    return found


def commands() -> list[Command]:
    """Every command of the README and the guide."""
    return [
        command
        for path in documents()
        for command in commands_in(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]


def options(words: tuple[str, ...]) -> list[str]:
    """The option names among a command's words, as written in a usage line: `[--stack STACK]` names
    --stack, `--parameter=X` names --parameter, `-p` names -p."""
    named = []
    for word in words:
        bare = word.strip("[]")
        if re.match(r"^--?[A-Za-z]", bare):
            named.append(bare.split("=", 1)[0])
    return named
