"""Whether ``ddp-doctor doctor`` should run the smoke job after the checks, and how.

The checks come first; the smoke job is only worth running when nothing they found
makes it certain to fail (torch missing, or GPUs asked for that are not usable), or
pointless: on a machine whose GPUs NVML lists but CUDA cannot use, a CPU run would say
nothing about them, so it is skipped naming the finding that blocks CUDA. Then it is
sized from the launch plan (--gpus, --global-batch, --workers) when one was given.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ddp_doctor.model import Report, Severity
from ddp_doctor.smoke.launch import MIN_BATCH, SmokeOptions

# Findings about CUDA, GPUs or the torch build that make a CUDA smoke job pointless.
_GPU_AREAS = ("driver", "cuda", "visibility", "pytorch", "launch")


def _blocking(report: Report, areas: tuple[str, ...], codes: tuple[str, ...] = ()) -> list[str]:
    found = []
    for result in report.results:
        for finding in result.findings:
            if finding.code.id in codes or (finding.effective_severity is Severity.ERROR
                                            and result.area in areas):
                found.append(finding.code.id)
    return list(dict.fromkeys(found))


def plan_smoke(report: Report, facts_torch: dict[str, Any] | None, plan: dict[str, Any],
               base: SmokeOptions, nvml_gpus: int = 0) -> SmokeOptions | str:
    """The options for the smoke run, or the reason it is skipped.

    ``nvml_gpus`` is how many GPUs the driver (NVML) lists on this machine.
    """
    torch = facts_torch or {}
    if not torch.get("importable"):
        blockers = _blocking(report, (), ("TOR001",)) or ["TOR001"]
        return f"blocked by {', '.join(blockers)}: torch cannot be imported"
    cuda = torch.get("cuda") or {}
    gpus = int(cuda.get("device_count") or 0) if cuda.get("available") else 0
    wanted = plan.get("gpus")
    if wanted and gpus < wanted:
        blockers = _blocking(report, _GPU_AREAS) or ["PLN001"]
        return (f"blocked by {', '.join(blockers)}: --gpus {wanted} asks for GPUs, "
                f"{gpus} usable")
    if not gpus and nvml_gpus:
        blockers = _blocking(report, _GPU_AREAS)
        if blockers:
            return (f"blocked by {', '.join(blockers)}: NVML lists {nvml_gpus} GPU(s) but "
                    "torch cannot use them; a CPU run would prove nothing about them")
    device = "cuda" if gpus else "cpu"
    nproc = wanted or (gpus if gpus else None)
    options = replace(base, device=device, nproc=nproc)
    if plan.get("batch"):
        options = replace(options, batch=max(MIN_BATCH, int(plan["batch"]) // (nproc or 2)))
    if plan.get("workers") is not None:
        options = replace(options, workers=int(plan["workers"]))
    return options
