"""Does a torch build carry kernels for a GPU? Compute capability against the arch list.

Sources:
- Binary compatibility of cubins and PTX (same rules in every generation's guide):
  https://docs.nvidia.com/cuda/blackwell-compatibility-guide/index.html
  * a cubin for sm_XY runs on compute capability X.Z only when Z >= Y (same major);
  * PTX (compute_XY) is JIT-compiled by the driver for any capability >= X.Y;
  * arch-specific targets (sm_90a, sm_100a) run only on exactly that capability.
- Jetson (integrated GPU) exception: torch does not accept a discrete-GPU cubin for the
  Jetson capabilities 5.3, 6.2, 7.2, 8.7 (sm_50/sm_52 not for 5.3, sm_60/sm_61 not for 6.2,
  sm_70 not for 7.2, sm_80/sm_86 not for 8.7, sm_100 not for 10.1): ``DEVICE_REQUIREMENT`` in
  pytorch/pytorch ``torch/cuda/__init__.py`` (as shipped in torch 2.13.0).
- What ``torch.cuda.get_arch_list()`` returns per wheel, and the text torch prints when
  nothing matches ("sm_120 is not compatible with the current PyTorch installation"):
  pytorch/pytorch ``torch/cuda/__init__.py``; pytorch/pytorch#145949, #150733.
- Architectures of the current wheel variants (TORCH_CUDA_ARCH_LIST per CUDA variant,
  ``+PTX`` on the last one): pytorch/pytorch RELEASE.md and ``.ci/manywheel/build_cuda.sh``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

_ARCH = re.compile(r"^(sm|compute)_(\d+)([a-z]?)$")


class Support(str, Enum):
    NATIVE = "native"  # a cubin for this GPU's major with minor <= the GPU's
    PTX = "ptx"  # only PTX for an older capability: JIT-compiled at first use
    NONE = "none"  # no kernel image: every kernel launch fails


@dataclass(frozen=True)
class Arch:
    kind: str  # "sm" (cubin) or "compute" (PTX)
    major: int
    minor: int
    specific: bool  # sm_90a / sm_100f style suffix

    @property
    def capability(self) -> tuple[int, int]:
        return (self.major, self.minor)


def parse_arch(text: str) -> Arch | None:
    """``sm_86`` -> Arch("sm", 8, 6); ``compute_120`` -> Arch("compute", 12, 0)."""
    match = _ARCH.match(text.strip())
    if not match or len(match.group(2)) < 2:
        return None
    digits = match.group(2)
    return Arch(match.group(1), int(digits[:-1]), int(digits[-1]), bool(match.group(3)))


def parse_capability(text: str | float | None) -> tuple[int, int] | None:
    """``"8.6"`` -> (8, 6); anything else -> None."""
    try:
        major, minor = str(text).split(".", 1)
        return int(major), int(minor)
    except (TypeError, ValueError):
        return None


# Jetson capabilities that accept only a cubin built for exactly them (torch's
# DEVICE_REQUIREMENT): an sm_80 cubin does not count for an Orin (8.7), sm_70 not for Xavier.
JETSON_ONLY_EXACT: frozenset[tuple[int, int]] = frozenset({(5, 3), (6, 2), (7, 2), (8, 7),
                                                           (10, 1)})


def support_for(capability: tuple[int, int], arch_list: list[str]) -> Support:
    """How a GPU of ``capability`` runs a build with ``arch_list`` (rules in the docstring)."""
    archs = [a for a in (parse_arch(x) for x in arch_list) if a is not None]
    major, minor = capability
    for arch in archs:
        if arch.kind != "sm":
            continue
        if arch.capability == capability:
            return Support.NATIVE
        if capability in JETSON_ONLY_EXACT:
            continue
        if not arch.specific and arch.major == major and arch.minor <= minor:
            return Support.NATIVE
    if any(a.kind == "compute" and a.capability <= capability for a in archs):
        return Support.PTX
    return Support.NONE


# Architectures of the current wheel variants ddp_doctor.knowledge.wheels recommends (Linux
# x86_64): torch 2.13.0's own table (PYTORCH_RELEASES_CODE_CC in torch/cuda/__init__.py,
# "x86_64") and RELEASE.md ("+PTX" on the last arch of the CUDA 13 builds, Linux only).
# sm_110 (Jetson Thor) is only in the aarch64 builds, so it is absent here.
CURRENT_WHEEL_ARCHS: dict[str, tuple[str, ...]] = {
    "cu126": ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
    "cu130": ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"),
    "cu132": ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"),
}
