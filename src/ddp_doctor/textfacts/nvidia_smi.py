"""The default ``nvidia-smi`` table, and the one-line errors nvidia-smi prints instead of it.

``nvidia-smi`` is a client of NVML, so what it shows maps onto the ``nvml`` fact: the
header's driver and CUDA versions (``nvmlSystemGetDriverVersion``,
``nvmlSystemGetCudaDriverVersion``), per GPU its index, name (cut to fit with "..." in the
narrow layouts), persistence mode, bus id, volatile uncorrectable ECC count (or "Off"/"On"/
"N/A"), memory used/total, compute mode and MIG mode, and the Processes table. Column
meanings: https://docs.nvidia.com/deploy/nvidia-smi/index.html. The layouts read here go
from R346 (2017, no CUDA Version) through the 79-column R450-R470 layout to the 91-column
R535+ one (captures in tests/fixtures/text, sources in SOURCES.md).

NVML lists compute processes only (``nvmlDeviceGetComputeRunningProcesses``), so graphics
("G") rows such as Xorg are left out of ``processes`` as the live probe leaves them out.

The errors, and the NVML state they stand for:
- "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver": NVML
  cannot reach a kernel driver (not installed, not loaded, not built for the running
  kernel): lyulyul/shine-cluster#50, negativo17/nvidia-driver#56.
- "Failed to initialize NVML: Driver/library version mismatch", with "NVML library version:
  570.124" from newer nvidia-smi: the libraries were upgraded under a loaded module
  (tinygrad/open-gpu-kernel-modules#47, NVIDIA/ubuntu-packaging-nvidia-driver#3).
- "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error" (or "GPU is
  lost"): NVML lists the GPU but cannot reach it (pdbear/syno_nvidia_gpu_driver#22; Xid 79).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ddp_doctor.textfacts.parsed import MIB, Parsed, known, normalize_line, to_int
from ddp_doctor.wording import count

_HEADER = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)"
                     r"(?:\s+CUDA Version:\s*(\S+))?", re.IGNORECASE)
_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_GPU_ROW1 = re.compile(r"^\|\s*(\d+)\s+(.+?)\s+(On|Off|WDDM|TCC|N/A)\s*\|\s*(" + _BUS
                       + r")\s+(\S+)\s*\|\s*(.*?)\s*\|")
_GPU_ROW2 = re.compile(r"^\|.*?\|\s*(\d+)\s*MiB\s*/\s*(\d+)\s*MiB\s*\|\s*(\S+)\s+(.+?)\s*\|")
_GPU_ROW3 = re.compile(r"^\|\s*\|\s*\|\s*(Enabled|Disabled|N/A)\s*\|")
_PROCESS_TYPES = {"C", "G", "C+G", "M", "M+C", "M+G", "M+C+G"}
_COMPUTE_MODES = {"default": "Default", "e. process": "Exclusive_Process",
                  "e. thread": "Exclusive_Thread", "prohibited": "Prohibited"}
NO_DRIVER = re.compile(r"NVIDIA-SMI has failed because it couldn.t communicate with the "
                       r"NVIDIA driver", re.IGNORECASE)
MISMATCH = re.compile(r"Failed to initialize NVML:\s*Driver/library version mismatch",
                      re.IGNORECASE)
_NVML_LIBRARY = re.compile(r"NVML library version:\s*(\S+)", re.IGNORECASE)
LOST = re.compile(r"Unable to determine the device handle for GPU\s*(" + _BUS + r")\s*:\s*"
                  r"(.+?)\s*$", re.IGNORECASE)
MAX_LINES = 400


def parse(lines: Sequence[str]) -> Parsed | None:
    """Read a table or an error starting at LINES[0]; None when it is neither."""
    text = [normalize_line(line) for line in lines[:MAX_LINES]]
    if not text:
        return None
    first = text[0]
    if NO_DRIVER.search(first):
        return _error(first.strip(), "NVMLError_DriverNotLoaded", None,
                      "nvidia-smi: cannot communicate with the NVIDIA driver")
    if MISMATCH.search(first):
        library = next((m.group(1) for m in map(_NVML_LIBRARY.search, text[1:4]) if m), None)
        return _error("Driver/library version mismatch", "NVMLError_LibRmVersionMismatch",
                      library, "nvidia-smi: driver/library version mismatch"
                      + (f" (NVML library {library})" if library else ""))
    if LOST.search(first):
        return _lost(text)
    header = _HEADER.search(first)
    return _table(text, header) if header else None


def _error(message: str, error_type: str, library: str | None, summary: str) -> Parsed:
    out = Parsed(kind="nvidia_smi", summary=summary)
    out.facts["nvml"] = {"initialized": False, "error": message, "error_type": error_type}
    if library:
        out.facts["driver"] = {"userspace_versions": [library]}
    return out


def _lost(text: list[str]) -> Parsed:
    gpus: list[dict[str, Any]] = []
    for line in text:
        match = LOST.search(line)
        if not match:
            break
        reason = match.group(2)
        gpus.append({"index": len(gpus), "pci_bus_id": match.group(1), "error": reason,
                     "error_type": "NVMLError_GpuIsLost" if "lost" in reason.lower()
                     else "NVMLError_Unknown"})
    out = Parsed(kind="nvidia_smi", summary=f"nvidia-smi: {count(len(gpus), 'GPU')} not answering "
                 f"({', '.join(g['pci_bus_id'] + ': ' + g['error'] for g in gpus)})")
    out.facts["nvml"] = {"initialized": True, "error": None, "gpus": gpus}
    return out


def _table(text: list[str], header: re.Match[str]) -> Parsed:
    gpus: list[dict[str, Any]] = []
    processes: list[tuple[int, dict[str, Any]]] = []
    in_processes = False
    processes_known = False  # the Processes table was pasted whole, or said "No running"
    for line in text[1:]:
        if _HEADER.search(line):
            break  # a second table
        if "Processes:" in line:
            in_processes = True
            continue
        if in_processes:
            row = _process_row(line)
            if row:
                processes.append(row)
                processes_known = True
            elif "no running processes found" in line.lower():
                processes_known = True
            elif not line.startswith(("|", "+")):
                break  # past the end of the table
            continue
        if not line.startswith(("|", "+")) and line.strip():
            if gpus:
                break
            continue
        row1 = _GPU_ROW1.match(line)
        if row1:
            gpus.append(_gpu(row1))
            continue
        row2 = _GPU_ROW2.match(line)
        if row2 and gpus and "memory_total" not in gpus[-1]:
            gpus[-1].update(memory_used=int(row2.group(1)) * MIB,
                            memory_total=int(row2.group(2)) * MIB,
                            compute_mode=_COMPUTE_MODES.get(row2.group(4).strip().lower(),
                                                            known(row2.group(4))))
            continue
        row3 = _GPU_ROW3.match(line)
        if row3 and gpus:
            mig = known(row3.group(1))
            if mig is not None:
                gpus[-1]["mig_mode"] = {"current": int(mig == "Enabled"), "pending": None}
    by_index = {g["index"]: g for g in gpus}
    for index, process in processes:
        if index in by_index:
            by_index[index].setdefault("processes", []).append(process)
    if processes_known:  # else the paste ends before the process list: unknown
        for gpu in gpus:
            gpu.setdefault("processes", [])
    driver, cuda = header.group(2), known(header.group(3))
    nvml: dict[str, Any] = {"initialized": True, "error": None, "driver_version": driver,
                            "gpus": gpus}
    if cuda and re.fullmatch(r"\d+\.\d+", cuda):
        nvml["cuda_driver_version"] = cuda
    out = Parsed(kind="nvidia_smi")
    out.facts["nvml"] = nvml
    names = [g.get("name") for g in gpus]
    out.summary = (f"nvidia-smi: driver {driver}" + (f" (CUDA {cuda})" if cuda else "")
                   + f", {count(len(gpus), 'GPU')}"
                   + (": " + ", ".join(f"{names.count(n)}x {n}" for n in dict.fromkeys(names))
                      if gpus else ""))
    return out


def _gpu(row: re.Match[str]) -> dict[str, Any]:
    gpu: dict[str, Any] = {"index": int(row.group(1)), "name": row.group(2).strip(),
                           "pci_bus_id": row.group(4)}
    persistence = row.group(3)
    if persistence in ("On", "Off"):
        gpu["persistence_mode"] = persistence == "On"
    ecc = row.group(6).strip()
    if ecc.isdigit():
        gpu["ecc"] = {"enabled": True, "volatile_uncorrected": int(ecc)}
    elif ecc in ("Off", "On"):
        gpu["ecc"] = {"enabled": ecc == "On"}
    return gpu


def _process_row(line: str) -> tuple[int, dict[str, Any]] | None:
    """``|    2   N/A  N/A     88420      C   python      27064MiB |`` (GI/CI since R450)."""
    tokens = line.strip().strip("|").split()
    kinds = [i for i, t in enumerate(tokens) if t in _PROCESS_TYPES]
    if len(tokens) < 4 or not tokens[0].isdigit() or not kinds:
        return None
    kind_at = kinds[0]
    pid = to_int(tokens[kind_at - 1]) if kind_at >= 1 else None
    if pid is None or "C" not in tokens[kind_at]:
        return None  # a graphics-only process: NVML's compute list does not hold it
    memory = re.fullmatch(r"(\d+)MiB", tokens[-1])
    name_end = len(tokens) - 1 if memory or tokens[-1] == "N/A" else len(tokens)
    return int(tokens[0]), {"pid": pid,
                            "used_memory": int(memory.group(1)) * MIB if memory else None,
                            "name": " ".join(tokens[kind_at + 1:name_end]) or None,
                            "username": None}
