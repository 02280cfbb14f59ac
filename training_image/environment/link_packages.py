"""Link installed distributions, with everything they require, into a virtualenv's site-packages.

The training image runs in a virtualenv of its own rather than in the base image's Python, whose many
packages (numpy 2.4, protobuf 6, the SageMaker SDK, MLflow...) do not fit smdebug's numpy and protobuf.
The Dockerfile links the base image's torch, with what torch requires, into that virtualenv (no copy of
its CUDA libraries) and pip-installs the image's requirements beside it, so `pip check` holds for the
one environment the jobs run in. The embedded SageMaker builds its stand-in for the image's Python the
same way, from the development virtualenv: everything training_image/requirements.txt needs, nothing
else (so the project's own packages and the test tools do not import in a job).

    python link_packages.py --into VENV [--freeze FILE] [-r REQUIREMENTS] [NAME ...]

Links the closure of the requirements (markers evaluated for the running interpreter) from the running
interpreter's site-packages, writes the console scripts of the linked distributions for VENV's python
and, with --freeze, their versions as pip constraints (so that installing beside them moves none).
Standard library and `packaging` only: it runs in the base image before anything is installed.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from collections import deque
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


class LinkError(RuntimeError):
    """A required distribution is not installed where the links would point."""


def read_requirements(path: Path) -> list[Requirement]:
    requirements = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            requirements.append(Requirement(line))
    return requirements


def closure(requirements: Iterable[Requirement]) -> dict[str, metadata.Distribution]:
    """Every installed distribution the requirements need, by canonical name."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    pending: deque[tuple[Requirement, frozenset[str]]] = deque((r, frozenset()) for r in requirements)
    while pending:
        requirement, parent_extras = pending.popleft()
        if requirement.marker is not None and not _marker_holds(requirement, parent_extras):
            continue
        name, extras = canonicalize_name(requirement.name), frozenset(requirement.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            distribution = found.get(name) or metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError as exc:
            raise LinkError(f"{requirement.name} is not installed in {sys.prefix}") from exc
        found[name] = distribution
        pending.extend((Requirement(child), extras) for child in distribution.requires or [])
    return found


def _marker_holds(requirement: Requirement, extras: frozenset[str]) -> bool:
    assert requirement.marker is not None
    environment: dict[str, str] = {key: str(value) for key, value in default_environment().items()}
    return any(requirement.marker.evaluate({**environment, "extra": extra}) for extra in (extras or {""}))


def top_level_entries(distribution: metadata.Distribution) -> set[str]:
    """The names directly in site-packages that a distribution installed (packages, modules, .pth
    files, its .dist-info)."""
    entries = {Path(str(f)).parts[0] for f in distribution.files or [] if Path(str(f)).parts[:1] != ("..",)}
    if not entries:
        raise LinkError(f"{distribution.metadata['Name']} lists no installed files (no RECORD)")
    return entries


def link(distributions: Iterable[metadata.Distribution], venv: Path) -> list[str]:
    """Link each distribution's entries into `venv`'s site-packages (an entry already there is left
    alone: a namespace directory shared by several is linked once); the linked names."""
    source = Path(sysconfig.get_paths()["purelib"])
    target = venv / source.relative_to(sys.prefix)
    target.mkdir(parents=True, exist_ok=True)
    linked = []
    for distribution in distributions:
        for entry in sorted(top_level_entries(distribution)):
            path = source / entry
            if path.exists() and not (target / entry).exists():
                (target / entry).symlink_to(path)
                linked.append(entry)
        write_console_scripts(distribution, venv)
    return linked


def write_console_scripts(distribution: metadata.Distribution, venv: Path) -> None:
    for script in distribution.entry_points.select(group="console_scripts"):
        module, _, attribute = script.value.partition(":")
        function = (attribute.split()[0] if attribute else "main").strip()
        head = function.split(".")[0]
        path = venv / "bin" / script.name
        path.write_text(
            f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom {module} import {head}\nsys.exit({function}())\n",
            encoding="utf-8",
        )
        path.chmod(0o755)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--into", type=Path, required=True, help="the virtualenv to link into")
    parser.add_argument("--freeze", type=Path, help="write the linked versions here as pip constraints")
    parser.add_argument("-r", "--requirement", type=Path, action="append", default=[])
    parser.add_argument("names", nargs="*", help="more requirements (e.g. torch)")
    args = parser.parse_args(argv)
    requirements = [r for path in args.requirement for r in read_requirements(path)]
    requirements += [Requirement(name) for name in args.names]
    try:
        distributions = closure(requirements)
    except LinkError as error:
        print(f"link_packages: {error}", file=sys.stderr)
        return 1
    link(distributions.values(), args.into.resolve())
    if args.freeze is not None:
        pins = sorted(f"{name}=={dist.version}" for name, dist in distributions.items())
        args.freeze.write_text("".join(f"{pin}\n" for pin in pins), encoding="utf-8")
    print(f"linked {len(distributions)} distributions into {args.into}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
