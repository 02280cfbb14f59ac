from __future__ import annotations

import json

import pytest
import torch

from retrain_training import distributed


def test_torchrun_variables_give_rank_and_world() -> None:
    env = {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "10.0.0.2",
        "MASTER_PORT": "1234",
    }
    assert distributed.from_env(env) == (3, 4, 1, "10.0.0.2", "1234")


def test_sagemaker_hosts_give_one_rank_per_host() -> None:
    env = {"SM_HOSTS": json.dumps(["algo-1", "algo-2", "algo-3"]), "SM_CURRENT_HOST": "algo-2"}
    assert distributed.from_env(env) == (1, 3, 0, "algo-1", distributed.DEFAULT_MASTER_PORT)


def test_mpirun_variables_give_rank_and_world() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_SIZE": "16",
        "OMPI_COMM_WORLD_LOCAL_RANK": "5",
        "SM_HOSTS": json.dumps(["algo-2", "algo-1"]),
    }
    assert distributed.from_env(env) == (5, 16, 5, "algo-1", distributed.DEFAULT_MASTER_PORT)


def test_a_single_host_is_one_process() -> None:
    assert distributed.from_env({})[:2] == (0, 1)
    context = distributed.setup({}, use_cuda=False)
    assert (context.world_size, context.backend, context.device) == (1, None, torch.device("cpu"))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WORLD_SIZE": "2"}, "RANK"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, "outside WORLD_SIZE"),
        ({"SM_HOSTS": '["algo-1", "algo-2"]', "SM_CURRENT_HOST": "algo-9"}, "not in SM_HOSTS"),
    ],
)
def test_inconsistent_environment_is_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(distributed.DistributedError, match=message):
        distributed.from_env(env)


def test_cpu_uses_gloo() -> None:
    assert distributed.pick_backend(torch.device("cpu")) == "gloo"


def test_one_process_per_host_meets_at_the_host_of_rank_0() -> None:
    env = {"SM_HOSTS": json.dumps(["algo-2", "algo-1"]), "SM_CURRENT_HOST": "algo-1"}
    assert distributed.from_env(env)[:4] == (1, 2, 0, "algo-2")
