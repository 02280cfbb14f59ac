"""The training image as the embedded SageMaker runs it: what its Dockerfile gives the container.

No Docker engine runs here, so the image is read from its Dockerfile (`dockerfile-parse`): ENTRYPOINT,
CMD, ENV and WORKDIR become the container's start, and every COPY is laid out under a root directory,
`.dockerignore` applied, exactly where the Dockerfile puts it under /opt/ml (the one tree a job's
container gets of its own here). The RUN steps are not executed, and the files COPY puts elsewhere only
feed them: the local interpreter (this virtualenv, which installs training_image/requirements.txt)
stands in for the image's Python, and `make image-check` holds the image's own package set against its
base image.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from dockerfile_parse import DockerfileParser
from dockerfile_parse.util import WordSplitter

from retrain_contract import container as contract

OPT_ML = PurePosixPath(contract.DEFAULT_BASE_DIR)
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The project's training image, built (`make image`) with the repository root as its context.
BUILD_CONTEXT = Path(__file__).resolve().parents[3]
TRAINING_DOCKERFILE = BUILD_CONTEXT / "training_image" / "Dockerfile"
# What the image's RUN steps install, the script that links them into the image's virtualenv, and where
# the environment standing in for the image's Python is kept.
TRAINING_REQUIREMENTS = BUILD_CONTEXT / "training_image" / "requirements.txt"
LINK_PACKAGES = BUILD_CONTEXT / "training_image" / "environment" / "link_packages.py"
IMAGE_ENVIRONMENTS = BUILD_CONTEXT / "build" / "image-env"
# What every Python image has besides its requirements (the virtualenv's own pip and setuptools).
BASE_DISTRIBUTIONS = ("pip", "setuptools")


class ImageError(ValueError):
    """A Dockerfile the embedded stack cannot run as an image; the message says which line and why."""


@dataclass(frozen=True)
class ContainerImage:
    """A built image: its start (entrypoint, cmd, env, workdir) and its files under `root`, laid out as
    in the container (`root/opt/ml/code/train.py` is `/opt/ml/code/train.py`)."""

    root: Path
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str = "/"
    interpreter: Path = field(default_factory=lambda: Path(sys.executable))
    # What the interpreter's environment is made of here (its own prefix, the installed packages it
    # links to): a container gets them copy-on-write.
    environment: tuple[Path, ...] = ()

    @property
    def opt_ml(self) -> Path:
        """The image's own /opt/ml (its code directory among it)."""
        return self.root / OPT_ML.relative_to("/")

    @property
    def code_dir(self) -> Path:
        return self.root / PurePosixPath(contract.CODE_DIR).relative_to("/")

    def install(self, base: Path) -> None:
        """A new container's /opt/ml starts as the image's (`base` is that container's /opt/ml)."""
        if self.opt_ml.is_dir():
            shutil.copytree(self.opt_ml, base, dirs_exist_ok=True, symlinks=True)

    def command(self, arguments: list[str] | None = None) -> list[str]:
        """The container's command line: ENTRYPOINT then the arguments, which replace CMD when given."""
        command = [*self.entrypoint, *(self.cmd if arguments is None else arguments)]
        if not command:
            raise ImageError("the image has neither ENTRYPOINT nor CMD, and the job gives no command")
        return command

    def job_command(
        self, entrypoint: Sequence[object], arguments: Sequence[object], default: list[str] | None = None
    ) -> list[str]:
        """What SageMaker runs for a job: its ContainerEntrypoint in place of the image's ENTRYPOINT, its
        ContainerArguments in place of CMD, else `default` (`train` for a training job) or CMD."""
        given = [str(part) for part in entrypoint]
        words = [str(part) for part in arguments]
        return [*given, *words] if given else self.command(words or default)


def build_image(
    root: Path,
    dockerfile: Path = TRAINING_DOCKERFILE,
    context: Path = BUILD_CONTEXT,
    requirements: Path = TRAINING_REQUIREMENTS,
    build_args: Mapping[str, str] | None = None,
) -> ContainerImage:
    """Read `dockerfile` (a build with `context`) and lay out its COPY files under `root`; the image's
    Python is an environment of `requirements` (`image_environment`)."""
    # The base image's own ENV is not known here: a `${PATH}` in ENV extends the usual system PATH.
    parser = DockerfileParser(
        path=str(dockerfile), build_args=dict(build_args or {}), parent_env={"PATH": SYSTEM_PATH}
    )
    # BuildKit reads <Dockerfile>.dockerignore beside the Dockerfile first, else the context's.
    beside = dockerfile.with_name(dockerfile.name + ".dockerignore")
    ignore = DockerIgnore.read(beside if beside.is_file() else context / ".dockerignore")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    workdir = PurePosixPath("/")
    entrypoint: list[str] = []
    cmd: list[str] = []
    args = dict(parser.args)
    envs = dict(parser.envs)  # the image's ENV (its last stage's), for $NAME in WORKDIR and COPY
    for line in parser.structure:
        instruction, value = line["instruction"], line["value"]
        where = f"{dockerfile}:{line['startline'] + 1}"
        if instruction == "FROM":
            # Only the last stage is the image: what earlier stages did is not in it.
            workdir, entrypoint, cmd = PurePosixPath("/"), [], []
            shutil.rmtree(root)
            root.mkdir()
        elif instruction == "ARG":
            name, _, default = value.partition("=")
            args.setdefault(name.strip(), default.strip())
        elif instruction == "WORKDIR":
            workdir = workdir / _words(value, args, envs)[0]
        elif instruction == "ENTRYPOINT":
            entrypoint = _exec_form(value)
            cmd = []  # as Docker does: a new ENTRYPOINT clears an inherited CMD
        elif instruction == "CMD":
            cmd = _exec_form(value)
        elif instruction == "COPY":
            _copy(_words(value, args, envs), context, root, workdir, ignore, where)
        elif instruction == "ADD":
            raise ImageError(f"{where}: ADD is not supported by the embedded stack; use COPY")
    interpreter = image_environment(requirements, IMAGE_ENVIRONMENTS)
    return ContainerImage(
        root=root,
        entrypoint=tuple(entrypoint),
        cmd=tuple(cmd),
        env=envs,
        workdir=str(workdir),
        interpreter=interpreter,
        environment=(interpreter.parent.parent, Path(sys.prefix)),
    )


def _words(value: str, args: Mapping[str, str], envs: Mapping[str, str]) -> list[str]:
    return [str(word) for word in WordSplitter(value, args=dict(args), envs=dict(envs)).split(dequote=True)]


def _exec_form(value: str) -> list[str]:
    """ENTRYPOINT/CMD: the JSON array form as it is, the shell form through /bin/sh -c."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return ["/bin/sh", "-c", value]
    if not isinstance(parsed, list) or not all(isinstance(part, str) for part in parsed):
        return ["/bin/sh", "-c", value]
    return parsed


def _copy(
    words: list[str], context: Path, root: Path, workdir: PurePosixPath, ignore: DockerIgnore, where: str
) -> None:
    flags = [w for w in words if w.startswith("--")]
    if any(flag.startswith("--from") for flag in flags):
        raise ImageError(f"{where}: COPY --from (multi-stage builds) is not supported by the embedded stack")
    paths = [w for w in words if not w.startswith("--")]
    if len(paths) < 2:
        raise ImageError(f"{where}: COPY needs a source and a destination")
    *sources, target = paths
    destination = workdir / target
    if destination != OPT_ML and OPT_ML not in destination.parents:
        return  # a build input of the RUN steps, which the local interpreter stands in for
    into = root / destination.relative_to("/")
    matched = [path for source in sources for path in sorted(context.glob(source.rstrip("/")))]
    if not matched:
        raise ImageError(f"{where}: COPY {' '.join(sources)} matches nothing in {context}")
    many = len(matched) > 1 or target.endswith("/")
    for source in matched:
        if source.is_dir():
            _copy_tree(source, into, context, ignore)
        elif not ignore.excludes(source.relative_to(context).as_posix()):
            dest = into / source.name if many else into
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)


def _copy_tree(source: Path, into: Path, context: Path, ignore: DockerIgnore) -> None:
    """A directory's contents (not the directory itself), as COPY copies them."""
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(context).as_posix()
        if path.is_dir() or ignore.excludes(relative):
            continue
        dest = into / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)


@dataclass(frozen=True)
class DockerIgnore:
    """`.dockerignore`: the last pattern that matches a path (or one of its parent directories)
    decides; `!` re-includes; `*` and `?` stay within one path segment, `**` spans any number."""

    rules: tuple[tuple[re.Pattern[str], bool], ...] = ()

    @classmethod
    def read(cls, path: Path) -> DockerIgnore:
        return cls.parse(path.read_text(encoding="utf-8").splitlines()) if path.is_file() else cls()

    @classmethod
    def parse(cls, lines: list[str]) -> DockerIgnore:
        rules = []
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            include = line.startswith("!")
            pattern = line[1:].strip() if include else line
            rules.append((_pattern(pattern), include))
        return cls(tuple(rules))

    def excludes(self, relative: str) -> bool:
        parts = relative.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = False
        for pattern, include in self.rules:
            if any(pattern.fullmatch(prefix) for prefix in prefixes):
                excluded = not include
        return excluded


def _pattern(pattern: str) -> re.Pattern[str]:
    cleaned = str(PurePosixPath(pattern.strip("/"))) if pattern.strip("/") else ""
    out, i = "", 0
    while i < len(cleaned):
        if cleaned.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif cleaned.startswith("**", i):
            out, i = out + ".*", i + 2
        elif cleaned[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif cleaned[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(cleaned[i]), i + 1
    return re.compile(out)


def image_environment(requirements: Path, cache: Path) -> Path:
    """The interpreter of a virtualenv holding exactly `requirements` (and what they need) as installed
    here, linked by the image's own build step (LINK_PACKAGES); built once per set of installed
    versions."""
    spec = importlib.util.spec_from_file_location("retrain_link_packages", LINK_PACKAGES)
    assert spec is not None and spec.loader is not None
    linker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(linker)
    wanted = [*linker.read_requirements(requirements), *map(linker.Requirement, BASE_DISTRIBUTIONS)]
    try:
        installed = linker.closure(wanted)
    except linker.LinkError as error:
        raise ImageError(
            f"the training image's requirements are not all installed here: {error}; run `make setup`"
        ) from error
    pins = sorted(f"{name}=={dist.version}" for name, dist in installed.items())
    key = hashlib.sha256("\n".join([sys.executable, LINK_PACKAGES.read_text(), *pins]).encode()).hexdigest()
    venv = cache / key[:16]
    done = venv / ".complete"
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / f"{key[:16]}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder; the others wait and reuse its environment
        if not done.exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
            subprocess.run(
                [
                    sys.executable,
                    str(LINK_PACKAGES),
                    "--into",
                    str(venv),
                    "-r",
                    str(requirements),
                    *BASE_DISTRIBUTIONS,
                ],
                check=True,
                capture_output=True,
            )
            done.touch()
    return venv / "bin" / "python"
