"""The rank's own JSON-lines event file: the only channel from a rank to the supervisor.

Results are never scraped from stdout: each rank appends one JSON object per line to its
own file and flushes it at once, so the supervisor can tail the file while the job runs,
tell which phase a silent rank is stuck in, and still read every finished phase after a
crash. Every line carries the rank, the phase, monotonic and wall-clock times: monotonic
times are comparable between processes of one host (CLOCK_MONOTONIC is system-wide on
Linux), wall times between hosts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class EventWriter:
    """Appends events for one rank; ``phase()`` brackets a phase with begin and end lines."""

    def __init__(self, path: str, rank: int) -> None:
        self.rank = rank
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the rank

    def emit(self, kind: str, phase: str, t_start: float, t_end: float | None,
             wall_start: float, wall_end: float | None, **data: Any) -> None:
        record = {"rank": self.rank, "kind": kind, "phase": phase, "t_start": t_start,
                  "t_end": t_end, "wall_start": wall_start, "wall_end": wall_end, **data}
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    @contextmanager
    def phase(self, name: str, **data: Any) -> Iterator[dict[str, Any]]:
        """Write ``begin`` now and ``end`` when the block finishes; the block may add data.

        No end line is written when the block raises: an open phase is exactly what the
        supervisor reports as the place a rank failed.
        """
        t0, w0 = time.monotonic(), time.time()
        self.emit("begin", name, t0, None, w0, None, **data)
        extra: dict[str, Any] = {}
        yield extra
        self.emit("end", name, t0, time.monotonic(), w0, time.time(), **extra)

    def step(self, step: int, t_start: float, wall_start: float, **data: Any) -> None:
        self.emit("step", "train", t_start, time.monotonic(), wall_start, time.time(),
                  step=step, **data)

    def close(self) -> None:
        self._file.close()


# Files are named by the rank's index on its node (LOCAL_RANK), not by its global rank:
# a node's supervisor knows how many ranks it started, but not where they fall in the job
# when the nodes run different numbers of ranks (torchrun numbers them by every node's
# real count). Each event carries the global rank, so the supervisor learns it from there.


def event_path(run_dir: str, local_rank: int) -> str:
    return os.path.join(run_dir, f"local{local_rank}.jsonl")


def stderr_path(run_dir: str, local_rank: int) -> str:
    return os.path.join(run_dir, f"local{local_rank}.stderr")


def stacks_path(run_dir: str, local_rank: int) -> str:
    """Where the rank's faulthandler writes every thread's stack on SIGUSR1."""
    return os.path.join(run_dir, f"local{local_rank}.stacks")
