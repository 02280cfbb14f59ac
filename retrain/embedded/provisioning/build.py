"""What the embedded Lambda runtime runs: ``sam build``'s output for each function's CodeUri and layer.

On AWS a function runs from the archive ``sam build`` made of its ``CodeUri`` (the code plus what
``requirements.txt`` installs, for the template's ``Runtime``), unpacked at ``/var/task``, with each layer
unpacked at ``/opt``. :func:`build_functions` gives every function of a template the same two things on
this machine: its task root and its layers' folders, both made by the SAM CLI's ``sam build``.

Builds are kept by content under a shared root (the repository's ``.aws-sam/embedded/`` by default), one
folder per *unit*: a function code folder (CodeUri, Runtime, Architectures, build Metadata) or a layer
(ContentUri, BuildMethod). A unit's key hashes the bytes of every file of its source folder, its build
properties, the SAM CLI's version and the interpreter's, so

- a changed source is a new key and is built before anything runs: a stale build is never run, and the
  source tree itself is never run;
- unchanged sources are not rebuilt: a warm start only hashes them, and two templates with the same code
  (the tests' mutated copies of template.yaml) share one build;
- the eleven functions of template.yaml share one unit (one CodeUri), as ``sam build`` shares one build
  among functions of the same build definition.

Missing units are built by one ``sam build`` of a template holding just them, run under an exclusive lock
on the root (parallel pytest workers and stacks wait for each other instead of building twice), into a
scratch folder, then moved into place whole: a unit folder that exists is complete. The sources are hashed
again after the build; a source changed meanwhile fails the build rather than publishing a mix.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from retrain.embedded.awslambda.interpreters import Interpreter, interpreter, python_version
from retrain.embedded.provisioning.sam import ProvisioningError

LOG = logging.getLogger(__name__)
REPO_ROOT: Final = Path(__file__).resolve().parents[3]
DEFAULT_BUILD_ROOT: Final = REPO_ROOT / ".aws-sam" / "embedded"
# Bumped when the layout of a unit folder or what its key covers changes.
BUILD_FORMAT: Final = 1
# At most this many units of one source folder are kept after a build: the most recently used ones, and
# always those the build was for.
KEEP_PER_SOURCE: Final = 3
BUILD_TIMEOUT_SECONDS: Final = 900.0
# Not part of what `sam build` ships (aws-lambda-builders leaves them out too): they never change a key.
_SKIPPED_DIRS: Final = frozenset({"__pycache__", ".aws-sam", ".git", ".mypy_cache", ".pytest_cache"})
_SKIPPED_SUFFIXES: Final = (".pyc", ".pyo")
_MACHINE_ARCHITECTURE: Final = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}


class BuildError(ProvisioningError):
    """``sam build`` failed, or the template's code cannot be built here; the message says why."""


@dataclass(frozen=True)
class FunctionBuild:
    """One function as Lambda would run it: its runtime, its task root and its layers' ``/opt`` folders
    (in the function's ``Layers`` order)."""

    runtime: str
    task_root: Path
    layers: tuple[Path, ...] = ()


@dataclass(frozen=True)
class _Unit:
    kind: str  # "function" or "layer"
    logical_id: str  # the first resource of the template that is built by this unit
    source: Path
    properties: dict[str, Any]  # the resource's Properties in the one-unit build template
    metadata: dict[str, Any]
    runtimes: tuple[str, ...]  # Python runtimes `sam build` needs on PATH for it
    source_digest: str  # tree_digest(source) when the key was made
    key: str


def build_functions(
    template: dict[str, Any], base_dir: Path, *, root: Path = DEFAULT_BUILD_ROOT
) -> dict[str, FunctionBuild]:
    """{function logical id: its build} for every AWS::Serverless::Function, built where missing."""
    functions, units = _plan(template, base_dir)
    if not units:
        return {}
    root.mkdir(parents=True, exist_ok=True)
    missing = [unit for unit in units.values() if not (root / unit.key).is_dir()]
    if missing:
        with _locked(root):
            missing = [unit for unit in missing if not (root / unit.key).is_dir()]
            if missing:
                _build(missing, root)
                _prune(root, keep={unit.key for unit in units.values()})
    for unit in units.values():
        with contextlib.suppress(OSError):
            os.utime(root / unit.key / "unit.json")  # in use: the last a prune removes
    builds: dict[str, FunctionBuild] = {}
    for logical_id, (runtime, code, layers) in functions.items():
        layer_dirs = tuple(_layer_dir(root, units, layer) for layer in layers)
        builds[logical_id] = FunctionBuild(runtime, root / units[code].key / "out", layer_dirs)
    return builds


def _layer_dir(root: Path, units: dict[str, _Unit], layer: str | Path) -> Path:
    """A built layer's folder (``sam build`` output), or a layer without BuildMethod as it is: Lambda
    unpacks its ContentUri at /opt unchanged."""
    return layer if isinstance(layer, Path) else root / units[layer].key / "out"


def _plan(
    template: dict[str, Any], base_dir: Path
) -> tuple[dict[str, tuple[str, str, list[str | Path]]], dict[str, _Unit]]:
    """Per function (runtime, its code unit's id, its layers: a unit id or a folder), and the units."""
    resources: dict[str, Any] = template.get("Resources", {})
    globals_ = template.get("Globals", {}).get("Function", {}) or {}
    units: dict[str, _Unit] = {}
    by_key: dict[str, str] = {}
    layer_units: dict[str, str | Path] = {}
    for logical_id, resource in resources.items():
        if resource.get("Type") == "AWS::Serverless::LayerVersion":
            layer_units[logical_id] = _layer_unit(logical_id, resource, base_dir, units, by_key)
    functions: dict[str, tuple[str, str, list[str | Path]]] = {}
    for logical_id, resource in resources.items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = {**globals_, **(resource.get("Properties") or {})}
        if props.get("PackageType", "Zip") != "Zip":
            raise BuildError(f"{logical_id}: only Zip functions run in the embedded stack, not images")
        runtime = _literal(logical_id, "Runtime", props.get("Runtime"))
        python_version(runtime)
        architecture = _architecture(logical_id, props.get("Architectures"))
        code_uri = _literal(logical_id, "CodeUri", props.get("CodeUri"))
        source = _folder(base_dir, code_uri, f"{logical_id}: CodeUri {code_uri!r}")
        metadata = {k: v for k, v in (resource.get("Metadata") or {}).items() if k.startswith("Build")}
        build_props = {"Runtime": runtime, "Architectures": [architecture]}
        digest = tree_digest(source)
        key = _key("function", source, digest, {**build_props, "Metadata": metadata}, [runtime])
        code = _add_unit(
            units,
            by_key,
            _Unit(
                "function",
                logical_id,
                source,
                {**build_props, "CodeUri": str(source), "Handler": str(props.get("Handler", "app.handler"))},
                metadata,
                (runtime,),
                digest,
                key,
            ),
        )
        # SAM adds a function's Layers to those of Globals, in that order.
        layers: list[str | Path] = []
        for layer in [
            *(globals_.get("Layers") or []),
            *((resource.get("Properties") or {}).get("Layers") or []),
        ]:
            name = layer.get("Ref") if isinstance(layer, dict) else None
            if name not in layer_units:
                raise BuildError(
                    f"{logical_id}: layer {layer!r} is not an AWS::Serverless::LayerVersion of this "
                    "template; only those run in the embedded stack"
                )
            layers.append(layer_units[name])
        functions[logical_id] = (runtime, code, layers)
    return functions, units


def _layer_unit(
    logical_id: str, resource: dict[str, Any], base_dir: Path, units: dict[str, _Unit], by_key: dict[str, str]
) -> str | Path:
    props = resource.get("Properties") or {}
    content_uri = _literal(logical_id, "ContentUri", props.get("ContentUri"))
    source = _folder(base_dir, content_uri, f"{logical_id}: ContentUri {content_uri!r}")
    metadata = {k: v for k, v in (resource.get("Metadata") or {}).items() if k.startswith("Build")}
    method = metadata.get("BuildMethod")
    if method is None:
        return source  # `sam build` leaves it as it is, and so does Lambda
    runtimes = [str(method)] if str(method).startswith("python") else []
    if not runtimes:
        raise BuildError(
            f"{logical_id}: BuildMethod {method!r}: the embedded stack builds Python layers only"
        )
    python_version(runtimes[0])
    build_props = {"CompatibleRuntimes": props.get("CompatibleRuntimes") or runtimes}
    digest = tree_digest(source)
    key = _key("layer", source, digest, {**build_props, "Metadata": metadata}, runtimes)
    return _add_unit(
        units,
        by_key,
        _Unit(
            "layer",
            logical_id,
            source,
            {**build_props, "ContentUri": str(source)},
            metadata,
            tuple(runtimes),
            digest,
            key,
        ),
    )


def _add_unit(units: dict[str, _Unit], by_key: dict[str, str], unit: _Unit) -> str:
    """The id of the unit with this key (the first resource that needs it)."""
    if unit.key not in by_key:
        by_key[unit.key] = unit.logical_id
        units[unit.logical_id] = unit
    return by_key[unit.key]


def _literal(logical_id: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise BuildError(
            f"{logical_id}: {name} must be a literal value for the embedded stack, not {value!r}"
        )
    return value


def _folder(base_dir: Path, uri: str, what: str) -> Path:
    if uri.startswith("s3://"):
        raise BuildError(f"{what} must be a local folder for the embedded stack")
    folder = (base_dir / uri).resolve()
    if not folder.is_dir():
        raise BuildError(f"{what} is not a folder next to the template")
    return folder


def _architecture(logical_id: str, architectures: Any) -> str:
    wanted = (architectures or ["x86_64"])[0]
    here = _MACHINE_ARCHITECTURE.get(platform.machine().lower(), platform.machine())
    if wanted != here:
        raise BuildError(f"{logical_id}: Architectures {wanted} cannot run on this {here} machine")
    return str(wanted)


def _key(kind: str, source: Path, digest: str, properties: dict[str, Any], runtimes: list[str]) -> str:
    """The unit's folder name: kind, source folder name and a hash of all that makes its build."""
    hashed = hashlib.sha256()
    described = {
        "format": BUILD_FORMAT,
        "kind": kind,
        "properties": properties,
        "sam": _sam_version(),
        "interpreters": [interpreter(runtime).full_version for runtime in runtimes],
    }
    hashed.update(json.dumps(described, sort_keys=True).encode())
    hashed.update(digest.encode())
    return f"{kind}-{source.name}-{hashed.hexdigest()[:24]}"


def _sam_version() -> str:
    try:
        return importlib.metadata.version("aws-sam-cli")
    except importlib.metadata.PackageNotFoundError:
        raise BuildError(
            f"the SAM CLI (aws-sam-cli) is not installed for {sys.executable}: run `make setup`"
        ) from None


def tree_digest(folder: Path) -> str:
    """The sha256 of every file under ``folder`` (its relative path, executable bit and bytes)."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = sorted(name for name in dirnames if name not in _SKIPPED_DIRS)
        for name in sorted(filenames):
            if name.endswith(_SKIPPED_SUFFIXES):
                continue
            path = Path(dirpath, name)
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
            digest.update(b"x" if os.access(path, os.X_OK) else b"-")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """The root's build lock, across processes (pytest workers, stacks, `retrain local up`)."""
    with open(root / ".lock", "a+", encoding="utf-8") as lock:
        began = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)
        waited = time.monotonic() - began
        if waited > 1:
            LOG.info("waited %.1f s for another build of %s", waited, root)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(units: list[_Unit], root: Path) -> None:
    """One `sam build` of the missing units, each moved into ``root/<key>`` once whole."""
    scratch = root / f".build-{uuid.uuid4().hex[:12]}"
    scratch.mkdir()
    try:
        resources: dict[str, Any] = {}
        for unit in units:
            kind = "AWS::Serverless::Function" if unit.kind == "function" else "AWS::Serverless::LayerVersion"
            resource: dict[str, Any] = {"Type": kind, "Properties": copy.deepcopy(unit.properties)}
            if unit.metadata:
                resource["Metadata"] = copy.deepcopy(unit.metadata)
            resources[unit.logical_id] = resource
        build_template = scratch / "template.yaml"
        build_template.write_text(
            yaml.safe_dump(
                {
                    "AWSTemplateFormatVersion": "2010-09-09",
                    "Transform": "AWS::Serverless-2016-10-31",
                    "Resources": resources,
                },
                sort_keys=False,
            ),
            encoding="utf-8",
        )
        began = time.monotonic()
        _sam_build(build_template, scratch / "build", {r for unit in units for r in unit.runtimes})
        for unit in units:
            if tree_digest(unit.source) != unit.source_digest:
                raise BuildError(
                    f"{unit.source} changed while `sam build` ran: start again to build what it holds now"
                )
        for unit in units:
            staged = scratch / unit.key
            staged.mkdir()
            (scratch / "build" / unit.logical_id).rename(staged / "out")
            (staged / "unit.json").write_text(
                json.dumps({"kind": unit.kind, "source": str(unit.source), "key": unit.key}), encoding="utf-8"
            )
            staged.rename(root / unit.key)
        LOG.info("sam build of %s in %.1f s", ", ".join(u.key for u in units), time.monotonic() - began)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _sam_build(template: Path, build_dir: Path, runtimes: set[str]) -> None:
    """`sam build` with each runtime's interpreter first on PATH (its Python workflow runs pip with
    ``pythonX.Y`` from PATH), in the scratch folder (so its ``.aws-sam/deps`` stays there)."""
    interpreters: list[Interpreter] = [interpreter(runtime) for runtime in sorted(runtimes)]
    path = os.pathsep.join(
        [*(str(found.executable.parent) for found in interpreters), os.environ.get("PATH", os.defpath)]
    )
    command = [
        sys.executable, "-m", "samcli", "build",
        "--template-file", str(template),
        "--build-dir", str(build_dir),
        "--no-cached",
        "--no-use-container",
    ]  # fmt: skip
    env = {**os.environ, "PATH": path, "SAM_CLI_TELEMETRY": "0"}
    try:
        done = subprocess.run(
            command,
            cwd=template.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BuildError(f"sam build ran past {BUILD_TIMEOUT_SECONDS:.0f} s ({template})") from None
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-3000:]
        raise BuildError(f"sam build failed (exit {done.returncode}):\n{output}")


def _prune(root: Path, *, keep: set[str]) -> None:
    """Remove the oldest-used units of each source folder beyond KEEP_PER_SOURCE (never one in ``keep``)."""
    by_source: dict[tuple[str, str], list[tuple[float, Path]]] = {}
    for described in root.glob("*/unit.json"):
        try:
            unit = json.loads(described.read_text(encoding="utf-8"))
            used = described.stat().st_mtime
        except (OSError, ValueError):
            continue
        by_source.setdefault((unit["kind"], unit["source"]), []).append((used, described.parent))
    for units in by_source.values():
        units.sort(reverse=True)
        for _, folder in units[KEEP_PER_SOURCE:]:
            if folder.name not in keep:
                LOG.info("removing the old Lambda build %s", folder)
                shutil.rmtree(folder, ignore_errors=True)
