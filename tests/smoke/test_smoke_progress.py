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


def state(rank: int, phase: str | None, steps: int = 0, done_phase: str | None = None
          ) -> RankState:
    s = RankState(rank, f"/nonexistent/rank{rank}.jsonl")
    s.open_phase, s.last_phase, s.steps_done = phase, done_phase, steps
    return s


def test_phases_and_steps_become_lines_with_the_slowest_rank():
    out, clock = io.StringIO(), Clock()
    progress = LineProgress(out, every_s=5.0, clock=clock)
    progress.note("asking torch in /venv/bin/python which GPUs it can use")
    progress.begin("smoke", [0, 1], 30)
    clock.now += 1
    progress.update([state(0, "init_process_group"), state(1, None)])  # rank 1 still importing
    progress.update([state(0, "barrier"), state(1, "init_process_group")])
    clock.now += 2
    progress.update([state(0, "train", 3), state(1, "train", 1)])
    clock.now += 3  # under 5 s since training began: no step line yet
    progress.update([state(0, "train", 9), state(1, "train", 8)])
    clock.now += 3
    progress.update([state(0, "train", 20), state(1, "train", 17)])
    progress.update([state(0, "train", 21), state(1, "train", 18)])  # same second: no repeat
    clock.now += 4
    progress.end()
    assert out.getvalue().splitlines() == [
        "ddp-doctor: smoke: asking torch in /venv/bin/python which GPUs it can use",
        "ddp-doctor: smoke: launched 2 ranks (ranks 0-1), 30 steps each (0 s)",
        "ddp-doctor: smoke: starting Python and importing torch (slowest: rank 1) (1 s)",
        "ddp-doctor: smoke: rendezvous: init_process_group (slowest: rank 1) (1 s)",
        "ddp-doctor: smoke: training (slowest: rank 1) (3 s)",
        "ddp-doctor: smoke: step 17/30 (slowest: rank 1) (9 s)",
        "ddp-doctor: smoke: ranks exited (13 s)",
    ]


def test_one_rank_and_a_scaling_label():
    out, clock = io.StringIO(), Clock()
    progress = LineProgress(out, clock=clock)
    progress.begin("1 rank", [0], 10)
    progress.update([state(0, "model")])
    assert out.getvalue().splitlines() == [
        "ddp-doctor: 1 rank: launched rank 0, 10 steps (0 s)",
        "ddp-doctor: 1 rank: building the model and DDP (0 s)",
    ]
