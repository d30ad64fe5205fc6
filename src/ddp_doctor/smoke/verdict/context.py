"""What the verdict knows about a finished smoke run, and how it names where a rank was.

Every part of the verdict (failures, criteria) reads the same ``RunContext`` and words
its findings the same way: a rank is "in train (after step 4 of 30)", and a rerun command
keeps the user's own options (``rerun_command``), so the command a finding suggests
differs from the one that ran only in what it means to change.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, fields, replace
from typing import Any

from ddp_doctor.smoke.launch import SmokeOptions
from ddp_doctor.smoke.monitor import Outcome, RankState

# SmokeOptions field -> the smoke command's flag, for rerun commands that keep the user's
# own options. Booleans: (flag when True, flag when False).
_FLAGS: dict[str, Any] = {
    "device": "--device", "nproc": "--nproc", "steps": "--steps", "batch": "--batch-per-process",
    "imgsz": "--imgsz", "model": "--model", "workers": "--workers",
    "launcher": "--launcher", "mode": "--mode", "backend": "--backend",
    "sync_bn": ("--sync-bn", None),
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
    nnodes: int = 1  # nodes in the job (a multi-node DDP run), and this node's rank
    node_rank: int = 0

    def rerun(self, env: str = "", **changes: Any) -> str:
        return rerun_command(self.options, env, **changes)

    @property
    def nccl(self) -> bool:
        return self.backend == "nccl"


def phase_of(state: RankState, steps: int) -> str:
    """Where the rank was: the phase it was in, or the last one it finished."""
    if not state.events:
        return "start-up (no event yet)"
    if state.where == "train" and state.open_phase == "train":
        return f"train (after step {state.steps_done} of {steps})"
    if state.open_phase:
        return state.open_phase
    return f"after {state.where}"
