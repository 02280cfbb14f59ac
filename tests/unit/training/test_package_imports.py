"""The training image's modules import each other without cycles (lazy importlib imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "training_image" / "retrain_training"
NAME = "retrain_training"


def imports_of(path: Path) -> set[str]:
    """The package's modules `path` imports, at the top or inside a function, or by importlib."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(NAME):
            parts = node.module.split(".")[1:]
            found.update([parts[0]] if parts else [alias.name for alias in node.names])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith(f"{NAME}."))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).startswith(f"{NAME}.")
        ):
            found.add(str(node.args[0].value).split(".")[1])
    return found


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle, or []."""
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> list[str]:
        state[module] = 1
        for child in sorted(graph.get(module, ())):
            if state.get(child) == 1:
                return [*path, module, child]
            if child not in state and (found := visit(child, [*path, module])):
                return found
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module, [])):
            return found
    return []


def test_the_training_image_has_no_import_cycle() -> None:
    graph = {p.stem: imports_of(p) - {p.stem} for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert "augment" in graph["dali_loader"]  # the scan sees imports
    assert cycle(graph) == []


def test_a_cycle_is_found() -> None:
    assert cycle({"loaders": {"dali_loader"}, "dali_loader": {"loaders"}}) == [
        "dali_loader",
        "loaders",
        "dali_loader",
    ]
