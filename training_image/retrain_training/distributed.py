"""Data-parallel setup from the environment torchrun or SageMaker provides.

torchrun (and SageMaker's `torch_distributed` launcher, which runs torchrun) sets RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT; mpirun (SageMaker's smdistributed launcher) sets the
OMPI_COMM_WORLD_* variables. Without either, a multi-host SageMaker job (one process per host) is
described by SM_HOSTS and SM_CURRENT_HOST: rank = the host's index, master = the first host (whose
rank 0 writes the checkpoints). Several processes per host are started by `launch` through torchrun.
Backend: SageMaker's data-parallel library when it imports on a GPU, NCCL on GPU, gloo on CPU.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

from retrain_contract import container as contract

T = TypeVar("T")
DEFAULT_MASTER_PORT = "29500"
SMDDP_BACKEND = "smddp"
MPI_RANK, MPI_WORLD_SIZE, MPI_LOCAL_RANK = (
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
)


class DistributedError(Exception):
    """An inconsistent data-parallel environment; the message names the variables."""


@dataclass(frozen=True)
class Context:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None = None  # None: a single process, no process group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def _smddp_available() -> bool:
    try:
        import smdistributed.dataparallel.torch.torch_smddp  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


def pick_backend(device: torch.device) -> str:
    if device.type == "cuda":
        return SMDDP_BACKEND if _smddp_available() else "nccl"
    return "gloo"


def from_env(environ: Mapping[str, str] | None = None) -> tuple[int, int, int, str, str]:
    """(rank, world_size, local_rank, master_addr, master_port) from torchrun's or SageMaker's variables."""
    env = os.environ if environ is None else environ
    port = env.get("MASTER_PORT", DEFAULT_MASTER_PORT)
    if "WORLD_SIZE" in env:
        try:
            rank, world, local = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))
        except (KeyError, ValueError) as error:
            raise DistributedError(
                f"WORLD_SIZE is set but RANK/LOCAL_RANK are missing or not integers: {error}"
            ) from error
        if not 0 <= rank < world:
            raise DistributedError(f"RANK {rank} is outside WORLD_SIZE {world}")
        return rank, world, local, env.get("MASTER_ADDR", "127.0.0.1"), port
    hosts = json.loads(env.get(contract.HOSTS_ENV, json.dumps([contract.DEFAULT_HOST])))
    if MPI_WORLD_SIZE in env:  # mpirun, as SageMaker's smdistributed launcher uses
        rank, world, local = (int(env[name]) for name in (MPI_RANK, MPI_WORLD_SIZE, MPI_LOCAL_RANK))
        return rank, world, local, env.get("MASTER_ADDR", sorted(hosts)[0]), port
    current = env.get(contract.CURRENT_HOST_ENV, contract.DEFAULT_HOST)
    if len(hosts) <= 1:
        return 0, 1, 0, "127.0.0.1", port
    if current not in hosts:
        raise DistributedError(
            f"{contract.CURRENT_HOST_ENV}={current!r} is not in {contract.HOSTS_ENV}={hosts}"
        )
    return hosts.index(current), len(hosts), 0, env.get("MASTER_ADDR", hosts[0]), port


def local_world_size(environ: Mapping[str, str] | None = None) -> int:
    """Training processes on this host, as torchrun or mpirun tells them (1 otherwise)."""
    env = os.environ if environ is None else environ
    return int(env.get("LOCAL_WORLD_SIZE", env.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1")))


def setup(environ: Mapping[str, str] | None = None, *, use_cuda: bool | None = None) -> Context:
    """Join the process group when more than one process trains; pick this process's device."""
    rank, world, local, addr, port = from_env(environ)
    cuda = torch.cuda.is_available() if use_cuda is None else use_cuda
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world == 1:
        return Context(0, 1, 0, device)
    backend = pick_backend(device)
    os.environ.setdefault("MASTER_ADDR", addr)
    os.environ.setdefault("MASTER_PORT", port)
    dist.init_process_group(backend=backend, rank=rank, world_size=world)
    return Context(rank, world, local, device, backend)


def teardown(context: Context) -> None:
    if context.enabled and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: list[float], context: Context) -> list[float]:
    """Element-wise sum over ranks (validation counts and losses)."""
    if not context.enabled:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=context.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return [float(v) for v in tensor.tolist()]


def broadcast_from_main(value: T, context: Context) -> T:
    """Rank 0's `value` on every rank (pickled): what only rank 0's host holds, such as its checkpoints."""
    if not context.enabled:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, device=context.device if context.device.type == "cuda" else None)
    return box[0]


def barrier(context: Context) -> None:
    if context.enabled:
        dist.barrier()
