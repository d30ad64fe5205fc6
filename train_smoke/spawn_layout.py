"""Where each rank of the spawn launcher sits in the job, from every node's real count.

Under ``--launcher spawn`` the worker starts its node's ranks itself with
``torch.multiprocessing.spawn``. On one node the ranks meet the way such scripts do
(``env://``: MASTER_ADDR and MASTER_PORT), and those two values are the ones the doctor
chose: a shell that already exports them (a Slurm batch script, a Kubeflow pod) must not
send the ranks to another address than the one the doctor checked.

Across nodes, the usual ``rank = node_rank * nproc + local_rank`` assumes every node runs
the same number of ranks; a node short of a GPU breaks it (two ranks with one number, a
world size the nodes disagree on, a job that never starts). torchrun avoids this by having
its agents agree on the counts first. The spawn launcher does the same here: each node's
launcher process writes its count into a TCPStore hosted by node 0's launcher at
MASTER_ADDR:MASTER_PORT, waits for every node's, and derives its ranks' numbers and the
world size from the real counts; the ranks then join the process group through that same
store (``init_process_group(store=...)``), so no second port is needed. Node 0's launcher
lives until its ranks exit (``mp.spawn(join=True)``), so the store outlives the job.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist

COUNT_KEY = "ddp_doctor_smoke/nproc/{}"
JOB_PREFIX = "ddp_doctor_smoke/job"


@dataclass(frozen=True)
class SpawnLayout:
    """This node's first global rank, the world size, and every node's rank count."""

    first_rank: int
    world: int
    counts: tuple[int, ...]


def single_node(nproc: int) -> SpawnLayout:
    return SpawnLayout(0, nproc, (nproc,))


def layout_from_counts(counts: list[int], node_rank: int) -> SpawnLayout:
    """Ranks numbered node by node, as torchrun numbers them."""
    return SpawnLayout(sum(counts[:node_rank]), sum(counts), tuple(counts))


def agree_on_counts(addr: str, port: int, nnodes: int, node_rank: int, nproc: int,
                    timeout_s: float) -> tuple[SpawnLayout, Any]:
    """Every node's count through node 0's store; returns the layout and the store.

    The caller keeps the store alive while its ranks run (on node 0 it is the server).
    Raises when the other nodes do not arrive within ``timeout_s``.
    """
    store = dist.TCPStore(addr, port, world_size=None, is_master=node_rank == 0,
                          timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    store.set(COUNT_KEY.format(node_rank), str(nproc))
    keys = [COUNT_KEY.format(n) for n in range(nnodes)]
    store.wait(keys)
    counts = [int(store.get(k)) for k in keys]
    return layout_from_counts(counts, node_rank), store


def job_store(addr: str, port: int, timeout_s: float) -> Any:
    """A rank's own connection to node 0's store, under the job's key prefix."""
    client = dist.TCPStore(addr, port, world_size=None, is_master=False,
                           timeout=timedelta(seconds=timeout_s))
    return dist.PrefixStore(JOB_PREFIX, client)
