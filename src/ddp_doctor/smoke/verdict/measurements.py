"""What a smoke run measured: start-up and step times, throughput, memory, bandwidth.

Numbers, not judgements: they go into the smoke result's data that the reports show, so
a run that passed still says how fast it was, and a slow one where it spent its time.
"""

from __future__ import annotations

import statistics
from typing import Any

from ddp_doctor.smoke.monitor import RankState


def _rel(value: Any, started: float) -> float | None:
    return round(float(value) - started, 4) if isinstance(value, (int, float)) else None


def _gbps(value: Any) -> float | None:
    return round(float(value), 3) if isinstance(value, (int, float)) else None


def measurements(ranks: list[RankState], started: float) -> dict[str, Any]:
    """Rendezvous and first-step times, step time, throughput, memory and bus bandwidth."""
    rdzv = [e["t_end"] for s in ranks if (e := s.ended("init_process_group"))]
    first = [s.steps()[0]["t_end"] for s in ranks if s.steps()]
    durations: list[float] = []
    per_rank = []
    for state in ranks:
        steps = state.steps()
        timed = steps[1:] if len(steps) > 1 else steps
        rank_durations = [e["t_end"] - e["t_start"] for e in timed]
        durations += rank_durations
        median = statistics.median(rank_durations) if rank_durations else None
        images = steps[-1]["images"] if steps else 0
        train = state.ended("train") or {}
        copies = state.ended("host_copy") or {}
        per_rank.append({
            "rank": state.rank,
            "median_step_s": round(median, 5) if median else None,
            "images_per_s": round(images / median, 2) if median else None,
            "peak_gpu_mem_bytes": train.get("peak_mem_bytes"),
            "h2d_gbps": _gbps(copies.get("h2d_gbps")),
            "d2h_gbps": _gbps(copies.get("d2h_gbps")),
        })
    bw = next((e for s in sorted(ranks, key=lambda s: s.rank)
               if (e := s.ended("all_reduce_bandwidth"))), None)
    # nccl-tests' busbw is algbw × 2(n-1)/n: 0 on one rank, where nothing crosses a link.
    # Measured all the same (it exercises NCCL), but a 0 there is no slow link.
    one_rank = bw is not None and bw.get("ranks") == 1
    rates = [r["images_per_s"] for r in per_rank if r["images_per_s"]]
    return {
        "rendezvous_s": _rel(max(rdzv), started) if rdzv else None,
        "first_step_s": _rel(max(first), started) if first else None,
        "median_step_s": round(statistics.median(durations), 5) if durations else None,
        "images_per_s_total": round(sum(rates), 2) if rates else None,
        "per_rank": per_rank,
        "allreduce_bytes": bw.get("bytes") if bw else None,
        "allreduce_algbw_gbps": round(bw["algbw_gbps"], 4) if bw else None,
        "allreduce_busbw_gbps": round(bw["busbw_gbps"], 4) if bw else None,
        "allreduce_note": ("1 rank: nothing crosses a link, so busbw is 0 by nccl-tests' "
                           "definition" if one_rank else None),
    }


def phase_timings(state: RankState, started: float) -> dict[str, dict[str, float | None]]:
    """Each phase the rank began, relative to launch; an unfinished phase has no end."""
    out: dict[str, dict[str, float | None]] = {}
    for event in state.events:
        kind, phase = event.get("kind"), event.get("phase")
        if not isinstance(phase, str):
            continue  # every begin/end event names its phase; anything else is not one
        if kind == "begin":
            out[phase] = {"start_s": _rel(event["t_start"], started), "end_s": None,
                          "duration_s": None}
        elif kind == "end" and phase in out:
            out[phase]["end_s"] = _rel(event["t_end"], started)
            out[phase]["duration_s"] = round(event["t_end"] - event["t_start"], 4)
    return out
