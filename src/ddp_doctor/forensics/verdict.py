"""Which rank holds a hung job up: HNG findings from where every rank waits.

Judged in this order, each finding naming ranks, functions and lines:

1. ranks inside ``init_process_group``: the rendezvous waits for ranks that never joined
   (HNG005), named with where they are when their stacks were read;
2. ranks whose processes are gone while others wait in a collective (HNG004);
3. ranks in a collective while others are in none: those others hold the job up (HNG001);
4. ranks in different collectives, or one collective from different lines: their paths
   parted, and the first frame where they differ is named (HNG002);
5. every rank in the same collective from the same line: nobody holds anybody up, the
   collective itself does not complete (HNG003).

Stacks that could not be read give HNG006 with the reason and what would allow it; the
rest of the verdict stands on the stacks that were read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ddp_doctor.forensics import codes as H
from ddp_doctor.forensics.flight import RankRecord
from ddp_doctor.forensics.flight_verdict import flight_findings
from ddp_doctor.forensics.stacks import RankStack
from ddp_doctor.forensics.waits import Wait, parted_at, wait_of
from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.wording import count

SOURCE_WORDS = {"py-spy": "py-spy dump", "faulthandler": "faulthandler (SIGUSR1)",
                "pasted": "the pasted stacks"}


def _ranks(ranks: Iterable[int]) -> str:
    listed = sorted(ranks)
    return ("rank " if len(listed) == 1 else "ranks ") + ", ".join(str(r) for r in listed)


def _evidence(stacks: dict[int, RankStack], waits: dict[int, Wait]) -> list[Evidence]:
    out = []
    for rank in sorted(waits):
        stack = stacks[rank]
        frames = stack.main.python_frames[:4] if stack.main else []
        out.append(Evidence(f"rank {rank}" + (f" (pid {stack.pid})" if stack.pid else ""),
                            waits[rank].describe() + ("; innermost: " + " < ".join(
                                f.where() for f in frames) if frames else ""),
                            SOURCE_WORDS.get(stack.source, stack.source)))
    return out


def _step_for(wait: Wait) -> Step:
    if wait.kind == "data":
        return Step("Look at what the data loader waits on at that line on this rank: a file "
                    "on a slow or dead filesystem, a DataLoader worker that died or is stuck "
                    "(set timeout= on the DataLoader to make it fail instead of hang).")
    if wait.kind == "lock":
        return Step("A lock this rank already holds, or one another thread never releases: "
                    "look at every acquire of it on the path the finding names.")
    return Step("Open the named line on this rank: only it is not in the collective the "
                "others wait in.")


def hang_findings(stacks: list[RankStack], gone: Iterable[int] = ()) -> list[Finding]:
    """The verdict on a hung job from its ranks' stacks (and the ranks already gone)."""
    gone = sorted(set(gone))
    read = {s.rank: s for s in stacks if s.threads and s.rank is not None}
    unread = [s for s in stacks if not s.threads]
    found: list[Finding] = []
    if unread and not read:
        return [_unreadable(unread)]
    waits = {rank: wait_of(stack) for rank, stack in read.items()}
    evidence = _evidence(read, waits)
    rendezvous = [r for r, w in waits.items() if w.kind == "rendezvous"]
    in_collective = {r: w for r, w in waits.items() if w.kind == "collective"}
    # A rank whose main function returned, its process kept alive at exit by a thread: it
    # left the job as a rank that ended did, but its open connections make the others wait.
    exiting = {r: w for r, w in waits.items() if w.kind == "exiting"}
    elsewhere = {r: w for r, w in waits.items()
                 if w.kind not in ("collective", "rendezvous", "exiting")}
    if exiting and in_collective:
        holder = next(iter(in_collective.values()))
        first = sorted(exiting)[0]
        found.append(Finding(
            H.RANK_GONE, f"{_ranks(exiting).capitalize()} left the job while "
            f"{_ranks(in_collective)} wait{'s' if len(in_collective) == 1 else ''} in "
            f"{holder.call}" + (f" from {holder.user.where()}" if holder.user else "")
            + f": rank {first} {exiting[first].describe()}, which keeps its process and "
            "its connections alive", tuple(evidence), (Step(H.RANK_GONE.fix), Step(
                "Make the thread a daemon (threading.Thread(daemon=True)) or stop it before "
                "main returns, and call dist.destroy_process_group() on every rank.")),
            affects=tuple(f"rank:{r}" for r in sorted(exiting))))
    elif exiting:
        elsewhere.update(exiting)
    if rendezvous:
        held = sorted(set(elsewhere) | set(in_collective) | set(gone))
        title = (f"{_ranks(rendezvous).capitalize()} "
                 f"{'wait' if len(rendezvous) > 1 else 'waits'} in init_process_group"
                 + (f"; {_ranks(held)} never joined" if held else
                    ": a rank of the world size never joined"))
        culprit = next((w for r, w in elsewhere.items()), None)
        if culprit is not None and culprit.user is not None:
            title += f" ({_ranks(elsewhere)} {culprit.describe()})"
        found.append(Finding(H.STUCK_IN_RENDEZVOUS, title, tuple(evidence),
                             (Step(H.STUCK_IN_RENDEZVOUS.fix),),
                             affects=tuple(f"rank:{r}" for r in held)))
    if gone and in_collective:
        call = next(iter(in_collective.values())).call
        found.append(Finding(
            H.RANK_GONE, f"{_ranks(gone).capitalize()} ended while {_ranks(in_collective)} "
            f"wait{'s' if len(in_collective) == 1 else ''} in {call}",
            tuple([Evidence(f"rank {r}", "its process had ended", "process tree")
                   for r in gone] + evidence), (Step(H.RANK_GONE.fix),),
            affects=tuple(f"rank:{r}" for r in gone)))
    if in_collective and elsewhere:
        first = sorted(elsewhere)[0]
        wait = elsewhere[first]
        waiting = next(iter(in_collective.values()))
        title = (f"{_ranks([first]).capitalize()} holds the job up: it {wait.describe()}; "
                 f"{_ranks(in_collective)} {'wait' if len(in_collective) > 1 else 'waits'} "
                 f"in {waiting.call}" + (f" from {waiting.user.where()}" if waiting.user
                                         else ""))
        if len(elsewhere) > 1:
            title += f" (also {_ranks(r for r in elsewhere if r != first)})"
        found.append(Finding(H.RANK_HOLDS_UP, title, tuple(evidence), (_step_for(wait),),
                             affects=tuple(f"rank:{r}" for r in sorted(elsewhere))))
    groups: dict[tuple[str, str], list[int]] = {}
    for rank, wait in in_collective.items():
        groups.setdefault((wait.call, wait.user.where() if wait.user else ""), []).append(rank)
    if len(groups) > 1:
        (call_a, where_a), ranks_a = sorted(groups.items(), key=lambda kv: min(kv[1]))[0]
        (call_b, where_b), ranks_b = sorted(groups.items(), key=lambda kv: min(kv[1]))[1]
        left, right = parted_at(in_collective[ranks_a[0]], in_collective[ranks_b[0]])
        parted = (f"; their paths part at {left.where()} against {right.where()}"
                  if left and right else "")
        title = (f"The ranks wait in different collectives: {_ranks(ranks_a)} in {call_a}"
                 + (f" from {where_a}" if where_a else "") + f", {_ranks(ranks_b)} in "
                 f"{call_b}" + (f" from {where_b}" if where_b else "") + parted)
        found.append(Finding(H.RANKS_DIVERGED, title, tuple(evidence),
                             (Step(H.RANKS_DIVERGED.fix),),
                             affects=tuple(f"rank:{r}" for r in sorted(ranks_b))))
    elif in_collective and not elsewhere and not gone and not rendezvous:
        (call, where), ranks = next(iter(groups.items()))
        found.append(Finding(
            H.ALL_IN_COLLECTIVE, f"Every rank read ({count(len(ranks), 'rank')}) waits in "
            f"{call}" + (f" from {where}" if where else "") + ": no rank holds the others up",
            tuple(evidence), (Step(H.ALL_IN_COLLECTIVE.fix),)))
    if unread:
        found.append(_unreadable(unread))
    return found


def lone_stack_findings(stacks: list[RankStack]) -> list[Finding]:
    """The verdict a single pasted stack allows: a rank whose main thread waits on its data
    loader holds the job up, whatever the ranks not pasted wait in (they wait for it at the
    next collective: bigscience tr11's evaluation hang, one rank's validation DataLoader
    deadlocked while 383 others sat in broadcast and all_reduce). A lone stack in a
    collective or in the job's own code names no culprit, so it gives nothing; the caller
    asks only where no error was read (a crash's faulthandler dump is not a hang)."""
    read = [s for s in stacks if s.threads]
    if len(read) != 1:
        return []
    stack = read[0]
    wait = wait_of(stack)
    if wait.kind != "data":
        return []
    rank = stack.rank if stack.rank is not None else 0
    evidence = _evidence({rank: stack}, {rank: wait})
    if stack.rank is None:  # a dump that names no rank: say so, not "rank 0"
        evidence = [replace(e, label=e.label.replace("rank 0", "the pasted process", 1))
                    for e in evidence]
    return [Finding(
        H.RANK_HOLDS_UP, f"The pasted stack {wait.describe()}: that rank cannot reach the "
        "next collective, so the ranks not pasted wait for it there",
        (*evidence, Evidence("other possible cause", "the other ranks' stacks were not pasted: "
                                                      "dump every rank to confirm")),
        (_step_for(wait), Step("Dump every rank of the hung job and diagnose them together.",
                               command="py-spy dump --pid PID >> stacks.txt; "
                                       "ddp-doctor diagnose stacks.txt")))]


def hang_verdict(stacks: list[RankStack], gone: Iterable[int] = (),
                 flight: list[RankRecord] | None = None) -> list[Finding]:
    """The whole verdict on a hung job: where each rank waits (its stack), then, when the
    job ran with the Flight Recorder, the collective each rank reached (flight_verdict)."""
    found = hang_findings(stacks, gone) if stacks else []
    if flight:
        found += flight_findings(flight, gone)
    return found


def _unreadable(unread: list[RankStack]) -> Finding:
    reasons = sorted({s.error or "no stack" for s in unread})
    return Finding(
        H.STACKS_UNREADABLE, f"The stacks of {count(len(unread), 'process')} could not be "
        f"read: {reasons[0]}",
        tuple(Evidence(f"rank {s.rank}" if s.rank is not None else f"pid {s.pid}",
                       s.error or "no stack", "stack capture") for s in unread),
        (Step("Install py-spy where ddp-doctor runs (ddp-doctor never installs it).",
              command="pip install py-spy"),
         Step("In a container, allow reading other processes.",
              command="docker run --cap-add SYS_PTRACE ...", url=H.PY_SPY_DOCKER),
         Step("Or dump a hung rank yourself and diagnose the output.",
              command="py-spy dump --pid PID > stacks.txt && ddp-doctor diagnose stacks.txt")))
