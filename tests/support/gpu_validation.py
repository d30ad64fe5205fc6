"""Helpers of the GPU validation suite (tests/gpu): nvidia-smi's output read, the facts
compared with it, and the figures of check and smoke reports.

Plain functions of text and JSON, tested on CPU in tests/gpu/test_gpu_support_unit.py, so
a GPU run fails only on what the GPU machine did, not on a parsing slip found there first.
The report readers are bench/gpu_validate_summary.py's (the summary of
bench/gpu_validate.sh reads the same figures), loaded from its file: bench/ is no package.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SUMMARY_SCRIPT = REPO / "bench" / "gpu_validate_summary.py"
SMI_QUERY = ["nvidia-smi", "--query-gpu=index,name,uuid,memory.total,driver_version",
             "--format=csv,noheader,nounits"]
MIB = 2**20
# The check ids whose pass proves a healthy GPU: driver, CUDA initialisation, the matmul
# test, the cuDNN convolution, kernels for this architecture, NCCL in the torch build.
HEALTHY_CHECKS = ("driver.present", "driver.cuda_compat", "cuda.init", "cuda.functional",
                  "cudnn.conv", "torch.arch_support", "nccl.available")


def load_summary_module() -> ModuleType:
    """bench/gpu_validate_summary.py as a module."""
    spec = importlib.util.spec_from_file_location("gpu_validate_summary", SUMMARY_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class SmiGpu:
    """One row of ``nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version``."""

    index: int
    name: str
    uuid: str
    memory_mib: int
    driver: str


def parse_smi_query(text: str) -> list[SmiGpu]:
    """The rows of SMI_QUERY's CSV (no header, no units), in nvidia-smi's order."""
    rows = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != 5:
            raise ValueError(f"expected 5 fields, got {len(row)}: {row!r}")
        index, name, uuid, memory, driver = (field.strip() for field in row)
        rows.append(SmiGpu(int(index), name, uuid, int(float(memory)), driver))
    return rows


SMI_LIST_LINE = re.compile(r"^GPU (\d+): (.+?) \(UUID: ([^)]+)\)\s*$")


def parse_smi_list(text: str) -> list[tuple[int, str, str]]:
    """``nvidia-smi -L``: (index, name, UUID) of each GPU; MIG devices (indented lines
    under their GPU) are not GPUs of their own."""
    found = []
    for line in text.splitlines():
        match = SMI_LIST_LINE.match(line)
        if match:
            found.append((int(match.group(1)), match.group(2), match.group(3)))
    return found


def gpu_uuid(text: str | None) -> str | None:
    """A UUID as nvidia-smi writes it: torch's device properties give it without the
    ``GPU-`` prefix."""
    if not text:
        return None
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def facts_disagree_with_smi(facts: dict[str, Any], smi: list[SmiGpu],
                            listed: list[tuple[int, str, str]]) -> list[str]:
    """What a ``--save-facts`` snapshot says differently from nvidia-smi: the count, each
    GPU's name, UUID and memory (NVML's bytes within a MiB of nvidia-smi's MiB), the driver
    version, and torch's devices (as a set: CUDA may number them in another order).
    Empty when they agree."""
    problems = []
    values = {name: (record or {}).get("value") or {}
              for name, record in (facts.get("facts") or {}).items()}
    nvml = values.get("nvml") or {}
    gpus = sorted(nvml.get("gpus") or [], key=lambda g: g.get("index", -1))
    if len(listed) != len(smi):
        problems.append(f"nvidia-smi -L lists {len(listed)} GPUs, the query {len(smi)}")
    if len(gpus) != len(smi):
        problems.append(f"NVML facts list {len(gpus)} GPUs, nvidia-smi {len(smi)}")
    for gpu, row in zip(gpus, smi):
        where = f"GPU {row.index}"
        if gpu.get("index") != row.index:
            problems.append(f"{where}: facts index {gpu.get('index')}")
        if gpu.get("name") != row.name:
            problems.append(f"{where}: name {gpu.get('name')!r} != {row.name!r}")
        if gpu.get("uuid") != row.uuid:
            problems.append(f"{where}: uuid {gpu.get('uuid')!r} != {row.uuid!r}")
        total = gpu.get("memory_total")
        if not isinstance(total, int) or abs(total / MIB - row.memory_mib) > 1:
            problems.append(f"{where}: memory {total} bytes != {row.memory_mib} MiB")
    for number, name, uuid in listed:
        match = [r for r in smi if r.index == number]
        if not match or (match[0].name, match[0].uuid) != (name, uuid):
            problems.append(f"nvidia-smi -L GPU {number} ({name}, {uuid}) is not in the query")
    drivers = {row.driver for row in smi}
    if drivers and nvml.get("driver_version") not in drivers:
        problems.append(f"driver {nvml.get('driver_version')!r} != {sorted(drivers)}")
    cuda = (values.get("torch") or {}).get("cuda") or {}
    devices = cuda.get("devices") or []
    if cuda.get("device_count") != len(smi):
        problems.append(f"torch sees {cuda.get('device_count')} GPUs, nvidia-smi {len(smi)}")
    torch_side = sorted((d.get("name"), gpu_uuid(d.get("uuid"))) for d in devices)
    smi_side = sorted((row.name, row.uuid) for row in smi)
    if torch_side != smi_side:
        problems.append(f"torch's devices {torch_side} != nvidia-smi's {smi_side}")
    for device in devices:
        row = next((r for r in smi if r.uuid == gpu_uuid(device.get("uuid"))), None)
        total = device.get("total_memory")
        # CUDA reports the memory it can use: the same card, at most what NVML counts.
        if row is not None and (not isinstance(total, int) or total > row.memory_mib * MIB + MIB):
            problems.append(f"torch GPU {device.get('index')}: total_memory {total} bytes is "
                            f"more than nvidia-smi's {row.memory_mib} MiB")
    return problems


def findings_of(report: dict[str, Any], check_id: str) -> list[dict[str, Any]]:
    """The findings one check reported."""
    for result in report.get("checks") or []:
        if result.get("id") == check_id:
            return list(result.get("findings") or [])
    raise KeyError(f"no check {check_id!r} in the report")


def codes(report: dict[str, Any]) -> list[str]:
    return [f["code"] for f in report.get("findings") or []]


def finding(report: dict[str, Any], code: str) -> dict[str, Any]:
    found = [f for f in report.get("findings") or [] if f["code"] == code]
    assert found, (code, codes(report))
    return found[0]


def run_doctor(*args: str, env: dict[str, str] | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -m ddp_doctor ARGS`` in this interpreter, output captured."""
    return subprocess.run([sys.executable, "-m", "ddp_doctor", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, check=False)
