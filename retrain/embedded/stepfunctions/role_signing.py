"""Every Task acts as its state machine's role: the role of the execution whose state runs on this thread,
and moto's ``boto_client_for`` signing the interpreter's HTTP calls with that role's credentials."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from retrain.embedded.stepfunctions.calls import execution_role
from retrain.embedded.stepfunctions.services import ACTING, ACTIVE


def boto_client_modules() -> list[Any]:
    """The modules of moto's interpreter that build their clients with ``boto_client_for``."""
    import importlib
    import pkgutil

    from moto.stepfunctions.parser.asl.component.state.exec import state_task

    found = []
    for info in pkgutil.walk_packages(state_task.__path__, state_task.__name__ + "."):
        module = importlib.import_module(info.name)
        if hasattr(module, "boto_client_for"):
            found.append(module)
    return found


def signed_as_the_role(original: Callable[..., Any]) -> Callable[..., Any]:
    """``boto_client_for`` that signs with the acting execution's role (moto signs every call as 'ak')."""

    def boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        gate, role = ACTIVE.gate, getattr(ACTING, "role", None)
        client = original(region, service, state_credentials)
        if gate is None or role is None:
            return client
        key, secret = gate.credentials(role)
        import boto3

        return boto3.client(  # type: ignore[call-overload]
            service,
            region_name=region,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            endpoint_url=client.meta.endpoint_url,
            config=client.meta.config,
        )

    return boto_client_for


def acting_state(original: Callable[..., Any]) -> Callable[..., Any]:
    def _eval_state(self: Any, env: Any) -> Any:
        ACTING.role = execution_role(env)
        return original(self, env)

    return _eval_state
