"""``nvidia-smi -q``: the full per-GPU report, read into the ``nvml`` fact.

The text is nested ``Key : value`` lines whose indentation gives the sections ("ECC
Errors" > "Volatile" > "DRAM Uncorrectable"); each value is one NVML query
(https://docs.nvidia.com/deploy/nvidia-smi/index.html). What the checks need from it:

- ECC mode and uncorrectable counts: R470-era "Double Bit / Total" per Volatile/Aggregate
  block, Ampere-era "DRAM Uncorrectable" and "SRAM Uncorrectable[ Parity| SEC-DED]";
- "Retired Pages / Pending Page Blacklist" (pre-Ampere page retirement waiting for a reset,
  https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html);
- "Remapped Rows" (Ampere+: Correctable/Uncorrectable Error, Pending, Remapping Failure
  Occurred), "N/A" on older GPUs; the stas00/ml-engineering capture after an Xid 63 has
  "Pending: Yes";
- "Fabric / State" on NVSwitch boards ("In Progress" until Fabric Manager registers the GPU);
- name, UUID, bus id, memory, MIG, compute and persistence mode, and "Processes : None";
- "GPU Link Info": "PCIe Generation" and "Link Width" (Max / Current, "16x") and "Replays
  Since Reset"; "Clocks Event Reasons" ("Clocks Throttle Reasons" before R535), each reason
  "Active" or "Not Active", into NVML's bit mask; "Temperature": "GPU Current Temp",
  "GPU Slowdown Temp" and "GPU Max Operating Temp" ("34 C"; the last is the temperature the
  GPU's own control keeps it under by lowering its clocks, NVML's
  NVML_TEMPERATURE_THRESHOLD_GPU_MAX; R580-era drivers print "T.Limit" figures instead,
  degrees left below it, see ``_margin``). A pasted report is a snapshot of an unknown moment, so
  like the NVML probe's reading it is taken as idle: the link's width and the slowdown
  reasons are judged, its generation is not.

The section starts at the "Driver Version" line (the "NVSMI LOG" banner and Timestamp
before it carry nothing); pastes are often excerpts ("[...]" where the author cut), so a
missing block is simply unknown. Users also paste one section of one GPU alone, the
"Clocks Event Reasons" (``parse_excerpt``) or the "Temperature" one (``parse_temperature``,
from its exact field names), flush left or with the report's indentation: read as one GPU
whose identity the paste does not show. ``nvidia-smi -q -i N`` shows one GPU without its index;
the GPU's index is then its "Minor Number" where shown, else its position in the text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ddp_doctor.knowledge.links import active_reasons, reasons_mask
from ddp_doctor.textfacts.parsed import MIB, Parsed, known, normalize_line, to_int, yes_no
from ddp_doctor.wording import count

Path = tuple[str, ...]
_KEY_VALUE = re.compile(r"^(.*?\S)\s*:\s*(.*?)\s*$")
_GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
START = re.compile(r"^Driver Version\s*:\s*\S", re.IGNORECASE)
# The clock-event reasons pasted on their own, flush left (a thread about throttling quotes
# just the reasons and the clocks): read as one GPU whose identity the paste does not show.
EXCERPT = re.compile(r"^Clocks (?:Event|Throttle) Reasons\s*$")
# The same heading with the report's indentation, copied out of a terminal: an excerpt only
# where no whole report comes before it in the text (``sections.find_sections``).
INDENTED_EXCERPT = re.compile(r"^\s+Clocks (?:Event|Throttle) Reasons\s*$")
# The "Temperature" section's first field, as nvidia-smi -q prints it (the heading alone,
# "Temperature", is any prose's word): a paste of that section is read from its exact field
# names, the R470-R570 absolute ones and the R580 "T.Limit" ones
# (https://docs.nvidia.com/deploy/nvidia-smi/index.html, "Temperature").
TEMPERATURE = re.compile(r"^\s*GPU Current Temp\s*:\s*\S")
TEMPERATURE_FIELDS = frozenset({
    "GPU Current Temp", "GPU Shutdown Temp", "GPU Slowdown Temp", "GPU Max Operating Temp",
    "GPU T.Limit Temp", "GPU Shutdown T.Limit Temp", "GPU Slowdown T.Limit Temp",
    "GPU Max Operating T.Limit Temp", "GPU Target Temperature", "Memory Current Temp",
    "Memory Max Operating Temp", "Memory Max Operating T.Limit Temp"})
MAX_LINES = 20000  # 8 GPUs of a recent driver are about 2,500 lines
_COMPUTE_MODES = {"default": "Default", "exclusive_process": "Exclusive_Process",
                  "exclusive_thread": "Exclusive_Thread", "prohibited": "Prohibited"}
_FABRIC = {"not started": "not_started", "in progress": "in_progress",
           "completed": "completed"}


def _tree(lines: Sequence[str], headless: bool = False
          ) -> tuple[dict[str, str], list[dict[Path, str]]]:
    """Top-level values and, per GPU block, every value by its section path. ``headless``:
    the lines are one GPU block's sections, pasted without the report around them."""
    system: dict[str, str] = {}
    gpu: dict[Path, str] | None = {} if headless else None
    gpus: list[dict[Path, str]] = [gpu] if gpu is not None else []
    sections: list[tuple[int, str]] = []
    for raw in lines[:MAX_LINES]:
        line = ("    " if headless else "") + normalize_line(raw)
        stripped = line.strip()
        if not stripped or stripped.startswith("====") or stripped == "[...]":
            continue
        indent = len(line) - len(line.lstrip(" "))
        while sections and sections[-1][0] >= indent:
            sections.pop()
        match = _KEY_VALUE.match(stripped)
        if indent == 0:
            sections.clear()
            header = _GPU_HEADER.match(stripped)
            if header:
                gpu = {("Bus Id",): header.group(1)}
                gpus.append(gpu)
            elif match and not gpus:
                system[match.group(1)] = match.group(2)
            elif match or gpus:
                break  # something after the report
            continue
        if gpu is None:
            break  # indented text before any GPU block: not -q output
        if match and match.group(2):
            gpu[(*(name for _, name in sections), match.group(1))] = match.group(2)
        else:
            sections.append((indent, stripped.rstrip(":").strip()))
    return system, gpus


def parse(lines: Sequence[str]) -> Parsed | None:
    """Read a report whose "Driver Version" line is LINES[0]; None without a GPU block."""
    if not lines or not START.match(normalize_line(lines[0]).strip()):
        return None
    system, blocks = _tree(lines)
    if not blocks:
        return None
    gpus = [_gpu(block, position) for position, block in enumerate(blocks)]
    driver = known(system.get("Driver Version"))
    cuda = known(system.get("CUDA Version"))
    nvml: dict[str, Any] = {"initialized": True, "error": None, "gpus": gpus}
    if driver:
        nvml["driver_version"] = driver
    if cuda and re.fullmatch(r"\d+\.\d+", cuda):
        nvml["cuda_driver_version"] = cuda
    attached = to_int(system.get("Attached GPUs"))
    out = Parsed(kind="nvidia_smi_q")
    out.facts["nvml"] = nvml
    problems = [f"GPU {g['index']}: {p}" for g in gpus for p in _problems(g)]
    out.summary = (f"nvidia-smi -q: driver {driver}, {count(len(gpus), 'GPU')} shown"
                   + (f" of {attached} attached" if attached and attached != len(gpus) else "")
                   + (" (" + "; ".join(problems) + ")" if problems else ""))
    return out


def parse_excerpt(lines: Sequence[str]) -> Parsed | None:
    """Read sections of one GPU pasted without their report (LINES[0] is EXCERPT's or
    INDENTED_EXCERPT's line): the clock-event reasons and what follows them (the clocks,
    sometimes the link)."""
    first = normalize_line(lines[0]).rstrip() if lines else ""
    if not (EXCERPT.match(first) or INDENTED_EXCERPT.match(first)):
        return None
    # the heading made flush left, and every line after it moved by as much
    cut = len(first) - len(first.lstrip(" "))
    lines = [_dedent(normalize_line(line), cut) for line in lines]
    _, blocks = _tree(lines, headless=True)
    gpu = _gpu(blocks[0], 0)
    if gpu.get("clock_event_reasons") is None and gpu.get("pcie") is None:
        return None
    return _one_gpu(gpu, "nvidia-smi -q excerpt")


def parse_temperature(lines: Sequence[str]) -> Parsed | None:
    """Read the "Temperature" section of one GPU pasted without its report (LINES[0] is
    TEMPERATURE's line): its consecutive fields, each one of nvidia-smi -q's own names; at
    least two of them, so that one "GPU Current Temp" line in prose is not a report."""
    block: dict[Path, str] = {}
    for raw in lines[:len(TEMPERATURE_FIELDS)]:
        match = _KEY_VALUE.match(normalize_line(raw).strip())
        if match is None or match.group(1) not in TEMPERATURE_FIELDS:
            break
        block[("Temperature", match.group(1))] = match.group(2)
    if len(block) < 2:
        return None
    gpu = _gpu(block, 0)
    gpu.pop("clock_event_reasons", None)
    if gpu.get("temperature") is None:
        return None
    return _one_gpu(gpu, "nvidia-smi -q temperature excerpt")


def _one_gpu(gpu: dict[str, Any], what: str) -> Parsed:
    """The facts of sections of one GPU pasted without their report: NVML as read, that
    GPU alone (its index unknown), and a summary naming its problems."""
    out = Parsed(kind="nvidia_smi_q")
    out.facts["nvml"] = {"initialized": True, "error": None, "gpus": [gpu]}
    problems = _problems(gpu)
    out.summary = (f"{what} of one GPU (which one is not shown)"
                   + (" (" + "; ".join(problems) + ")" if problems else ""))
    return out


def _dedent(line: str, cut: int) -> str:
    """LINE without up to CUT leading blanks."""
    kept = len(line) - len(line.lstrip(" "))
    return line[min(cut, kept):]


def _get(block: dict[Path, str], *path: str) -> str | None:
    return known(block.get(path))


def _find(block: dict[Path, str], *names: str) -> str | None:
    """A value at any depth whose path ends with NAMES."""
    for path, value in block.items():
        if path[-len(names):] == names:
            return known(value)
    return None


def _mib(value: str | None) -> int | None:
    number = to_int(value)
    return number * MIB if number is not None and "MiB" in (value or "") else None


def _gpu(block: dict[Path, str], position: int) -> dict[str, Any]:
    minor = to_int(_get(block, "Minor Number"))
    gpu: dict[str, Any] = {
        "index": minor if minor is not None else position,
        "name": _get(block, "Product Name"),
        "uuid": _get(block, "GPU UUID"),
        "pci_bus_id": _get(block, "Bus Id"),
        "memory_total": _mib(_get(block, "FB Memory Usage", "Total")),
        "memory_used": _mib(_get(block, "FB Memory Usage", "Used")),
        "persistence_mode": yes_no(_get(block, "Persistence Mode")),
    }
    mig = yes_no(_get(block, "MIG Mode", "Current"))
    if mig is not None:
        gpu["mig_mode"] = {"current": int(mig),
                           "pending": _int_or_none(yes_no(_get(block, "MIG Mode", "Pending")))}
    mode = _get(block, "Compute Mode")
    if mode:
        gpu["compute_mode"] = _COMPUTE_MODES.get(mode.lower(), mode)
    ecc = _ecc(block)
    if ecc is not None:
        gpu["ecc"] = ecc
    pending = yes_no(_get(block, "Retired Pages", "Pending Page Blacklist")
                     or _get(block, "Retired Pages", "Pending"))
    if pending is not None:
        gpu["retired_pages_pending"] = pending
    rows = _remapped_rows(block)
    if rows is not None:
        gpu["remapped_rows"] = rows
    fabric = _FABRIC.get((_get(block, "Fabric", "State") or "").lower())
    if fabric:
        gpu["fabric"] = {"state": fabric}
    processes = _processes(block)
    if processes is not None:
        gpu["processes"] = processes
    pcie = _pcie(block)
    if pcie is not None:
        gpu["pcie"] = pcie
    gpu["clock_event_reasons"] = _clock_reasons(block)
    gpu["temperature"] = _celsius(_get(block, "Temperature", "GPU Current Temp"))
    gpu["temperature_slowdown"] = _celsius(_get(block, "Temperature", "GPU Slowdown Temp"))
    gpu["temperature_max_operating"] = _celsius(_get(block, "Temperature",
                                                      "GPU Max Operating Temp"))
    gpu["temperature_margin"] = _margin(block, gpu)
    return {k: v for k, v in gpu.items() if v is not None}


def _lanes(value: str | None) -> int | None:
    return to_int((value or "").rstrip("xX").strip() or None)


def _pcie(block: dict[Path, str]) -> dict[str, Any] | None:
    """The "GPU Link Info" block (under "PCI"); None when it was not pasted or is N/A."""
    link = {
        "gen_current": to_int(_find(block, "GPU Link Info", "PCIe Generation", "Current")),
        "gen_max": to_int(_find(block, "GPU Link Info", "PCIe Generation", "Max")),
        "width_current": _lanes(_find(block, "GPU Link Info", "Link Width", "Current")),
        "width_max": _lanes(_find(block, "GPU Link Info", "Link Width", "Max")),
        "replay_counter": to_int(_find(block, "Replays Since Reset")),
    }
    return link if any(v is not None for v in link.values()) else None


def _clock_reasons(block: dict[Path, str]) -> int | None:
    """NVML's clock-event bit mask from the reasons' "Active"/"Not Active" lines."""
    names: dict[str, bool] = {}
    for path, value in block.items():
        if path and path[0] in ("Clocks Event Reasons", "Clocks Throttle Reasons") \
                and len(path) >= 2 and known(value):
            names[path[-1]] = value.strip().lower() == "active"
    return reasons_mask(names) if names else None


def _margin(block: dict[Path, str], gpu: dict[str, Any]) -> int | None:
    """Degrees C left below the max operating temperature. R580+ drivers print T.Limit
    figures instead of absolute ones: "GPU T.Limit Temp" (the margin NVML reports) against
    "GPU Max Operating T.Limit Temp" (the limit on that scale, usually 0 C)."""
    current, limit = gpu.get("temperature"), gpu.get("temperature_max_operating")
    if current is not None and limit:
        return int(limit - current)
    margin = _celsius(_get(block, "Temperature", "GPU T.Limit Temp"))
    floor = _celsius(_get(block, "Temperature", "GPU Max Operating T.Limit Temp"))
    return margin - floor if margin is not None and floor is not None else None


def _celsius(value: str | None) -> int | None:
    return to_int((value or "").replace("C", "").strip() or None)


def _int_or_none(value: bool | None) -> int | None:
    return None if value is None else int(value)


def _uncorrected(block: dict[Path, str], scope: str) -> int | None:
    """Uncorrectable errors in the Volatile or Aggregate block, summed over its locations."""
    total, seen = 0, False
    for path, value in block.items():
        if len(path) < 3 or path[0] != "ECC Errors" or path[1] != scope:
            continue
        name = " ".join(path[2:]).lower()
        counts = (name == "double bit total" or
                  ("uncorrectable" in name and "sources" not in name))
        number = to_int(known(value))
        if counts and number is not None:
            total, seen = total + number, True
    return total if seen else None


def _ecc(block: dict[Path, str]) -> dict[str, Any] | None:
    enabled = yes_no(_get(block, "Ecc Mode", "Current") or _get(block, "ECC Mode", "Current"))
    volatile = _uncorrected(block, "Volatile")
    aggregate = _uncorrected(block, "Aggregate")
    if enabled is None and volatile is None and aggregate is None:
        return None  # neither the mode nor a count was pasted
    return {"enabled": enabled, "volatile_uncorrected": volatile,
            "aggregate_uncorrected": aggregate}


def _remapped_rows(block: dict[Path, str]) -> dict[str, Any] | None:
    pending = yes_no(_get(block, "Remapped Rows", "Pending"))
    if pending is None:
        return None  # "Remapped Rows : N/A" (pre-Ampere) or not pasted
    return {"correctable": to_int(_get(block, "Remapped Rows", "Correctable Error")),
            "uncorrectable": to_int(_get(block, "Remapped Rows", "Uncorrectable Error")),
            "pending": pending,
            "failure": bool(yes_no(_get(block, "Remapped Rows", "Remapping Failure Occurred")))}


def _processes(block: dict[Path, str]) -> list[dict[str, Any]] | None:
    """[] for "Processes : None"; a listed process table is not read (unknown, None)."""
    if (block.get(("Processes",)) or "").strip().lower() == "none":
        return []
    return None


def _problems(gpu: dict[str, Any]) -> list[str]:
    problems = []
    if (gpu.get("remapped_rows") or {}).get("pending"):
        problems.append("remapped rows pending")
    if (gpu.get("remapped_rows") or {}).get("failure"):
        problems.append("row remapping failed")
    if gpu.get("retired_pages_pending"):
        problems.append("retired pages pending")
    ecc = gpu.get("ecc") or {}
    if ecc.get("volatile_uncorrected") or ecc.get("aggregate_uncorrected"):
        problems.append("uncorrectable ECC errors")
    if (gpu.get("fabric") or {}).get("state") in ("not_started", "in_progress"):
        problems.append(f"fabric {gpu['fabric']['state'].replace('_', ' ')}")
    link = gpu.get("pcie") or {}
    if link.get("width_current") and link.get("width_max") \
            and link["width_current"] < link["width_max"]:
        problems.append(f"PCIe link x{link['width_current']} of x{link['width_max']}")
    if gpu.get("temperature_margin") is not None and gpu["temperature_margin"] <= 0:
        problems.append("at its max operating temperature")
    slowed = [r.name for r in active_reasons(gpu.get("clock_event_reasons")) if r.slows]
    if slowed:
        problems.append(", ".join(slowed))
    return problems
