"""What all-reduce bus bandwidth a GPU-to-GPU path can carry: NVLink, PCIe and InfiniBand.

The smoke job measures all-reduce bus bandwidth the way nccl-tests reports it (busbw =
algbw x 2(n-1)/n), which nccl-tests defines so that it "reflects how optimally the hardware
is used" and can be compared with the peak bandwidth of the slowest link of the ring:
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md. The figures below are
each link's nominal rate per direction; the judgement (``FAR_BELOW``) is a fraction of it.

Sources, per link:

- NVLink per link and direction: NVLink 1.0 (P100, sm_60) 20 GB/s (4 links, 160 GB/s both
  directions); NVLink 2.0 (V100, sm_70) 25 GB/s (6 links, 300 GB/s); NVLink 3.0 (A100,
  sm_80) 25 GB/s (12 links, 600 GB/s); NVLink 4.0 (H100/H200/H800, sm_90) 25 GB/s (18 links,
  900 GB/s); NVLink 5.0 (B200/GB200, sm_100) 50 GB/s (18 links, 1.8 TB/s):
  https://www.nvidia.com/en-us/data-center/nvlink/ and each GPU's datasheet. The GeForce
  RTX 3090 (sm_86) bridge carries 112.5 GB/s both directions over 4 links, 14.0625 GB/s
  per link and direction (NVIDIA GeForce RTX 3090 specifications, "NVLink (SLI Ready)").
- PCIe per lane and direction: ``links.PCIE_GBPS_PER_LANE`` (PCI-SIG: 2.5, 5, 8, 16, 32,
  64 GT/s for generations 1 to 6, after line encoding).
- InfiniBand and Ethernet: the port's signalling rate as the kernel reports it
  (/sys/class/infiniband/*/ports/*/rate, "400 Gb/sec (4X NDR)"; an interface's speed in
  Mb/s), divided by 8 for bytes. On a rail-optimised node (one NIC per GPU, as on DGX
  and HGX systems) NCCL drives the NICs in parallel, one channel set per NIC, so the
  all-reduce bus bandwidth across nodes scales with the NICs in use; nccl-tests' maintainers
  put it at about 24 GB/s per 200 Gb/s NIC, i.e. close to each port's rate
  (https://github.com/NVIDIA/nccl-tests/issues/212, and NCCL's NCCL_IB_HCA / rails notes in
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html). The expectation is
  therefore one port's rate times the rails: the node's ranks, up to its InfiniBand ports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ddp_doctor.knowledge.links import pcie_gbps

NCCL_TESTS_PERFORMANCE = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"

# GB/s per NVLink and direction, by compute capability (the NVLink generation goes with it).
NVLINK_GBPS_BY_CAPABILITY: dict[str, float] = {
    "6.0": 20.0,  # NVLink 1.0, P100
    "7.0": 25.0,  # NVLink 2.0, V100
    "8.0": 25.0,  # NVLink 3.0, A100
    "8.6": 14.0625,  # NVLink 3.0 bridge of the GeForce RTX 3090 / RTX A6000 class
    "9.0": 25.0,  # NVLink 4.0, H100 / H200 / H800
    "10.0": 50.0,  # NVLink 5.0, B200 / GB200
}

FAR_BELOW = 0.25
"""busbw under this share of the path's nominal rate is "far below" it. nccl-tests reaches
70-90 % of it on healthy systems at large sizes; the smoke job's buffer (64 MiB, 5
iterations) gets less, so a quarter leaves room for a short test and still catches a path
that runs at PCIe speed where NVLink was expected, or a NIC left out."""

MIN_JUDGED_BYTES = 16 << 20
"""Below this buffer size latency, not the link, decides the figure: not judged."""


@dataclass(frozen=True)
class PathRate:
    """The nominal GB/s per direction of the slowest link a job's ring crosses, and why."""

    gbps: float
    link: str  # "NVLink 4.0-class x18", "PCIe gen3 x16", "InfiniBand 100 Gb/sec"
    source: str  # where the figure comes from


def nvlink_gbps(capability: str | None) -> float | None:
    """GB/s per NVLink and direction for a GPU of this compute capability, None if unknown."""
    return NVLINK_GBPS_BY_CAPABILITY.get(capability or "")


def rate_gbps(text: str | None) -> float | None:
    """GB/s from an InfiniBand rate string ("400 Gb/sec (4X NDR)"), None when unreadable."""
    match = re.match(r"\s*([\d.]+)\s*Gb/sec", text or "")
    return float(match.group(1)) / 8 if match else None


def pair_rate(gpus: list[dict[str, Any]], nvlinks: list[list[Any]] | None,
              a: int, b: int) -> PathRate | None:
    """The nominal rate between NVML GPUs ``a`` and ``b`` of one node, None when unknown.

    NVLink-joined: links x the generation's per-link rate. Otherwise PCIe: the lower of
    the two GPUs' links at their maximum generation and width (a link trained lower is
    what the measurement is there to catch).
    """
    by_index = {g.get("index"): g for g in gpus}
    ga, gb = by_index.get(a), by_index.get(b)
    if ga is None or gb is None:
        return None
    links = 0
    if nvlinks and a < len(nvlinks) and b < len(nvlinks[a] or []):
        links = int(nvlinks[a][b] or 0)
    if links:
        per = nvlink_gbps(ga.get("compute_capability"))
        if per is None:
            return None
        return PathRate(links * per, f"NVLink x{links} ({per:g} GB/s per link)",
                        "NVIDIA NVLink rates per generation")
    rates = []
    for gpu in (ga, gb):
        pcie = gpu.get("pcie") or {}
        gen = pcie.get("gen_max") or pcie.get("gen_current")
        width = pcie.get("width_max") or pcie.get("width_current")
        rate = pcie_gbps(gen, width)
        if rate is None:
            return None
        rates.append((rate, gen, width))
    rate, gen, width = min(rates)
    return PathRate(rate, f"PCIe gen{gen} x{width}", "PCI-SIG per-lane rates")


def expected_rails(interconnect: dict[str, Any], ranks: int) -> int:
    """NICs a node's ranks should drive at once: its ranks, up to its InfiniBand ports.

    Every port counts, active or not: a port that is down is a rail the node should have,
    and counting only the active ones would expect one rail of a node that lost seven.
    """
    ports = len(interconnect.get("infiniband") or [])
    return max(1, min(ranks, ports)) if ports else 1


def network_rate(interconnect: dict[str, Any], rails: int = 1) -> PathRate | None:
    """The InfiniBand path across nodes: the slowest active port's rate times ``rails``
    (``expected_rails``), else the fastest Ethernet link."""
    ib = [(rate_gbps(p.get("rate")), p) for p in interconnect.get("infiniband") or []
          if p.get("active")]
    ib = [(r, p) for r, p in ib if r]
    if ib:
        rate, port = min(ib, key=lambda x: x[0] or 0.0)
        rails = max(1, rails)
        return PathRate(float(rate or 0) * rails, f"InfiniBand {port.get('rate')}"
                        + (f" x {rails} rails" if rails > 1 else ""),
                        "the port's rate (/sys/class/infiniband)"
                        + (", one NIC per rank" if rails > 1 else ""))
    eth = [(i.get("speed_mbps") or 0, i) for i in interconnect.get("interfaces") or []
           if i.get("up") and i.get("name") != "lo" and i.get("speed_mbps")]
    if eth:
        speed, iface = max(eth, key=lambda x: x[0])
        return PathRate(speed / 8000, f"Ethernet {iface.get('name')} {speed // 1000} Gb/s",
                        "the interface's speed (/sys/class/net)")
    return None


def active_ib_ports(interconnect: dict[str, Any]) -> list[str]:
    """``device/port`` of every active InfiniBand port (link layer InfiniBand or RoCE)."""
    return [f"{p.get('device')}/{p.get('port')}" for p in interconnect.get("infiniband") or []
            if p.get("active")]
