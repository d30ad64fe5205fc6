"""What comparing the nodes inside the job costs: a two-node smoke with and without it.

A two-node smoke job on loopback (two supervisors, one per node, as two `ddp-doctor smoke
--nnodes 2 --node-rank 0/1` would run) is run with the node exchange (every node's
summary collected by its local rank 0 and gathered once over the job's process group)
and without it (``SmokeOptions.node_exchange=False``), alternating, so a change in
machine load hits both. Prints the median wall time of each (the slower node's, since the
job ends with it), their ratio, and the median duration of the exchange phase itself:
on a loaded machine the whole job's time varies far more between runs than the exchange
costs, and the phase's own duration is the precise figure (nothing else differs between
the two variants).

    python bench/node_exchange.py [--runs 3] [--steps 10] [--imgsz 64] [--nproc 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ddp_doctor.smoke.launch import SmokeOptions, free_port
from ddp_doctor.smoke.run import run_smoke


def two_nodes(args: argparse.Namespace, exchange: bool) -> tuple[float, float | None]:
    """One two-node job: (the slower node's wall time, the exchange phase's duration)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-nodes-") as tmp:
        def node(rank: int) -> Any:
            return run_smoke(SmokeOptions(
                device="cpu", nproc=args.nproc, nnodes=2, node_rank=rank,
                master_addr="127.0.0.1", master_port=port, steps=args.steps,
                imgsz=args.imgsz, timeout=600, node_exchange=exchange,
                run_dir=str(Path(tmp) / f"node{rank}")))

        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(node, (0, 1)))
    for result in results:
        if not result.ok:
            raise SystemExit(f"the job failed: {[f.title for f in result.findings]}")
        if exchange != (result.nodes is not None):
            raise SystemExit("the exchange did not run as asked")
    phase = [p.get("duration_s") for r in results for rank in r.data["per_rank"]
             if (p := rank["phases"].get("nodes"))]
    return max(r.data["wall_s"] for r in results), (max(phase) if phase else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--imgsz", type=int, default=64)
    parser.add_argument("--nproc", type=int, default=1, help="ranks per node")
    args = parser.parse_args()
    times: dict[bool, list[float]] = {True: [], False: []}
    phases: list[float] = []
    for run in range(args.runs):
        for exchange in ((False, True) if run % 2 == 0 else (True, False)):
            wall, phase = two_nodes(args, exchange)
            times[exchange].append(wall)
            if phase is not None:
                phases.append(phase)
            print(f"run {run + 1}: {'with' if exchange else 'without'} exchange "
                  f"{wall:.2f} s" + (f" (exchange phase {phase * 1000:.1f} ms)"
                                     if phase is not None else ""), flush=True)
    without, with_ = statistics.median(times[False]), statistics.median(times[True])
    pairs = [w / wo for w, wo in zip(times[True], times[False])]
    print(f"median without the exchange: {without:.2f} s "
          f"(range {min(times[False]):.2f}-{max(times[False]):.2f})")
    print(f"median with the exchange:    {with_:.2f} s "
          f"(range {min(times[True]):.2f}-{max(times[True]):.2f})")
    print(f"ratio of the medians: {with_ / without:.3f}; median of the paired ratios: "
          f"{statistics.median(pairs):.3f}")
    if phases:
        print(f"exchange phase itself (median over runs, slowest rank): "
              f"{statistics.median(phases) * 1000:.1f} ms "
              f"({statistics.median(phases) / without:.2%} of the job: a ratio of "
              f"{1 + statistics.median(phases) / without:.4f} from the phase alone)")


if __name__ == "__main__":
    main()
