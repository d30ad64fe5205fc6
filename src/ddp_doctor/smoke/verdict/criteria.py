"""The pass criteria of a smoke run that ended cleanly: steps, loss, sync, all-reduce.

A run whose ranks all exited 0 has proven only that nothing crashed; these criteria say
whether it trained: every rank did every step, the loss stayed finite and fell, and (for
DDP) the ranks' parameters agree after training and an all-reduce returned the right
value.
"""

from __future__ import annotations

import math
import statistics

from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.smoke import codes as C
from ddp_doctor.smoke.monitor import RankState
from ddp_doctor.smoke.verdict.context import RunContext, phase_of

# "Loss fell": the mean of the last few steps must be at least 10% below the mean of the
# first few. The job repeats a small fixed data set, so a working setup memorises it and
# falls far more than that within 30 steps, while batch-to-batch noise on repeated
# batches is much smaller; a broken gradient path (no update, no averaging) stays flat.
LOSS_DROP_MIN = 0.10
# Below this many steps the first and last windows are single noisy batches: the
# loss-fell criterion is skipped (SMK016, an INFO note) instead of failing by chance.
LOSS_MIN_STEPS = 10


def _window(steps: int) -> int:
    return max(1, min(5, steps // 5))


def loss_curve(ranks: list[RankState]) -> list[float]:
    """Mean loss over ranks, per step."""
    per_step: dict[int, list[float]] = {}
    for state in ranks:
        for event in state.steps():
            per_step.setdefault(int(event["step"]), []).append(float(event["loss"]))
    return [statistics.fmean(per_step[k]) for k in sorted(per_step)]


def criteria_findings(ctx: RunContext) -> list[Finding]:
    """The pass criteria of a run that ended cleanly."""
    found: list[Finding] = []
    short = [s for s in ctx.ranks if s.steps_done < ctx.steps or not s.done]
    if short:
        found.append(Finding(C.STEPS_MISSING, "Ranks " + ", ".join(
            f"{s.rank} ({s.steps_done}/{ctx.steps} steps)" for s in short)
            + " did not finish the job", tuple(Evidence(f"rank {s.rank}", f"stopped in "
                                                  f"{phase_of(s, ctx.steps)}", "event file")
                                         for s in short)))
    curve = loss_curve(ctx.ranks)
    bad = [(i + 1, v) for i, v in enumerate(curve) if not math.isfinite(v)]
    if bad:
        found.append(Finding(C.LOSS_NOT_FINITE, f"The loss was {bad[0][1]} at step {bad[0][0]}",
                             (Evidence("first non-finite step", str(bad[0][0]), "event file"),),
                             (Step("Rerun without mixed precision.",
                                   command=ctx.rerun(amp=False)),)))
    elif curve and len(curve) < LOSS_MIN_STEPS:
        found.append(Finding(
            C.LOSS_NOT_JUDGED, f"Loss not judged: {len(curve)} steps are fewer than the "
            f"{LOSS_MIN_STEPS} needed to tell a falling loss from batch noise",
            (Evidence("loss per step", ", ".join(f"{v:.3g}" for v in curve), "event file"),),
            (Step("Rerun with enough steps to judge the loss.",
                  command=ctx.rerun(steps=max(30, LOSS_MIN_STEPS))),)))
    elif curve:
        first, last = loss_first_last(curve)
        if not last <= (1 - LOSS_DROP_MIN) * first:
            found.append(Finding(
                C.LOSS_FLAT, f"The loss did not fall: {first:.4g} over the first steps, "
                f"{last:.4g} over the last", (Evidence("loss per step", ", ".join(
                    f"{v:.3g}" for v in curve), "event file"),
                    Evidence("required drop", f"{LOSS_DROP_MIN:.0%}", "")),
                (Step("Rerun with more steps.", command=ctx.rerun(steps=100)),)))
    if ctx.mode == "ddp":
        found += _sync_findings(ctx)
    return found


def loss_first_last(curve: list[float]) -> tuple[float, float]:
    k = _window(len(curve))
    return statistics.fmean(curve[:k]), statistics.fmean(curve[-k:])


def _sync_findings(ctx: RunContext) -> list[Finding]:
    found = []
    p2p = (Step("Rerun without peer-to-peer transport.",
                command=ctx.rerun("NCCL_P2P_DISABLE=1")),) if ctx.nccl else (
           Step("Rerun the smoke job to see whether it repeats.", command=ctx.rerun()),)
    mismatched = sorted({r for s in ctx.ranks
                         for r in ((s.ended("checksum") or {}).get("mismatched_ranks") or [])})
    if mismatched:
        digests = ", ".join(f"rank {s.rank}: {(s.ended('checksum') or {}).get('digest')}"
                            for s in ctx.ranks)
        found.append(Finding(C.PARAMS_DIFFER if ctx.nccl else C.PARAMS_DIFFER_GLOO,
                             "Parameters of rank " + ", ".join(map(str, mismatched))
                             + " differ from rank 0 after training",
                             (Evidence("parameter fingerprints", digests, "event file"),), p2p,
                             affects=tuple(f"rank:{r}" for r in mismatched)))
    for state in ctx.ranks:
        check = state.ended("all_reduce_check")
        if check is not None and not check.get("ok"):
            found.append(Finding(C.ALLREDUCE_WRONG if ctx.nccl else C.ALLREDUCE_WRONG_GLOO,
                                 f"All-reduce on rank {state.rank} returned "
                                 f"{check.get('value')} instead of {check.get('expected')}",
                                 (Evidence("wrong elements", str(check.get("wrong_elements")),
                                           "event file"),), p2p,
                                 affects=(f"rank:{state.rank}",)))
            break
    return found
