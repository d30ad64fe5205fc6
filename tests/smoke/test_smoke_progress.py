"""Progress where a CI log is watching: a line per phase and every few seconds of steps."""

from __future__ import annotations

import io

from ddp_doctor.smoke.monitor import RankState
from ddp_doctor.smoke.progress import LineProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def state(rank: int, phases: list[str], steps: int = 0, done: bool = False) -> RankState:
    """A rank that has begun PHASES (the last one still open) and done STEPS steps."""
    s = RankState(rank, f"/nonexistent/rank{rank}.jsonl")
    s.events = [{"kind": "begin", "phase": p} for p in phases]
    s.open_phase = phases[-1] if phases and not done else None
    s.last_phase = "done" if done else None
    s.steps_done, s.done = steps, done
    return s


RDZV = ["init_process_group"]
TRAIN = [*RDZV, "barrier", "all_reduce_check", "all_reduce_bandwidth", "data", "model", "train"]


def test_phases_and_steps_become_lines_with_the_slowest_rank():
    out, clock = io.StringIO(), Clock()
    progress = LineProgress(out, every_s=5.0, clock=clock)
    progress.note("asking torch in /venv/bin/python which GPUs it can use")
    progress.begin("smoke", [0, 1], 30)
    clock.now += 1
    progress.update([state(0, RDZV), state(1, [])])  # rank 1 still importing torch
    clock.now += 1
    # between two polls rank 1 went through the rendezvous, the barrier, ... into training:
    # each phase still gets its line, in order
    progress.update([state(0, TRAIN, 3), state(1, TRAIN, 1)])
    clock.now += 3  # under 5 s since training began: no step line yet
    progress.update([state(0, TRAIN, 9), state(1, TRAIN, 8)])
    clock.now += 3
    progress.update([state(0, TRAIN, 20), state(1, TRAIN, 17)])
    progress.update([state(0, TRAIN, 21), state(1, TRAIN, 18)])  # same second: no repeat
    clock.now += 4
    progress.update([state(0, TRAIN, 30, done=True), state(1, TRAIN, 30, done=True)])
    progress.end()
    assert out.getvalue().splitlines() == [
        "ddp-doctor: smoke: asking torch in /venv/bin/python which GPUs it can use",
        "ddp-doctor: smoke: launched 2 ranks (ranks 0-1), 30 steps each (0 s)",
        "ddp-doctor: smoke: rendezvous: init_process_group (slowest: rank 1) (2 s)",
        "ddp-doctor: smoke: all ranks joined; first barrier (slowest: rank 1) (2 s)",
        "ddp-doctor: smoke: checking all_reduce (slowest: rank 1) (2 s)",
        "ddp-doctor: smoke: measuring all_reduce bandwidth (slowest: rank 1) (2 s)",
        "ddp-doctor: smoke: building the data loader (slowest: rank 1) (2 s)",
        "ddp-doctor: smoke: building the model and DDP (slowest: rank 1) (2 s)",
        "ddp-doctor: smoke: training (slowest: rank 1) (2 s)",
        "ddp-doctor: smoke: step 17/30 (slowest: rank 1) (8 s)",
        "ddp-doctor: smoke: every rank finished (12 s)",
        "ddp-doctor: smoke: ranks exited (12 s)",
    ]


def test_one_rank_and_a_scaling_label():
    out, clock = io.StringIO(), Clock()
    progress = LineProgress(out, clock=clock)
    progress.begin("1 rank", [0], 10)
    progress.update([state(0, ["data", "model"])])
    assert out.getvalue().splitlines() == [
        "ddp-doctor: 1 rank: launched rank 0, 10 steps (0 s)",
        "ddp-doctor: 1 rank: building the data loader (0 s)",
        "ddp-doctor: 1 rank: building the model and DDP (0 s)",
    ]
