"""The entry point's launch plan: how many processes per host, and torchrun's arguments for them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from retrain_contract import container as contract
from retrain_training import distributed, launch

TWO_HOSTS = {contract.HOSTS_ENV: json.dumps(["algo-1", "algo-2"]), contract.CURRENT_HOST_ENV: "algo-2"}


@pytest.mark.parametrize(
    "env",
    [
        {launch.NUM_GPUS_ENV: "0"},
        {launch.NUM_GPUS_ENV: "1", **TWO_HOSTS},  # one process per host: distributed.from_env's case
        {launch.NUM_GPUS_ENV: "4", "RANK": "0", "WORLD_SIZE": "4"},  # a torchrun child
        {launch.NUM_GPUS_ENV: "4", distributed.MPI_WORLD_SIZE: "4"},  # started by mpirun
        {launch.NUM_GPUS_ENV: "4", contract.PROCESSES_PER_HOST_ENV: "1"},
    ],
)
def test_one_process_trains_in_place(env: dict[str, str]) -> None:
    assert launch.plan(env) is None


def test_one_process_per_gpu_on_one_host() -> None:
    assert launch.plan({launch.NUM_GPUS_ENV: "4"}) == launch.Plan(4)


def test_the_override_sets_processes_without_gpus() -> None:
    assert launch.plan({launch.NUM_GPUS_ENV: "0", contract.PROCESSES_PER_HOST_ENV: "2"}) == launch.Plan(2)


def test_several_hosts_meet_at_the_first() -> None:
    chosen = launch.plan({launch.NUM_GPUS_ENV: "8", **TWO_HOSTS})
    assert chosen == launch.Plan(8, hosts=2, node_rank=1, master_addr="algo-1", master_port="29500")


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({contract.PROCESSES_PER_HOST_ENV: "0"}, ValueError),
        ({contract.PROCESSES_PER_HOST_ENV: "two"}, ValueError),
        (
            {launch.NUM_GPUS_ENV: "2", **TWO_HOSTS, contract.CURRENT_HOST_ENV: "algo-9"},
            distributed.DistributedError,
        ),
    ],
)
def test_an_inconsistent_environment_is_refused(env: dict[str, str], error: type[Exception]) -> None:
    with pytest.raises(error):
        launch.plan(env)


def test_torchrun_reads_the_arguments_of_a_host_of_several() -> None:
    chosen = launch.Plan(4, hosts=3, node_rank=2, master_addr="algo-1", master_port="29501")
    args = torchrun.parse_args(launch.torchrun_args(chosen, "/opt/ml/code/train.py", ["--epochs", "2"]))
    assert (args.nproc_per_node, args.nnodes, args.node_rank) == ("4", "3", 2)
    assert (args.master_addr, args.master_port, args.max_restarts) == ("algo-1", 29501, 0)
    assert (args.training_script, args.training_script_args) == ("/opt/ml/code/train.py", ["--epochs", "2"])
    assert not args.standalone


def test_one_host_rendezvouses_with_itself() -> None:
    args = torchrun.parse_args(launch.torchrun_args(launch.Plan(2), "train.py", []))
    assert args.standalone and args.nproc_per_node == "2"


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([143, 143], 143),
        ([1, 143], 1),
        ([143, 2], 2),
        ([-9], 1),
        ([], 1),
    ],
)
def test_exit_status_from_the_children(codes: list[int], expected: int) -> None:
    assert launch.exit_code(codes) == expected


def test_the_first_failure_reason_is_kept(tmp_path: Path) -> None:
    paths = contract.resolve_paths({contract.BASE_DIR_ENV: str(tmp_path)})
    contract.write_failure(paths, "ValueError: the cause", keep_first=True)
    contract.write_failure(paths, "RuntimeError: connection closed by peer", keep_first=True)
    assert paths.failure_file.read_text() == "ValueError: the cause\n"
    contract.write_failure(paths, "RuntimeError: overwritten")
    assert paths.failure_file.read_text() == "RuntimeError: overwritten\n"


def failed(*exitcodes: int) -> ChildFailedError:
    return ChildFailedError(
        "train.py",
        {rank: ProcessFailure(rank, 1000 + rank, code, "") for rank, code in enumerate(exitcodes)},
    )


def test_a_child_killed_by_a_signal_gets_a_failure_reason(tmp_path: Path) -> None:
    paths = contract.resolve_paths({contract.BASE_DIR_ENV: str(tmp_path)})
    assert launch.children_failed(failed(143, -9), paths) == 1
    assert paths.failure_file.read_text() == "training process 1 exited with signal SIGKILL\n"


def test_a_childs_own_reason_is_not_replaced(tmp_path: Path) -> None:
    paths = contract.resolve_paths({contract.BASE_DIR_ENV: str(tmp_path)})
    contract.write_failure(paths, "ModelError: the cause")
    assert launch.children_failed(failed(1, 143), paths) == 1
    assert paths.failure_file.read_text() == "ModelError: the cause\n"


def test_interrupted_children_leave_no_failure(tmp_path: Path) -> None:
    paths = contract.resolve_paths({contract.BASE_DIR_ENV: str(tmp_path)})
    assert launch.children_failed(failed(143, 143), paths) == contract.INTERRUPTED_EXIT_CODE
    assert not paths.failure_file.exists()
