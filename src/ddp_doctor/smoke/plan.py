"""Whether ``ddp-doctor doctor`` should run the smoke job after the checks, and how.

The checks come first; the smoke job is only worth running when nothing they found
makes it certain to fail (torch missing, or GPUs asked for that are not usable), or
pointless: on a machine whose GPUs NVML lists but CUDA cannot use, a CPU run would say
nothing about them, so it is skipped naming the finding that blocks CUDA. Then it is
sized from the launch plan (--gpus, --global-batch, --workers) when one was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ddp_doctor.model import Evidence, Finding, Report, Severity
from ddp_doctor.smoke.launch import MIN_BATCH, SmokeOptions
from ddp_doctor.wording import count

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


def plan_smoke(report: Report, facts_torch: Mapping[str, Any] | None, plan: Mapping[str, Any],
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
            return (f"blocked by {', '.join(blockers)}: NVML lists {count(nvml_gpus, 'GPU')} but "
                    "torch cannot use them; a CPU run would prove nothing about them")
    # No usable GPU: "auto", not "cpu". The user asked for no CPU run, so the job's own
    # verdict must say it fell back (SMK017: GPU training not proven), not "ready".
    device = "cuda" if gpus else "auto"
    nproc = wanted or (gpus if gpus else None)
    options = replace(base, device=device, nproc=nproc)
    if plan.get("batch"):
        # The global batch is shared by every rank of the job, on every node.
        world = (nproc or 2) * (base.nnodes or 1)
        options = replace(options, batch=max(MIN_BATCH, int(plan["batch"]) // world))
    if plan.get("workers") is not None:
        options = replace(options, workers=int(plan["workers"]))
    return options


def with_check_causes(findings: list[Finding], report: Report) -> list[Finding]:
    """SMK017 (GPU training not proven) names the checks' findings that explain it."""
    causes = _blocking(report, (*_GPU_AREAS, "wsl"))
    if not causes:
        return findings
    return [replace(f, evidence=(*f.evidence, Evidence(
                "the checks found", ", ".join(causes), "this report's findings")))
            if f.code.id == "SMK017" else f for f in findings]
