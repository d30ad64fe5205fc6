"""How fast a GPU's links should be, and which clock-event reasons mean it is being slowed.

Sources:
- PCIe per-lane rates: 2.5, 5, 8, 16, 32 and 64 GT/s for generations 1 to 6 (PCI-SIG,
  https://pcisig.com/specifications), with 8b/10b encoding for generations 1-2 and
  128b/130b for 3-5 (6 uses FLIT mode, about 7.56 GB/s per lane after overhead): usable
  bytes per second per lane and direction below.
- NVLink: 25 GB/s per link and direction for NVLink 2.0 (V100), 3.0 (A100) and 4.0 (H100)
  (V100 6 links = 300 GB/s, A100 12 links = 600 GB/s, H100 18 links = 900 GB/s, both
  directions: https://www.nvidia.com/en-us/data-center/nvlink/). NVLink 5 doubles it; 25 is
  the floor the table uses for every generation.
- Clock-event reasons: the ``nvmlClocksEventReason*`` bits of nvml.h
  (https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html), the same
  names ``nvidia-smi -q`` prints under "Clocks Event Reasons" ("Clocks Throttle Reasons"
  before R535).
- Boards wired for eight lanes: the GeForce RTX 4060 and 4060 Ti are PCIe 4.0 x8 (NVIDIA's
  board documents as reported at launch, https://www.guru3d.com/news-story/upcoming-nvidia-
  geforce-rtx-4060-ti-pci-express-4-x8-interface-enhanced-specifications.html,
  https://meterpreter.org/rtx-4060-series-are-only-equipped-with-pci-e-4-0-x8-interface/),
  as are the desktop RTX 3050 and the RTX 5050/5060/5060 Ti (PCIe 5.0 x8) by their
  published specifications (https://www.techpowerup.com/gpu-specs/). NVML's "maximum" width
  is the chip's, not the board's: a real RTX 3050 under load reports x8 of a maximum x16
  at PCIe Gen4, which is simply how the card is built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NVML_CLOCK_REASONS = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html"

PCIE_GBPS_PER_LANE: dict[int, float] = {
    1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563,
}
"""Usable GB/s per lane and direction, by PCIe generation."""

NVLINK_GBPS_PER_LINK = 25.0
"""GB/s per NVLink and direction (NVLink 2.0 to 4.0; NVLink 5 is faster)."""

_EIGHT_LANE_BOARDS = re.compile(r"\bRTX\s+(?:3050|4060|5050|5060)\b(?!.*\b(?:Laptop|Mobile)\b)",
                                re.IGNORECASE)


def board_lanes(model: str | None) -> int | None:
    """The lanes a GPU's board is wired for when fewer than its chip's maximum (desktop x8
    cards), else None. Laptop parts vary by design and are not assumed."""
    return 8 if model and _EIGHT_LANE_BOARDS.search(model) else None


SLOW_FRACTION = 0.25
"""A GPU-to-GPU copy below this share of its link's rate is "far below" expectation: well
under what a healthy link delivers (typically 70-90 %), yet above the noise of a short test,
and what an IOMMU that routes P2P traffic through the CPU produces."""


def pcie_gbps(gen: int | None, width: int | None) -> float | None:
    """The link's usable GB/s per direction, None when either number is unknown."""
    if not gen or not width or gen not in PCIE_GBPS_PER_LANE:
        return None
    return PCIE_GBPS_PER_LANE[gen] * width


@dataclass(frozen=True)
class ClockReason:
    bit: int
    name: str  # as nvidia-smi -q prints it
    slows: bool  # a finding: the GPU is held below the clocks it should run at
    meaning: str


CLOCK_REASONS: tuple[ClockReason, ...] = (
    ClockReason(0x1, "Idle", False, "nothing to run: clocks are low on purpose"),
    ClockReason(0x2, "Applications Clocks Setting", False,
                "clocks set by the administrator (nvidia-smi -ac)"),
    ClockReason(0x4, "SW Power Cap", False,
                "at the board's power limit: normal under full load"),
    ClockReason(0x8, "HW Slowdown", True,
                "the hardware halved its clocks or more: too hot, or the power supply "
                "signalled a problem"),
    ClockReason(0x10, "Sync Boost", False, "clocks held in step with other GPUs"),
    ClockReason(0x20, "SW Thermal Slowdown", True,
                "the driver lowered clocks to keep the GPU under its maximum temperature"),
    ClockReason(0x40, "HW Thermal Slowdown", True,
                "the GPU (or its memory) got too hot and the hardware cut its clocks"),
    ClockReason(0x80, "HW Power Brake Slowdown", True,
                "an external power brake (the system's power supply or chassis) cut the "
                "clocks"),
    ClockReason(0x100, "Display Clock Setting", False, "clocks set for a display"),
)

SLOWING_BITS = sum(r.bit for r in CLOCK_REASONS if r.slows)


def active_reasons(mask: int | None) -> list[ClockReason]:
    """The reasons whose bit is set in ``mask``, in NVML's order."""
    if not mask:
        return []
    return [r for r in CLOCK_REASONS if mask & r.bit]


def reasons_mask(names: dict[str, bool]) -> int:
    """The bit mask for reasons given by their nvidia-smi names (True = Active)."""
    by_name = {r.name.lower(): r.bit for r in CLOCK_REASONS}
    mask = 0
    for name, active in names.items():
        bit = by_name.get(name.lower())
        if bit is not None and active:
            mask |= bit
    return mask
