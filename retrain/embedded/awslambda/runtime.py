"""The embedded Lambda runtime: the template's handlers run as real Python processes, one environment each.

Each function gets a small pool of long-lived worker processes (:mod:`retrain.embedded.awslambda.worker`),
started on first use on the function's runtime (the template's ``python3.13``: :mod:`.interpreters`),
isolated (``-I -S``: no site-packages, no ``PYTHON*`` variables, nothing of the development environment)
and importing only from the function's build (its task root, ``LAMBDA_TASK_ROOT``) and its layers, as
:mod:`retrain.embedded.provisioning.build` made them with ``sam build``. The environment is exactly the one
the template gives that function, plus the variables Lambda itself sets and ``AWS_ENDPOINT_URL`` so the
handler's boto3 clients reach the emulation with no local-only code path. A worker serves one invocation
at a time, like a Lambda execution environment; an invocation that runs past the function's Timeout kills
its worker and fails as Lambda does, and so does one whose handler module cannot be imported
(``Runtime.ImportModuleError``), one whose worker outgrows the function's MemorySize
(``Runtime.OutOfMemory``: the worker is killed, :mod:`.memory`) and one whose response is over Lambda's
payload limit (``Function.ResponseSizeTooLarge``). Each invocation ends with Lambda's ``REPORT`` line in
the function's log (duration, memory size, max memory used).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.awslambda.interpreters import interpreter
from retrain.embedded.awslambda.memory import POLL_SECONDS, process_tree, resident_bytes
from retrain.embedded.limits import LAMBDA_RESPONSE_BYTES
from retrain.embedded.stepfunctions.errors import TaskFailed

LOG = logging.getLogger(__name__)
# The bootstrap each environment runs: a standalone script of the standard library only.
WORKER: Final = Path(__file__).resolve().with_name("worker.py")
TIMEOUT_ERROR: Final = "Sandbox.Timedout"
RESPONSE_TOO_LARGE: Final = "Function.ResponseSizeTooLarge"
OUT_OF_MEMORY_ERROR: Final = "Runtime.OutOfMemory"
MIB: Final = 1024 * 1024
INIT_SECONDS: Final = 10.0


class FunctionNotFoundError(KeyError):
    """An invoke named a function the template does not declare."""


@dataclass(frozen=True)
class FunctionSpec:
    """One AWS::Lambda::Function as the template declares it, with its build: ``code_dir`` is the task
    root (``/var/task``, what ``sam build`` made of its CodeUri), ``layers`` what each of its layers unpacks
    at ``/opt`` (in the function's Layers order), ``runtime`` the template's (python3.13)."""

    name: str
    handler: str
    code_dir: Path
    environment: dict[str, str] = field(default_factory=dict)
    timeout_seconds: float = 3.0
    memory_mb: int = 128
    logical_id: str = ""
    role_arn: str = ""  # the execution role: the function's AWS calls are signed as its session
    layers: tuple[Path, ...] = ()
    runtime: str = field(kw_only=True)


class _Worker:
    def __init__(self, spec: FunctionSpec, env: dict[str, str], log: IO[str]) -> None:
        # Later layers first: where two layers hold the same file, Lambda keeps the later one's in /opt.
        layers = [str(layer) for layer in reversed(spec.layers)]
        python = interpreter(spec.runtime).executable
        self.process = subprocess.Popen(
            [str(python), "-I", "-S", str(WORKER), spec.handler, *layers],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            cwd=str(spec.code_dir),
            text=True,
            bufsize=1,
        )
        self.replies: queue.Queue[str | None] = queue.Queue()
        self.initialised = False
        self.memory_limit = spec.memory_mb * MIB
        self.peak_bytes = 0  # the most resident memory seen during the last invocation
        threading.Thread(target=self._read, daemon=True, name=f"lambda-reader-{spec.name}").start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.replies.put(line)
        self.replies.put(None)

    def call(self, payload: Any, timeout: float, function_arn: str, request_id: str) -> dict[str, Any] | None:
        """The reply; Lambda's out-of-memory error when the worker outgrew its memory; None when it died or
        ran past ``timeout``. A worker that did not reply is killed."""
        assert self.process.stdin is not None
        request = {
            "payload": payload,
            "timeout": timeout,
            "request_id": request_id,
            "invoked_function_arn": function_arn,
        }
        self.peak_bytes = 0
        # Lambda gives a new environment's init (imports) its own 10 s beyond the function timeout.
        deadline = time.monotonic() + timeout + (0.0 if self.initialised else INIT_SECONDS)
        line: str | None = None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            while time.monotonic() < deadline:
                try:  # a reply, or None when the worker died
                    line = self.replies.get(timeout=min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
                    break
                except queue.Empty:
                    if self._measure() > self.memory_limit:
                        self.kill()
                        return {"error": self._out_of_memory(request_id)}
        except BrokenPipeError:
            line = None
        if line is None:
            self.kill()
            return None
        self._measure()
        self.initialised = True
        reply: dict[str, Any] = json.loads(line)
        if reply.get("init_error"):
            self.kill()  # the environment failed its init: the next invocation starts a new one
        return reply

    def _measure(self) -> int:
        used = resident_bytes(self.process.pid)
        self.peak_bytes = max(self.peak_bytes, used)
        return used

    def _out_of_memory(self, request_id: str) -> dict[str, Any]:
        """What Lambda reports for an environment killed for its memory, with the numbers."""
        return {
            "errorType": OUT_OF_MEMORY_ERROR,
            "errorMessage": f"RequestId: {request_id} Error: Runtime exited with error: signal: killed "
            f"(the environment used {self.peak_bytes // MIB} MB, over its MemorySize of "
            f"{self.memory_limit // MIB} MB)",
        }

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """End the environment: the worker and whatever its handler started, as Lambda ends a sandbox."""
        if self.alive():
            for member in reversed(process_tree(self.process.pid)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(member, signal.SIGKILL)
        self.process.wait()


class LambdaRuntime:
    """Runs the template's functions; ``invoke`` is the ``lambda_invoker`` the integrations call."""

    def __init__(
        self,
        functions: dict[str, FunctionSpec],
        *,
        endpoint_url: str,
        log_dir: Path,
        region: str = REGION,
        max_concurrency: int = 2,
        base_environment: dict[str, str] | None = None,
        credentials: Callable[[str], tuple[str, str]] | None = None,
    ) -> None:
        self.functions = dict(functions)
        self._endpoint = endpoint_url
        self._region = region
        self._log_dir = log_dir
        self._log_dir.mkdir(parents=True, exist_ok=True)
        self._max = max_concurrency
        self._base = base_environment if base_environment is not None else _inherited_environment()
        self._credentials = credentials
        # Endpoints of the stack's services that boto3's AWS_ENDPOINT_URL does not reach (an MLflow app)
        self.redirects: dict[str, str] = {}
        self._idle: dict[str, list[_Worker]] = {}
        self._busy: dict[str, int] = {}
        self._cond = threading.Condition()
        self._logs: dict[str, IO[str]] = {}
        self._log_lock = threading.Lock()
        self._closed = False

    @property
    def max_concurrency(self) -> int:
        """How many invocations of one function run at once."""
        return self._max

    def resolve(self, function: str) -> FunctionSpec:
        """A function by name, ARN or template logical id."""
        name = function.rsplit(":function:", maxsplit=1)[-1].split(":", maxsplit=1)[0]
        if name in self.functions:
            return self.functions[name]
        for spec in self.functions.values():
            if spec.logical_id == name:
                return spec
        raise FunctionNotFoundError(
            f"Function not found: {function} (the template declares {sorted(self.functions)})"
        )

    def environment(self, spec: FunctionSpec) -> dict[str, str]:
        """What the function's process sees: the machine's basics, Lambda's own variables (its role's
        credentials among them), the template's."""
        role: dict[str, str] = {}
        if self._credentials is not None and spec.role_arn:
            key, secret = self._credentials(spec.role_arn)
            role = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
        base = {k: v for k, v in self._base.items() if not (role and k == "AWS_SESSION_TOKEN")}
        return {
            **base,
            **role,
            "AWS_ENDPOINT_URL": self._endpoint,
            "AWS_REGION": self._region,
            "AWS_DEFAULT_REGION": self._region,
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{spec.runtime}",
            "LAMBDA_TASK_ROOT": str(spec.code_dir),
            "_HANDLER": spec.handler,
            **self.redirects,
            **spec.environment,
        }

    def invoke(self, function: str, payload: Any) -> Any:
        """Run one invocation; a handler error raises TaskFailed(errorType, errorMessage)."""
        spec = self.resolve(function)
        worker = self._acquire(spec)
        arn = f"arn:aws:lambda:{self._region}:{ACCOUNT_ID}:function:{spec.name}"
        request_id, began = str(uuid.uuid4()), time.monotonic()
        reply = worker.call(payload, spec.timeout_seconds, arn, request_id)
        self._report(spec, request_id, time.monotonic() - began, worker.peak_bytes)
        self._release(spec, worker)
        if reply is None:
            raise TaskFailed(TIMEOUT_ERROR, f"Task timed out after {spec.timeout_seconds:.2f} seconds")
        if "error" in reply:
            raise TaskFailed(str(reply["error"]["errorType"]), str(reply["error"]["errorMessage"]))
        # What the Python runtime posts is json.dumps(result); Lambda refuses it over the limit.
        size = len(json.dumps(reply["result"]).encode("utf-8"))
        if size > LAMBDA_RESPONSE_BYTES:
            raise TaskFailed(
                RESPONSE_TOO_LARGE,
                f"Response payload size exceeded maximum allowed payload size ({LAMBDA_RESPONSE_BYTES} "
                f"bytes). The response of {spec.name} is {size} bytes: put large results in S3 and "
                "return their URI.",
            )
        return reply["result"]

    def _report(self, spec: FunctionSpec, request_id: str, seconds: float, peak_bytes: int) -> None:
        """Lambda's REPORT line, in the function's log."""
        line = (
            f"REPORT RequestId: {request_id}\tDuration: {seconds * 1000:.2f} ms\t"
            f"Memory Size: {spec.memory_mb} MB\tMax Memory Used: {-(-peak_bytes // MIB)} MB\n"
        )
        with self._log_lock:
            self._logs[spec.name].write(line)
            self._logs[spec.name].flush()

    def _acquire(self, spec: FunctionSpec) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("the Lambda runtime is stopped")
                idle = self._idle.setdefault(spec.name, [])
                while idle:
                    worker = idle.pop()
                    if worker.alive():
                        self._busy[spec.name] = self._busy.get(spec.name, 0) + 1
                        return worker
                if self._busy.get(spec.name, 0) < self._max:
                    self._busy[spec.name] = self._busy.get(spec.name, 0) + 1
                    break
                self._cond.wait()
        try:
            if spec.name not in self._logs:
                self._logs[spec.name] = open(self._log_dir / f"{spec.name}.log", "a", encoding="utf-8")  # noqa: SIM115
            return _Worker(spec, self.environment(spec), self._logs[spec.name])
        except BaseException:
            with self._cond:
                self._busy[spec.name] -= 1
                self._cond.notify_all()
            raise

    def _release(self, spec: FunctionSpec, worker: _Worker) -> None:
        with self._cond:
            self._busy[spec.name] -= 1
            if worker.alive() and not self._closed:
                self._idle.setdefault(spec.name, []).append(worker)
            else:
                worker.kill()
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            workers = [w for pool in self._idle.values() for w in pool]
            self._idle.clear()
            self._cond.notify_all()
        for worker in workers:
            worker.kill()
        for log in self._logs.values():
            log.close()


def _inherited_environment() -> dict[str, str]:
    """The parent's variables a Lambda process needs (credentials and paths), nothing function-specific."""
    keep = (
        "PATH",
        "HOME",
        "LANG",
        "TMPDIR",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "POWERTOOLS_TRACE_DISABLED",
        "POWERTOOLS_METRICS_NAMESPACE",
    )
    env = {key: os.environ[key] for key in keep if key in os.environ}
    env.setdefault("AWS_ACCESS_KEY_ID", "retrain-local")
    env.setdefault("AWS_SECRET_ACCESS_KEY", "retrain-local")
    env["AWS_CONFIG_FILE"] = os.devnull
    env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    return env
