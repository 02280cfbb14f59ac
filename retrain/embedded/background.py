"""The embedded stack as a background process, for ``retrain local up|down``.

``up()`` starts ``python -m retrain.embedded.background`` (which runs :class:`EmbeddedStack` until SIGTERM
or SIGINT) and waits until it serves; the process writes ``server.json`` (pid, endpoint, stack name) in the
state directory, which ``running()`` reads. ``down()`` sends SIGTERM: the stack saves its data and stops.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from retrain.embedded.faults import Faults
from retrain.embedded.stack import (
    DEFAULT_STACK_NAME,
    DEFAULT_STATE_DIR,
    REPO_ROOT,
    EmbeddedStack,
    EmbeddedStackError,
)

SERVER_FILE: Final = "server.json"


def _server_file(state_dir: Path) -> Path:
    return Path(state_dir) / SERVER_FILE


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):  # our own child (up() then down() in one process): reap it
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def running(state_dir: Path = DEFAULT_STATE_DIR) -> tuple[str, str] | None:
    """(endpoint URL, stack name) of the background stack, or None when none runs."""
    path = _server_file(state_dir)
    if not path.exists():
        return None
    info = json.loads(path.read_text(encoding="utf-8"))
    if not _alive(int(info["pid"])):
        path.unlink(missing_ok=True)
        return None
    return str(info["endpoint"]), str(info["stack_name"])


def up(state_dir: Path = DEFAULT_STATE_DIR, *, timeout: float = 120.0, **options: Any) -> str:
    """Start the stack in a background process; its endpoint URL once it serves."""
    found = running(state_dir)
    if found is not None:
        return found[0]
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    unknown = sorted(set(options) - {"parameter_overrides", "template", "stack_name", "faults"})
    if unknown:
        raise EmbeddedStackError(
            f"up() takes parameter_overrides, template, stack_name, faults; not {unknown}"
        )
    command = [sys.executable, "-m", "retrain.embedded.background", "--state-dir", str(state_dir)]
    if options.get("parameter_overrides"):
        command += ["--parameters", json.dumps(options["parameter_overrides"])]
    if options.get("template"):
        command += ["--template", str(Path(options["template"]).resolve())]
    if options.get("stack_name"):
        command += ["--stack-name", str(options["stack_name"])]
    if options.get("faults") is not None:
        options["faults"].save(state_dir / "faults.json")
    log = open(state_dir / "server.log", "a", encoding="utf-8")  # noqa: SIM115 - handed to the child
    process = subprocess.Popen(command, stdout=log, stderr=log, cwd=str(REPO_ROOT), start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = running(state_dir)
        if found is not None:
            return found[0]
        if process.poll() is not None:
            raise EmbeddedStackError(f"the embedded stack exited at start; see {state_dir / 'server.log'}")
        time.sleep(0.2)
    process.terminate()
    raise EmbeddedStackError(
        f"the embedded stack did not start in {timeout:.0f} s; see {state_dir / 'server.log'}"
    )


def down(state_dir: Path = DEFAULT_STATE_DIR, *, timeout: float = 120.0) -> bool:
    """Stop the background stack (it saves its data first); False when none was running."""
    path = _server_file(state_dir)
    if running(state_dir) is None:
        return False
    pid = int(json.loads(path.read_text(encoding="utf-8"))["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        raise EmbeddedStackError(f"the embedded stack (pid {pid}) did not stop in {timeout:.0f} s")
    path.unlink(missing_ok=True)
    return True


@contextlib.contextmanager
def _terminate_on_signal() -> Iterator[None]:
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> None:
    """``python -m retrain.embedded.background``: the stack served until SIGTERM or SIGINT (by ``up``)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--parameters", default="{}", help="template parameter overrides as JSON")
    parser.add_argument("--template", type=Path, default=REPO_ROOT / "template.yaml")
    parser.add_argument("--stack-name", default=DEFAULT_STACK_NAME)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` prints every thread's stack to server.log
    faults = Faults.load(args.state_dir / "faults.json")
    stack = EmbeddedStack(
        args.state_dir,
        parameter_overrides=json.loads(args.parameters),
        faults=faults,
        template=args.template,
        stack_name=args.stack_name,
    )
    with _terminate_on_signal():
        try:
            endpoint = stack.start()
            _server_file(args.state_dir).write_text(
                json.dumps({"pid": os.getpid(), "endpoint": endpoint, "stack_name": stack.stack_name}),
                encoding="utf-8",
            )
            while True:
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
        finally:
            stack.stop()
            _server_file(args.state_dir).unlink(missing_ok=True)
    # Everything is saved and stopped; skip the interpreter's teardown of moto's large object graph,
    # which can take minutes on a busy machine while `down` waits.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
