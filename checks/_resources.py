"""What the planned job will use on this host: ranks, GPUs, DataLoader workers, RAM.

Shared by the host, WSL and launch checks so they size the job the same way.

Sources:
- CUDA_VISIBLE_DEVICES semantics (enumeration stops at the first invalid entry):
  https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/environment-variables.html
- Default DataLoader workers per rank, ``min(cpu_count // ranks, 8)``: Ultralytics
  ``ultralytics/cfg/default.yaml`` (``workers: 8``) and ``ultralytics/data/build.py``
  (``build_dataloader``), the trainer this doctor was first written for.
- Host RAM per rank: the CUDA context plus the torch runtime take about 2 GiB of host
  memory per process, and ``torch.save``/``torch.load`` stage a full copy of the model
  state in host RAM (https://docs.pytorch.org/docs/stable/generated/torch.load.html:
  tensors are loaded to the CPU first unless ``map_location`` says otherwise); with Adam
  the weights are at most about a quarter of the GPU memory they train in (weights,
  gradients and two moments). A forked DataLoader worker typically costs a few hundred
  MiB of its own. These are rules of thumb, so findings based on them are warnings.
"""

from __future__ import annotations

from typing import Any

from ddp_doctor.checks._util import GIB

DEFAULT_MAX_WORKERS = 8
RANK_BASE_BYTES = 2 * GIB
WEIGHT_SHARE_OF_GPU_MEMORY = 0.25
WORKER_BYTES = GIB // 2


# A GPU whose memory others already hold to this share cannot take a training rank: what is
# left is about the CUDA context alone (a rule of thumb, like the RAM estimate below).
FULL_GPU_SHARE = 0.90


def nccl_version_text(value: Any) -> str | None:
    """torch's NCCL version as "2.7.8": old torch returned NCCL_VERSION_CODE as an int.

    NCCL encodes major*1000 + minor*100 + patch up to 2.8, and major*10000 + minor*100 +
    patch from 2.9 on (NVIDIA/nccl src/nccl.h.in, NCCL_VERSION; decoded the same way in
    pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp getNcclVersion). Snapshots
    of older doctor versions recorded that int as text ("2708").
    """
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return ".".join(str(v) for v in value)
    text = str(value).strip()
    if not text.isdigit():
        return text or None
    code = int(text)
    div = 10000 if code >= 10000 else 1000
    major, minor = code // div, code % div // 100
    return f"{major}.{minor}.{code % 100}"


def mig_enabled(facts: Any) -> bool:
    """Whether any GPU runs in MIG mode (only then can a MIG- UUID name a device)."""
    gpus = (facts.get("nvml") or {}).get("gpus") or []
    return any((g.get("mig_mode") or {}).get("current") == 1 for g in gpus)


def visible_device_ids(env_vars: dict[str, str], gpu_count: int,
                       mig: bool = True) -> list[str] | None:
    """The CUDA_VISIBLE_DEVICES entries CUDA honours; None when the variable is unset.

    MIG- entries count only when MIG is on somewhere (MIG); otherwise they name nothing.
    """
    raw = env_vars.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    kept: list[str] = []
    prefixes = ("GPU-", "MIG-") if mig else ("GPU-",)
    for entry in (e.strip() for e in raw.split(",")):
        valid_index = entry.isdigit() and int(entry) < gpu_count
        if valid_index or entry.startswith(prefixes):
            kept.append(entry)
        else:
            break  # CUDA stops enumerating at the first invalid entry
    return kept


def usable_gpus(facts: Any) -> tuple[int, str]:
    """How many GPUs a process started here can use, and what says so."""
    torch = facts.get("torch") or {}
    cuda = torch.get("cuda") or {}
    if torch.get("importable") and cuda.get("available"):
        return int(cuda.get("device_count") or 0), "torch.cuda.device_count()"
    nvml = facts.get("nvml") or {}
    count = len(nvml.get("gpus") or [])
    env_vars = facts.get("env_vars") or {}
    visible = visible_device_ids(env_vars, count, mig_enabled(facts))
    if visible is None:
        return count, "NVML"
    return min(count, len(visible)), (
        f"NVML ({count} GPUs) with CUDA_VISIBLE_DEVICES={env_vars['CUDA_VISIBLE_DEVICES']!r}")


def job_nvml_gpus(facts: Any) -> list[dict[str, Any]]:
    """The NVML GPUs a job started here would use, in CUDA_VISIBLE_DEVICES order."""
    gpus = [g for g in (facts.get("nvml") or {}).get("gpus") or [] if "error" not in g]
    visible = visible_device_ids(facts.get("env_vars") or {}, len(gpus), mig_enabled(facts))
    if visible is None:
        return gpus
    chosen = []
    for entry in visible:
        if entry.isdigit():
            chosen += [g for g in gpus if g.get("index") == int(entry)]
        elif entry.startswith("GPU-"):
            chosen += [g for g in gpus
                       if (g.get("uuid") or "").lower().startswith(entry.lower())][:1]
    return chosen


def full_gpus(facts: Any) -> list[dict[str, Any]]:
    """GPUs the job would use whose memory other processes already hold (FULL_GPU_SHARE)."""
    return [g for g in job_nvml_gpus(facts)
            if (g.get("memory_total") or 0) > 0
            and (g.get("memory_used") or 0) >= FULL_GPU_SHARE * g["memory_total"]]


def gpu_memories(facts: Any) -> list[int]:
    """Memory of each GPU a process here can use (torch's view first, NVML otherwise)."""
    torch = facts.get("torch") or {}
    devices = (torch.get("cuda") or {}).get("devices") or []
    if torch.get("importable") and devices:
        return [int(d.get("total_memory") or 0) for d in devices]
    return [int(g.get("memory_total") or 0) for g in (facts.get("nvml") or {}).get("gpus") or []]


def planned_ranks(facts: Any) -> int:
    """One process per GPU: --gpus when given, else every usable GPU."""
    plan = facts.get("plan") or {}
    if plan.get("gpus"):
        return int(plan["gpus"])
    return usable_gpus(facts)[0]


def cpu_cores(host: dict[str, Any]) -> int:
    """CPUs this process may run on (affinity/cgroup cpuset), else the logical count."""
    return int(host.get("cpu_affinity") or host.get("cpu_logical") or 1)


def workers_per_rank(facts: Any, ranks: int) -> tuple[int, bool]:
    """DataLoader workers per rank and whether the user planned them (--workers)."""
    plan = facts.get("plan") or {}
    if plan.get("workers") is not None:
        return int(plan["workers"]), True
    cores = cpu_cores(facts.get("host") or {})
    return min(cores // max(ranks, 1), DEFAULT_MAX_WORKERS), False


def workers_phrase(workers: int, planned: bool) -> str:
    """'8 DataLoader workers each', saying so when the count is the assumed default."""
    assumed = "" if planned else (" (assumed: the YOLO default, min(CPU cores per GPU, 8); "
                                  "give --workers to size your job)")
    return f"{workers} DataLoader workers each{assumed}"


def effective_ram(host: dict[str, Any]) -> tuple[int, str]:
    """Host RAM the job can have: the container's cgroup limit when lower than the RAM."""
    total = int(host.get("memory_total") or 0)
    limit = host.get("cgroup_memory_limit")
    if limit and limit < total:
        return int(limit), "cgroup memory limit (/sys/fs/cgroup/memory.max)"
    return total, "total RAM (/proc/meminfo)"


def ram_needed(facts: Any) -> dict[str, Any]:
    """Rule-of-thumb host RAM for the planned job, with its parts for the evidence."""
    ranks = planned_ranks(facts)
    memories = sorted(gpu_memories(facts), reverse=True)[:ranks] or [0]
    per_gpu = max(memories)
    workers, planned = workers_per_rank(facts, ranks)
    per_rank = RANK_BASE_BYTES + int(per_gpu * WEIGHT_SHARE_OF_GPU_MEMORY) + workers * WORKER_BYTES
    return {"ranks": ranks, "workers": workers, "workers_planned": planned,
            "gpu_memory": per_gpu, "per_rank": per_rank, "total": per_rank * ranks}
