"""The error a Parallel or Map state re-raises from a branch: ``States.*`` names as moto's
StatesErrorName, where moto's CustomErrorName refuses them and crashes the execution."""

from __future__ import annotations

from typing import Any


def error_name_modules() -> list[Any]:
    """moto's Parallel and Map states re-raise a branch's error as CustomErrorName, which refuses the
    ``States.*`` names (``States.TaskFailed`` from a .sync job) and crashes the whole execution."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import iteration_worker
    from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import branches_decl

    return [branches_decl, iteration_worker]


def rethrown_error_name(error_name: str) -> Any:
    """The error name a Parallel/Map state re-raises: States.* as moto's StatesErrorName."""
    from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName

    if error_name.startswith("States."):
        return StatesErrorName.from_name(error_name)
    return CustomErrorName(error_name=error_name)
