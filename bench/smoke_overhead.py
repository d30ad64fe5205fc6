"""The supervisor's overhead: `ddp-doctor smoke` against a bare torchrun of the same job.

Runs both side by side (alternating, so a change in machine load hits both), several
times, and prints the median wall time of each and their ratio. The budget is a
ratio of at most 1.15: supervision (launch, tailing the event files, the verdict and the
clean-up sweep) may add no more than 15% to the job's own wall time.

    python bench/smoke_overhead.py [--runs 5] [--nproc 2] [--steps 30] [--device cpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from ddp_doctor.smoke.launch import free_port


def bare_torchrun(args: argparse.Namespace, env: dict[str, str]) -> float:
    """The job as a user would run it by hand: torchrun and the worker, nothing else."""
    with tempfile.TemporaryDirectory(prefix="bench-bare-") as run_dir:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--node_rank", "0", "--nproc_per_node", str(args.nproc), "--master_addr",
               "127.0.0.1", "--master_port", str(free_port()), "--max_restarts", "0",
               "-m", "ddp_doctor.train_smoke.worker", "--run-dir", run_dir,
               "--device", args.device, "--steps", str(args.steps), "--batch",
               str(args.batch), "--imgsz", str(args.imgsz), "--workers", str(args.workers)]
        start = time.monotonic()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return time.monotonic() - start


def supervised(args: argparse.Namespace, env: dict[str, str]) -> float:
    """The same job through `ddp-doctor smoke` (import, launch, watch, judge, sweep)."""
    cmd = [sys.executable, "-m", "ddp_doctor", "smoke", "--device", args.device,
           "--nproc", str(args.nproc), "--steps", str(args.steps),
           "--batch-per-process", str(args.batch), "--imgsz", str(args.imgsz),
           "--workers", str(args.workers), "--json", os.devnull]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"ddp-doctor smoke failed (exit {proc.returncode})")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--imgsz", type=int, default=128)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    # The same threads per rank for both (torchrun would pick 1; the doctor cores/ranks).
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get(
        "OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.nproc))))
    bare, sup = [], []
    for run in range(args.runs):
        bare.append(bare_torchrun(args, env))
        sup.append(supervised(args, env))
        print(f"run {run + 1}: bare torchrun {bare[-1]:.2f} s, ddp-doctor smoke {sup[-1]:.2f} s",
              flush=True)
    ratio = statistics.median(sup) / statistics.median(bare)
    print(f"median: bare torchrun {statistics.median(bare):.2f} s, ddp-doctor smoke "
          f"{statistics.median(sup):.2f} s, ratio {ratio:.3f} "
          f"({'within' if ratio <= 1.15 else 'OVER'} the 1.15 budget)")


if __name__ == "__main__":
    main()
