"""Watching a running smoke job: tail each rank's event file and enforce the deadlines.

The job's processes are started, remembered and ended by ``ddp_doctor.process``
(``ProcessTree``); here the supervisor reads what the ranks say and decides when to stop.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psutil

from ddp_doctor.process.tree import ProcessTree

PHASES = ("startup", "init_process_group", "nodes", "barrier", "all_reduce_check",
          "all_reduce_bandwidth", "host_copy", "data", "model", "train", "checksum",
          "destroy_process_group", "done")
POLL_S = 0.25  # waiting on the launcher in between: its exit is seen at once
# A rank is stalled when silent for max(stall, STEP_FACTOR x the slowest step seen so far):
# a legitimately slow step (a big model on the CPU, a first AMP/cuDNN step) is not a hang.
STEP_FACTOR = 5.0


@dataclass
class RankState:
    """What the supervisor knows about one rank from its event file so far.

    ``rank`` starts as the number this node expects its rank to have and becomes the
    global rank the rank itself reports in its first event: with nodes that run different
    numbers of ranks only the ranks know their numbers (torchrun numbers them by every
    node's real count). ``world_size`` is the job's, as the rank saw it (None before).
    """

    rank: int
    path: str
    offset: int = 0
    partial: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    last_seen: float | None = None  # supervisor's monotonic time of the last new event
    open_phase: str | None = None
    last_phase: str | None = None
    steps_done: int = 0
    done: bool = False
    slowest_step_s: float = 0.0
    world_size: int | None = None

    def read_new(self, now: float) -> int:
        """Read whole new lines; a half-written last line waits for the next poll."""
        try:
            with open(self.path, encoding="utf-8") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
                self.offset = fh.tell()
        except OSError:
            return 0
        if not chunk:
            return 0
        text = self.partial + chunk
        lines = text.split("\n")
        self.partial = lines.pop()
        added = 0
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self._apply(event)
            added += 1
        if added:
            self.last_seen = now
        return added

    def _apply(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        kind, phase = event.get("kind"), event.get("phase")
        if isinstance(event.get("rank"), int):
            self.rank = event["rank"]
        if isinstance(event.get("world_size"), int):
            self.world_size = event["world_size"]
        if kind == "begin":
            self.open_phase = phase
        elif kind == "end":
            self.open_phase, self.last_phase = None, phase
        elif kind == "step":
            self.steps_done = max(self.steps_done, int(event.get("step", 0)))
            with contextlib.suppress(TypeError, ValueError, KeyError):
                took = float(event["t_end"]) - float(event["t_start"])
                self.slowest_step_s = max(self.slowest_step_s, took)
        elif kind == "done":
            self.done, self.last_phase = True, "done"
        elif kind == "info" and self.last_phase is None:
            self.last_phase = phase

    @property
    def where(self) -> str:
        """The phase the rank is in (or stopped after)."""
        return self.open_phase or self.last_phase or "startup"

    def progress(self) -> tuple[int, int]:
        """Ordering key: how far the rank got (phase index, then steps)."""
        phase = self.where
        index = PHASES.index(phase) if phase in PHASES else 0
        if self.open_phase is None and self.last_phase is not None:
            index += 1  # finished that phase: further than a rank still inside it
        return (index * 2, self.steps_done)

    @property
    def startup(self) -> dict[str, Any]:
        """The rank's first event (its pid, GPU, world size), empty before it wrote one."""
        return next((e for e in self.events if e.get("phase") == "startup"), {})

    def ended(self, phase: str) -> dict[str, Any] | None:
        for event in self.events:
            if event.get("kind") == "end" and event.get("phase") == phase:
                return event
        return None

    def steps(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("kind") == "step"]


@dataclass
class Outcome:
    """How the launcher ended: exit code, and which deadline (if any) stopped it."""

    returncode: int | None
    stopped_by: str | None  # None | "stall" | "deadline"
    stalled: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    started: float = 0.0  # supervisor's monotonic time at launch
    stall_s: float | None = None  # the stall deadline in force when it fired
    peers: RendezvousPeers | None = None  # a stopped multi-node run: who had joined
    # A run stopped by a deadline: every rank's stack, read before anything was stopped,
    # and the ranks whose processes had already ended (forensics/).
    stacks: list[Any] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)
    flight: list[Any] = field(default_factory=list)  # the ranks' Flight Recorder dumps


def stall_deadline(ranks: list[RankState], stall_s: float) -> float:
    """The stall deadline now: ``stall_s``, widened to STEP_FACTOR x the slowest step."""
    slowest = max((s.slowest_step_s for s in ranks), default=0.0)
    return max(stall_s, STEP_FACTOR * slowest)


def supervise(tree: ProcessTree, ranks: list[RankState], started: float, wall_s: float,
              stall_s: float,
              on_progress: Callable[[list[RankState]], None] | None = None) -> Outcome:
    """Poll until the launcher exits, a rank stalls, or the wall-clock deadline passes.

    Before its first event a rank is starting its interpreter and importing torch, which on
    a cold cache or a network filesystem can take minutes: only the wall-clock deadline
    applies to it then. After that, a rank silent for ``stall_deadline`` has stalled.
    The caller ends every process in ``finally`` (``ProcessTree.stop``) whatever happens
    here.
    """
    proc = tree.proc
    last_remember = 0.0
    while True:
        now = time.monotonic()
        for state in ranks:
            state.read_new(now)
        if on_progress is not None:
            on_progress(ranks)
        code = proc.poll()
        if code is not None:
            for state in ranks:  # the last lines written before exit
                state.read_new(time.monotonic())
            return Outcome(code, None, wall_s=time.monotonic() - started, started=started)
        if now - last_remember > 1.0:
            tree.remember()
            last_remember = now
        limit = stall_deadline(ranks, stall_s)
        stalled = [s.rank for s in ranks if not s.done and s.last_seen is not None
                   and now - s.last_seen > limit]
        if stalled:
            return Outcome(None, "stall", stalled, now - started, started, limit)
        if now - started > wall_s:
            return Outcome(None, "deadline", [], now - started, started)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=POLL_S)


@dataclass(frozen=True)
class RendezvousPeers:
    """Who had reached the rendezvous port when a multi-node run was stopped.

    Read from the run's own processes' TCP connections (psutil), because a node that never
    joined leaves no event file anywhere: on the node hosting the store, ``joined`` is the
    number of connections it accepted (torchrun: one per node's agent, its own included;
    the spawn launcher: one per rank); on another node, ``reached_host`` says whether it
    holds a connection to the store at all. ``remote`` lists the peers' addresses. Both
    are None when the processes' connections could not be read.
    """

    joined: int | None
    reached_host: bool | None
    remote: tuple[str, ...] = ()


def _connections(proc: psutil.Process) -> list[Any]:
    getter = getattr(proc, "net_connections", None) or proc.connections
    return list(getter(kind="tcp"))


def rendezvous_peers(procs: Iterable[psutil.Process], port: int) -> RendezvousPeers:
    """Count the established connections to the rendezvous ``port`` among ``procs``."""
    accepted: set[tuple[str, int]] = set()
    outgoing = 0
    readable = False
    for proc in procs:
        try:
            conns = _connections(proc)
        except (psutil.Error, OSError):
            continue
        readable = True
        for conn in conns:
            if conn.status != psutil.CONN_ESTABLISHED or not conn.raddr:
                continue
            if conn.laddr and conn.laddr.port == port:
                accepted.add((conn.raddr.ip, conn.raddr.port))
            elif conn.raddr.port == port:
                outgoing += 1
    if not readable:
        return RendezvousPeers(None, None)
    remote = sorted({ip[len("::ffff:"):] if ip.startswith("::ffff:") else ip
                     for ip, _ in accepted})
    return RendezvousPeers(len(accepted), outgoing > 0, tuple(remote))
