"""Which PyTorch wheel to install for a given driver, and the exact command.

Sources:
- CUDA variants of the current stable wheels: pytorch/pytorch RELEASE.md, "Release
  Compatibility Matrix" (torch 2.14: CUDA 12.6, 13.0, 13.2), and the wheel index naming
  of https://pytorch.org/get-started/locally/ (``https://download.pytorch.org/whl/cuXYZ``).
- A CUDA 12.x build runs on any driver of branch 525 or newer, a 13.x build on 580 or
  newer, through CUDA minor-version compatibility:
  https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html
- Maxwell, Pascal and Volta GPUs (compute capability below 7.5) have kernels only in
  the CUDA 12.6 wheels, and the CUDA 12.6 wheels stop at sm_90 (Hopper): Blackwell GPUs
  (sm_100, sm_120) need a CUDA 12.8+ build (RELEASE.md, TORCH_CUDA_ARCH_LIST per variant;
  pytorch/pytorch#145949 "sm_120 is not compatible with the current PyTorch installation").
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

WHEEL_INDEX = "https://download.pytorch.org/whl"
INSTALL_GUIDE = "https://pytorch.org/get-started/locally/"


@dataclass(frozen=True)
class WheelVariant:
    tag: str  # "cu126"
    cuda: str  # "12.6"
    min_linux_driver: str  # lowest driver that runs it (minor-version compatibility)
    min_capability: float  # oldest GPU architecture it ships kernels for
    max_capability_major: int  # newest GPU generation (compute capability major) it runs on


# Newest first. The CUDA 12.6 build is the one that still carries sm_50..sm_70 kernels.
CURRENT_VARIANTS: tuple[WheelVariant, ...] = (
    WheelVariant("cu132", "13.2", "580.65.06", 7.5, 12),
    WheelVariant("cu130", "13.0", "580.65.06", 7.5, 12),
    WheelVariant("cu126", "12.6", "525.60.13", 5.0, 9),
)


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def choose_variant(
    driver_cuda: str | None, capabilities: list[float] | None = None
) -> WheelVariant | None:
    """The newest current wheel variant this driver runs and every GPU has kernels in.

    Both ends matter: the oldest GPU must not be older than the variant's oldest
    architecture, and the newest GPU's generation must not be newer than its newest.

    ``driver_cuda`` is the CUDA version the driver reports (nvidia-smi's "CUDA Version",
    NVML's cuda_driver_version). None when the driver is too old for every variant.
    """
    supported = _version(driver_cuda)
    oldest_gpu = min(capabilities) if capabilities else None
    newest_major = int(max(capabilities)) if capabilities else None
    for variant in CURRENT_VARIANTS:
        needed = Version(variant.cuda)
        # Minor-version compatibility: any driver of the same CUDA major runs the build.
        if supported is not None and supported.major < needed.major:
            continue
        if oldest_gpu is not None and oldest_gpu < variant.min_capability:
            continue
        if newest_major is not None and newest_major > variant.max_capability_major:
            continue
        return variant
    return None


def install_command(variant: WheelVariant | None, packages: str = "torch torchvision") -> str:
    """The pip command that replaces whatever torch is there with a CUDA build."""
    if variant is None:
        return f"pip install --upgrade {packages}  # see {INSTALL_GUIDE}"
    return f"pip install --upgrade {packages} --index-url {WHEEL_INDEX}/{variant.tag}"
