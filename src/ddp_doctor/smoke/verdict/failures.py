"""Why a smoke run that did not end cleanly failed: failed, killed and stalled ranks.

A run stopped by the stall watchdog or the deadline, or ended by a rank that died, is
turned into findings: the rank that caused it named first (torchrun's root cause, a
signal death) rather than the survivors that only saw a peer disappear, with the error
in its stderr matched against the same log rules ``diagnose`` uses, and the steps that
tell the likely causes apart.
"""

from __future__ import annotations

import re
import shlex
import signal

from ddp_doctor.forensics.verdict import hang_verdict
from ddp_doctor.logrules import match_text
from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.smoke import codes as C
from ddp_doctor.smoke.verdict.context import RunContext, phase_of
from ddp_doctor.smoke.verdict.nodes import missing_node_findings

TAIL_LINES = 8


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


def _stderr_evidence(ctx: RunContext, rank: int) -> list[Evidence]:
    text = tail(ctx.rank_stderr.get(rank, ""))
    return [Evidence(f"rank {rank} stderr (last lines)", text, "rank stderr")] if text else []


def not_started_findings(ctx: RunContext, waited: float) -> list[Finding]:
    """Ranks that never wrote an event: still starting (importing torch) after ``waited`` s."""
    silent = [s for s in ctx.ranks if not s.events]
    names = ", ".join(str(s.rank) for s in silent)
    evidence = [Evidence(f"rank {s.rank}", f"in {phase_of(s, ctx.steps)}", "event file")
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
    phase = phase_of(behind[0], ctx.steps)
    title = (f"Rank {names} stopped making progress in {phase}: no event for "
             f"{limit:.0f} s" if code is C.RANK_STALLED else
             f"The ranks never met: rank {names} still in {phase} after {limit:.0f} s")
    evidence = []
    for state in ctx.ranks:
        quiet = now - ((state.last_seen or ctx.outcome.started) - ctx.outcome.started)
        evidence.append(Evidence(f"rank {state.rank}",
                                 f"in {phase_of(state, ctx.steps)}, last event {quiet:.1f} s ago"
                                 + (" (done)" if state.done else ""), "event file"))
    for state in behind:
        evidence += _stderr_evidence(ctx, state.rank)
    steps = _hang_steps(ctx, phase)
    if code is C.RENDEZVOUS:
        steps = (_rendezvous_step(ctx),)
    found = [Finding(code, title, tuple(evidence), steps,
                     affects=tuple(f"rank:{s.rank}" for s in behind))]
    return found + hang_verdict(ctx.outcome.stacks, ctx.outcome.gone,
                                ctx.outcome.flight) + _rule_findings(
        ctx, [s.rank for s in behind], {})


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
                evidence.append(Evidence("phase", phase_of(state, ctx.steps), "event file"))
            evidence.append(Evidence("matched", match.line, "log rule"))
            evidence += _stderr_evidence(ctx, rank)
            phase = phase_of(state, ctx.steps) if state else "start-up"
            found[code.id] = Finding(code, f"Rank {rank} failed in {phase}: {code.summary}",
                                     tuple(evidence), match.rule.steps,
                                     affects=(f"rank:{rank}",))
    return list(found.values())


def failure_findings(ctx: RunContext, node_first_rank: int = 0) -> list[Finding]:
    """Why a run that did not end cleanly failed: a node missing, stall, deadline, or a
    failed rank."""
    if ctx.outcome.stopped_by is not None:
        # Waiting for a node that never joined looks like a rank that never started or
        # never met the others; the node is the finding, named (NOD014, as ``compare``).
        missing = missing_node_findings(ctx)
        if missing:
            return missing
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
                            tuple(Evidence(f"rank {s.rank}", f"in {phase_of(s, ctx.steps)}",
                                           "event file") for s in ctx.ranks),
                            (_rendezvous_step(ctx),),
                            affects=tuple(f"rank:{s.rank}" for s in waiting))]
        evidence = tuple(Evidence(f"rank {s.rank}", f"in {phase_of(s, ctx.steps)}", "event file")
                         for s in ctx.ranks)
        deadline = Finding(C.DEADLINE, f"The smoke job was still running after its "
                           f"{ctx.wall_s:.0f} s deadline and was stopped", evidence,
                           (Step("Give it more time or fewer steps.",
                                 command=ctx.rerun(timeout=max(600.0, ctx.wall_s * 2),
                                                   steps=min(ctx.steps, 10))),))
        return [deadline, *hang_verdict(ctx.outcome.stacks, ctx.outcome.gone,
                                        ctx.outcome.flight)]
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
    phase = phase_of(state, ctx.steps) if state else "start-up"
    code = describe_exit(exits[rank]) if rank in exits else "non-zero"
    evidence = [Evidence("rank", str(rank), ""), Evidence("exit code", code, "launcher"),
                Evidence("phase", phase, "event file"), *_stderr_evidence(ctx, rank)]
    if not ctx.rank_stderr.get(rank):
        evidence.append(Evidence("launcher stderr", tail(ctx.launcher_text), "launcher"))
    return [Finding(C.RANK_FAILED, f"Rank {rank} exited with code {code} in {phase}",
                    tuple(evidence), affects=(f"rank:{rank}",))]
