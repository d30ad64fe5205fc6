"""A small NCCL job for the GPU suite's ``ddp-doctor run`` tests: one rank per GPU.

Run under ``python -m torch.distributed.run --nproc-per-node N``. The second argument is a
marker the tests look for on command lines, to prove nothing of a run is left behind.
Modes: ``ok`` (a few all-reduces on the GPUs, exit 0); ``sigkill`` (the last rank kills
itself with SIGKILL after the first all-reduce, as the kernel's OOM killer would).
The CPU counterpart is tests/job/scripts/ddp_job.py (gloo).
"""

from __future__ import annotations

import os
import signal
import sys

import torch
import torch.distributed as dist


def main() -> None:
    mode = sys.argv[1]
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    tensor = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    print(f"rank {rank}: first all_reduce gives {tensor[0].item():g}", flush=True)
    if mode == "sigkill" and rank == world - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    for step in range(3):
        dist.all_reduce(tensor)
        torch.cuda.synchronize()
        print(f"rank {rank}: step {step}", flush=True)
    dist.destroy_process_group()
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main()
