"""Small formatting helpers shared by the check modules."""

from __future__ import annotations

from typing import Any

from gpu_doctor.knowledge.wheels import WheelVariant, choose_variant

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


def wheel_for_machine(facts: Any) -> WheelVariant | None:
    """The torch wheel variant that fits this machine's driver and GPUs.

    Without a driver to ask, this is the newest variant; ``wheel_advice`` says so.
    """
    nvml = facts.get("nvml") or {}
    caps = []
    for gpu in nvml.get("gpus") or []:
        try:
            caps.append(float(gpu.get("compute_capability")))
        except (TypeError, ValueError):
            continue
    return choose_variant(nvml.get("cuda_driver_version"), caps or None)


def wheel_advice(facts: Any, variant: WheelVariant | None) -> str:
    """Why this wheel variant: matched to the driver, or the newest one for lack of a driver."""
    nvml = facts.get("nvml") or {}
    if variant is None:
        return ("this driver is too old for every current CUDA build of torch: upgrade the "
                "driver first")
    if nvml.get("cuda_driver_version"):
        return (f"the CUDA {variant.cuda} build runs on this driver (it supports CUDA "
                f"{nvml['cuda_driver_version']}) and has kernels for these GPUs")
    return (f"no driver answered, so this is the newest build (CUDA {variant.cuda}, needs "
            f"driver {variant.min_linux_driver} or newer); with an older driver use the "
            f"cuXYZ index that matches the 'CUDA Version' nvidia-smi prints")
