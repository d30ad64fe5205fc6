"""Smoke-job results for renderer tests, judged by the real verdict code.

Each rank's event lines (the format train_smoke writes) go through ``RankState``, the
smoke job's own criteria (``criteria_findings``) and its own ``_fill``, the way
``smoke.run_once`` judges a finished run, so the ``smoke`` data and the findings have
exactly the shape a real run produces, without starting one.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from ddp_doctor.smoke.launch import SmokeOptions
from ddp_doctor.smoke.monitor import Outcome, RankState
from ddp_doctor.smoke.run import SmokeResult, _base_data, _fill
from ddp_doctor.smoke.verdict import RunContext, criteria_findings, failure_findings

COMMAND = ("python -m torch.distributed.run --standalone --nproc-per-node 2 "
           "-m ddp_doctor.train_smoke.worker --device cpu --steps 12")


def rank_events(rank: int, losses: list[float], mismatched: tuple[int, ...] = (),
                all_reduce_ok: bool = True, ddp: bool = True) -> list[dict[str, Any]]:
    """One rank's event lines for a run that went through every phase (as worker.py)."""
    t = 1.0 + rank * 0.01
    events: list[dict[str, Any]] = []

    def phase(name: str, took: float, **extra: Any) -> None:
        nonlocal t
        events.append({"rank": rank, "kind": "begin", "phase": name, "t_start": t})
        events.append({"rank": rank, "kind": "end", "phase": name, "t_start": t,
                       "t_end": t + took, **extra})
        t += took

    if ddp:
        phase("init_process_group", 1.5)
        phase("barrier", 0.01)
        phase("all_reduce_check", 0.02, ok=all_reduce_ok, value=3.0 if all_reduce_ok else 2.0,
              expected=3.0, wrong_elements=0 if all_reduce_ok else 4)
        phase("all_reduce_bandwidth", 0.4, bytes=4 << 20, seconds=0.0125, algbw_gbps=0.3355,
              busbw_gbps=0.3355, iters=5)
    phase("data", 0.2)
    phase("model", 0.3)
    events.append({"rank": rank, "kind": "begin", "phase": "train", "t_start": t})
    train_start = t
    for step, loss in enumerate(losses, 1):
        events.append({"rank": rank, "kind": "step", "phase": "train", "step": step,
                       "loss": loss, "images": 8, "t_start": t, "t_end": t + 0.25})
        t += 0.25
    events.append({"rank": rank, "kind": "end", "phase": "train", "t_start": train_start,
                   "t_end": t, "peak_mem_bytes": None})
    phase("checksum", 0.01, in_sync=not mismatched, mismatched_ranks=list(mismatched),
          digest="5be3a9d0c41f7e22" if rank not in mismatched else "9c04e1b7a2d35f80")
    if ddp:
        phase("destroy_process_group", 0.05)
    events.append({"rank": rank, "kind": "done", "phase": "done", "t_start": t})
    return events


def judged_run(per_rank: list[list[dict[str, Any]]], steps: int, mode: str = "ddp",
               wall_s: float = 21.4, outcome: Outcome | None = None) -> SmokeResult:
    """A run on CPU (gloo), judged as ``run_once`` judges it.

    Without ``outcome`` the launcher exited 0 and the pass criteria are applied; with one
    (a deadline fired) the failure is explained instead.
    """
    options = SmokeOptions(device="cpu", nproc=len(per_rank), steps=steps, imgsz=64,
                           mode=mode, python="python")
    with tempfile.TemporaryDirectory() as folder:
        ranks = []
        for rank, events in enumerate(per_rank):
            path = Path(folder) / f"rank{rank}.jsonl"
            path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
            state = RankState(rank, str(path))
            state.read_new(1.0)
            ranks.append(state)
    clean = outcome is None
    outcome = outcome or Outcome(0, None, wall_s=wall_s)
    backend = "gloo" if mode == "ddp" else None
    ctx = RunContext(ranks, outcome, steps, len(per_rank), "", {}, 45.0, 180.0, mode,
                     backend, options, ("127.0.0.1", 29500))
    findings = criteria_findings(ctx) if clean else failure_findings(ctx)
    data = _base_data(options, "cpu", len(per_rank), len(per_rank) if mode == "ddp" else 1)
    _fill(data, ctx, 0.0)
    if clean:
        data["loss_judged"] = not any(f.code.id == "SMK016" for f in findings)
    data.update(ok=not any(f.effective_severity.value == "error" for f in findings),
                wall_s=wall_s, exit_code=outcome.returncode, stopped_by=outcome.stopped_by,
                command=COMMAND, run_dir="/tmp/ddp-doctor-smoke-3f9a1c" if findings else None)
    return SmokeResult(data, findings)


FALLING = [2.0, 1.9, 1.7, 1.5, 1.3, 1.2, 1.1, 1.0, 0.9, 0.85, 0.8, 0.75]
FLAT = [2.0, 2.01, 1.99, 2.0, 2.02, 1.98, 2.0, 2.01, 1.99, 2.0, 2.0, 1.99]


def passing_run() -> SmokeResult:
    """Two gloo ranks, every criterion met."""
    return judged_run([rank_events(r, FALLING) for r in range(2)], steps=12)


def failing_run() -> SmokeResult:
    """Two gloo ranks that finished, but the loss stayed flat and rank 1 drifted apart."""
    return judged_run([rank_events(r, FLAT, mismatched=(1,)) for r in range(2)], steps=12)


def short_run() -> SmokeResult:
    """Too few steps to judge the loss (SMK016, an INFO note), in one process (--mode dp)."""
    return judged_run([rank_events(0, FALLING[:4], ddp=False)], steps=4, mode="dp")


def stalled_run() -> SmokeResult:
    """Rank 1 went silent after step 3 and the stall deadline stopped the job."""
    ahead = rank_events(0, FALLING)
    behind = rank_events(1, FALLING)
    behind = behind[:next(i for i, e in enumerate(behind) if e.get("step") == 3) + 1]
    return judged_run([ahead, behind], steps=12, wall_s=52.0,
                      outcome=Outcome(-15, "stall", [1], 52.0, 0.0, 45.0))
