"""A small DDP job for ``ddp-doctor run``'s tests: two gloo ranks, one mode per failure.

Run under ``python -m torch.distributed.run --nproc-per-node 2``. The second argument is
a marker the tests look for on command lines, to prove nothing of a run is left behind.

Modes: ``ok`` (a few all-reduces, exit 0); ``oom`` (rank 1 raises the CUDA out-of-memory
error torch raises); ``hang`` (rank 1 sleeps before the collective the others wait in);
``sigkill`` (rank 1 kills itself with SIGKILL); ``long`` (prints a step a second for a
minute, ``milestone`` after the third).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    mode = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank}: started in mode {mode}, NCCL_DEBUG={os.environ.get('NCCL_DEBUG')}",
          flush=True)
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    print(f"rank {rank}: first all_reduce gives {tensor[0].item():g}", flush=True)
    if mode == "oom" and rank == 1:
        raise torch.cuda.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 79.15 GiB total "
            "capacity; 77.80 GiB already allocated; 1.02 GiB free; 78.00 GiB reserved in "
            "total by PyTorch)")
    if mode == "hang" and rank == 1:
        time.sleep(3600)  # never reaches the collective below; rank 0 waits in it
    if mode == "sigkill" and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    steps = 60 if mode == "long" else 1
    for step in range(steps):
        dist.all_reduce(tensor)
        print(f"rank {rank}: step {step}", flush=True)
        if mode == "long":
            if step == 2 and rank == 0:
                print("milestone reached", flush=True)
            time.sleep(1.0)
    dist.destroy_process_group()
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main()
