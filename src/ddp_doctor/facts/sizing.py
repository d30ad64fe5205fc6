"""Rules of thumb that size the planned job from the facts: GPUs, workers, host RAM.

The host, WSL and launch checks and the CI policy all size the job the same way, so the
rules live here, under ``facts/``, and ``FactsView`` applies them to one snapshot.

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
- torch's NCCL version code: NCCL encodes major*1000 + minor*100 + patch up to 2.8, and
  major*10000 + minor*100 + patch from 2.9 on (NVIDIA/nccl src/nccl.h.in, NCCL_VERSION;
  decoded the same way in pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp
  getNcclVersion).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ddp_doctor.facts.shapes import HostFact

GIB = 1024**3
MIB = 1024**2

DEFAULT_MAX_WORKERS = 8
RANK_BASE_BYTES = 2 * GIB
WEIGHT_SHARE_OF_GPU_MEMORY = 0.25
WORKER_BYTES = GIB // 2

# A GPU whose memory others already hold to this share cannot take a training rank: what is
# left is about the CUDA context alone (a rule of thumb, like the RAM estimate).
FULL_GPU_SHARE = 0.90


@dataclass(frozen=True)
class RamNeed:
    """Rule-of-thumb host RAM for the planned job, with its parts for the evidence."""

    ranks: int
    workers: int  # DataLoader workers per rank
    workers_planned: bool  # --workers was given (else the assumed default)
    gpu_memory: int  # of the largest GPU a rank uses
    per_rank: int
    total: int


def ram_estimate(ranks: int, gpu_memory: int, workers: int, planned: bool) -> RamNeed:
    per_rank = RANK_BASE_BYTES + int(gpu_memory * WEIGHT_SHARE_OF_GPU_MEMORY) + \
        workers * WORKER_BYTES
    return RamNeed(ranks=ranks, workers=workers, workers_planned=planned,
                   gpu_memory=gpu_memory, per_rank=per_rank, total=per_rank * ranks)


def nccl_version_text(value: object) -> str | None:
    """torch's NCCL version as "2.7.8": old torch returned NCCL_VERSION_CODE as an int.

    Snapshots of older doctor versions recorded that int as text ("2708").
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


def visible_device_ids(env_vars: Mapping[str, str], gpu_count: int,
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


def cpu_cores(host: HostFact) -> int:
    """CPUs this process may run on (affinity/cgroup cpuset), else the logical count."""
    return int(host.get("cpu_affinity") or host.get("cpu_logical") or 1)


def effective_ram(host: HostFact) -> tuple[int, str]:
    """Host RAM the job can have: the container's cgroup limit when lower than the RAM."""
    total = int(host.get("memory_total") or 0)
    limit = host.get("cgroup_memory_limit")
    if limit and limit < total:
        return int(limit), "cgroup memory limit (/sys/fs/cgroup/memory.max)"
    return total, "total RAM (/proc/meminfo)"
