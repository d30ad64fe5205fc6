"""Host facts through psutil: CPU, RAM, swap, /dev/shm, disk, limits.

/dev/shm matters more than its size suggests: NCCL puts its intra-node transport
buffers there and DataLoader workers pass every batch through it, and Docker gives a
container only 64 MB unless told otherwise
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html).
"""

from __future__ import annotations

import os
from typing import Any

from gpu_doctor.facts.env import Env

SHM_PATH = "/dev/shm"


def _disk(psutil: Any, path: str) -> dict[str, Any] | None:
    try:
        usage = psutil.disk_usage(path)
    except OSError:
        return None
    return {"path": path, "total": usage.total, "free": usage.free, "used": usage.used}


def _cgroup_memory_limit(env: Env) -> int | None:
    """The container's memory cap (cgroup v2, then v1); None when unlimited."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = (env.read_text(path) or "").strip()
        if text.isdigit():
            value = int(text)
            return value if value < 1 << 60 else None  # v1 reports "unlimited" as ~2^63
    return None


def probe_host(env: Env, workdir: str | None = None) -> dict[str, Any]:
    psutil = env.psutil()
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    nofile = None
    try:
        soft, hard = psutil.Process().rlimit(psutil.RLIMIT_NOFILE)
        nofile = {"soft": soft, "hard": hard}
    except (AttributeError, OSError):
        pass
    shm_mounted = env.exists(SHM_PATH)
    return {
        "cpu_logical": psutil.cpu_count(logical=True),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(psutil.Process().cpu_affinity())
        if hasattr(psutil.Process(), "cpu_affinity")
        else None,
        "memory_total": vm.total,
        "memory_available": vm.available,
        "swap_total": swap.total,
        "cgroup_memory_limit": _cgroup_memory_limit(env),
        "shm": _disk(psutil, SHM_PATH) if shm_mounted else {"path": SHM_PATH, "missing": True},
        "disk": _disk(psutil, workdir or os.getcwd()),
        "nofile_limit": nofile,
    }
