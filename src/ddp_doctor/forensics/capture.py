"""Take every rank's stack from outside, before a hung job is stopped.

The ranks are found in the job's own processes (``ddp_doctor.process`` knows them): a
process is a rank when its environment holds RANK (torchrun, accelerate, DeepSpeed's
launcher and Ultralytics' DDP all start ranks that way), or when a caller that knows the
ranks' pids says so (the smoke job: each rank writes its pid in its first event).
``mp.spawn`` children inherit no RANK (the script sets it later, in Python); they are
numbered in the order they were started, which is the order ``mp.spawn`` starts them.

Each stack is read with ``py-spy dump`` (native frames too where py-spy can unwind them;
every thread), all ranks at once, within a deadline; a rank of the smoke job also dumps
its own stack on SIGUSR1 through faulthandler (``train_smoke/worker.py``), which needs no
ptrace permission and is read when py-spy cannot be. Nothing here stops or changes a
process: py-spy pauses it for the moment of the read, faulthandler writes and returns.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ddp_doctor.forensics.stacks import (
    RankStack,
    last_faulthandler_dump,
    parse_faulthandler,
    parse_py_spy,
)
from ddp_doctor.process.tag import environ_of

# py-spy pauses a process for the read; native unwinding can take seconds on a loaded
# machine, and a read without native frames is tried next within the same budget.
DUMP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RankProcess:
    """A live process of the job that is one of its ranks."""

    pid: int
    rank: int | None
    how: str  # "RANK in its environment", "the smoke job's event file", "start order"


def py_spy_path() -> str | None:
    """py-spy beside this interpreter (ddp-doctor's own environment) or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def _is_python(proc: psutil.Process) -> bool:
    try:
        return "python" in os.path.basename(proc.cmdline()[0] if proc.cmdline() else "")
    except (psutil.Error, OSError, IndexError):
        return False


def find_ranks(procs: list[psutil.Process], known: dict[int, int] | None = None
               ) -> list[RankProcess]:
    """The ranks among a job's live processes, with their rank where it can be told."""
    if known:  # the caller knows the ranks: their helpers (DataLoader workers) are not ranks
        return sorted((RankProcess(p.pid, known[p.pid], "the smoke job's event file")
                       for p in procs if p.pid in known), key=lambda r: (r.rank or 0, r.pid))
    found: dict[int, RankProcess] = {}
    ranks_of = {p.pid: environ_of(p).get("RANK", "") for p in procs}
    for proc in procs:
        rank = ranks_of[proc.pid]
        with contextlib.suppress(psutil.Error):
            # A DataLoader worker inherits its rank's environment: it is not another rank.
            if ranks_of.get(proc.ppid()) == rank:
                continue
        if rank.isdigit() and _is_python(proc):
            found[proc.pid] = RankProcess(proc.pid, int(rank), "RANK in its environment")
    if found:
        return sorted(found.values(), key=lambda r: (r.rank is None, r.rank or 0, r.pid))
    # mp.spawn: python children of a python parent, none with RANK in its environment.
    pids = {p.pid for p in procs}
    children = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if _is_python(proc) and proc.ppid() in pids and "spawn_main" in " ".join(
                    proc.cmdline()):
                children.append(proc)
    children.sort(key=lambda p: p.create_time())
    return [RankProcess(p.pid, i, "start order (mp.spawn)") for i, p in enumerate(children)]


def _why(stderr: str) -> str:
    text = stderr.strip().splitlines()[0] if stderr.strip() else "py-spy failed"
    if "ermission" in stderr or "ptrace" in stderr.lower() or "EPERM" in stderr:
        return ("ptrace is not permitted here (a container without CAP_SYS_PTRACE, or "
                "kernel.yama.ptrace_scope): " + text[:160])
    return text[:200]


def py_spy_dump(pid: int, py_spy: str, timeout: float = DUMP_TIMEOUT_S
                ) -> tuple[str | None, str | None]:
    """(dump, None) or (None, why): native frames where py-spy can unwind them."""
    why = "py-spy failed"
    for extra in (["--native"], []):
        try:
            done = subprocess.run([py_spy, "dump", "--pid", str(pid), *extra],
                                  capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            why = f"py-spy did not answer within {timeout:g} s"
            continue
        except OSError as exc:
            return None, f"py-spy could not start: {exc}"
        if done.returncode == 0 and "Thread" in done.stdout:
            return done.stdout, None
        why = _why(done.stderr or done.stdout)
        if "ptrace is not permitted" in why:
            break
    return None, why


def faulthandler_dump(pid: int, path: Path, wait_s: float = 2.0) -> str | None:
    """Ask a smoke rank for its stack (SIGUSR1) and read the dump it appends to ``path``."""
    before = path.stat().st_size if path.exists() else 0
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return None
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if path.exists() and path.stat().st_size > before:
            time.sleep(0.1)  # every thread is written at once; let the write finish
            text = path.read_text(encoding="utf-8", errors="replace")[before:]
            return last_faulthandler_dump(text) or None
    return None


def capture_stacks(procs: list[psutil.Process], known: dict[int, int] | None = None,
                   faulthandler_files: dict[int, Path] | None = None,
                   budget_s: float = 15.0) -> list[RankStack]:
    """Every rank's stack, all at once, within ``budget_s``; a rank that could not be read
    is a RankStack with the reason."""
    ranks = find_ranks(procs, known)
    if not ranks:
        return []
    py_spy = py_spy_path()
    files = faulthandler_files or {}

    def one(rank: RankProcess) -> RankStack:
        text, why = (py_spy_dump(rank.pid, py_spy, min(DUMP_TIMEOUT_S, budget_s))
                     if py_spy else (None, "py-spy is not installed"))
        if text:
            parsed = parse_py_spy(text, rank.rank)
            if parsed:
                parsed[0].pid, parsed[0].raw = rank.pid, text
                return parsed[0]
        path = files.get(rank.pid)
        if path is not None:
            dump = faulthandler_dump(rank.pid, path)
            stack = parse_faulthandler(dump or "", rank.rank, rank.pid)
            if stack is not None:
                stack.raw = dump or ""
                return stack
        return RankStack(rank.pid, rank.rank, error=why or "no stack")

    with ThreadPoolExecutor(max_workers=min(16, len(ranks))) as pool:
        return list(pool.map(one, ranks))


def missing_ranks(stacks: list[RankStack], procs: list[psutil.Process]) -> list[int]:
    """Ranks of the world size (WORLD_SIZE of the ranks found) with no live process."""
    worlds = {environ_of(p).get("WORLD_SIZE", "") for p in procs
              if p.pid in {s.pid for s in stacks}}
    sizes = [int(w) for w in worlds if w.isdigit()]
    if len(sizes) != 1:
        return []
    present = {s.rank for s in stacks if s.rank is not None}
    return [r for r in range(sizes[0]) if r not in present]


def gone_ranks(expected: dict[int, int], alive: list[Any]) -> list[int]:
    """Ranks (rank -> pid, from the smoke job's events) whose process has ended."""
    live = {p.pid for p in alive}
    return sorted(rank for rank, pid in expected.items() if pid not in live)
