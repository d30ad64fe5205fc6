"""Does a torch build carry kernels for a GPU? Compute capability against the arch list.

Sources:
- Binary compatibility of cubins and PTX (same rules in every generation's guide):
  https://docs.nvidia.com/cuda/blackwell-compatibility-guide/index.html
  * a cubin for sm_XY runs on compute capability X.Z only when Z >= Y (same major);
  * PTX (compute_XY) is JIT-compiled by the driver for any capability >= X.Y;
  * arch-specific targets (sm_90a, sm_100a) run only on exactly that capability.
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


def support_for(capability: tuple[int, int], arch_list: list[str]) -> Support:
    """How a GPU of ``capability`` runs a build with ``arch_list`` (rules in the docstring)."""
    archs = [a for a in (parse_arch(x) for x in arch_list) if a is not None]
    major, minor = capability
    for arch in archs:
        if arch.kind != "sm":
            continue
        if arch.specific and arch.capability == capability:
            return Support.NATIVE
        if not arch.specific and arch.major == major and arch.minor <= minor:
            return Support.NATIVE
    if any(a.kind == "compute" and a.capability <= capability for a in archs):
        return Support.PTX
    return Support.NONE


# Architectures of the wheel variants gpu_doctor.knowledge.wheels recommends (Linux
# x86_64), so a finding can say which variant has kernels for a GPU.
CURRENT_WHEEL_ARCHS: dict[str, tuple[str, ...]] = {
    "cu126": ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
    "cu130": ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"),
    "cu132": ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"),
}


def variants_with_kernels(capability: tuple[int, int]) -> list[str]:
    """Current wheel variants with a native cubin for ``capability``, newest first."""
    return [tag for tag, archs in CURRENT_WHEEL_ARCHS.items()
            if support_for(capability, list(archs)) is Support.NATIVE][::-1]
