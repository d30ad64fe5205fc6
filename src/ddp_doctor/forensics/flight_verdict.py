"""Which rank holds a hung job up, from the ranks' Flight Recorder dumps (HNG007-HNG010).

Judged on the first process group in which some rank has a collective it did not complete
(the default group, in every job this tool plants or has seen), in this order:

1. at one sequence number the ranks called different ops, or one op on different sizes or
   dtypes (HNG007): their control flow parted there;
2. ranks wait in collective #N and a rank never reached it: its last collective is earlier,
   or it has no dump because its process ended or it never joined (HNG008);
3. every rank waits in the same collective, called the same way (HNG009).

A rank whose dump is missing or unreadable is said (HNG010, info), and the rest stands.
Each rank's evidence line gives its last completed, started and scheduled collective.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ddp_doctor.forensics import codes as H
from ddp_doctor.forensics.flight import Op, RankRecord
from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.wording import count

SOURCE = "Flight Recorder"


def _ranks(ranks: Iterable[int]) -> str:
    listed = sorted(ranks)
    return ("rank " if len(listed) == 1 else "ranks ") + ", ".join(str(r) for r in listed)


def _group_of_hang(read: list[RankRecord]) -> str | None:
    """The first group (in the order its ops were recorded) with an op not completed."""
    for record in read:
        for op in record.ops:
            if not op.completed and not op.p2p:
                return op.group
    groups = [op.group for record in read for op in record.ops if not op.p2p]
    return groups[0] if groups else None


def describe_rank(record: RankRecord, group: str) -> str:
    """A rank's place in the group: its last completed, started and scheduled collective."""
    done = record.last(group, completed=True)
    started = record.last(group, state="started")
    scheduled = record.last(group)
    parts = [f"last completed {done.describe() if done else 'none'}"]
    if started is not None and not started.completed:
        parts.append(f"started {started.describe()}")
    if scheduled is not None and not scheduled.completed:
        parts.append(f"waits in {scheduled.describe()} ({scheduled.state or 'scheduled'}, "
                     "not completed)")
    return "; ".join(parts) + f" ({len(record.in_group(group))} recorded)"


def _evidence(records: list[RankRecord], group: str, gone: set[int]) -> list[Evidence]:
    out = []
    for record in records:
        who = f"rank {record.rank}" if record.rank is not None else record.source
        if record.why is not None:
            why = record.why + ("; its process had ended" if record.rank in gone else "")
            out.append(Evidence(who, f"no Flight Recorder entries: {why}", record.source))
        else:
            out.append(Evidence(who, describe_rank(record, group), f"{SOURCE}: {record.source}"))
    return out


def _key(op: Op) -> tuple[str, tuple[object, ...], tuple[str, ...]]:
    return (op.name, op.sizes, op.dtypes)


def flight_findings(records: list[RankRecord], gone: Iterable[int] = (),
                    analysis: str | None = None) -> list[Finding]:
    """The verdict of the ranks' Flight Recorder dumps (and the ranks known gone); torch's
    own analyser's words (``flight_analyser``), when it ran, are evidence on the first."""
    found = _flight_findings(records, gone)
    if analysis and found:
        first = found[0]
        found[0] = replace(first, evidence=(*first.evidence, Evidence(
            "torch's analyser (fr_trace)", analysis, "torch.distributed.flight_recorder")))
    return found


def _flight_findings(records: list[RankRecord], gone: Iterable[int]) -> list[Finding]:
    gone_set = set(gone)
    if not records:
        return [Finding(H.FR_UNAVAILABLE, "No rank wrote a Flight Recorder dump when asked",
                        (Evidence("dumps", "none arrived within the wait: the ranks had not "
                                  "loaded torch.distributed, or ran no Python", SOURCE),),
                        (Step(H.FR_UNAVAILABLE.fix),))]
    read = [r for r in records if r.why is None and r.rank is not None and r.ops]
    unread = [r for r in records if r.why is not None]
    world = next((r.world for r in read if r.world), [])
    dumped = {r.rank for r in records if r.rank is not None}
    no_dump = sorted((set(world) | gone_set) - dumped)
    found: list[Finding] = []
    group = _group_of_hang(read)
    evidence = _evidence(records, group or "", gone_set)
    evidence += [Evidence(f"rank {r}", "no Flight Recorder dump" + (
        ": its process had ended" if r in gone_set else ""), SOURCE) for r in no_dump]
    if group is not None:
        found += _judge_group(read, group, no_dump, unread, gone_set, evidence)
    if unread or (no_dump and not found) or (records and not read and not found):
        found.append(_unavailable(unread, no_dump, gone_set))
    return found


def _judge_group(read: list[RankRecord], group: str, no_dump: list[int],
                 unread: list[RankRecord], gone: set[int], evidence: list[Evidence]
                 ) -> list[Finding]:
    ops = {r.rank: {op.seq: op for op in r.in_group(group)} for r in read if r.rank is not None}
    pending = {rank: min((s for s, op in by_seq.items() if not op.completed), default=None)
               for rank, by_seq in ops.items()}
    reached = {rank: max(by_seq, default=0) for rank, by_seq in ops.items()}
    waiting = {rank: seq for rank, seq in pending.items() if seq is not None}
    if not waiting:
        return []
    label = f" of {group}" if group not in ("default_pg", "0", "") else ""
    # 1. the same number, called differently
    for seq in sorted(set(waiting.values())):
        at = {rank: by_seq[seq] for rank, by_seq in ops.items() if seq in by_seq}
        kinds: dict[tuple[str, tuple[object, ...], tuple[str, ...]], list[int]] = {}
        for rank, op in sorted(at.items()):
            kinds.setdefault(_key(op), []).append(rank)
        if len(kinds) > 1:
            parts = [f"{_ranks(ranks)} {at[ranks[0]].describe()}" for ranks in
                     sorted(kinds.values(), key=min)]
            minority = sorted(kinds.values(), key=lambda rs: (len(rs), -min(rs)))[0]
            names = {at[rs[0]].name for rs in kinds.values()}
            how = "different collectives" if len(names) > 1 else "different sizes or dtypes"
            return [Finding(
                H.FR_MISMATCH, f"Collective #{seq}{label} was called with {how}: "
                + " against ".join(parts), tuple(evidence), (Step(H.FR_MISMATCH.fix),),
                affects=tuple(f"rank:{r}" for r in minority))]
    # 2. a rank that never reached the collective the others wait in
    target = max(waiting.values())
    waiters = sorted(r for r, s in waiting.items() if s == target)
    behind = sorted(r for r, top in reached.items() if top < target)
    missing = behind + [r for r in no_dump if r not in behind]
    if missing:
        op = ops[waiters[0]][target]
        first = missing[0]
        if first in ops and reached[first]:
            where = f"its last collective is #{reached[first]} {ops[first][reached[first]].name}"
            done = ops[first][reached[first]].completed
            where += " (completed)" if done else " (not completed)"
        elif first in gone:
            where = "its process had ended"
        else:
            where = next((r.why for r in unread if r.rank == first), None) or \
                "it wrote no dump"
        title = (f"{_ranks([first]).capitalize()} never called collective {op.describe()}"
                 f"{label} that {_ranks(waiters)} "
                 f"{'wait' if len(waiters) > 1 else 'waits'} in: {where}")
        if len(missing) > 1:
            title += f" (also {_ranks(missing[1:])})"
        return [Finding(H.FR_MISSING, title, tuple(evidence), (Step(H.FR_MISSING.fix),),
                        affects=tuple(f"rank:{r}" for r in missing))]
    # 3. everyone in the same collective, called alike
    op = ops[waiters[0]][target]
    return [Finding(H.FR_ALL_WAITING, f"Every rank ({count(len(waiters), 'rank')}) waits in "
                    f"collective {op.describe()}{label}, called alike: none is missing",
                    tuple(evidence), (Step(H.FR_ALL_WAITING.fix),))]


def _unavailable(unread: list[RankRecord], no_dump: list[int], gone: set[int]) -> Finding:
    reasons = [f"{f'rank {r.rank}' if r.rank is not None else r.source}: {r.why}"
               for r in unread]
    reasons += [f"rank {r}: " + ("its process had ended" if r in gone else "no dump")
                for r in no_dump]
    title = (f"The Flight Recorder has nothing for {count(len(reasons), 'rank')}: "
             f"{reasons[0]}" if reasons else "The Flight Recorder dumps hold no collective")
    return Finding(H.FR_UNAVAILABLE, title,
                   tuple(Evidence("dump", why, SOURCE) for why in reasons),
                   (Step(H.FR_UNAVAILABLE.fix),))
