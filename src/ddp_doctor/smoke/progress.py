"""Where the live progress of a smoke run goes: bars on a terminal, plain lines elsewhere.

A CI log shows nothing between a command's start and its end unless the command prints:
a slow or stuck run would look frozen until its deadline. So when stderr is not a
terminal, each phase is one line as the slowest rank reaches it (rendezvous, the first
step, ...), and while the ranks train, one line every few seconds says how far they are.
The terminal gets live per-rank bars instead (``RichProgress``); ``-q`` gets neither.
These follow a running job, so they live with the smoke job, not with the renderers of a
finished Report (``report/``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from ddp_doctor.smoke.monitor import RankState
from ddp_doctor.wording import count


class ProgressSink(Protocol):
    """Where live progress goes: the terminal's per-rank bars, plain lines for a CI log, or
    nothing (``-q``, or a report on stdout)."""

    def note(self, text: str) -> None: ...

    def begin(self, label: str, ranks: list[int], steps: int) -> None: ...

    def update(self, states: list[RankState]) -> None: ...

    def end(self) -> None: ...


# What each phase of the job means to a person watching a log (train_smoke/worker.py).
PHASE_WORDS = {
    "init_process_group": "rendezvous: init_process_group",
    "nodes": "all ranks joined; exchanging node summaries",
    "barrier": "all ranks joined; first barrier",
    "all_reduce_check": "checking all_reduce",
    "all_reduce_bandwidth": "measuring all_reduce bandwidth",
    "host_copy": "measuring host-to-GPU copy rates",
    "data": "building the data loader",
    "model": "building the model and DDP",
    "train": "training",
    "checksum": "comparing parameters across ranks",
    "destroy_process_group": "shutting down the process group",
}
STEP_EVERY_S = 5.0


class LineProgress:
    """One line per phase, and one every few seconds of training, on a text stream."""

    def __init__(self, stream: TextIO | None = None, every_s: float = STEP_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.every_s, self.clock = every_s, clock
        self.prefix, self.steps = "smoke", 0
        self.started = self.last_step_line = 0.0
        self.shown, self.finished = 0, False  # phases of the slowest rank already printed

    def _line(self, text: str) -> None:
        elapsed = self.clock() - self.started if self.started else 0.0
        self.stream.write(f"ddp-doctor: {self.prefix}: {text}"
                          + (f" ({elapsed:.0f} s)" if self.started else "") + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        self._line(text)

    def begin(self, label: str, ranks: list[int], steps: int) -> None:
        self.prefix = label or "smoke"
        self.steps, self.shown, self.finished = steps, 0, False
        self.started = self.last_step_line = self.clock()
        self._line(f"launched {count(len(ranks), 'rank')} "
                   f"(ranks {ranks[0]}-{ranks[-1]}), {steps} steps each"
                   if len(ranks) > 1 else f"launched rank {ranks[0]}, {steps} steps")

    def update(self, states: list[RankState]) -> None:
        if not states:
            return
        slowest = min(states, key=lambda s: s.progress())
        # Every phase the slowest rank has begun, in order, even one that came and went
        # between two polls (a rendezvous on one node takes milliseconds).
        begun = [e["phase"] for e in slowest.events
                 if e.get("kind") == "begin" and isinstance(e.get("phase"), str)]
        who = "" if len(states) == 1 else f" (slowest: rank {slowest.rank})"
        for phase in begun[self.shown:]:
            self._line(PHASE_WORDS.get(phase, phase) + who)
            if phase == "train":
                self.last_step_line = self.clock()
        self.shown = max(self.shown, len(begun))
        if all(s.done for s in states) and not self.finished:
            self.finished = True
            self._line("every rank finished")
        if slowest.where == "train" and self.clock() - self.last_step_line >= self.every_s:
            self.last_step_line = self.clock()
            done = min(s.steps_done for s in states)
            self._line(f"step {done}/{self.steps}{who}")

    def end(self) -> None:
        self._line("ranks exited")
        self.started = 0.0


class RichProgress:
    """One bar per rank: steps done of the total and the phase it is in."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.tasks: dict[int, Any] = {}

    def note(self, text: str) -> None:
        """A phase before the bars (the torch probe), as one dim line that stays."""
        self.console.print(Text(f"· {text}", style="dim"), crop=False)

    def begin(self, label: str, ranks: list[int], steps: int) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[phase]}"),
                                 TimeElapsedColumn(), console=self.console, transient=True)
        prefix = f"{label}: " if label else ""
        self.tasks = {r: self.progress.add_task(f"{prefix}rank {r}", total=steps,
                                                phase="starting") for r in ranks}
        self.progress.start()

    def update(self, states: list[RankState]) -> None:
        if self.progress is None:
            return
        for state in states:
            task = self.tasks.get(state.rank)
            if task is not None:
                self.progress.update(task, completed=state.steps_done, phase=state.where)

    def end(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
