"""Run the checks on gathered facts and derive each check's status.

Checks stay plain functions that yield findings: the runner decides skip (a missing fact,
a blocking check) and error, and ``model.status_of`` turns the findings into pass, warn
or fail, the same rule the smoke job, ``diagnose`` and the policy use. The runner contains
every failure: a check that raises or emits a code it did not declare becomes an ``error``
result with the traceback, a plugin that failed to load becomes one too, and the run
always goes on.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ddp_doctor import __version__
from ddp_doctor.facts.snapshot import Facts
from ddp_doctor.facts.view import FactsView
from ddp_doctor.model import CheckResult, Finding, Report, Status, status_of
from ddp_doctor.registry import Catalogue, CheckSpec, Summary

_BLOCKING = (Status.FAIL, Status.ERROR, Status.SKIP)


def _blocking_reason(spec: CheckSpec, done: dict[str, CheckResult]) -> str | None:
    for other_id in spec.blocked_by:
        other = done.get(other_id)
        if other is None or other.status not in _BLOCKING:
            continue
        codes = ", ".join(dict.fromkeys(f.code.id for f in other.findings))
        return f"blocked by {codes or other_id}" + (f" ({other_id})" if codes else "")
    return None


def run_check(spec: CheckSpec, facts: Facts | FactsView,
              done: dict[str, CheckResult]) -> CheckResult:
    view = FactsView.of(facts)
    base: dict[str, Any] = {"check_id": spec.id, "title": spec.title, "area": spec.area}
    missing = [name for name in spec.requires if not view.available(name)]
    if missing:
        reason = view.why_unavailable(missing[0])
        return CheckResult(**base, status=Status.SKIP, summary=reason, skip_reason=reason)
    blocked = _blocking_reason(spec, done)
    if blocked:
        return CheckResult(**base, status=Status.SKIP, summary=blocked, skip_reason=blocked)
    start = time.monotonic()
    findings: list[Finding] = []
    summary: str | None = None
    command: str | None = None
    try:
        for item in spec.func(view):
            if isinstance(item, Summary):
                summary, command = item.text, item.command
            elif isinstance(item, Finding):
                if item.code.id not in spec.code_ids:
                    raise ValueError(f"check emitted undeclared code {item.code.id}")
                findings.append(item)
            else:
                raise TypeError(f"check yielded {type(item).__name__}, not Finding or Summary")
    except Exception as exc:
        return CheckResult(
            **base,
            status=Status.ERROR,
            summary=f"check crashed: {type(exc).__name__}: {exc}",
            error=traceback.format_exc(limit=8),
            duration_s=time.monotonic() - start,
        )
    status = status_of(findings)
    if summary is None:
        summary = findings[0].title if findings else "no problem found"
    return CheckResult(**base, status=status, summary=summary, findings=tuple(findings),
                       duration_s=time.monotonic() - start, command=command)


def run_checks(catalogue: Catalogue, facts: Facts | FactsView) -> list[CheckResult]:
    """Every check of CATALOGUE on one view of FACTS, in catalogue order."""
    view = FactsView.of(facts)
    done: dict[str, CheckResult] = {}
    results = [
        CheckResult(
            check_id=f"plugin:{failure.plugin}",
            title=f"Load plugin {failure.plugin}",
            area="plugins",
            status=Status.ERROR,
            summary=f"plugin failed to load: {failure.error.strip().splitlines()[-1]}",
            error=failure.error,
        )
        for failure in catalogue.failures
    ]
    for spec in catalogue.specs:
        result = run_check(spec, view, done)
        done[spec.id] = result
        results.append(result)
    return results


def build_report(catalogue: Catalogue, facts: Facts | FactsView,
                 facts_source: str = "live") -> Report:
    return Report(
        tool_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        results=tuple(run_checks(catalogue, facts)),
        facts_source=facts_source,
        environment=summarize_environment(facts),
        probe_errors=facts.errors(),
    )


def _gpu_name(gpu: Mapping[str, Any]) -> str:
    """A GPU's model, or where it is when NVML could not name it (a GPU with no handle)."""
    if gpu.get("name"):
        return str(gpu["name"])
    where = f"at {gpu['pci_bus_id']}" if gpu.get("pci_bus_id") else str(gpu.get("index", "?"))
    return f"GPU {where} (model not shown)"


def summarize_environment(facts: Facts | FactsView) -> dict[str, Any]:
    """The few facts a reader of any report wants first, without the whole snapshot."""
    view = FactsView.of(facts)
    os_fact, nvml, python = view.os(), view.nvml(), view.python()
    build, cuda = view.torch_build(), view.torch_cuda()
    wsl = os_fact.get("wsl") or {}
    return {
        "os": view.distro().get("pretty") or os_fact.get("system"),
        "kernel": os_fact.get("kernel"),
        "wsl": wsl.get("version") if wsl.get("is_wsl") else None,
        "container": view.container().get("kind"),
        "python": python.get("version"),
        "python_executable": python.get("executable"),
        "driver": nvml.get("driver_version"),
        "driver_cuda": nvml.get("cuda_driver_version"),
        "gpus": [_gpu_name(g) for g in view.nvml_gpus()],
        "torch": build.get("version"),
        "torch_cuda": build.get("cuda"),
        "cuda_available": cuda.get("available"),
        "cuda_device_count": cuda.get("device_count"),
    }
