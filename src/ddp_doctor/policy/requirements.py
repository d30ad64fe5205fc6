"""Each requirement of a CI policy judged against one run's facts and smoke results.

A pure function of the facts and the smoke job's ``data`` (as ``smoke.py`` and
``smoke_verdict.measurements`` write it): nothing is re-gathered. A requirement the run
cannot judge (the smoke job did not run, the driver version is unreadable) is a POL006
warning naming why, so a policy never passes by silence.

Sources: NVIDIA driver versions are dot-separated numbers (nvidia-smi
``--query-gpu=driver_version``, e.g. 535.104.05), compared number by number; torch's
version is matched with ``packaging``'s PEP 440 ``SpecifierSet``
(https://packaging.python.org/en/latest/specifications/version-specifiers/), pre-releases
included (a nightly is judged by its place in the ordering, and ``<2.7`` still excludes
2.7.0.dev builds, as PEP 440 says); bus bandwidth is nccl-tests' busbw
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Union

from ddp_doctor.facts.snapshot import Facts
from ddp_doctor.facts.view import FactsView
from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.policy import codes as P

if TYPE_CHECKING:
    from ddp_doctor.policy.load import Policy

TORCH_VERSIONS_URL = "https://pytorch.org/get-started/previous-versions/"
ACS_URL = ("https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
           "#pci-access-control-services-acs")


def _policy_evidence(policy: Policy, key: str, value: Any) -> Evidence:
    shown = (f'"{value}"' if isinstance(value, str) else str(value).lower()
             if isinstance(value, bool) else f"{value:g}")
    return Evidence("policy", f"{key} = {shown}", str(policy.path))


def _ignore_step(policy: Policy) -> Step:
    return Step(f"If this run deliberately cannot measure it, add POL006 to `ignore` in "
                f"{policy.path} with the reason.")


def _not_measured(policy: Policy, key: str, value: Any, what: str, why: str,
                  steps: tuple[Step, ...]) -> Finding:
    return Finding(P.NOT_MEASURED, f"The policy requires {what}, but {why}",
                   (_policy_evidence(policy, key, value), Evidence("not measured", why, "")),
                   (*steps, _ignore_step(policy)))


def _gpus(policy: Policy, facts: FactsView) -> Finding | None:
    wanted = policy.min_gpus
    if wanted is None:
        return None
    count, source = facts.usable_gpus()
    if count >= wanted:
        return None
    return Finding(
        P.FEWER_GPUS, f"{count} usable GPU{'s' * (count != 1)}; the policy requires {wanted}",
        (Evidence("usable GPUs", str(count), source),
         _policy_evidence(policy, "min-gpus", wanted)),
        (Step("List the GPUs the driver sees.", command="nvidia-smi -L"),
         Step("If CUDA_VISIBLE_DEVICES hides some, unset or widen it for the job.",
              url=P.CUDA_ENV_URL),
         Step(f"Or run on a machine with {wanted} GPUs, or lower min-gpus in {policy.path} "
              "if the job was resized.")))


def _version_numbers(text: str) -> tuple[int, ...] | None:
    if not re.fullmatch(r"\d+(\.\d+)*", text.strip()):
        return None
    return tuple(int(part) for part in text.strip().split("."))


def _older(found: tuple[int, ...], wanted: tuple[int, ...]) -> bool:
    width = max(len(found), len(wanted))
    return found + (0,) * (width - len(found)) < wanted + (0,) * (width - len(wanted))


def _driver(policy: Policy, facts: FactsView) -> Finding | None:
    wanted = policy.min_driver_version
    if wanted is None:
        return None
    version = facts.nvml().get("driver_version")
    source = "nvmlSystemGetDriverVersion"
    if not version:
        version = facts.driver().get("module_version")
        source = "/proc/driver/nvidia/version"
    numbers = _version_numbers(str(version)) if version else None
    if numbers is None:
        why = ("no NVIDIA driver version could be read" if not version else
               f"the driver version {version!r} could not be read as numbers")
        return _not_measured(policy, "min-driver-version", wanted,
                             f"driver {wanted} or newer", why,
                             (Step("See the driver findings above (DRV…) for why.",
                                   command="nvidia-smi"),))
    if not _older(numbers, _version_numbers(wanted) or ()):
        return None
    return Finding(
        P.DRIVER_OLDER, f"Driver {version} is older than the policy's minimum {wanted}",
        (Evidence("driver", str(version), source),
         _policy_evidence(policy, "min-driver-version", wanted)),
        (Step("Confirm the installed driver.",
              command="nvidia-smi --query-gpu=driver_version --format=csv,noheader"),
         Step(f"Install driver {wanted} or newer (distribution packages or NVIDIA's "
              "installer), then reboot.", url=P.NVIDIA_DRIVERS_URL),
         Step(f"Or schedule the job on newer nodes, or lower min-driver-version in "
              f"{policy.path}.")))


def _torch(policy: Policy, facts: FactsView) -> Finding | None:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    spec = policy.torch_versions
    if spec is None:
        return None
    version, source = facts.torch_version_source()
    what = f"torch {spec}"
    if version is None:
        return _not_measured(policy, "torch-versions", spec, what,
                             "no installed torch was found",
                             (Step("See the PyTorch findings above (TOR…) for why."),))
    try:
        parsed = Version(version)
    except InvalidVersion:
        return _not_measured(policy, "torch-versions", spec, what,
                             f"torch's version {version!r} is not a PEP 440 version", ())
    if SpecifierSet(spec).contains(parsed, prereleases=True):
        return None
    return Finding(
        P.TORCH_NOT_ALLOWED, f"torch {version} is not one the policy allows ({spec})",
        (Evidence("torch", version, source), _policy_evidence(policy, "torch-versions", spec)),
        (Step("Install an allowed release from the wheel index of this machine's CUDA "
              "(add --index-url https://download.pytorch.org/whl/cuXXX).",
              command=f"{facts.target_pip()} install 'torch{spec}'", url=TORCH_VERSIONS_URL),
         Step(f"Or widen torch-versions in {policy.path} once the new release is tested.")))


def _smoke_gap(smoke: dict[str, Any] | None) -> str | None:
    """Why the smoke job measured nothing, or None when it ran."""
    if smoke is None:
        return ("the smoke job did not run (`ddp-doctor check`, --no-smoke and --facts "
                "run none)")
    if smoke.get("skipped"):
        return f"the smoke job was skipped: {smoke['skipped']}"
    return None


_RUN_SMOKE = Step("Run the checks and the smoke job.", command="ddp-doctor doctor")


def _gpu_training(policy: Policy, smoke: dict[str, Any] | None) -> Finding | None:
    """``require-gpu-training``: the smoke job trained on the GPUs (not on a CPU fallback)."""
    if not policy.require_gpu_training:
        return None
    key, what = "require-gpu-training", "a smoke job that trained on the GPUs"
    if smoke is None:  # `check`, --no-smoke, --facts: not measured, not disproved
        return _not_measured(policy, key, True, what, _smoke_gap(smoke) or "", (_RUN_SMOKE,))
    gap = _smoke_gap(smoke)
    proved = smoke.get("proved") or {}
    if proved.get("gpu_training"):
        return None
    if gap is None and proved.get("cpu_fallback"):
        gap = "no GPU was usable, so the smoke job trained on the CPU (SMK017)"
    elif gap is None:
        device = (smoke or {}).get("device") or "no device"
        gap = (f"the smoke job did not pass on the GPUs (it ran on {device}"
               + (" and failed)" if not (smoke or {}).get("ok") else ")"))
    return Finding(P.GPU_TRAINING_NOT_PROVEN, f"The policy requires {what}, but {gap}",
                   (_policy_evidence(policy, key, True),
                    Evidence("smoke job", gap, "this run's smoke job")),
                   (Step("See why no GPU was usable: the checks name the cause.",
                         command="ddp-doctor check"),
                    Step("Prove GPU training once the GPUs are usable.",
                         command="ddp-doctor smoke --device cuda")))


def _busbw(policy: Policy, smoke: dict[str, Any] | None) -> Finding | None:
    wanted = policy.min_allreduce_busbw_gbps
    if wanted is None:
        return None
    key = "min-allreduce-busbw-gbps"
    what = f"an all-reduce bus bandwidth of at least {wanted:g} GB/s"
    gap = _smoke_gap(smoke)
    measurements = (smoke or {}).get("measurements") or {}
    measured = measurements.get("allreduce_busbw_gbps")
    if gap is None and measurements.get("allreduce_note"):  # one rank: its 0 is no link's
        gap = f"the smoke job ran {measurements['allreduce_note']}"
        measured = None
    if gap is None and measured is None:
        gap = ("the smoke job measured no all-reduce bandwidth (one process, or it failed "
               "before that phase)")
    if gap is not None or measured is None:
        return _not_measured(policy, key, wanted, what, gap or "no measurement", (_RUN_SMOKE,))
    if measured >= wanted:
        return None
    size = ((smoke or {}).get("measurements") or {}).get("allreduce_bytes")
    ranks = (smoke or {}).get("ranks")
    source = (f"smoke job, all_reduce of {size / 2**20:.0f} MiB on {ranks} ranks "
              "(nccl-tests busbw)" if size else "smoke job (nccl-tests busbw)")
    return Finding(
        P.BUSBW_LOW, f"All-reduce bus bandwidth {measured:.2f} GB/s is below the policy's "
                     f"minimum of {wanted:g} GB/s",
        (Evidence("bus bandwidth", f"{measured:.2f} GB/s", source),
         Evidence("device", str((smoke or {}).get("device")), "smoke job"),
         _policy_evidence(policy, key, wanted)),
        (Step("See how the GPUs are connected (NV# is NVLink; PIX/PXB/PHB/SYS go over PCIe).",
              command="nvidia-smi topo -m"),
         Step("See which transport NCCL picks (P2P/NVLink, or SHM through host memory).",
              command="NCCL_DEBUG=INFO ddp-doctor smoke -v"),
         Step("If P2P is not used on a bare-metal host, disable PCIe ACS or set the IOMMU to "
              "passthrough.", url=ACS_URL),
         Step("Check that no other job shares the GPUs.", command="nvidia-smi")))


def _scaling(policy: Policy, smoke: dict[str, Any] | None) -> Finding | None:
    wanted = policy.min_scaling_efficiency
    if wanted is None:
        return None
    key, what = "min-scaling-efficiency", f"a scaling efficiency of at least {wanted:.0%}"
    gap = _smoke_gap(smoke)
    scaling = (smoke or {}).get("scaling") or {}
    efficiency = scaling.get("efficiency")
    if gap is None and efficiency is None and scaling.get("not_measured"):
        gap = f"the smoke job did not measure scaling: {scaling['not_measured']}"
    if gap is None and efficiency is None:
        gap = ("the smoke job did not measure scaling (it ran without --scaling, or a run "
               "failed before its throughput was known)" if not scaling else
               "the smoke job could not measure throughput on 1 rank and on all ranks")
    if gap is not None or efficiency is None:
        return _not_measured(policy, key, wanted, what, gap or "no measurement",
                             (Step("Run the checks and the smoke job (with this policy it "
                                   "also runs on 1 rank, for the efficiency).",
                                   command="ddp-doctor doctor"),))
    if efficiency >= wanted:
        return None
    ranks = scaling.get("ranks")
    return Finding(
        P.SCALING_LOW, f"Scaling efficiency {efficiency:.0%} on {ranks} ranks is below the "
                       f"policy's minimum of {wanted:.0%}",
        (Evidence("throughput on 1 rank", f"{scaling.get('images_per_s_1')} img/s",
                  "smoke job"),
         Evidence(f"throughput on {ranks} ranks", f"{scaling.get('images_per_s_n')} img/s",
                  "smoke job"),
         Evidence("speedup", f"{scaling.get('speedup')}× (efficiency {efficiency:.2f})",
                  "smoke job"),
         _policy_evidence(policy, key, wanted)),
        (Step("See the per-rank measurements and the all-reduce bandwidth.",
              command="ddp-doctor smoke --scaling -v"),
         Step("Check CPU cores and DataLoader workers per GPU for the planned job.",
              command=f"ddp-doctor check --gpus {ranks}"),
         Step("Check that no other job shares the GPUs or CPUs.", command="nvidia-smi")))


def requirement_findings(policy: Policy, facts: Union[Facts, FactsView, None],
                         smoke: dict[str, Any] | None) -> list[Finding]:
    """One finding per requirement not met (or not measurable); none when all are met."""
    # `smoke` judges only the smoke requirements and gathers no facts: an empty snapshot.
    view = FactsView.of(facts if facts is not None else Facts())
    judged = (_gpus(policy, view), _driver(policy, view), _torch(policy, view),
              _gpu_training(policy, smoke), _busbw(policy, smoke), _scaling(policy, smoke))
    return [f for f in judged if f is not None]


def requirements_summary(policy: Policy, findings: list[Finding]) -> str:
    """One line for the check row: how many requirements are met, and from which file."""
    total = policy.requirements
    parts = []
    if total:
        missed = sum(1 for f in findings if f.code is not P.NOT_MEASURED)
        unknown = len(findings) - missed
        parts.append(f"{total - len(findings)} of {total} requirement{'s' * (total != 1)} met"
                     + (f", {missed} not met" if missed else "")
                     + (f", {unknown} not measured" if unknown else ""))
    else:
        parts.append("no requirements set")
    if policy.ignore:
        parts.append(f"ignores {', '.join(sorted(policy.ignore))}")
    fail = policy.fail_on_warnings
    if fail is True:
        parts.append("warnings fail the run")
    elif fail:
        parts.append(f"warnings {', '.join(fail)} fail the run")
    return "; ".join(parts) + f" ({policy.path.name})"
