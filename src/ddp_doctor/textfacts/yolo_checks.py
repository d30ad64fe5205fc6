"""Ultralytics ``yolo checks`` output and the YOLOv5 / Ultralytics device banner.

Every Ultralytics and YOLOv5 run prints one banner line from ``select_device``
(ultralytics/utils/torch_utils.py, yolov5 utils/torch_utils.py)::

  YOLOv5 🚀 v6.2-0-gd3ea0df Python-3.9.0 torch-1.13.0+cu116 CUDA:0 (NVIDIA A100 80GB PCIe, 81100MiB)
  Ultralytics 8.3.74 🚀 Python-3.12.9 torch-2.6.0+cu124 CUDA:0 (Tesla T4, 14918MiB)
                                                        CUDA:1 (Tesla T4, 14918MiB)

so YOLO tickets carry torch's version, its wheel tag and the CUDA devices torch opened
(``torch.cuda.get_device_properties``: name and total memory in MiB). "CPU (...)" means the
CPU was selected, which says nothing about CUDA by itself. ``yolo checks``
(``collect_system_info`` in ultralytics/utils/checks.py) adds "OS" (``platform.platform()``),
"Environment", "Python", "CUDA" (``torch.version.cuda`` when CUDA is available, else
None) and one row per requirement ("torch  ✅ 2.1.1+cu121>=1.8.0").

The torch CUDA version comes from the "CUDA" row or the wheel tag (+cu118 -> 11.8,
https://download.pytorch.org/whl/); "+cpu" is a CPU build. A version without a tag (a PyPI
wheel) leaves the build unknown, so ``build`` is left out rather than guessed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ddp_doctor.textfacts.parsed import (
    MIB,
    Parsed,
    cuda_from_local_tag,
    known,
    normalize_line,
    os_from_platform,
    rocm_from_local_tag,
    version_in,
    yes_no,
)

BANNER = re.compile(r"^\s*(?:Ultralytics\b|YOLOv5\b).*?\btorch-(\d\S*)", re.IGNORECASE)
_ULTRALYTICS = re.compile(r"Ultralytics\s+(?:YOLOv)?(\d+\.\d+[\w.]*)", re.IGNORECASE)
_PYTHON = re.compile(r"Python-(\d+\.\d+(?:\.\d+)?)")
_DEVICE = re.compile(r"CUDA:(\d+)\s*\((.+?),\s*(\d+)\s*MiB\)")
_CONTINUATION = re.compile(r"^\s+CUDA:\d+\s*\(")
_ROW = re.compile(r"^(OS|Environment|Python|Install|RAM|CPU|CUDA|GPU|GPU count|Path|Disk|"
                  r"CPU count)\s{2,}(.*?)\s*$")
_REQUIREMENT = re.compile(r"^([A-Za-z0-9_.\-]+)\s+(?:✅|❌|\u2705|\u274c)\s*(\S+)")
_IS_AVAILABLE = re.compile(r"torch\.cuda\.is_available\(\):\s*(\w+)")
_DEVICE_COUNT = re.compile(r"torch\.cuda\.device_count\(\):\s*(\d+)")
MAX_LINES = 60  # banner, "Setup complete", 12 system rows, about 20 requirement rows


def parse(lines: Sequence[str]) -> Parsed | None:
    """Read a banner at LINES[0] and the ``yolo checks`` rows or device error after it."""
    text = [normalize_line(line) for line in lines[:MAX_LINES]]
    banner = BANNER.match(text[0]) if text else None
    if banner is None:
        return None
    devices = [(int(i), name, int(mib)) for i, name, mib in _DEVICE.findall(text[0])]
    rows: dict[str, str] = {}
    requirements: dict[str, str] = {}
    cuda_available: bool | None = True if devices else None
    device_count: int | None = None
    for line in text[1:]:
        if BANNER.match(line):
            break  # the next run's banner
        if _CONTINUATION.match(line):
            devices += [(int(i), n, int(m)) for i, n, m in _DEVICE.findall(line)]
            continue
        row = _ROW.match(line)
        if row:
            rows.setdefault(row.group(1), row.group(2))
            continue
        requirement = _REQUIREMENT.match(line.strip())
        if requirement:
            requirements.setdefault(requirement.group(1).lower(),
                                    re.split(r"[<>=!~,;]", requirement.group(2))[0])
            continue
        available = _IS_AVAILABLE.search(line)
        if available:
            cuda_available = yes_no(available.group(1))
        count = _DEVICE_COUNT.search(line)
        if count:
            device_count = int(count.group(1))
    torch_version = banner.group(1)
    ultralytics = _ULTRALYTICS.search(text[0])
    python_version = (_PYTHON.search(text[0]) or [None, None])[1] or version_in(
        rows.get("Python"))
    if "CUDA" in rows and known(rows["CUDA"]) is None and devices == []:
        cuda_available = False  # collect_system_info prints None unless CUDA is available
    out = Parsed(kind="yolo_checks" if rows else "yolov5_banner")
    out.facts["torch"] = _torch(torch_version, known(rows.get("CUDA")), devices,
                                cuda_available, device_count)
    packages = {name: [{"version": version, "location": "yolo checks"}]
                for name, version in requirements.items()}
    packages.setdefault("torch", [{"version": torch_version, "location": "yolo banner"}])
    if ultralytics:
        packages.setdefault("ultralytics", [{"version": ultralytics.group(1),
                                             "location": "yolo banner"}])
    python: dict[str, Any] = {"packages": packages}
    if python_version:
        python["version"] = python_version
    out.facts["python"] = python
    os_fact = _os(rows)
    if os_fact:
        out.facts["os"] = os_fact
    where = ", ".join(f"{sum(1 for d in devices if d[1] == n)}x {n}"
                      for n in dict.fromkeys(d[1] for d in devices)) or "no CUDA device shown"
    label = "yolo checks" if rows else "YOLO banner"
    out.summary = f"{label}: torch {torch_version}, {where}"
    return out


def _torch(version: str, cuda_row: str | None, devices: list[tuple[int, str, int]],
           available: bool | None, device_count: int | None) -> dict[str, Any]:
    torch: dict[str, Any] = {"importable": True, "import_error": None}
    cuda = cuda_row or cuda_from_local_tag(version)
    hip = rocm_from_local_tag(version)
    if cuda or hip or version.endswith("+cpu"):
        torch["build"] = {"version": version, "cuda": cuda, "hip": hip}
    state: dict[str, Any] = {}
    if available is not None:
        state["available"] = available
    if device_count is not None:
        state["device_count"] = device_count
    if devices:
        state["devices"] = [{"index": i, "name": name, "total_memory": mib * MIB}
                            for i, name, mib in devices]
    if state:
        torch["cuda"] = state
    return torch


def _os(rows: dict[str, str]) -> dict[str, Any]:
    os_fact = os_from_platform(rows.get("OS"))
    environment = (rows.get("Environment") or "").strip()
    if environment == "Docker":
        os_fact["container"] = {"in_container": True, "kind": "docker",
                                "evidence": ["yolo checks: Environment Docker"]}
    if environment == "Windows" and "system" not in os_fact:
        os_fact["system"] = "Windows"
    return os_fact
