"""Gather every fact once, probes in parallel, none able to stop the others.

The slow probes (the interpreter probe that imports torch, the NVML child) run side by
side with the quick in-process ones, so a run costs about as much as importing torch.
A probe that raises becomes an unavailable fact carrying its error text; the doctor
goes on and the checks that needed it say why they were skipped.

Every probe also has a deadline. The child-process probes enforce their own (the torch and
NVML timeouts); the in-process ones could still block in the kernel, e.g. ``statvfs`` of a
working directory on a hung NFS or Lustre mount, so each runs in a daemon thread that the
gather stops waiting for at its deadline: the fact is recorded as failed ("did not finish
within N s") and the thread, if it never returns, does not keep the doctor from exiting.

The two child processes start first, before this module even imports the in-process
probes: the torch probe is the longest part of any run, so every moment the parent spends
before starting it is added to the run, and every moment after is hidden behind it. Its
thread is waited for until it is starting its child (``probe_starting``): imports made
meanwhile, here or by the caller, would hold the GIL that thread needs to get there.
"""

from __future__ import annotations

import platform
import sys
import threading
import time
import traceback
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

from ddp_doctor import __version__
from ddp_doctor.facts.nvidia_smi_text import NVIDIA_SMI_TEXT_TIMEOUT_S
from ddp_doctor.facts.nvml import NVML_TIMEOUT_S, probe_nvml
from ddp_doctor.facts.seam import Env
from ddp_doctor.facts.snapshot import FactRecord, Facts
from ddp_doctor.facts.torch_probe import TORCH_PROBE_TIMEOUT_S, probe_python

if TYPE_CHECKING:  # the kernel-log probe loads with the other in-process ones, later
    from ddp_doctor.facts.kernel_log import LogCodeOf

# In-process probes read /proc, /sys and a few syscalls: well under a second normally.
IN_PROCESS_TIMEOUT_S = 15.0
# Slack on top of a child probe's own timeout, for starting it and reading its output.
CHILD_SLACK_S = 10.0
# The longest the gather waits for the torch probe's child to be started before it goes on
# to the in-process probes (it is set within milliseconds; the bound is for a stuck exec).
PROBE_START_WAIT_S = 2.0


@dataclass(frozen=True)
class GatherOptions:
    python: str = sys.executable
    torch_timeout_s: float = TORCH_PROBE_TIMEOUT_S
    nvml_timeout_s: float = NVML_TIMEOUT_S
    in_process_timeout_s: float = IN_PROCESS_TIMEOUT_S
    # Keep the raw `nvidia-smi -q` / `topo -m` text (only --bundle needs it).
    nvidia_smi_text: bool = False
    nvidia_smi_timeout_s: float = NVIDIA_SMI_TEXT_TIMEOUT_S
    # What diagnose's rules make of a kernel-log line (logrules.code_of_line): the rules
    # lie above the facts, so the caller hands them in; without them the code is None.
    log_code_of: LogCodeOf | None = None
    # Set as the torch probe's child starts (or the probe fails to): a caller that has
    # imports of its own to make waits for it, as the gather does before importing the
    # in-process probes, since an import holds the GIL the probe's thread needs to get
    # its child going.
    probe_starting: threading.Event | None = None


@dataclass(frozen=True)
class _Job:
    names: tuple[str, ...]  # the facts it records
    run: Callable[[], list[FactRecord]]
    deadline_s: float


def _start(job: _Job) -> Future[list[FactRecord]]:
    """Run JOB in a daemon thread: one stuck in a syscall cannot hold up interpreter exit."""
    future: Future[list[FactRecord]] = Future()

    def target() -> None:
        try:
            future.set_result(job.run())
        except BaseException as exc:  # _timed/_guarded catch Exception; keep the rest too
            future.set_exception(exc)

    threading.Thread(target=target, name=f"probe-{job.names[0]}", daemon=True).start()
    return future


def _timed(name: str, fn: Callable[[], Any]) -> list[FactRecord]:
    """Run an in-process probe; any exception becomes an unavailable fact."""
    start = time.monotonic()
    try:
        value = fn()
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        location = f"{where.filename.rsplit('/', 1)[-1]}:{where.lineno}"
        return [FactRecord(name, ok=False, error=f"{type(exc).__name__}: {exc} (at {location})",
                           duration_s=time.monotonic() - start)]
    return [FactRecord(name, ok=True, value=value, duration_s=time.monotonic() - start)]


def _guarded(names: tuple[str, ...], fn: Callable[[], list[FactRecord]]) -> list[FactRecord]:
    """Run a child-process probe; a bug in the parent side still yields records."""
    start = time.monotonic()
    try:
        return fn()
    except Exception as exc:
        return [FactRecord(n, ok=False, error=f"{type(exc).__name__}: {exc}",
                           duration_s=time.monotonic() - start) for n in names]


def _in_process(name: str, fn: Callable[[], Any], deadline_s: float) -> _Job:
    return _Job((name,), lambda: _timed(name, fn), deadline_s)


def _child_jobs(env: Env, options: GatherOptions, starting: threading.Event) -> list[_Job]:
    """The probes that run child processes: the torch probe and the NVML child."""
    def torch_probe() -> list[FactRecord]:
        try:
            return probe_python(env, options.python, options.torch_timeout_s, starting)
        finally:
            starting.set()  # also when the probe could not start

    return [
        _Job(("python", "torch"), lambda: _guarded(("python", "torch"), torch_probe),
             options.torch_timeout_s + CHILD_SLACK_S),
        _Job(("nvml",), lambda: _guarded(("nvml",), lambda: [probe_nvml(env,
                                                                         options.nvml_timeout_s)]),
             options.nvml_timeout_s + CHILD_SLACK_S),
    ]


def _in_process_jobs(env: Env, options: GatherOptions) -> list[_Job]:
    """The probes that read this machine from the doctor's own process; their modules are
    imported here, once the child probes are under way."""
    from ddp_doctor.facts.driver_files import probe_driver_files
    from ddp_doctor.facts.environment_variables import probe_environ
    from ddp_doctor.facts.host import probe_host
    from ddp_doctor.facts.interconnect import probe_interconnect
    from ddp_doctor.facts.kernel_log import COMMANDS as KERNEL_LOG_COMMANDS
    from ddp_doctor.facts.kernel_log import KERNEL_LOG_TIMEOUT_S, probe_kernel_log
    from ddp_doctor.facts.nvidia_smi_text import probe_nvidia_smi_text
    from ddp_doctor.facts.os_info import probe_os
    from ddp_doctor.facts.wsl import probe_wsl

    quick = options.in_process_timeout_s
    log_code_of = options.log_code_of or (lambda line: None)
    jobs = [
        _in_process("os", lambda: probe_os(env), quick),
        _in_process("host", lambda: probe_host(env), quick),
        _in_process("driver", lambda: probe_driver_files(env), quick),
        _in_process("env_vars", lambda: probe_environ(env), quick),
        _in_process("interconnect", lambda: probe_interconnect(env), quick),
        _in_process("wsl", lambda: probe_wsl(env), quick),
        # Up to three commands in turn, each under its own deadline.
        _in_process("kernel_log", lambda: probe_kernel_log(env, log_code_of=log_code_of),
                    len(KERNEL_LOG_COMMANDS) * KERNEL_LOG_TIMEOUT_S + CHILD_SLACK_S),
    ]
    if options.nvidia_smi_text:
        smi_timeout = options.nvidia_smi_timeout_s
        jobs.append(_in_process("nvidia_smi_text",
                                lambda: probe_nvidia_smi_text(env, smi_timeout),
                                2 * smi_timeout + CHILD_SLACK_S))
    return jobs


def gather(env: Env, options: GatherOptions | None = None) -> Facts:
    options = options or GatherOptions()
    facts = Facts(meta={
        "gathered_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tool_version": __version__,
        "doctor_python": platform.python_version(),
        "target_python": options.python,
    })
    start = time.monotonic()
    starting = options.probe_starting or threading.Event()
    futures = [(job, _start(job)) for job in _child_jobs(env, options, starting)]
    starting.wait(PROBE_START_WAIT_S)
    futures += [(job, _start(job)) for job in _in_process_jobs(env, options)]
    for job, future in futures:
        left = max(0.0, start + job.deadline_s - time.monotonic())
        try:
            records = future.result(timeout=left)
        except FutureTimeout:
            records = [FactRecord(name, ok=False, error=f"the {name} probe did not finish within "
                                  f"{job.deadline_s:g} s (a hung mount?)",
                                  duration_s=time.monotonic() - start) for name in job.names]
        except BaseException as exc:  # not raised by _timed/_guarded; keep the fact anyway
            records = [FactRecord(name, ok=False, error=f"{type(exc).__name__}: {exc}",
                                  duration_s=time.monotonic() - start) for name in job.names]
        for record in records:
            facts.add(record)
    return facts
