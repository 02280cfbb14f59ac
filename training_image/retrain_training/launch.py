"""The entry point's launcher: one training process per GPU of every host, through torchrun.

SageMaker runs the entry point once per host (script mode). The processes per host are
RETRAIN_PROCESSES_PER_HOST (contract.PROCESSES_PER_HOST_ENV) when set, else SageMaker's SM_NUM_GPUS,
else the GPUs torch sees, and at least one. With more than one the entry point becomes a torchrun agent
(torch.distributed.run): --nproc-per-node of them here, --nnodes = len(SM_HOSTS), --node-rank = the
index of SM_CURRENT_HOST, the first host as master (MASTER_ADDR and MASTER_PORT override it). Its
children (RANK set) train in-process (retrain_training.train.run), as does a host of one process and a
process that torchrun or mpirun started.

SIGTERM (spot reclaim, StopTrainingJob): torchrun sends it on to the children, which finish their
step, checkpoint and exit with contract.INTERRUPTED_EXIT_CODE; the launcher exits with it too, or
with 1 when a child failed meanwhile. Failures: the first child to fail writes the failure file and
the others' consequent errors leave it; the launcher writes one only when no child did (a child
killed by a signal, a rendezvous that never formed).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from retrain_contract import container as contract
from retrain_training import checkpoints, distributed, train

log = logging.getLogger("launch")

NUM_GPUS_ENV = contract.NUM_GPUS_ENV  # SageMaker's
# Seconds a child may take from SIGTERM to exit (finish the step, write the checkpoint) before torchrun
# kills it: SageMaker waits 120 s after its SIGTERM before it kills the container.
SHUTDOWN_TIMEOUT_S = 100


@dataclass(frozen=True)
class Plan:
    """torchrun's arguments for this host."""

    processes: int
    hosts: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: str = distributed.DEFAULT_MASTER_PORT


def processes_per_host(env: Mapping[str, str]) -> int:
    """The explicit count, else one per GPU, and at least one."""
    if contract.PROCESSES_PER_HOST_ENV in env:
        count = int(env[contract.PROCESSES_PER_HOST_ENV])
        if count < 1:
            raise ValueError(f"{contract.PROCESSES_PER_HOST_ENV} must be at least 1, got {count}")
        return count
    gpus = int(env[NUM_GPUS_ENV]) if NUM_GPUS_ENV in env else torch.cuda.device_count()
    return max(1, gpus)


def plan(environ: Mapping[str, str] | None = None) -> Plan | None:
    """How to start this host's processes; None: train in this process (one per host, or already
    started by torchrun or mpirun)."""
    env = os.environ if environ is None else environ
    if "RANK" in env or "WORLD_SIZE" in env or distributed.MPI_WORLD_SIZE in env:
        return None
    processes = processes_per_host(env)
    if processes == 1:
        return None
    hosts = json.loads(env.get(contract.HOSTS_ENV, json.dumps([contract.DEFAULT_HOST])))
    current = env.get(contract.CURRENT_HOST_ENV, contract.DEFAULT_HOST)
    if len(hosts) <= 1:
        return Plan(processes)
    if current not in hosts:
        raise distributed.DistributedError(
            f"{contract.CURRENT_HOST_ENV}={current!r} is not in {contract.HOSTS_ENV}={hosts}"
        )
    return Plan(
        processes,
        hosts=len(hosts),
        node_rank=hosts.index(current),
        master_addr=env.get("MASTER_ADDR", hosts[0]),
        master_port=env.get("MASTER_PORT", distributed.DEFAULT_MASTER_PORT),
    )


def torchrun_args(chosen: Plan, script: str, argv: Sequence[str]) -> list[str]:
    """torchrun's command line: one host rendezvouses with itself on a free port; several meet at the
    first host's (static rendezvous, so node ranks, and with them the ranks, follow SM_HOSTS)."""
    common = [
        f"--nproc-per-node={chosen.processes}",
        "--max-restarts=0",
        f"--shutdown-timeout={SHUTDOWN_TIMEOUT_S}",
    ]
    if chosen.hosts == 1:
        where = ["--standalone"]
    else:
        where = [
            f"--nnodes={chosen.hosts}",
            f"--node-rank={chosen.node_rank}",
            f"--master-addr={chosen.master_addr}",
            f"--master-port={chosen.master_port}",
        ]
    return [*common, *where, script, *argv]


def exit_code(codes: Iterable[int]) -> int:
    """The launcher's exit status from its failed children's, first failure first: interrupted when all
    were, else the first real failure's status (1 for one killed by a signal)."""
    listed = list(codes)
    if listed and all(code == contract.INTERRUPTED_EXIT_CODE for code in listed):
        return contract.INTERRUPTED_EXIT_CODE
    return next((code for code in listed if 0 < code != contract.INTERRUPTED_EXIT_CODE), 1)


def children_failed(failed: ChildFailedError, paths: contract.Paths) -> int:
    failures = sorted(failed.failures.items(), key=lambda item: item[1].timestamp)
    code = exit_code(failure.exitcode for _, failure in failures)
    if code == contract.INTERRUPTED_EXIT_CODE:
        log.warning("the training processes were interrupted; exiting with %d", code)
        return code
    first = next(((r, f) for r, f in failures if f.exitcode != contract.INTERRUPTED_EXIT_CODE), None)
    if first is not None:
        rank, failure = first
        how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"status {failure.exitcode}"
        # A child that failed has written the reason; this one only stands in for a child that could not.
        contract.write_failure(paths, f"training process {rank} exited with {how}", keep_first=True)
    return code


def launch(chosen: Plan, script: str, argv: Sequence[str], paths: contract.Paths) -> int:
    """Run torchrun with this host's share of the processes; their outcome as an exit status."""
    # An earlier run's reason in this base directory would hide this run's (keep_first).
    paths.failure_file.unlink(missing_ok=True)
    log.info(
        "starting %d training processes on host %d of %d",
        chosen.processes,
        chosen.node_rank + 1,
        chosen.hosts,
    )
    with checkpoints.Interruption() as early:
        if early.requested:  # SIGTERM before any child started: nothing to checkpoint
            return contract.INTERRUPTED_EXIT_CODE
        try:
            torchrun.run(torchrun.parse_args(torchrun_args(chosen, script, argv)))
        except ChildFailedError as failed:
            return children_failed(failed, paths)
        except SignalException as signalled:
            # torchrun sent it on to the children and waited for them to checkpoint and exit.
            log.warning("%s: the training processes were stopped", signalled)
            return 1 if paths.failure_file.exists() else contract.INTERRUPTED_EXIT_CODE
    return 0


def main(script: str, argv: Sequence[str] | None = None) -> int:
    """The entry point: train here, or launch this host's processes through torchrun."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    paths = contract.resolve_paths()
    try:
        chosen = plan()
    except (ValueError, distributed.DistributedError) as error:
        log.error("cannot start the training processes: %s", error)
        contract.write_failure(paths, f"{type(error).__name__}: {error}")
        return 1
    if chosen is None:
        return train.run(argv)
    arguments = list(sys.argv[1:] if argv is None else argv)
    return contract.run_reporting_failure(
        paths,
        lambda: launch(chosen, str(Path(script).resolve()), arguments, paths),
        invalid="invalid launch",
        argv=arguments,
    )
