"""One job's container: the image's command started the way SageMaker starts it, on this machine.

SageMaker runs a training image as `<ENTRYPOINT> train` (a processing image as its ContainerEntrypoint)
in a container of its own, and stops it (StopTrainingJob, a time limit, a spot reclaim) with SIGTERM
to the container's first process, SIGKILL after a grace period. With no Docker engine here, each
container is the image's command in new Linux namespaces (util-linux `unshare`, as root or in a user
namespace): a PID namespace, so the command is PID 1 (a signal to it reaches nothing else, and its exit
ends every other process of the container); a mount namespace, in which the job's tree is /opt/ml, the
image's code is in /opt/ml/code, /etc/hosts names the job's hosts, this machine's /opt and pip
configuration are hidden and the interpreter is copy-on-write; and, for a job with network isolation,
a network namespace with only a loopback interface.

The environment is the image's (ENV), the job's and what SageMaker sets, not this machine's; the
interpreter standing in for the image's Python is first on PATH (see image.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

from retrain.embedded.sagemaker import container_init
from retrain.embedded.sagemaker.image import SYSTEM_PATH, ContainerImage
from retrain_contract import container as contract

UNSHARE: Final = "unshare"
# This machine's pip configuration, which the image does not have (its find-links and local indexes
# would let `pip install` in a job succeed offline where the image's cannot).
HIDDEN_CONFIGURATION: Final = ("/etc/pip.conf", "/etc/xdg/pip", "/etc/xdg/pip.conf")
START_FAILED: Final = container_init.START_FAILED
_PID1_WAIT_SECONDS: Final = 10.0


class ContainerError(RuntimeError):
    """The container could not be started on this machine."""


@dataclass(frozen=True)
class ContainerSpec:
    """What one container runs: `argv` with exactly `env`, in `workdir`, `opt_ml` as its /opt/ml."""

    argv: list[str]
    env: Mapping[str, str]
    opt_ml: Path
    workdir: str = "/"
    network_isolation: bool = True
    hosts: tuple[str, ...] = ()
    # Directories the container may write to without changing them here (the image's interpreter and
    # what its site-packages links to): each is copy-on-write in the container.
    copy_on_write: tuple[Path, ...] = ()


def container_environment(image: ContainerImage, *layers: Mapping[str, str]) -> dict[str, str]:
    """The image's ENV, then each layer (what SageMaker sets, the job's Environment), with PATH led by
    the interpreter that stands in for the image's Python."""
    env = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", **image.env}
    for layer in layers:
        env.update(layer)
    env["PATH"] = os.pathsep.join([str(image.interpreter.parent), env["PATH"]])
    return env


def job_spec(
    image: ContainerImage,
    argv: list[str],
    opt_ml: Path,
    *,
    network_isolation: bool,
    layers: Sequence[Mapping[str, str]] = (),
) -> ContainerSpec:
    """A job's container of `image`: on its one host, in the image's working directory, its
    interpreter copy-on-write, its environment the image's then `layers` (see container_environment)."""
    return ContainerSpec(
        argv=argv,
        env=container_environment(image, *layers),
        opt_ml=opt_ml,
        workdir=image.workdir,
        network_isolation=network_isolation,
        hosts=(contract.DEFAULT_HOST,),
        copy_on_write=image.environment,
    )


@cache
def check_namespaces() -> None:
    """Refuse at once, with what to do, where this machine cannot make a container's namespaces."""
    command = [UNSHARE, *_namespace_flags(network_isolation=True), "--", "true"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError as exc:
        raise ContainerError(
            f"the embedded SageMaker runs each job in Linux namespaces, as a container, with `{UNSHARE}` "
            "(util-linux), which this machine lacks: install util-linux (Linux only)"
        ) from exc
    if result.returncode != 0:
        raise ContainerError(
            "the embedded SageMaker runs each job in Linux namespaces, as a container, and this machine "
            f"refused them ({' '.join(command)}: {result.stderr.strip()}); run as root, or allow "
            "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)"
        )


def _namespace_flags(*, network_isolation: bool) -> list[str]:
    flags = ["--mount", "--pid", "--fork", "--mount-proc", "--kill-child"]
    if network_isolation:
        flags.append("--net")
    if os.geteuid() != 0:
        flags.append("--map-root-user")
    return flags


def hosts_file(hosts: tuple[str, ...]) -> str:
    """/etc/hosts of a one-instance job: its host names are this container's address."""
    return "127.0.0.1\tlocalhost\n::1\tlocalhost\n" + "".join(f"127.0.0.1\t{host}\n" for host in hosts)


class Container:
    """A started container. `state` is a directory of its own on this machine (spec, /etc/hosts, the
    interpreter's copy-on-write layer), removed by `cleanup`."""

    def __init__(self, spec: ContainerSpec, state: Path) -> None:
        check_namespaces()
        self.spec = spec
        self.state = state
        shutil.rmtree(state, ignore_errors=True)
        state.mkdir(parents=True)
        (state / "hosts").write_text(hosts_file(spec.hosts), encoding="utf-8")
        overlays = []
        for index, lower in enumerate(sorted({path.resolve() for path in spec.copy_on_write})):
            layer = state / "layers" / str(index)
            (layer / "upper").mkdir(parents=True)
            (layer / "work").mkdir()
            overlays.append({"lower": str(lower), "upper": str(layer / "upper"), "work": str(layer / "work")})
        # A home of its own: this machine's (its pip configuration and caches) is not the image's.
        env = {"HOME": str(state / "home"), **spec.env}
        (state / "home").mkdir()
        init_spec = {
            "argv": list(spec.argv),
            "env": env,
            "workdir": spec.workdir,
            "opt_ml": str(spec.opt_ml.resolve()),
            "hosts_file": str(state / "hosts"),
            "keep_under_opt": sorted({o["lower"] for o in overlays if o["lower"].startswith("/opt/")}),
            "hide": list(HIDDEN_CONFIGURATION),
            "overlays": overlays,
            "loopback": spec.network_isolation,
        }
        (state / "spec.json").write_text(json.dumps(init_spec), encoding="utf-8")
        command = [
            UNSHARE,
            *_namespace_flags(network_isolation=spec.network_isolation),
            "--",
            sys.executable,
            "-I",
            container_init.__file__,
            str(state / "spec.json"),
        ]
        self.process = subprocess.Popen(
            command,
            env={"PATH": os.environ.get("PATH", SYSTEM_PATH)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self._pid1: int | None = None

    @property
    def pid1(self) -> int | None:
        """The container's first process as this machine numbers it (None once the container ended)."""
        if self._pid1 is None:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
            deadline = time.time() + _PID1_WAIT_SECONDS
            while self._pid1 is None and self.process.poll() is None and time.time() < deadline:
                with contextlib.suppress(OSError):
                    listed = children.read_text().split()
                    self._pid1 = int(listed[0]) if listed else None
                if self._pid1 is None:
                    time.sleep(0.01)
        return self._pid1

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def signal(self, signum: int) -> None:
        """Send a signal to the container's first process only (`docker kill --signal`)."""
        pid = self.pid1
        if pid is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def stop(self, grace_seconds: float) -> None:
        """`docker stop`: SIGTERM to the first process; SIGKILL after the grace period, which ends the
        whole container."""
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()  # `unshare --kill-child` ends the container with it
        self.process.wait()

    def cleanup(self) -> None:
        # overlayfs leaves its work directories without permissions for anyone but root.
        with contextlib.suppress(OSError):
            for path in (self.state / "layers").glob("*/work/**"):
                path.chmod(0o700)
        shutil.rmtree(self.state, ignore_errors=True)
