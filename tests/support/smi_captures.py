"""NVML as real machines answered it, rebuilt from their captured ``nvidia-smi`` output.

``nvidia-smi`` is a thin client of NVML: every line of ``nvidia-smi -q`` and every cell
of the table is one NVML query. ``FakeNVML`` answers the same queries from those
captures (tests/fixtures/captures, sources in SOURCES.md), and, like the real bindings,
raises ``NVMLError_NotSupported`` for anything the machine showed as "N/A" or did not
show at all.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

CAPTURES = Path(__file__).parents[1] / "fixtures" / "captures"
MIB = 1024**2

# Compute capabilities of the GPUs in the captures: nvidia-smi's default output does not
# print them, NVML derives them from the chip. Values from https://developer.nvidia.com/cuda-gpus
COMPUTE_CAPABILITY = {
    "Tesla V100-PCIE-32GB": (7, 0),
    "NVIDIA GeForce RTX 4070 Laptop GPU": (8, 9),
    "NVIDIA A100-SXM4-80GB": (8, 0),
    "A100-PCIE-40GB": (8, 0),
}
# nvmlGpuFabricState_t by the words nvidia-smi prints for it.
_FABRIC_STATES = {"Not Supported": 0, "Not Started": 1, "In Progress": 2, "Completed": 3}
COMPUTE_MODE_CODES = {"Default": 0, "Exclusive_Thread": 1, "Prohibited": 2,
                      "Exclusive_Process": 3}


def capture(name: str) -> str:
    return (CAPTURES / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------- parsers

Path_ = tuple[str, ...]


@dataclass
class SmiQuery:
    """``nvidia-smi -q``: top-level keys, and per GPU every value by its section path."""

    system: dict[str, str] = field(default_factory=dict)
    gpus: list[dict[Path_, str]] = field(default_factory=list)


_KEY_VALUE = re.compile(r"^(.*?\S)\s*:\s+(.*?)\s*$")


def parse_smi_q(text: str) -> SmiQuery:
    """Indentation gives the sections: ``("ECC Errors", "Volatile", "DRAM Correctable")``."""
    out = SmiQuery()
    gpu: dict[Path_, str] | None = None
    sections: list[tuple[int, str]] = []  # (indent, name) of the open section headers
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("===="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        while sections and sections[-1][0] >= indent:
            sections.pop()
        match = _KEY_VALUE.match(line)
        if indent == 0:
            sections.clear()
            if line.startswith("GPU ") and not match:
                gpu = {("Bus Id",): line.split(None, 1)[1]}
                out.gpus.append(gpu)
            elif match:
                out.system[match.group(1)] = match.group(2)
            else:
                gpu = None  # e.g. the "[...]" an author left for elided text
            continue
        if gpu is None:  # a fragment that starts inside a GPU's block
            gpu = {}
            out.gpus.append(gpu)
        path = tuple(name for _, name in sections)
        if match:
            gpu[(*path, match.group(1))] = match.group(2)
        else:
            sections.append((indent, line))
    return out


@dataclass
class SmiTableGpu:
    index: int
    name: str
    persistence: str
    bus_id: str
    ecc_cell: str
    memory_used_mib: int
    memory_total_mib: int
    compute_mode: str
    mig_cell: str | None  # None: the capture ends before the GPU's third line


@dataclass
class SmiTable:
    smi_version: str
    driver_version: str
    cuda_version: str
    gpus: list[SmiTableGpu]
    processes: list[dict[str, Any]]


_HEADER = re.compile(r"NVIDIA-SMI (\S+)\s+Driver Version: (\S+)\s+CUDA Version: (\S+)")
_ROW1 = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|"
                   r"\s+([0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d)\s+\w+\s+\|\s+(\S+)\s+\|$")
_ROW2 = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB\s+\|\s+\S+\s+(\S+)\s+\|$")
_ROW3 = re.compile(r"^\|\s+\|\s+\|\s+(\S+)\s+\|$")
_PROC = re.compile(r"^\|\s+(\d+)\s+\S+\s+\S+\s+(\d+)\s+([CG+]+)\s+(.+?)\s+(\d+)MiB\s+\|$")


def parse_smi_table(text: str) -> SmiTable:
    """The default ``nvidia-smi`` table (79-column R450-R470 and 91-column R525+ layouts)."""
    header = _HEADER.search(text)
    assert header, "no NVIDIA-SMI header line"
    lines = [line.rstrip() for line in text.splitlines()]
    gpus = []
    for i, line in enumerate(lines):
        row1 = _ROW1.match(line)
        if not row1:
            continue
        row2 = _ROW2.search(lines[i + 1])
        row3 = _ROW3.match(lines[i + 2]) if i + 2 < len(lines) else None
        assert row2, f"GPU row {row1.group(1)} is not followed by its memory line"
        gpus.append(SmiTableGpu(
            index=int(row1.group(1)), name=row1.group(2), persistence=row1.group(3),
            bus_id=row1.group(4), ecc_cell=row1.group(5),
            memory_used_mib=int(row2.group(1)), memory_total_mib=int(row2.group(2)),
            compute_mode=row2.group(3), mig_cell=row3.group(1) if row3 else None))
    processes = [{"gpu": int(m.group(1)), "pid": int(m.group(2)), "type": m.group(3),
                  "name": m.group(4), "used_mib": int(m.group(5))}
                 for m in map(_PROC.match, lines) if m]
    return SmiTable(header.group(1), header.group(2), header.group(3), gpus, processes)


# ---------------------------------------------------------------- fake bindings


class NVMLError(Exception):
    """Shaped like pynvml's: a subclass per error code, str() is NVML's error string."""

    text = "Unknown Error"

    def __str__(self) -> str:
        return self.args[0] if self.args else self.text


class NVMLError_NotSupported(NVMLError):
    text = "Not Supported"


class NVMLError_Unknown(NVMLError):
    text = "Unknown Error"


class NVMLError_LibRmVersionMismatch(NVMLError):
    text = "Driver/library version mismatch"


class NVMLError_GpuIsLost(NVMLError):
    text = "GPU is lost"


class NVMLError_LibraryNotFound(NVMLError):
    text = "NVML Shared Library Not Found"


class NVMLError_Uninitialized(NVMLError):
    text = "Uninitialized"


_NOT_SHOWN = ("N/A", "[N/A]", "ERR!", "Unknown Error")
# nvmlClocksEventReason* bits by the names `nvidia-smi -q` prints (nvml.h).
_REASON_BITS = {"Idle": 0x1, "Applications Clocks Setting": 0x2, "SW Power Cap": 0x4,
                "HW Slowdown": 0x8, "Sync Boost": 0x10, "SW Thermal Slowdown": 0x20,
                "HW Thermal Slowdown": 0x40, "HW Power Brake Slowdown": 0x80,
                "Display Clock Setting": 0x100}


@dataclass
class FakeGpu:
    """One GPU: the values nvidia-smi showed for it, keyed by their ``-q`` section path."""

    values: dict[Path_, str]
    processes: list[SimpleNamespace] | None = None  # None: the capture shows no process list
    handle_error: NVMLError | None = None  # nvmlDeviceGetHandleByIndex fails for this GPU


class FakeNVML:
    """A module-like stand-in for ``pynvml`` answering from captured output."""

    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1

    def __init__(self, system: dict[str, str], gpus: list[FakeGpu], *,
                 init_error: NVMLError | None = None, as_bytes: bool = False) -> None:
        self.system = system
        self.gpus = gpus
        self.init_error = init_error
        self.as_bytes = as_bytes  # older nvidia-ml-py releases returned bytes
        self.initialized = False
        self.shutdown_calls = 0
        self.queries: list[str] = []

    # -- helpers
    def _str(self, value: str) -> str | bytes:
        return value.encode() if self.as_bytes else value

    def _need_init(self, query: str) -> None:
        self.queries.append(query)
        if not self.initialized:
            raise NVMLError_Uninitialized()

    def _get(self, h: FakeGpu, *paths: Path_) -> str:
        for path in paths:
            value = h.values.get(path)
            if value is not None and value not in _NOT_SHOWN:
                return value
        raise NVMLError_NotSupported()

    @staticmethod
    def _yes(value: str) -> int:
        return {"Enabled": 1, "Yes": 1, "Disabled": 0, "No": 0}[value]

    # -- library
    def nvmlInit(self) -> None:
        self.queries.append("nvmlInit")
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._need_init("nvmlShutdown")
        self.shutdown_calls += 1
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._need_init("driver")
        value = self.system.get("Driver Version")
        if not value or value in _NOT_SHOWN:
            raise NVMLError_NotSupported()
        return self._str(value)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._need_init("cuda")
        value = self.system.get("CUDA Version", "")
        match = re.fullmatch(r"(\d+)\.(\d+)", value)
        if not match:  # "ERR!" on a broken WSL2 install
            raise NVMLError_Unknown()
        return int(match.group(1)) * 1000 + int(match.group(2)) * 10

    def nvmlSystemGetNVMLVersion(self) -> str | bytes:
        self._need_init("nvml")
        value = self.system.get("NVML Version")
        if not value:
            raise NVMLError_NotSupported()
        return self._str(value)

    # -- devices
    def nvmlDeviceGetCount(self) -> int:
        self._need_init("count")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._need_init("handle")
        gpu = self.gpus[index]
        if gpu.handle_error is not None:
            raise gpu.handle_error
        return gpu

    def nvmlDeviceGetName(self, h: FakeGpu) -> str | bytes:
        self._need_init("name")
        return self._str(self._get(h, ("Product Name",)))

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str | bytes:
        self._need_init("uuid")
        return self._str(self._get(h, ("GPU UUID",)))

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> SimpleNamespace:
        self._need_init("pci")
        return SimpleNamespace(busId=self._str(self._get(h, ("PCI", "Bus Id"), ("Bus Id",))))

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> SimpleNamespace:
        self._need_init("memory")
        total = int(self._get(h, ("FB Memory Usage", "Total")).split()[0]) * MIB
        used = int(self._get(h, ("FB Memory Usage", "Used")).split()[0]) * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeGpu) -> tuple[int, int]:
        self._need_init("cc")
        name = self._get(h, ("Product Name",))
        if name not in COMPUTE_CAPABILITY:
            raise NVMLError_NotSupported()
        return COMPUTE_CAPABILITY[name]

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        self._need_init("mig")
        return [self._yes(self._get(h, ("MIG Mode", "Current"))),
                self._yes(self._get(h, ("MIG Mode", "Pending")))]

    def nvmlDeviceGetComputeMode(self, h: FakeGpu) -> int:
        self._need_init("compute mode")
        return COMPUTE_MODE_CODES[self._get(h, ("Compute Mode",))]

    def nvmlDeviceGetPersistenceMode(self, h: FakeGpu) -> int:
        self._need_init("persistence")
        return self._yes(self._get(h, ("Persistence Mode",)))

    def nvmlDeviceGetEccMode(self, h: FakeGpu) -> list[int]:
        self._need_init("ecc mode")
        return [self._yes(self._get(h, ("ECC Mode", "Current"), ("Ecc Mode", "Current"))),
                self._yes(self._get(h, ("ECC Mode", "Pending"), ("Ecc Mode", "Pending")))]

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, error_type: int,
                                    counter: int) -> int:
        self._need_init("ecc errors")
        base = ("ECC Errors", "Volatile" if counter == self.NVML_VOLATILE_ECC else "Aggregate")
        uncorrected = error_type == self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        # R470 and older: "Single Bit" / "Double Bit" blocks with a Total.
        old = (*base, "Double Bit" if uncorrected else "Single Bit", "Total")
        if old in h.values:
            return int(self._get(h, old))
        # Ampere and newer: DRAM and SRAM counts.
        if uncorrected:
            parts = [("DRAM Uncorrectable",), ("SRAM Uncorrectable",)]
            if (*base, "SRAM Uncorrectable Parity") in h.values:
                parts = [("DRAM Uncorrectable",), ("SRAM Uncorrectable Parity",),
                         ("SRAM Uncorrectable SEC-DED",)]
        else:
            parts = [("DRAM Correctable",), ("SRAM Correctable",)]
        return sum(int(self._get(h, (*base, *p))) for p in parts)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: FakeGpu) -> int:
        self._need_init("retired pages")
        return self._yes(self._get(h, ("Retired Pages", "Pending Page Blacklist"),
                                   ("Retired Pages", "Pending Page Retirement")))

    def nvmlDeviceGetRemappedRows(self, h: FakeGpu) -> tuple[int, int, int, int]:
        self._need_init("remapped rows")
        section = "Remapped Rows"
        return (int(self._get(h, (section, "Correctable Error"))),
                int(self._get(h, (section, "Uncorrectable Error"))),
                self._yes(self._get(h, (section, "Pending"))),
                self._yes(self._get(h, (section, "Remapping Failure Occurred"))))

    class c_nvmlGpuFabricInfo_t(ctypes.Structure):  # the layout of pynvml's
        _fields_ = [("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint),
                    ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint)]

    def nvmlDeviceGetGpuFabricInfo(self, h: FakeGpu, info: Any) -> int:
        """``Fabric / State`` of ``nvidia-smi -q``; absent (pre-Hopper, R470) -> NotSupported."""
        self._need_init("fabric")
        state = self._get(h, ("Fabric", "State"))
        info._obj.state = _FABRIC_STATES[state]
        return 0

    # -- PCIe link, clock-event reasons, temperature ("GPU Link Info", "Clocks Event Reasons",
    #    "Temperature" of `nvidia-smi -q`)
    def _link(self, h: FakeGpu, what: str, which: str) -> int:
        self._need_init("pcie")
        return int(self._get(h, ("PCI", "GPU Link Info", what, which)).rstrip("x"))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: FakeGpu) -> int:
        return self._link(h, "PCIe Generation", "Current")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: FakeGpu) -> int:
        return self._link(h, "PCIe Generation", "Max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: FakeGpu) -> int:
        return self._link(h, "Link Width", "Current")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: FakeGpu) -> int:
        return self._link(h, "Link Width", "Max")

    def nvmlDeviceGetPcieReplayCounter(self, h: FakeGpu) -> int:
        self._need_init("pcie replays")
        return int(self._get(h, ("PCI", "Replays Since Reset")))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        self._need_init("clock events")
        mask, seen = 0, False
        for path, value in h.values.items():
            if path[0] in ("Clocks Event Reasons", "Clocks Throttle Reasons") and \
                    path[-1] in _REASON_BITS:
                seen = True
                mask |= _REASON_BITS[path[-1]] if value == "Active" else 0
        if not seen:
            raise NVMLError_NotSupported()
        return mask

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        self._need_init("temperature")
        return int(self._get(h, ("Temperature", "GPU Current Temp")).split()[0])

    def nvmlDeviceGetTemperatureThreshold(self, h: FakeGpu, threshold: int) -> int:
        self._need_init("temperature threshold")
        name = {0: "GPU Shutdown Temp", 1: "GPU Slowdown Temp"}.get(threshold, "")
        return int(self._get(h, ("Temperature", name)).split()[0])

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[SimpleNamespace]:
        self._need_init("processes")
        if h.processes is not None:
            return h.processes
        if h.values.get(("Processes",)) == "None":
            return []
        raise NVMLError_NotSupported()


# ---------------------------------------------------------------- machines


def nvml_from_smi_q(name: str, **kwargs: Any) -> FakeNVML:
    """A machine from one ``nvidia-smi -q`` capture."""
    parsed = parse_smi_q(capture(name))
    return FakeNVML(parsed.system, [FakeGpu(g) for g in parsed.gpus], **kwargs)


def nvml_from_smi_table(name: str, *, full_name: str | None = None,
                        details: dict[int, dict[Path_, str]] | None = None,
                        nvml_version: str | None = None) -> FakeNVML:
    """A machine from the ``nvidia-smi`` table; ``details`` adds a GPU's ``-q`` values.

    The table truncates long names ("Tesla V100-PCIE..."): ``full_name`` is the name the
    same machine's ``-q`` output gives.
    """
    table = parse_smi_table(capture(name))
    system = {"Driver Version": table.driver_version, "CUDA Version": table.cuda_version}
    if nvml_version:
        system["NVML Version"] = nvml_version
    gpus = []
    for row in table.gpus:
        values: dict[Path_, str] = {
            ("Product Name",): full_name if full_name and row.name.endswith("...") else row.name,
            ("PCI", "Bus Id"): row.bus_id,
            ("FB Memory Usage", "Total"): f"{row.memory_total_mib} MiB",
            ("FB Memory Usage", "Used"): f"{row.memory_used_mib} MiB",
            ("Compute Mode",): row.compute_mode,
            ("Persistence Mode",): "Enabled" if row.persistence == "On" else "Disabled",
        }
        if row.mig_cell is not None:
            # The table shows only the current mode; with no change pending (the usual
            # case) NVML reports the same mode as pending.
            values[("MIG Mode", "Current")] = values[("MIG Mode", "Pending")] = row.mig_cell
        # "Volatile Uncorr. ECC": a count when ECC is on, "Off", or "N/A" (no ECC).
        if row.ecc_cell.isdigit():
            values[("Ecc Mode", "Current")] = values[("Ecc Mode", "Pending")] = "Enabled"
            values[("ECC Errors", "Volatile", "Double Bit", "Total")] = row.ecc_cell
        elif row.ecc_cell in ("On", "Off"):
            mode = "Enabled" if row.ecc_cell == "On" else "Disabled"
            values[("Ecc Mode", "Current")] = values[("Ecc Mode", "Pending")] = mode
        values.update((details or {}).get(row.index, {}))
        procs = [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used_mib"] * MIB)
                 for p in table.processes if p["gpu"] == row.index]
        gpus.append(FakeGpu(values, processes=procs if table.processes else None))
    return FakeNVML(system, gpus)
