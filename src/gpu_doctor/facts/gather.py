"""Gather every fact once, probes in parallel, none able to stop the others.

The slow probes (the interpreter probe that imports torch, the NVML child) run side by
side with the quick in-process ones, so a run costs about as much as importing torch.
A probe that raises becomes an unavailable fact carrying its error text; the doctor
goes on and the checks that needed it say why they were skipped.
"""

from __future__ import annotations

import platform
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from gpu_doctor import __version__
from gpu_doctor.facts.driver_files import probe_driver_files
from gpu_doctor.facts.env import Env
from gpu_doctor.facts.environ import probe_environ
from gpu_doctor.facts.host import probe_host
from gpu_doctor.facts.interconnect import probe_interconnect
from gpu_doctor.facts.nvml import NVML_TIMEOUT_S, probe_nvml
from gpu_doctor.facts.os_info import probe_os
from gpu_doctor.facts.snapshot import FactRecord, Facts
from gpu_doctor.facts.torch_probe import TORCH_PROBE_TIMEOUT_S, probe_python
from gpu_doctor.facts.wsl import probe_wsl


@dataclass(frozen=True)
class GatherOptions:
    python: str = sys.executable
    torch_timeout_s: float = TORCH_PROBE_TIMEOUT_S
    nvml_timeout_s: float = NVML_TIMEOUT_S


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


def gather(env: Env, options: GatherOptions | None = None) -> Facts:
    options = options or GatherOptions()
    jobs: list[Callable[[], list[FactRecord]]] = [
        lambda: _guarded(("python", "torch"),
                         lambda: probe_python(env, options.python, options.torch_timeout_s)),
        lambda: _guarded(("nvml",), lambda: [probe_nvml(env, options.nvml_timeout_s)]),
        lambda: _timed("os", lambda: probe_os(env)),
        lambda: _timed("host", lambda: probe_host(env)),
        lambda: _timed("driver", lambda: probe_driver_files(env)),
        lambda: _timed("env_vars", lambda: probe_environ(env)),
        lambda: _timed("interconnect", lambda: probe_interconnect(env)),
        lambda: _timed("wsl", lambda: probe_wsl(env)),
    ]
    facts = Facts(meta={
        "gathered_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tool_version": __version__,
        "doctor_python": platform.python_version(),
        "target_python": options.python,
    })
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        for records in pool.map(lambda job: job(), jobs):
            for record in records:
                facts.add(record)
    return facts
