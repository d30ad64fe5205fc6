"""Host-to-GPU copy rates against what the GPU's kind of machine is required to reach.

Each CUDA rank times pinned host-to-device and device-to-host copies (train_smoke's
``measure_host_copies``). A copy rate is judged against, in this order:

1. an operator's published floor for the GPU model (``knowledge.floors``: Azure's health
   checks require 52 GB/s on H100 SXM, 48 GB/s on H200, 24 GB/s on A100 SXM4 40GB, measured
   with nvbandwidth's copy engines), named with its source;
2. else, with the doctor's facts, the GPU's PCIe link: ``floors.LINK_SHARE`` of the nominal
   rate of its maximum generation and width (``knowledge.links.pcie_gbps``);
3. else nothing: the figure is reported, not judged.

A warning (SMK030) names the rank, its GPU and both figures, so "is this number normal?"
has its answer beside the number.
"""

from __future__ import annotations

from typing import Any

from ddp_doctor.facts.view import FactsView
from ddp_doctor.knowledge.floors import LINK_SHARE, floor_for
from ddp_doctor.knowledge.links import pcie_gbps
from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.smoke import codes as C
from ddp_doctor.smoke.monitor import RankState

METRICS = (("h2d", "host-to-device"), ("d2h", "device-to-host"))


def expected_copy_rate(gpu_name: str | None, metric: str, view: FactsView | None,
                       index: int | None) -> dict[str, Any] | None:
    """The rate a copy should reach, with its basis and source; None when nothing says."""
    floor = floor_for(gpu_name, metric)
    if floor is not None:
        return {"gbps": floor.gbps, "basis": floor.label, "source": floor.source}
    if view is None or index is None:
        return None
    gpu = next((g for g in view.nvml_gpus() if g.get("index") == index), None)
    pcie = (gpu or {}).get("pcie") or {}
    gen = pcie.get("gen_max") or pcie.get("gen_current")
    width = pcie.get("width_max") or pcie.get("width_current")
    nominal = pcie_gbps(gen, width)
    if nominal is None:
        return None
    return {"gbps": round(nominal * LINK_SHARE, 2),
            "basis": f"{LINK_SHARE:.0%} of PCIe gen{gen} x{width} ({nominal:.1f} GB/s "
                     "per direction)",
            "source": "PCI-SIG per-lane rates; the GPU's link as NVML reports it"}


def copy_rates(ranks: list[RankState], view: FactsView | None,
               gpus: dict[int, int]) -> tuple[list[dict[str, Any]], list[Finding]]:
    """Per rank: the measured rates and what was expected (for the report), and findings."""
    rows: list[dict[str, Any]] = []
    found: list[Finding] = []
    for state in sorted(ranks, key=lambda s: s.rank):
        measured = state.ended("host_copy")
        if not measured:
            continue
        name = state.startup.get("gpu_name")
        index = gpus.get(state.rank)
        row: dict[str, Any] = {"rank": state.rank, "gpu": index, "gpu_name": name}
        slow = []
        for metric, words in METRICS:
            value = measured.get(f"{metric}_gbps")
            expected = expected_copy_rate(name, metric, view, index)
            row[f"{metric}_gbps"] = round(value, 3) if isinstance(value, (int, float)) else None
            row[f"{metric}_expected"] = expected
            if isinstance(value, (int, float)) and expected and value < expected["gbps"]:
                slow.append((words, value, expected))
        rows.append(row)
        if slow:
            found.append(_slow_copies(state.rank, index, name, slow))
    return rows, found


def _slow_copies(rank: int, index: int | None, name: str | None,
                 slow: list[tuple[str, float, dict[str, Any]]]) -> Finding:
    where = f" (GPU {index}{', ' + name if name else ''})" if index is not None else (
        f" ({name})" if name else "")
    words, value, expected = slow[0]
    evidence = []
    for what, measured, want in slow:
        evidence += [Evidence(f"rank {rank} {what}", f"{measured:.1f} GB/s (pinned, 64 MiB)",
                              "smoke job, CUDA events"),
                     Evidence(f"expected {what}", f">= {want['gbps']:g} GB/s: {want['basis']}",
                              want["source"])]
    select = f" -i {index}" if index is not None else ""
    return Finding(
        C.COPIES_SLOW, f"Rank {rank}{where}: {words} copies at {value:.1f} GB/s, below the "
        f"{expected['gbps']:g} GB/s expected", tuple(evidence),
        (Step("Compare the link's current generation and width with its maximum, under load.",
              command=f"nvidia-smi -q{select} -d PCI"),
         Step("Measure the same copies with NVIDIA's tool, per GPU.",
              command="nvbandwidth -t host_to_device_memcpy_ce device_to_host_memcpy_ce",
              url="https://github.com/NVIDIA/nvbandwidth")),
        affects=(f"rank:{rank}",) + ((f"gpu:{index}",) if index is not None else ()))
