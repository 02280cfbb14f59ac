"""The README a newcomer reads in five minutes: it opens with the two commands, stays under 200 lines, its
quick start on AWS names what a deploy needs, and its links reach the guide's pages and their headings.
(The guide's own links are checked by its strict build, `make docs-check`.)"""

from __future__ import annotations

import re
from pathlib import Path

import markdown
from mkdocs.config import load_config

from retrain.embedded.provisioning.sam import load_template
from tests.unit.docs.guide import DOCS, README, REPO, commands_in

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """A `## heading` section of a Markdown text, up to the next `## `."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def anchors(page: Path) -> set[str]:
    """The ids the guide's build gives the page's headings (Python-Markdown's toc, as MkDocs runs it)."""
    md = markdown.Markdown(extensions=["toc", "tables", "pymdownx.superfences"])
    md.convert(page.read_text(encoding="utf-8"))

    def ids(tokens: list[dict[str, object]]) -> set[str]:
        found: set[str] = set()
        for token in tokens:
            found |= {str(token["id"])} | ids(token["children"])  # type: ignore[arg-type]
        return found

    return ids(md.toc_tokens)


def test_the_readme_opens_with_the_two_commands() -> None:
    # GIVEN the README THEN its first lines are the title and the two commands that do everything
    lines = readme().splitlines()
    assert lines[:3] == ["# retrain", "", "```bash"]
    assert lines[3].startswith("make demo   # ") and lines[4].startswith("make test   # ")
    assert lines[5] == "```"


def test_the_readme_is_under_200_lines() -> None:
    assert len(readme().splitlines()) < 200


def test_the_quick_start_deploys_with_the_parameters_that_have_no_default() -> None:
    # GIVEN the template's parameters without a Default (the deploy asks for them and has nothing to offer)
    template = load_template(REPO / "template.yaml")
    required = sorted(name for name, p in template["Parameters"].items() if "Default" not in p)
    quick_start = section(readme(), "Quick start on AWS")
    # THEN the quick start names each, and runs one command per step: image, deploy, upload, watch, serve
    assert [name for name in required if f"`{name}`" not in quick_start] == []
    said = [" ".join((c.program, *c.words[:1])) for c in commands_in(quick_start, "README.md")]
    steps = ("make image", "sam build", "sam deploy", "retrain upload", "retrain status", "retrain predict")
    assert [step for step in steps if step not in said] == []
    assert "sam build && sam deploy --guided" in quick_start


def test_every_link_of_the_readme_reaches_its_page_and_heading() -> None:
    # GIVEN every relative link of the README (to the guide's pages, mostly)
    links = [target for target in LINK.findall(readme()) if not re.match(r"^[a-z]+:", target)]
    assert any(target.startswith("docs/") for target in links)
    broken = []
    for target in links:
        path, _, anchor = target.partition("#")
        page = (README.parent / path).resolve() if path else README
        if not page.exists():
            broken.append(f"{target}: no such file")
        elif anchor and page.suffix == ".md" and anchor not in anchors(page):
            broken.append(f"{target}: {page.name} has no heading #{anchor}")
    # THEN each reaches a file, and a heading of it where it names one
    assert broken == []


def test_every_page_of_the_guide_is_in_its_navigation() -> None:
    # GIVEN mkdocs.yml WHEN its nav is read THEN it lists every page under docs/, and only those
    config = load_config(str(REPO / "mkdocs.yml"))

    def files(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, dict):
            return [f for value in nav.values() for f in files(value)]
        if isinstance(nav, list):
            return [f for item in nav for f in files(item)]
        return []

    assert sorted(files(config["nav"])) == sorted(p.name for p in DOCS.glob("*.md"))
    assert config["strict"] is True


def test_the_parameter_table_is_where_the_readme_and_the_guide_send_people() -> None:
    # GIVEN the guide's Configuration page THEN it holds the parameter table (one row per parameter) and
    # the README links it
    page = (DOCS / "parameters.md").read_text(encoding="utf-8")
    assert re.search(r"^\| `TrainingImageUri` \| `\(required\)` \|", page, flags=re.M)
    assert "(docs/parameters.md)" in readme()
    assert not re.search(r"^\| `[A-Za-z0-9]+` \| `[^`]*` \|", readme(), flags=re.M)
