"""A function's MemorySize in the embedded Lambda runtime: an environment that outgrows it is killed and
the invocation fails with Runtime.OutOfMemory, as on Lambda; the next invocation gets a new environment."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from retrain.embedded.awslambda.runtime import OUT_OF_MEMORY_ERROR, FunctionSpec, LambdaRuntime
from retrain.embedded.provisioning.sam import load_template
from retrain.embedded.stepfunctions.errors import TaskFailed

REPO_ROOT = Path(__file__).resolve().parents[3]
RUNTIME = load_template(REPO_ROOT / "template.yaml")["Globals"]["Function"]["Runtime"]
MEMORY_MB = 128
# Past the memory a test function may use, it holds what it has until well after its timeout: without the
# memory limit such an invocation fails as Sandbox.Timedout instead.
TIMEOUT_SECONDS = 20.0

HANDLERS = """
import os, subprocess, sys, time

def work(event, context):
    held = b"x" * (event.get("mb", 0) << 20)  # every page written, so all of it is resident
    if event.get("mb"):
        time.sleep(60)
    return os.getpid()

def work_in_a_child(event, context):
    code = f"held = b'x' * ({event['mb']} << 20); import time; time.sleep(60)"
    subprocess.Popen([sys.executable, "-I", "-S", "-c", code])
    time.sleep(60)
"""


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LambdaRuntime]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "app.py").write_text(HANDLERS)
    functions = {
        name: FunctionSpec(
            name,
            f"app.{handler}",
            tmp_path / "code",
            memory_mb=MEMORY_MB,
            timeout_seconds=TIMEOUT_SECONDS,
            runtime=RUNTIME,
        )
        for name, handler in (("work", "work"), ("child", "work_in_a_child"))
    }
    runtime = LambdaRuntime(functions, endpoint_url="http://127.0.0.1:5999", log_dir=tmp_path / "logs")
    yield runtime
    runtime.close()


def test_a_worker_over_its_memory_size_is_killed_with_runtime_out_of_memory(runtime: LambdaRuntime) -> None:
    # GIVEN a handler that holds twice its function's MemorySize
    with pytest.raises(TaskFailed) as failed:
        runtime.invoke("work", {"mb": 2 * MEMORY_MB})
    # THEN Lambda's out-of-memory error, naming the memory used and the limit
    assert failed.value.error == OUT_OF_MEMORY_ERROR
    assert re.fullmatch(
        r"RequestId: [0-9a-f-]+ Error: Runtime exited with error: signal: killed "
        rf"\(the environment used \d+ MB, over its MemorySize of {MEMORY_MB} MB\)",
        failed.value.cause,
    )


def test_the_next_invocation_after_an_out_of_memory_kill_gets_a_new_worker(runtime: LambdaRuntime) -> None:
    first = runtime.invoke("work", {})
    with pytest.raises(TaskFailed) as failed:
        runtime.invoke("work", {"mb": 2 * MEMORY_MB})

    assert failed.value.error == OUT_OF_MEMORY_ERROR
    assert runtime.invoke("work", {}) != first


def test_memory_held_by_a_process_the_handler_started_counts(runtime: LambdaRuntime) -> None:
    with pytest.raises(TaskFailed) as failed:
        runtime.invoke("child", {"mb": 2 * MEMORY_MB})

    assert failed.value.error == OUT_OF_MEMORY_ERROR


def test_the_report_line_gives_the_memory_size_and_the_max_memory_used(
    runtime: LambdaRuntime, tmp_path: Path
) -> None:
    runtime.invoke("work", {})

    log = (tmp_path / "logs" / "work.log").read_text().splitlines()
    reports = [line for line in log if line.startswith("REPORT RequestId: ")]
    used = re.search(rf"\tMemory Size: {MEMORY_MB} MB\tMax Memory Used: (\d+) MB$", reports[-1])
    assert used is not None
    assert 0 < int(used.group(1)) < MEMORY_MB
