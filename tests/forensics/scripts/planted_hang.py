"""A small DDP training loop (gloo, CPU) that hangs in one planted way, for hang forensics.

Run under ``python -m torch.distributed.run --nproc-per-node 2 planted_hang.py MODE MARKER``.
Every rank trains a linear model on a tiny data set through a DataLoader and prints
``rank R step S`` after each step; at step 3 rank 1 misbehaves:

- ``dataloader``: its dataset's ``__getitem__`` blocks (a stuck file read);
- ``barrier``: it enters an extra ``dist.barrier()`` while rank 0 all-reduces;
- ``lock``: it deadlocks on a lock it already holds;
- ``exit``: it returns from training early and leaves ``main`` (no destroy_process_group);
  a non-daemon thread it started (a metrics uploader) keeps its process alive at exit, so
  its gloo connections stay open and rank 0 waits in the next collective for ever. (A
  rank whose process ends closes its sockets: gloo then fails rank 0's collective with
  "Connection closed by peer" instead of hanging.)
- ``skip``: it skips the step's all-reduce and goes on to the final barrier;
- ``init``: it never calls ``init_process_group`` (rank 0 waits in the rendezvous).
"""

from __future__ import annotations

import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

HANG_STEP = 3


class Samples(Dataset):
    def __init__(self, stuck: bool) -> None:
        self.stuck = stuck
        self.step = 0

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.stuck and self.step >= HANG_STEP:
            read_sample_file(index)
        return torch.ones(4) * index


def read_sample_file(index: int) -> None:
    """Stands for a read from a dead network filesystem: it never returns."""
    time.sleep(3600)


def sync_gradients(model: torch.nn.Module) -> None:
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad)


def upload_metrics(stop: threading.Event) -> None:
    """Stands for a metrics or checkpoint-upload thread that is not a daemon."""
    while not stop.wait(1.0):
        pass


def train(mode: str, rank: int) -> None:
    dataset = Samples(stuck=mode == "dataloader" and rank == 1)
    loader = iter(DataLoader(dataset, batch_size=2, num_workers=0))
    model = torch.nn.Linear(4, 1)
    lock = threading.Lock()
    for step in range(1, 1000):
        dataset.step = step
        batch = next(loader)
        model(batch).sum().backward()
        if step == HANG_STEP and rank == 1:
            if mode == "barrier":
                dist.barrier()
            elif mode == "lock":
                with lock:
                    lock.acquire()
            elif mode == "exit":
                return
            elif mode == "skip":
                break
        sync_gradients(model)
        print(f"rank {rank} step {step}", flush=True)
        time.sleep(0.2)
    dist.barrier()


def main() -> None:
    mode = sys.argv[1]
    rank = int(os.environ["RANK"])
    print(f"rank {rank}: started", flush=True)
    if mode == "init" and rank == 1:
        time.sleep(3600)
    dist.init_process_group("gloo")
    print(f"rank {rank}: joined", flush=True)
    if mode == "exit" and rank == 1:
        threading.Thread(target=upload_metrics, args=(threading.Event(),),
                         name="metrics-uploader").start()
        train(mode, rank)
        print(f"rank {rank}: left training early", flush=True)
        return  # Python now waits for the uploader thread before the process can exit
    train(mode, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
