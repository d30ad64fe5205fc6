"""Merge what the parsers read into one ``Facts``, in the shapes the live probes produce.

Several sections can describe the same machine (a collect_env report and an nvidia-smi
table): a fact is merged key by key, the better source first, and a key keeps the first
value that is known. For ``nvml`` the order is ``nvidia-smi -q``, the table, collect_env
(the driver's own detailed view first); for ``torch``, ``python`` and ``os`` collect_env
comes before the YOLO output. GPUs are matched by PCI bus id, else by index.

Facts the text says nothing about are recorded as unavailable with the error "not in the
pasted text", so the checks that need them are skipped and say why, instead of judging
an invented value.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from ddp_doctor.facts.snapshot import FactRecord, Facts
from ddp_doctor.textfacts.parsed import Parsed

NOT_IN_TEXT = "not in the pasted text"
# The facts a live run gathers (facts.gather); those the text does not show are unavailable.
FACT_NAMES = ("driver", "nvml", "torch", "python", "os", "wsl", "host", "env_vars",
              "interconnect", "plan")
_PRIORITY = {
    "nvml": ("nvidia_smi_q", "nvidia_smi", "collect_env", "yolo_checks", "yolov5_banner"),
    "default": ("collect_env", "yolo_checks", "yolov5_banner", "nvidia_smi_q", "nvidia_smi"),
}


def _bus(gpu: dict[str, Any]) -> str | None:
    """'00000000:1B:00.0' and '0000:1b:00.0' name the same device."""
    bus = str(gpu.get("pci_bus_id") or "")
    if not bus:
        return None
    domain, _, rest = bus.rpartition(":")
    domain, _, bus_no = domain.rpartition(":")
    return f"{int(domain or '0', 16):x}:{bus_no.lower()}:{rest.lower()}" if bus_no else None


def _merge_gpus(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> list[
        dict[str, Any]]:
    merged = [copy.deepcopy(g) for g in first]
    for gpu in second:
        match = next((m for m in merged if _bus(m) and _bus(m) == _bus(gpu)), None)
        if match is None and not (_bus(gpu) and any(_bus(m) for m in merged)):
            match = next((m for m in merged if m.get("index") == gpu.get("index")), None)
        if match is None:
            merged.append(copy.deepcopy(gpu))
        else:
            match.update(merge(match, gpu))
    return sorted(merged, key=lambda g: (g.get("index") is None, g.get("index") or 0))


def merge(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """FIRST with the keys only SECOND knows; nested dicts merged, known values kept."""
    out = copy.deepcopy(first)
    for key, value in second.items():
        mine = out.get(key)
        if key == "gpus" and isinstance(mine, list) and isinstance(value, list):
            out[key] = _merge_gpus(mine, value)
        elif key == "packages" and isinstance(mine, dict) and isinstance(value, dict):
            out[key] = {**copy.deepcopy(value), **mine}
        elif isinstance(mine, dict) and isinstance(value, dict):
            out[key] = merge(mine, value)
        elif mine is None:
            out[key] = copy.deepcopy(value)
    return out


def build_facts(parsed: Iterable[Parsed]) -> Facts:
    """One Facts from the parsed sections; ``meta["source"]`` is "text"."""
    items = list(parsed)
    facts = Facts(meta={"source": "text", "sections": [p.summary for p in items]})
    names = {name for p in items for name in p.facts}
    for name in sorted(names | set(FACT_NAMES)):
        order = _PRIORITY.get(name, _PRIORITY["default"])
        ranked = sorted((p for p in items if name in p.facts),
                        key=lambda p: order.index(p.kind) if p.kind in order else len(order))
        if not ranked:
            facts.add(FactRecord(name, ok=False, error=NOT_IN_TEXT))
            continue
        value: dict[str, Any] = {}
        for p in ranked:
            value = merge(value, p.facts[name])
        facts.add(FactRecord(name, ok=True, value=value))
    return facts
