"""Small formatting helpers shared by the check modules."""

from __future__ import annotations

import re
import shlex
from typing import Any

from ddp_doctor.knowledge.arch import parse_capability
from ddp_doctor.knowledge.cuda_driver import max_cuda_for_driver
from ddp_doctor.knowledge.wheels import (
    DRIVER_GUIDE,
    INSTALL_GUIDE,
    RECOMMENDED_BRANCH_MIN,
    Install,
    Recommendation,
    recommend,
)
from ddp_doctor.model import Step
from ddp_doctor.registry import Summary

GIB = 1024**3
MIB = 1024**2


def human_bytes(n: int | float | None) -> str:
    """1.5 GiB / 64 MiB / 512 B: the units `df -h` users recognise."""
    if n is None:
        return "unknown"
    for unit, size in (("TiB", 1024**4), ("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{int(n)} B"


def nvidia_gpus_present(facts: Any) -> bool:
    """True when NVML lists a GPU or the PCI bus holds an NVIDIA display/3D controller."""
    nvml = facts.get("nvml") or {}
    driver = facts.get("driver") or {}
    return bool(nvml.get("gpus")) or bool(driver.get("pci_gpus"))


def cuda_device_label(facts: Any, index: int | None) -> str:
    """'GPU 3 (NVIDIA A100-SXM4-80GB)': a CUDA index with the name the torch probe reported."""
    for dev in ((facts["torch"].get("cuda") or {}).get("devices") or []):
        if dev.get("index") == index:
            return f"GPU {index} ({dev.get('name')})"
    return f"GPU {index} (unknown GPU)"


def gpu_test_results(facts: Any, key: str, what: str) -> tuple[list[dict[str, Any]],
                                                                Summary | None]:
    """The torch probe's per-GPU results under ``torch.cuda[key]``.

    When there are none, also the Summary that says why: no CUDA device, or a snapshot
    saved before the probe ran GPU work (devices but no results).
    """
    cuda = facts["torch"].get("cuda") or {}
    results = cuda.get(key) or []
    if results:
        return results, None
    if cuda.get("device_count") or (cuda.get("available") and "device_count" not in cuda):
        return [], Summary(f"not run: the probe reported no {what} for the CUDA devices")
    return [], Summary(f"no {what} ran (no CUDA device)")


def target_python(facts: Any) -> str:
    """The interpreter being diagnosed (``--python``), quoted for a shell; ``python`` if unknown."""
    exe = (facts.get("python") or {}).get("executable")
    return shlex.quote(str(exe)) if exe else "python"


def target_pip(facts: Any) -> str:
    """pip of the interpreter being diagnosed: ``/venv/bin/python -m pip``."""
    return f"{target_python(facts)} -m pip"


def wheel_for_machine(facts: Any) -> Install | None:
    """The build to install here (``recommendation(facts).install``); None when none runs.

    Kept for callers written against the old helper; print its command with
    ``install.command(target_pip(facts), packages)``, or better use ``install_steps``.
    """
    return recommendation(facts).install


def _on_wsl(facts: Any) -> bool:
    return bool(((facts.get("os") or {}).get("wsl") or {}).get("is_wsl"))


def driver_cuda(facts: Any) -> str | None:
    """The newest CUDA the driver supports: NVML's answer, else derived from its version."""
    nvml = facts.get("nvml") or {}
    if nvml.get("cuda_driver_version"):
        return str(nvml["cuda_driver_version"])
    return max_cuda_for_driver(nvml.get("driver_version"),
                               "windows" if _on_wsl(facts) else "linux")


def recommendation(facts: Any, cuda: str | None = None) -> Recommendation:
    """``knowledge.wheels.recommend`` for this machine's driver, GPUs and Python.

    ``cuda`` overrides the driver's CUDA version (a check that derived it already).
    """
    nvml = facts.get("nvml") or {}
    caps = [c for c in (parse_capability(g.get("compute_capability"))
                        for g in nvml.get("gpus") or []) if c is not None]
    python = (facts.get("python") or {}).get("version")
    # Windows driver numbers (WSL2) are not comparable with the Linux MVC floors.
    version = None if _on_wsl(facts) else nvml.get("driver_version")
    return recommend(cuda or driver_cuda(facts), caps, python, version)


def _python_minor(facts: Any) -> str | None:
    version = str((facts.get("python") or {}).get("version") or "")
    return ".".join(version.split(".")[:2]) or None


def _install_text(facts: Any, install: Install, cuda: str | None) -> str:
    """Install this build, and why it fits this machine."""
    if install.torch is None:
        head = f"Install the CUDA {install.cuda} build ({install.tag})"
        if cuda is None:
            return (f"{head}: no driver answered, so this is the build for an R580 driver "
                    f"(needs driver 580.65.06 or newer); with an older driver use the cuXYZ "
                    f"index that matches the 'CUDA Version' nvidia-smi prints")
        how = (f"runs on this driver (CUDA {cuda}) through minor-version compatibility"
               if install.minor_compat else f"runs on this driver (it supports CUDA {cuda})")
        return f"{head}: it {how} and has kernels for these GPUs"
    how = " through minor-version compatibility" if install.minor_compat else ""
    return (f"Install torch {install.torch} with torchvision {install.torchvision} (CUDA "
            f"{install.cuda}, {install.tag}): the newest release that runs on this driver{how}, "
            f"has kernels for these GPUs and supports Python {_python_minor(facts)}")


def _blocked(facts: Any, rec: Recommendation, cuda: str | None) -> str:
    reasons = {
        "driver": f"its builds with kernels for these GPUs need driver {rec.driver_needed} "
                  f"or newer (this driver supports CUDA {cuda})" if rec.driver_needed else
                  f"no CUDA build of it runs on this driver (CUDA {cuda})",
        "gpu": "none of its CUDA builds has kernels for these GPUs",
        "python": f"it needs Python {rec.python_min} to {rec.python_max} (this is "
                  f"{_python_minor(facts)})",
    }
    return "; ".join(reasons[b] for b in rec.blocked)


def install_steps(facts: Any, packages: str = "torch torchvision torchaudio",
                  cuda: str | None = None) -> list[Step]:
    """Steps that install a torch this machine runs, for every check that advises one.

    Never an unpinned install that the driver cannot run: a current build matched to the
    driver, else an exact older release, plus the driver upgrade that makes current torch fit.
    """
    rec = recommendation(facts, cuda)
    cuda = cuda or driver_cuda(facts)
    pip = target_pip(facts)
    steps: list[Step] = []
    prefix = ""
    if rec.blocked:
        prefix = f"The current PyTorch release does not fit here: {_blocked(facts, rec, cuda)}. "
    if rec.install is not None:
        steps.append(Step(f"{prefix}{_install_text(facts, rec.install, cuda)}.",
                          command=rec.install.command(pip, packages), url=INSTALL_GUIDE))
    if rec.driver_branch and rec.current is not None:
        where = ("update the NVIDIA driver on Windows (WSL2 uses it) to"
                 if _on_wsl(facts) else "upgrade the driver to")
        text = (f"{where} the R{rec.driver_branch} branch ({RECOMMENDED_BRANCH_MIN} or newer, "
                f"long-term support), then install the current {rec.current.tag} build")
        command = rec.current.command(pip, packages)
        if "python" in rec.blocked:
            text += f" into a new Python {rec.python_min}+ environment"
            venv = f"python{rec.python_min} -m venv ~/venvs/train"
            command = venv + " && " + rec.current.command("~/venvs/train/bin/python -m pip",
                                                          packages)
        text = f"Or {text}" if steps else prefix + text[0].upper() + text[1:]
        steps.append(Step(text + ".", command=command, url=DRIVER_GUIDE))
        prefix = ""
    if not steps:
        steps.append(Step(f"{prefix}No published build is known to run here; see the "
                          "install guide for the builds of your GPU and driver.",
                          url=INSTALL_GUIDE))
    return steps


# Datacenter GPU model names (NVML), and the kernel flavours of cloud images: both mean a
# server, where Ubuntu packages the driver as nvidia-driver-NNN-server (source package
# https://packages.ubuntu.com/source/noble/nvidia-graphics-drivers-580-server) and its
# installer takes --gpgpu for compute servers (Ubuntu Server guide, "NVIDIA drivers
# installation"; review 3 P2-7).
_DATACENTER_MODELS = frozenset({
    "A2", "A10", "A10G", "A16", "A30", "A40", "A100", "A800", "B100", "B200", "B300", "GB200",
    "GB300", "GH200", "H20", "H100", "H200", "H800", "L4", "L20", "L40", "L40S", "P4", "P40",
    "P100", "T4", "V100", "K80",
})
_CLOUD_KERNEL = re.compile(r"-(aws|azure|gcp|gke|oracle|ibm|kvm|nvidia)(-|$)")


def looks_like_server(facts: Any) -> bool:
    """A datacenter GPU (by NVML name) or a cloud kernel: server driver packages fit."""
    for gpu in (facts.get("nvml") or {}).get("gpus") or []:
        tokens = re.split(r"[\s\-_]+", str(gpu.get("name") or "").upper())
        if "TESLA" in tokens or _DATACENTER_MODELS.intersection(tokens):
            return True
    kernel = str((facts.get("driver") or {}).get("kernel_release") or "")
    return bool(_CLOUD_KERNEL.search(kernel))
