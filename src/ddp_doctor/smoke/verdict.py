"""Judging a finished smoke run: failure findings, the pass criteria, and measurements.

Pure functions of what the run left behind (rank events, the launcher's and ranks'
stderr, the exit code and which deadline fired), so they can be tested on recorded runs.
"""

from __future__ import annotations

import math
import re
import shlex
import signal
import statistics
from dataclasses import dataclass, fields, replace
from typing import Any

from ddp_doctor.logrules import match_text
from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.smoke import codes as C
from ddp_doctor.smoke.launch import SmokeOptions
from ddp_doctor.smoke.monitor import Outcome, RankState

# "Loss fell": the mean of the last few steps must be at least 10% below the mean of the
# first few. The job repeats a small fixed data set, so a working setup memorises it and
# falls far more than that within 30 steps, while batch-to-batch noise on repeated
# batches is much smaller; a broken gradient path (no update, no averaging) stays flat.
LOSS_DROP_MIN = 0.10
# Below this many steps the first and last windows are single noisy batches: the
# loss-fell criterion is skipped (SMK016, an INFO note) instead of failing by chance.
LOSS_MIN_STEPS = 10
TAIL_LINES = 8

# SmokeOptions field -> the smoke command's flag, for rerun commands that keep the user's
# own options. Booleans: (flag when True, flag when False).
_FLAGS: dict[str, Any] = {
    "device": "--device", "nproc": "--nproc", "steps": "--steps", "batch": "--batch-per-process",
    "imgsz": "--imgsz", "model": "--model", "workers": "--workers",
    "launcher": "--launcher", "mode": "--mode", "sync_bn": ("--sync-bn", None),
    "amp": ("--amp", "--no-amp"), "scaling": ("--scaling", None), "timeout": "--timeout",
    "stall_timeout": "--stall-timeout", "nnodes": "--nnodes", "node_rank": "--node-rank",
    "master_addr": "--master-addr", "master_port": "--master-port",
}


def rerun_command(options: SmokeOptions | None, env: str = "", **changes: Any) -> str:
    """``ddp-doctor smoke`` with the user's non-default options, ``changes`` applied."""
    words = ["ddp-doctor", "smoke"]
    if options is not None:
        options = replace(options, **changes)
        default = SmokeOptions(python=options.python)
        for f in fields(SmokeOptions):
            flag, value = _FLAGS.get(f.name), getattr(options, f.name)
            if flag is None or value is None or value == getattr(default, f.name):
                continue
            if isinstance(flag, tuple):
                chosen = flag[0] if value else flag[1]
                words += [chosen] if chosen else []
            else:
                shown = f"{value:g}" if isinstance(value, float) else str(value)
                words += [flag, shown]
    else:
        for name, value in changes.items():
            words += [str(_FLAGS[name]), f"{value:g}" if isinstance(value, float) else str(value)]
    command = " ".join(shlex.quote(w) for w in words)
    return f"{env} {command}" if env else command


@dataclass
class RunContext:
    """What the verdict needs to know about the run."""

    ranks: list[RankState]
    outcome: Outcome
    steps: int
    world: int
    launcher_text: str
    rank_stderr: dict[int, str]
    stall_s: float
    wall_s: float
    mode: str = "ddp"
    backend: str | None = None  # nccl | gloo | None (dp)
    options: SmokeOptions | None = None  # for rerun commands with the user's options
    master: tuple[str, int] | None = None  # the rendezvous address and port actually used

    def rerun(self, env: str = "", **changes: Any) -> str:
        return rerun_command(self.options, env, **changes)

    @property
    def nccl(self) -> bool:
        return self.backend == "nccl"


def tail(text: str, lines: int = TAIL_LINES) -> str:
    kept = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def describe_exit(code: int) -> str:
    return f"{code} ({signal_name(code)})" if code < 0 else str(code)


_ROOT = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+)", re.S)
# What survivors say when a peer died under them: effects, not causes.
_PEER_GONE = re.compile(r"remote process exited|Connection closed by peer|"
                        r"Connection reset by peer|ncclRemoteError", re.I)
_SPAWN = re.compile(r"process (\d+) terminated with (?:signal (SIG\w+)|exit code (\d+))")


def rank_exit_codes(launcher_text: str, node_first_rank: int = 0) -> dict[int, int]:
    """Failed ranks and their exit codes from torchrun's report or mp.spawn's exception."""
    found: dict[int, int] = {}
    for rank, code in _ROOT.findall(launcher_text):
        found.setdefault(int(rank), int(code))
    for local, sig, code in _SPAWN.findall(launcher_text):
        value = -int(signal.Signals[sig]) if sig else int(code)
        found.setdefault(node_first_rank + int(local), value)
    return found


def root_cause_rank(launcher_text: str) -> int | None:
    """The rank torchrun names under "Root Cause (first observed failure)", if any."""
    match = _ROOT_CAUSE.search(launcher_text)
    return int(match.group(1)) if match else None


def _killed(code: int) -> bool:
    """Died of a signal other than the SIGTERM the launcher sends to the survivors."""
    return code < 0 and code != -signal.SIGTERM


def order_failed(exits: dict[int, int], launcher_text: str) -> list[int]:
    """Failed ranks, cause first: torchrun's root cause, then signal deaths, then the rest."""
    root = root_cause_rank(launcher_text)
    return sorted(exits, key=lambda r: (r != root, not _killed(exits[r]),
                                        exits[r] == -signal.SIGTERM, r))


def _where(state: RankState, steps: int) -> str:
    if not state.events:
        return "start-up (no event yet)"
    if state.where == "train" and state.open_phase == "train":
        return f"train (after step {state.steps_done} of {steps})"
    if state.open_phase:
        return state.open_phase
    return f"after {state.where}"


def _stderr_evidence(ctx: RunContext, rank: int) -> list[Evidence]:
    text = tail(ctx.rank_stderr.get(rank, ""))
    return [Evidence(f"rank {rank} stderr (last lines)", text, "rank stderr")] if text else []


def not_started_findings(ctx: RunContext, waited: float) -> list[Finding]:
    """Ranks that never wrote an event: still starting (importing torch) after ``waited`` s."""
    silent = [s for s in ctx.ranks if not s.events]
    names = ", ".join(str(s.rank) for s in silent)
    evidence = [Evidence(f"rank {s.rank}", f"in {_where(s, ctx.steps)}", "event file")
                for s in ctx.ranks]
    launcher = tail(ctx.launcher_text)
    evidence.append(Evidence("launcher stderr and stdout (last lines)", launcher or "(empty)",
                             "launcher"))
    for state in silent:
        evidence += _stderr_evidence(ctx, state.rank)
    python = ctx.options.python if ctx.options else "python"
    steps = (Step("Time how long the interpreter takes to import torch (cold caches and "
                  "network filesystems can take minutes).",
                  command=f"time {shlex.quote(python)} -c 'import torch'"),
             Step("Check the filesystem the environment lives on (NFS, a slow disk).",
                  command=f"df -h {shlex.quote(python)}"),
             Step("Give the job more time.",
                  command=ctx.rerun(timeout=max(600.0, ctx.wall_s * 2))))
    return [Finding(C.NOT_STARTED, f"Rank {names} did not start within {waited:.0f} s "
                    "(no event yet)", tuple(evidence), steps,
                    affects=tuple(f"rank:{s.rank}" for s in silent))]


def _hang_steps(ctx: RunContext, phase: str) -> tuple[Step, ...]:
    """What to try for a hang, by backend and the phase it happened in."""
    if phase.startswith("data"):
        return (Step("Rule out DataLoader worker processes.", command=ctx.rerun(workers=0)),
                Step("Check the size of /dev/shm (workers pass batches through it).",
                     command="df -h /dev/shm"))
    if not ctx.nccl:
        return (Step("Rerun with the process group's own log to see where it waits.",
                     command=ctx.rerun("TORCH_DISTRIBUTED_DEBUG=DETAIL")),
                Step("Check that nothing else loads the CPUs.", command="top"))
    return (Step("Rerun with NCCL's own log to see where it waits.",
                 command=ctx.rerun("NCCL_DEBUG=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL")),
            Step("If the hang is in a collective on GPUs, rule out peer-to-peer transport.",
                 command=ctx.rerun("NCCL_P2P_DISABLE=1")))


def _rendezvous_step(ctx: RunContext) -> Step:
    """Every node must run the same command and reach rank 0's address and port."""
    addr, port = ctx.master or ("MASTER_ADDR", "MASTER_PORT")
    return Step("Check that every node runs the same command with the same --nnodes, "
                "--master-addr and --master-port, and can reach the port from the other "
                "nodes.", command=f"nc -zv {addr} {port}")


def stall_findings(ctx: RunContext) -> list[Finding]:
    now = ctx.outcome.wall_s
    limit = ctx.outcome.stall_s or ctx.stall_s
    if any(not s.events for s in ctx.ranks):
        # The others wait for a rank that is still starting: that rank is the finding.
        return not_started_findings(ctx, now)
    by_rank = {s.rank: s for s in ctx.ranks}
    stalled = [by_rank[r] for r in ctx.outcome.stalled]
    least = min(s.progress() for s in stalled)
    behind = [s for s in stalled if s.progress() == least]
    never_met = (any(s.open_phase == "init_process_group" for s in ctx.ranks)
                 and not any(s.ended("init_process_group") for s in ctx.ranks))
    code = C.RENDEZVOUS if never_met else C.RANK_STALLED
    names = ", ".join(str(s.rank) for s in behind)
    phase = _where(behind[0], ctx.steps)
    title = (f"Rank {names} stopped making progress in {phase}: no event for "
             f"{limit:.0f} s" if code is C.RANK_STALLED else
             f"The ranks never met: rank {names} still in {phase} after {limit:.0f} s")
    evidence = []
    for state in ctx.ranks:
        quiet = now - ((state.last_seen or ctx.outcome.started) - ctx.outcome.started)
        evidence.append(Evidence(f"rank {state.rank}",
                                 f"in {_where(state, ctx.steps)}, last event {quiet:.1f} s ago"
                                 + (" (done)" if state.done else ""), "event file"))
    for state in behind:
        evidence += _stderr_evidence(ctx, state.rank)
    steps = _hang_steps(ctx, phase)
    if code is C.RENDEZVOUS:
        steps = (_rendezvous_step(ctx),)
    found = [Finding(code, title, tuple(evidence), steps,
                     affects=tuple(f"rank:{s.rank}" for s in behind))]
    return found + _rule_findings(ctx, [s.rank for s in behind], {})


def _rule_findings(ctx: RunContext, ranks: list[int], exits: dict[int, int]) -> list[Finding]:
    """Log-rule findings for the given ranks' error text (and exit codes)."""
    by_rank = {s.rank: s for s in ctx.ranks}
    found: dict[str, Finding] = {}
    for rank in ranks:
        text = ctx.rank_stderr.get(rank, "")
        if rank in exits:
            text += f"\nexitcode : {exits[rank]}"
        for match in match_text(text)[:1]:
            code = match.rule.code
            if code.id in found:
                continue
            state = by_rank.get(rank)
            evidence = [Evidence("rank", str(rank), "")]
            if rank in exits:
                evidence.append(Evidence("exit code", describe_exit(exits[rank]), "launcher"))
            if state is not None:
                evidence.append(Evidence("phase", _where(state, ctx.steps), "event file"))
            evidence.append(Evidence("matched", match.line, "log rule"))
            evidence += _stderr_evidence(ctx, rank)
            phase = _where(state, ctx.steps) if state else "start-up"
            found[code.id] = Finding(code, f"Rank {rank} failed in {phase}: {code.summary}",
                                     tuple(evidence), match.rule.steps,
                                     affects=(f"rank:{rank}",))
    return list(found.values())


def failure_findings(ctx: RunContext, node_first_rank: int = 0) -> list[Finding]:
    """Why a run that did not end cleanly failed: stall, deadline, or a failed rank."""
    if ctx.outcome.stopped_by == "stall":
        return stall_findings(ctx)
    if ctx.outcome.stopped_by == "deadline":
        if any(not s.events for s in ctx.ranks):
            return not_started_findings(ctx, ctx.outcome.wall_s)
        waiting = [s for s in ctx.ranks if s.open_phase == "init_process_group"]
        if waiting and not any(s.ended("init_process_group") for s in ctx.ranks):
            # Nobody got past the rendezvous: the ranks never met (e.g. a node missing).
            names = ", ".join(str(s.rank) for s in waiting)
            return [Finding(C.RENDEZVOUS, f"The ranks never met: rank {names} still in "
                            f"init_process_group at the {ctx.wall_s:.0f} s deadline",
                            tuple(Evidence(f"rank {s.rank}", f"in {_where(s, ctx.steps)}",
                                           "event file") for s in ctx.ranks),
                            (_rendezvous_step(ctx),),
                            affects=tuple(f"rank:{s.rank}" for s in waiting))]
        evidence = tuple(Evidence(f"rank {s.rank}", f"in {_where(s, ctx.steps)}", "event file")
                         for s in ctx.ranks)
        return [Finding(C.DEADLINE, f"The smoke job was still running after its "
                        f"{ctx.wall_s:.0f} s deadline and was stopped", evidence,
                        (Step("Give it more time or fewer steps.",
                              command=ctx.rerun(timeout=max(600.0, ctx.wall_s * 2),
                                                steps=min(ctx.steps, 10))),))]
    exits = rank_exit_codes(ctx.launcher_text, node_first_rank)
    if not any(s.events for s in ctx.ranks):
        return _launch_findings(ctx)
    failed = order_failed(exits, ctx.launcher_text)
    if not failed:
        failed = [s.rank for s in ctx.ranks if not s.done]
    found = _rule_findings(ctx, failed, exits)
    if any(_killed(code) for code in exits.values()):
        # Survivors' "remote process exited" is the effect of the killed rank, not a cause.
        kept = [f for f in found if not (f.affects and not _killed(exits.get(
            int(f.affects[0].split(":")[1]), 0)) and _PEER_GONE.search(_matched(f)))]
        found = kept or found
    if not found:
        found = _launcher_rule_findings(ctx) or _generic_failure(ctx, failed, exits)
    others = [r for r in failed if all(f"rank:{r}" not in f.affects for f in found)]
    if others and found:
        note = ", ".join(f"rank {r}" + (f" (exit {describe_exit(exits[r])})" if r in exits
                                        else "") for r in others)
        first = found[0]
        found[0] = Finding(first.code, first.title, (*first.evidence,
                           Evidence("also stopped", note, "launcher")), first.remediation,
                           affects=first.affects)
    return found


def _matched(finding: Finding) -> str:
    return next((e.value for e in finding.evidence if e.label == "matched"), "")


def _launch_findings(ctx: RunContext) -> list[Finding]:
    text = ctx.launcher_text
    evidence = (Evidence("launcher stderr (last lines)", tail(text), "launcher"),)
    if re.search(r"No module named '?torch|ModuleNotFoundError: No module named 'torch", text):
        return [Finding(C.LAUNCH_FAILED, "The smoke job could not start: torch is not "
                        "importable in the interpreter being diagnosed", evidence,
                        (Step("Install torch there (see https://pytorch.org/get-started/"
                              "locally/), or point the doctor at your training venv with "
                              "--python."),))]
    matches = match_text(text)
    if matches:
        rule = matches[0].rule
        return [Finding(rule.code, f"The smoke job failed before any rank started: "
                        f"{rule.code.summary}", (Evidence("matched", matches[0].line,
                                                          "log rule"), *evidence), rule.steps)]
    return [Finding(C.RANK_FAILED, f"The smoke job failed before any rank started (launcher "
                    f"exit code {describe_exit(ctx.outcome.returncode or 1)})", evidence)]


def _launcher_rule_findings(ctx: RunContext) -> list[Finding]:
    """Rules matched in the launcher's own output (torchrun's store, its failure report)."""
    matches = match_text(ctx.launcher_text)
    if not matches:
        return []
    rule = matches[0].rule
    return [Finding(rule.code, f"The smoke job failed: {rule.code.summary}",
                    (Evidence("matched", matches[0].line, "log rule"),
                     Evidence("launcher stderr (last lines)", tail(ctx.launcher_text),
                              "launcher")), rule.steps)]


def _generic_failure(ctx: RunContext, failed: list[int], exits: dict[int, int]) -> list[Finding]:
    if not failed:
        return [Finding(C.RANK_FAILED, f"The smoke job's launcher exited with code "
                        f"{describe_exit(ctx.outcome.returncode or 1)}",
                        (Evidence("launcher stderr", tail(ctx.launcher_text), "launcher"),))]
    rank = failed[0]
    by_rank = {s.rank: s for s in ctx.ranks}
    state = by_rank.get(rank)
    phase = _where(state, ctx.steps) if state else "start-up"
    code = describe_exit(exits[rank]) if rank in exits else "non-zero"
    evidence = [Evidence("rank", str(rank), ""), Evidence("exit code", code, "launcher"),
                Evidence("phase", phase, "event file"), *_stderr_evidence(ctx, rank)]
    if not ctx.rank_stderr.get(rank):
        evidence.append(Evidence("launcher stderr", tail(ctx.launcher_text), "launcher"))
    return [Finding(C.RANK_FAILED, f"Rank {rank} exited with code {code} in {phase}",
                    tuple(evidence), affects=(f"rank:{rank}",))]


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
                                                  f"{_where(s, ctx.steps)}", "event file")
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


def _rel(value: Any, started: float) -> float | None:
    return round(float(value) - started, 4) if isinstance(value, (int, float)) else None


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
        per_rank.append({
            "rank": state.rank,
            "median_step_s": round(median, 5) if median else None,
            "images_per_s": round(images / median, 2) if median else None,
            "peak_gpu_mem_bytes": train.get("peak_mem_bytes"),
        })
    bw = next((e for s in sorted(ranks, key=lambda s: s.rank)
               if (e := s.ended("all_reduce_bandwidth"))), None)
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
