"""The CLI's door to the embedded stack (`retrain.embedded.stack`): a foreground stack for one demo or
one command, or the background one that `retrain local up` started (`retrain.embedded.background`).
Only this module imports them."""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3

from retrain.deployment import Deployment, connect
from retrain.embedded.account import REGION
from retrain.errors import EmbeddedRuntimeError

log = logging.getLogger(__name__)
DEFAULT_STATE_DIR = Path(".retrain")
LOCAL_REGION = REGION
# The emulation accepts any credentials; these keep boto3 from looking for (or using) real ones.
LOCAL_KEY = "retrain-local"


def local_session() -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id=LOCAL_KEY, aws_secret_access_key=LOCAL_KEY, region_name=LOCAL_REGION
    )


def _stack_module(name: str = "stack") -> Any:
    try:
        return importlib.import_module(f"retrain.embedded.{name}")
    except ModuleNotFoundError as error:
        raise EmbeddedRuntimeError(
            f"the embedded AWS runtime is not installed ({error}): reinstall retrain with `make setup`, "
            "or pass --stack NAME to use a stack deployed on AWS"
        ) from None


@contextlib.contextmanager
def _guidance(module: Any) -> Iterator[None]:
    """The runtime's own errors (they say what to do) become the CLI's."""
    try:
        yield
    except module.EmbeddedStackError as error:
        raise EmbeddedRuntimeError(str(error)) from None


def connect_local(endpoint_url: str, stack_name: str, mlflow_endpoint: str | None = None) -> Deployment:
    deployment = connect(stack_name, endpoint_url=endpoint_url, session=local_session())
    deployment.mlflow_endpoint = mlflow_endpoint
    return deployment


@contextlib.contextmanager
def foreground(
    state_dir: Path = DEFAULT_STATE_DIR,
    *,
    parameter_overrides: dict[str, str] | None = None,
    faults: Any = None,
    spot: Any = None,
    read_only: bool = False,
) -> Iterator[Deployment]:
    """An embedded stack that lives as long as the `with` block (its state persists in state_dir; a
    read-only use leaves the saved state as it was)."""
    module = _stack_module()
    kwargs: dict[str, Any] = {"state_dir": state_dir}
    if parameter_overrides:
        kwargs["parameter_overrides"] = parameter_overrides
    if faults is not None:
        kwargs["faults"] = faults
    if spot is not None:
        kwargs["spot"] = spot
    stack = module.EmbeddedStack(**kwargs)
    with _guidance(module):
        # A read-only command may read the tables alone: the buckets fill on its first S3 request.
        endpoint = stack.start(read_only=read_only)
    try:
        app = getattr(stack, "mlflow_app", None)
        yield connect_local(
            str(endpoint), str(stack.stack_name), app.endpoint_url if app is not None else None
        )
    except BaseException:
        _stop_quietly(stack, state_dir, save=not read_only)
        raise
    if not _stop_quietly(stack, state_dir, save=not read_only):
        raise EmbeddedRuntimeError(
            f"the embedded stack did not stop cleanly; its state saved in {state_dir} may miss the last "
            "changes (details above)"
        )


def _stop_quietly(stack: Any, state_dir: Path, *, save: bool) -> bool:
    """Stop the stack; a failure to stop must not hide what the command itself did or raised."""
    try:
        stack.stop(save=save)
    except Exception as error:
        log.error(
            "the embedded stack in %s did not stop cleanly: %s", state_dir, " ".join(str(error).split())[:300]
        )
        return False
    return True


def background(state_dir: Path = DEFAULT_STATE_DIR) -> Deployment | None:
    """The background stack `retrain local up` started, or None when none is running."""
    module = _stack_module("background")
    found = module.running(state_dir)
    if found is None:
        return None
    endpoint, stack_name = found
    published = state_dir / "mlflow" / "endpoint.url"  # mlflow_app.ENDPOINT_FILE, while the app serves
    mlflow = published.read_text(encoding="utf-8").strip() if published.exists() else None
    return connect_local(str(endpoint), str(stack_name), mlflow)


def has_state(state_dir: Path = DEFAULT_STATE_DIR) -> bool:
    return state_dir.is_dir() and any(state_dir.iterdir())


def up(state_dir: Path = DEFAULT_STATE_DIR, **options: Any) -> str:
    """Start the background stack; its endpoint URL."""
    module = _stack_module("background")
    with _guidance(_stack_module()):
        return str(module.up(state_dir=state_dir, **options))


def down(state_dir: Path = DEFAULT_STATE_DIR) -> bool:
    """Stop the background stack; False when none was running."""
    module = _stack_module("background")
    with _guidance(_stack_module()):
        return bool(module.down(state_dir=state_dir))
