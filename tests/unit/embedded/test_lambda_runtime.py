"""The embedded Lambda runtime: handlers in their own processes, with the template's environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from retrain.embedded.awslambda.runtime import (
    TIMEOUT_ERROR,
    FunctionNotFoundError,
    FunctionSpec,
    LambdaRuntime,
)
from retrain.embedded.stepfunctions.errors import TaskFailed

HANDLERS = """
import os, time
STAGE = os.environ.get("STAGE", "unset")  # read once at import, like controller.config

def whoami(event, context):
    return {"stage": STAGE, "function": context.function_name, "endpoint": os.environ["AWS_ENDPOINT_URL"],
            "event": event, "remaining_ok": context.get_remaining_time_in_millis() > 0}

def boom(event, context):
    print("about to fail")
    raise ValueError(f"bad event: {event}")

def slow(event, context):
    if event.get("warm"):
        return "warm"
    time.sleep(30)
"""


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LambdaRuntime]:
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(HANDLERS)
    functions = {
        "ingest": FunctionSpec(
            "ingest", "app.whoami", code, {"STAGE": "ingest-env"}, logical_id="IngestFunction"
        ),
        "dispatch": FunctionSpec("dispatch", "app.whoami", code, {"STAGE": "dispatch-env"}),
        "boom": FunctionSpec("boom", "app.boom", code),
        "slow": FunctionSpec("slow", "app.slow", code, timeout_seconds=0.5),
    }
    runtime = LambdaRuntime(functions, endpoint_url="http://127.0.0.1:5999", log_dir=tmp_path / "logs")
    yield runtime
    runtime.close()


def test_each_function_sees_its_own_environment(runtime: LambdaRuntime) -> None:
    ingest = runtime.invoke("ingest", {"n": 1})
    dispatch = runtime.invoke("arn:aws:lambda:us-east-1:123456789012:function:dispatch", {"n": 2})

    assert (ingest["stage"], ingest["function"], ingest["event"]) == ("ingest-env", "ingest", {"n": 1})
    assert (dispatch["stage"], dispatch["function"]) == ("dispatch-env", "dispatch")
    assert ingest["endpoint"] == "http://127.0.0.1:5999"
    assert ingest["remaining_ok"] is True


def test_a_function_is_found_by_its_logical_id(runtime: LambdaRuntime) -> None:
    assert runtime.invoke("IngestFunction", {})["function"] == "ingest"


def test_handler_error_raises_its_type_and_message_and_logs(runtime: LambdaRuntime, tmp_path: Path) -> None:
    with pytest.raises(TaskFailed) as raised:
        runtime.invoke("boom", {"x": 1})

    assert raised.value.error == "ValueError"
    assert "bad event" in raised.value.cause
    log = (tmp_path / "logs" / "boom.log").read_text()
    assert "about to fail" in log
    assert "Traceback" in log


def test_an_invocation_past_the_timeout_fails_and_the_next_one_gets_a_fresh_worker(
    runtime: LambdaRuntime,
) -> None:
    runtime.invoke("slow", {"warm": True})  # the first call only imports: the handler returns at once

    with pytest.raises(TaskFailed) as raised:
        runtime.invoke("slow", {})

    assert raised.value.error == TIMEOUT_ERROR
    assert runtime.invoke("slow", {"warm": True}) == "warm"


def test_unknown_function_names_the_declared_ones(runtime: LambdaRuntime) -> None:
    with pytest.raises(FunctionNotFoundError, match="dispatch"):
        runtime.invoke("nope", {})
