"""Set up one job's container from inside its namespaces, then become its first process.

`container.py` starts this file (standard library only, run with `python -I`) under `unshare` in new
mount and PID namespaces (and a network namespace for an isolated job), so it runs as PID 1 of the
container. It mounts what a SageMaker instance gives the image, then replaces itself with the image's
command (execve), which therefore is PID 1: a stop signal reaches it and nothing else, and when it
exits the kernel ends every other process of the container.

The spec (a JSON file, the only argument):
  argv, env, workdir   the command, its whole environment, its working directory
  opt_ml               the job's /opt/ml tree on this machine, mounted at /opt/ml
  hosts_file           an /etc/hosts naming the job's hosts, mounted over /etc/hosts
  keep_under_opt       paths under /opt the container still needs (the interpreter standing in for the
                       image's, when it lives there); the rest of this machine's /opt is hidden, as the
                       image's /opt is its own
  hide                 files and directories of this machine's configuration (pip's) hidden from it
  overlays             [{"lower", "upper", "work"}]: directories made copy-on-write (the interpreter's),
                       so a job that installs packages changes only its own container
  loopback             bring up the loopback interface of a new network namespace
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

START_FAILED = 125  # docker run's status when the container could not start
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


def hide_opt(opt_ml: str, keep: list[str]) -> None:
    """/opt holds only /opt/ml (the job's) and the kept paths."""
    stash = tempfile.mkdtemp(prefix="retrain-opt-")
    mount("--rbind", "/opt", stash)
    mount("-t", "tmpfs", "-o", "mode=755", "tmpfs", "/opt")
    for path in keep:
        relative = Path(path).relative_to("/opt")
        source, target = Path(stash) / relative, Path("/opt") / relative
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
        mount("--rbind", str(source), str(target))
    Path("/opt/ml").mkdir()
    mount("--bind", opt_ml, "/opt/ml")
    mount("--make-rprivate", stash)
    subprocess.run(["umount", "-l", stash], check=True, capture_output=True)


def hide(paths: list[str]) -> None:
    empty = tempfile.mkdtemp(prefix="retrain-empty-")
    for path in paths:
        if os.path.isdir(path):
            mount("--bind", empty, path)
        elif os.path.exists(path):
            mount("--bind", "/dev/null", path)


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


def prepare(spec: dict[str, Any]) -> None:
    for overlay in spec.get("overlays") or []:
        options = f"lowerdir={overlay['lower']},upperdir={overlay['upper']},workdir={overlay['work']}"
        mount("-t", "overlay", "overlay", "-o", options, overlay["lower"])
    hide_opt(spec["opt_ml"], list(spec.get("keep_under_opt") or []))
    mount("--bind", spec["hosts_file"], "/etc/hosts")
    hide(list(spec.get("hide") or []))
    if spec.get("loopback"):
        loopback_up()
    os.chdir(spec["workdir"])


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    try:
        prepare(spec)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else ""
        print(f"[retrain emulator] the container could not start: {exc} {detail}".strip(), file=sys.stderr)
        sys.exit(START_FAILED)
    argv, env = spec["argv"], spec["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        # As docker run reports an entrypoint that cannot be executed.
        print(f"exec {argv[0]}: {exc.strerror}", file=sys.stderr)
        sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main()
