"""The cost of supervision: a real torchrun job bare against the same job under `ddp-doctor run`.

`run` streams the job's output line by line, keeps a log, watches for silence and sweeps
every process at the end; none of that may slow the job down noticeably. Both are run side
by side, alternating (so a change in machine load hits both), several times; the script
prints the median wall time of each and their ratio.

    python bench/run_overhead.py [--runs 5] [--nproc 2] [--steps 30]

The job is the built-in smoke worker under torchrun on the CPU (gloo), which prints a line
per phase and step to stdout like a real training script.
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


def job(args: argparse.Namespace, run_dir: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
            "--nproc_per_node", str(args.nproc), "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), "--max_restarts", "0",
            "-m", "ddp_doctor.train_smoke.worker", "--run-dir", run_dir, "--device", "cpu",
            "--steps", str(args.steps), "--batch", "8", "--imgsz", "64", "--workers", "0"]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode})")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    bare, supervised = [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-run-") as run_dir:
            bare.append(timed(job(args, run_dir), env))
        with tempfile.TemporaryDirectory(prefix="bench-run-") as run_dir:
            supervised.append(timed([sys.executable, "-m", "ddp_doctor", "run", "-q",
                                     "--json", os.devnull, "--", *job(args, run_dir)], env))
    b, s = statistics.median(bare), statistics.median(supervised)
    print(f"bare torchrun:     median {b:.2f} s over {args.runs} runs "
          f"({', '.join(f'{x:.2f}' for x in bare)})")
    print(f"ddp-doctor run:    median {s:.2f} s over {args.runs} runs "
          f"({', '.join(f'{x:.2f}' for x in supervised)})")
    print(f"ratio run / bare:  {s / b:.3f}")


if __name__ == "__main__":
    main()
