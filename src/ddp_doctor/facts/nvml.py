"""NVML facts: the driver and every GPU as the driver sees them.

NVML is queried through nvidia-ml-py (module ``pynvml``), NVIDIA's official bindings.
A wedged driver can hang ``nvmlInit`` for minutes, so the queries run in a child
interpreter (``python -m ddp_doctor.facts.nvml``) under a deadline; the parent only
parses the JSON it prints. ``collect_nvml`` takes the bindings as an argument so that
tests can hand it a fake built from captured ``nvidia-smi -q`` output.

NVML reference: https://docs.nvidia.com/deploy/nvml-api/

Per GPU this also reads the NVSwitch fabric state (``nvmlDeviceGetGpuFabricInfo``: on
Hopper and newer HGX boards the state stays "not started" or "in progress" until the
Fabric Manager has registered the GPU; DCGM#120 shows "Fabric State: In Progress" on an
H800 whose CUDA never initialised), and names the processes that hold a GPU through
psutil, so a "GPU busy" finding can say whose job it is.

It also reads each GPU's PCIe link (current and maximum generation and width, the replay
counter), its clock-event ("throttle") reasons and its temperature. This child runs while
the GPUs are idle, and an idle GPU lowers its link generation to save power, so only the
link's WIDTH read here is judged; the generation, and the throttle reasons under load, are
read again by the interpreter probe during its own GPU work (python_probe_script.py).
"""

from __future__ import annotations

import ctypes
import json
import sys
from typing import TYPE_CHECKING, Any, Callable

from ddp_doctor.facts.nvml_topology import safe_topology
from ddp_doctor.facts.snapshot import FactRecord

if TYPE_CHECKING:  # the child process stays light: shapes are for the type checker only
    from ddp_doctor.facts.seam import Env
    from ddp_doctor.facts.shapes import (
        Ecc,
        Fabric,
        GpuProcess,
        NvmlFact,
        NvmlGpu,
        PcieLink,
        RemappedRows,
    )

NVML_TIMEOUT_S = 20.0

# nvmlComputeMode_t (https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceEnumvs.html)
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _try(fn: Callable[[], Any]) -> Any:
    """Call one NVML query; "not supported" and friends become None, not a failed probe."""
    try:
        return fn()
    except Exception:
        return None


def decode_cuda_driver_version(value: int | None) -> str | None:
    """NVML encodes the driver's CUDA version as 1000*major + 10*minor (12040 -> "12.4")."""
    if not value:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def collect_nvml(nvml: Any, psutil: Any = None) -> NvmlFact:
    """Query the driver through ``nvml`` (pynvml or a fake) and return plain data.

    ``psutil`` (the module or a fake) names the processes NVML lists; without it their
    ``name`` and ``username`` are None.
    """
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return {"initialized": False, "error": _text(exc), "error_type": type(exc).__name__}
    try:
        count = nvml.nvmlDeviceGetCount()
        return {
            "initialized": True,
            "error": None,
            "driver_version": _try(lambda: _text(nvml.nvmlSystemGetDriverVersion())),
            "cuda_driver_version": decode_cuda_driver_version(
                _try(nvml.nvmlSystemGetCudaDriverVersion)
            ),
            "nvml_version": _try(lambda: _text(nvml.nvmlSystemGetNVMLVersion())),
            "gpus": [_collect_gpu(nvml, i, psutil) for i in range(count)],
            "topology": safe_topology(nvml, count),
        }
    finally:
        _try(nvml.nvmlShutdown)


def _collect_gpu(nvml: Any, index: int, psutil: Any = None) -> NvmlGpu:
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:  # a lost GPU: "Unable to determine the device handle"
        return {"index": index, "error": _text(exc), "error_type": type(exc).__name__}
    mem = _try(lambda: nvml.nvmlDeviceGetMemoryInfo(h))
    cc = _try(lambda: nvml.nvmlDeviceGetCudaComputeCapability(h))
    mig = _try(lambda: nvml.nvmlDeviceGetMigMode(h))
    pci = _try(lambda: nvml.nvmlDeviceGetPciInfo(h))
    compute_mode = _try(lambda: nvml.nvmlDeviceGetComputeMode(h))
    procs = _try(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(h)) or []
    return {
        "index": index,
        "name": _try(lambda: _text(nvml.nvmlDeviceGetName(h))),
        "uuid": _try(lambda: _text(nvml.nvmlDeviceGetUUID(h))),
        "pci_bus_id": _text(pci.busId) if pci is not None else None,
        "memory_total": getattr(mem, "total", None),
        "memory_used": getattr(mem, "used", None),
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        "mig_mode": {"current": mig[0], "pending": mig[1]} if mig else None,
        "compute_mode": COMPUTE_MODES.get(compute_mode, compute_mode)
        if compute_mode is not None
        else None,
        "persistence_mode": _try(lambda: bool(nvml.nvmlDeviceGetPersistenceMode(h))),
        "ecc": _collect_ecc(nvml, h),
        "retired_pages_pending": _try(
            lambda: bool(nvml.nvmlDeviceGetRetiredPagesPendingStatus(h))
        ),
        "remapped_rows": _collect_remapped_rows(nvml, h),
        "fabric": _collect_fabric(nvml, h),
        "processes": [
            {"pid": p.pid, "used_memory": getattr(p, "usedGpuMemory", None),
             **_process_owner(psutil, p.pid)}
            for p in procs
        ],
        "pcie": collect_pcie(nvml, h),
        "clock_event_reasons": clock_event_reasons(nvml, h),
        "temperature": _try(lambda: int(nvml.nvmlDeviceGetTemperature(h, TEMPERATURE_GPU))),
        "temperature_slowdown": _try(lambda: int(nvml.nvmlDeviceGetTemperatureThreshold(
            h, TEMPERATURE_THRESHOLD_SLOWDOWN))),
    }


# nvmlTemperatureSensors_t / nvmlTemperatureThresholds_t (nvml.h)
TEMPERATURE_GPU = 0
TEMPERATURE_THRESHOLD_SLOWDOWN = 1


def collect_pcie(nvml: Any, h: Any) -> PcieLink | None:
    """The GPU's PCIe link; None where NVML answers none of it (WSL, some VMs).

    NVML's Max* queries give the most the GPU *and the slot* allow (a Gen4 GPU in a Gen3 slot
    reports 3), so current < max is a real shortfall, not a cheaper slot.
    """
    link: PcieLink = {
        "gen_current": _try(lambda: int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(h))),
        "gen_max": _try(lambda: int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(h))),
        "width_current": _try(lambda: int(nvml.nvmlDeviceGetCurrPcieLinkWidth(h))),
        "width_max": _try(lambda: int(nvml.nvmlDeviceGetMaxPcieLinkWidth(h))),
        "replay_counter": _try(lambda: int(nvml.nvmlDeviceGetPcieReplayCounter(h))),
    }
    return link if any(v is not None for v in link.values()) else None


def clock_event_reasons(nvml: Any, h: Any) -> int | None:
    """The clock-event reasons bit mask (nvmlClocksEventReasons; the older bindings call the
    same query "throttle reasons")."""
    for name in ("nvmlDeviceGetCurrentClocksEventReasons",
                 "nvmlDeviceGetCurrentClocksThrottleReasons"):
        query: Callable[[Any], Any] | None = getattr(nvml, name, None)
        if query is None:
            continue
        value = _try(lambda q=query: q(h))  # type: ignore[misc]
        if value is not None:
            return int(value)
    return None


def _process_owner(psutil: Any, pid: int) -> GpuProcess:
    """The process's name and user where psutil can see it (not in another PID namespace)."""
    if psutil is None:
        return {"name": None, "username": None}
    try:
        proc = psutil.Process(pid)
    except Exception:  # gone, or in another container's PID namespace
        return {"name": None, "username": None}
    return {"name": _try(proc.name), "username": _try(proc.username)}


# nvmlGpuFabricState_t (nvml.h): the GPU's registration with the NVSwitch fabric.
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}


def _collect_fabric(nvml: Any, h: Any) -> Fabric | None:
    """The GPU's NVSwitch fabric state; None where the GPU or driver has no fabric to join."""
    struct = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
    if struct is None:  # bindings older than R530
        return None
    info = struct()
    if _try(lambda: nvml.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))) is None:
        return None
    state = FABRIC_STATES.get(int(info.state), str(info.state))
    if state == "not_supported":
        return None
    return {"state": state}


def _collect_ecc(nvml: Any, h: Any) -> Ecc | None:
    enabled = _try(lambda: nvml.nvmlDeviceGetEccMode(h))
    if enabled is None:
        return None
    uncorrected = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    return {
        "enabled": bool(enabled[0]),
        "volatile_uncorrected": _try(
            lambda: nvml.nvmlDeviceGetTotalEccErrors(h, uncorrected, nvml.NVML_VOLATILE_ECC)
        ),
        "aggregate_uncorrected": _try(
            lambda: nvml.nvmlDeviceGetTotalEccErrors(h, uncorrected, nvml.NVML_AGGREGATE_ECC)
        ),
    }


def _collect_remapped_rows(nvml: Any, h: Any) -> RemappedRows | None:
    rows = _try(lambda: nvml.nvmlDeviceGetRemappedRows(h))
    if rows is None:
        return None
    correctable, uncorrectable, pending, failure = rows
    return {
        "correctable": correctable,
        "uncorrectable": uncorrectable,
        "pending": bool(pending),
        "failure": bool(failure),
    }


def probe_nvml(env: Env, timeout: float = NVML_TIMEOUT_S) -> FactRecord:
    """Run ``collect_nvml`` in a child interpreter with a deadline."""
    result = env.run([sys.executable, "-m", "ddp_doctor.facts.nvml"], timeout=timeout)
    if not result.ok:
        return FactRecord(
            "nvml", ok=False, error=f"NVML query failed: {result.describe_failure()}",
            duration_s=result.duration_s,
        )
    try:
        value = json.loads(result.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return FactRecord(
            "nvml", ok=False, error="NVML query printed no result", duration_s=result.duration_s
        )
    return FactRecord("nvml", ok=True, value=value, duration_s=result.duration_s)


def _main() -> None:
    try:
        import pynvml
    except ImportError as exc:  # nvidia-ml-py is a dependency, but a broken venv happens
        print(json.dumps({"initialized": False, "error": f"pynvml not importable: {exc}",
                          "error_type": "ImportError"}))
        return
    try:
        import psutil
    except ImportError:
        psutil = None
    print(json.dumps(collect_nvml(pynvml, psutil)))


if __name__ == "__main__":
    _main()
