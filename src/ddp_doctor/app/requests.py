"""What a command asked for, as typed: the common options, the machine and plan of
``check``/``doctor``, the smoke job's options; and the checks of those inputs that need no
work (a policy file, an interpreter).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ddp_doctor.facts.interpreter import InterpreterError, validate_interpreter
from ddp_doctor.facts.seam import RealEnv
from ddp_doctor.policy.load import Policy, PolicyError, find_policy
from ddp_doctor.usage import (
    Limit,
    OutputPath,
    UsageError,
    check_outputs,
)

# The launch plan of check and doctor: the job the user is about to start.
GPUS = Limit("--gpus", 1)


GLOBAL_BATCH = Limit("--global-batch", 1)


PLAN_WORKERS = Limit("--workers", 0)


PROBE_TIMEOUT = Limit("--probe-timeout", 1, whole=False, unit=" s")


@dataclass(frozen=True)
class Common:
    """The options every report-producing command takes (check, doctor, smoke, diagnose).

    Each has one meaning everywhere: how much the console shows (quiet, verbose), what
    fails the run (strict), which files are written (json, markdown, junit, bundle with
    force), which policy judges it (config) and how much identity is removed (anonymize).
    """

    quiet: bool = False
    verbose: bool = False
    strict: bool = False
    json: Optional[str] = None
    markdown: Optional[str] = None
    junit: Optional[str] = None
    bundle: Optional[str] = None
    force: bool = False
    config: Optional[Path] = None
    anonymize: bool = False

    @property
    def reports(self) -> list[OutputPath]:
        return [OutputPath("--json", self.json), OutputPath("--markdown", self.markdown),
                OutputPath("--junit", self.junit)]

    @property
    def to_stdout(self) -> bool:
        """A report goes to stdout: the console report and live progress stay off it."""
        return "-" in (self.json, self.markdown, self.junit)


@dataclass(frozen=True)
class MachineRequest:
    """What check and doctor examine: this machine (or saved facts) and the planned job.

    The numbers are kept as typed so that a bad one is reported with the text given.
    """

    python: Optional[str] = None
    facts: Optional[Path] = None
    save_facts: Optional[Path] = None
    probe_timeout: Optional[str] = None
    gpus: Optional[str] = None
    global_batch: Optional[str] = None
    workers: Optional[str] = None


@dataclass(frozen=True)
class SmokeRequest:
    """The smoke job as typed on the command line; ``None`` means "choose for this machine"."""

    device: str = "auto"
    nproc: Optional[str] = None
    steps: Optional[str] = None
    batch_per_process: Optional[str] = None
    imgsz: Optional[str] = None
    model: str = "n"
    workers: Optional[str] = None
    launcher: str = "torchrun"
    backend: str = "auto"
    mode: str = "ddp"
    sync_bn: bool = False
    amp: bool = True
    scaling: bool = False
    timeout: Optional[str] = None
    stall_timeout: Optional[str] = None
    nnodes: Optional[str] = None
    node_rank: Optional[str] = None
    master_addr: Optional[str] = None
    master_port: Optional[str] = None
    python: Optional[str] = None
    trainer: str = "builtin"


def check_common(common: Common, *more: OutputPath) -> None:
    """The common options, judged the same way for every command, before any work."""
    if common.quiet and common.verbose:
        raise UsageError("--quiet and --verbose contradict each other")
    outputs: Sequence[OutputPath] = (*common.reports, *more)
    check_outputs(outputs, common.bundle, common.force)


def load_policy(config: Optional[Path]) -> Optional[Policy]:
    """The CI policy (--config, or the nearest ddp-doctor.toml / pyproject.toml), or None."""
    try:
        return find_policy(config, Path.cwd(), _every_code_id)
    except PolicyError as exc:
        raise UsageError(str(exc)) from None


def _every_code_id() -> set[str]:
    """Every code a policy may name: the built-in families' and the installed plugins'."""
    from ddp_doctor.codebook import all_codes  # every family: imported only for a policy

    return set(all_codes())


def interpreter(python: str) -> str:
    try:
        return validate_interpreter(RealEnv(), python)
    except InterpreterError as exc:
        raise UsageError(str(exc)) from None
