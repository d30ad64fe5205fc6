"""The pass criteria of a smoke run that ended cleanly: steps, loss, sync, all-reduce.

A run whose ranks all exited 0 has proven only that nothing crashed; these criteria say
whether it trained: every rank did every step, the loss stayed finite and fell, and (for
DDP) the ranks' parameters agree after training and an all-reduce returned the right
value.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.smoke import codes as C
from ddp_doctor.smoke.monitor import RankState
from ddp_doctor.smoke.verdict.context import RunContext, phase_of

# "Loss fell": a least-squares line through the loss of every step must fall by at least
# LOSS_DROP_MIN of its starting value, and its slope must be negative beyond what the
# steps' scatter around the line explains (a one-sided t-test at LOSS_SIGNIFICANCE). A fit
# over every step is robust to the noise of single batches, which a comparison of the
# first and last few steps is not: the same 12-step job could pass on one node and fail
# on another. The job repeats a small fixed data set, so a working setup memorises it and
# falls far more than that within 30 steps; a broken gradient path (no update, no
# averaging) stays flat or falls within the noise.
LOSS_DROP_MIN = 0.10
LOSS_SIGNIFICANCE = 0.01
# Below this many steps the fit has too few degrees of freedom to tell a falling loss
# from batch noise: the criterion is skipped (SMK016, an INFO note) instead of failing by
# chance.
LOSS_MIN_STEPS = 10


def t_critical(df: int, alpha: float = LOSS_SIGNIFICANCE) -> float:
    """Student's t quantile ``t(1 - alpha, df)`` without SciPy.

    The Cornish-Fisher expansion of t in terms of the normal quantile z (Abramowitz and
    Stegun 26.7.5), to the third order in 1/df: within 0.002 of the exact value from
    df = 8 on at alpha = 0.01 (2.896 at df 8, 2.764 at df 10), so within the steps this
    criterion judges.
    """
    z = statistics.NormalDist().inv_cdf(1 - alpha)
    if df <= 0:
        return math.inf
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


@dataclass(frozen=True)
class LossTrend:
    """The least-squares line through the loss per step, and whether it shows learning."""

    steps: int
    slope: float  # loss per step
    t: float  # slope / its standard error (-inf for a perfect falling line)
    t_critical: float
    first: float  # the line at the first step
    last: float  # the line at the last step

    @property
    def drop(self) -> float:
        """How much the line falls over the run, as a fraction of its starting value."""
        return (self.first - self.last) / self.first if self.first > 0 else 0.0

    @property
    def significant(self) -> bool:
        return self.t <= -self.t_critical

    @property
    def fell(self) -> bool:
        return self.drop >= LOSS_DROP_MIN and self.significant

    def to_dict(self) -> dict[str, Any]:
        def num(v: float) -> float | None:
            return round(v, 6) if math.isfinite(v) else None
        return {"steps": self.steps, "slope_per_step": num(self.slope), "t": num(self.t),
                "t_critical": num(self.t_critical), "drop": num(self.drop),
                "drop_min": LOSS_DROP_MIN, "significance": LOSS_SIGNIFICANCE,
                "fell": self.fell}


def loss_trend(curve: list[float]) -> LossTrend:
    """Fit ``loss = a + b * step`` over steps 1..n and test b < 0 (one-sided t-test)."""
    n = len(curve)
    if n < 2:
        value = curve[0] if curve else math.nan
        return LossTrend(n, 0.0, 0.0, math.inf, value, value)
    xs = range(1, n + 1)
    mx, my = (n + 1) / 2, statistics.fmean(curve)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, curve)) / sxx
    intercept = my - slope * mx
    df = n - 2
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, curve))
    se = math.sqrt(residual / df / sxx) if df > 0 else math.inf
    # With every point on the line (se 0) the slope is exact: infinitely significant.
    t = slope / se if se > 0 else (math.copysign(math.inf, slope) if slope else 0.0)
    return LossTrend(n, slope, t, t_critical(df), intercept + slope, intercept + slope * n)


def loss_curve(ranks: list[RankState]) -> list[float]:
    """The loss per step, over every rank of the job.

    A DDP rank records ``loss_all``, the step's loss all-reduced over every rank of every
    node, so every node's supervisor gets the same curve; without it (``--mode dp``) the
    mean over this node's ranks.
    """
    per_step: dict[int, list[float]] = {}
    for state in ranks:
        for event in state.steps():
            value = event["loss_all"] if "loss_all" in event else event["loss"]
            per_step.setdefault(int(event["step"]), []).append(float(value))
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
        trend = loss_trend(curve)
        if not trend.fell:
            found.append(_loss_flat(ctx, curve, trend))
    if ctx.mode == "ddp":
        found += _sync_findings(ctx)
    return found


def _loss_flat(ctx: RunContext, curve: list[float], trend: LossTrend) -> Finding:
    line = (f"a least-squares line over the {trend.steps} steps goes from {trend.first:.4g} "
            f"to {trend.last:.4g} ({-trend.drop:+.1%})")
    if trend.drop < LOSS_DROP_MIN:
        title = f"The loss did not fall: {line}, short of the {LOSS_DROP_MIN:.0%} drop"
    else:
        title = (f"The loss did not clearly fall: {line}, but the steps scatter too much "
                 f"to tell it from noise")
    scope = "all ranks of every node" if ctx.nnodes > 1 else "all ranks"
    return Finding(
        C.LOSS_FLAT, title,
        (Evidence("loss per step", ", ".join(f"{v:.3g}" for v in curve),
                  f"event files (mean over {scope})"),
         Evidence("slope", f"{trend.slope:.3g} per step, t = {trend.t:.2f}",
                  f"falling means t <= -{trend.t_critical:.2f} "
                  f"(one-sided, {LOSS_SIGNIFICANCE:.0%})"),
         Evidence("required drop", f"{LOSS_DROP_MIN:.0%}", "of the line's starting value")),
        (Step("Rerun with more steps.", command=ctx.rerun(steps=100)),))


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
