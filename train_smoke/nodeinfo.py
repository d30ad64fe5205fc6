"""What this node is made of, as the job's own ranks see it, exchanged once over the job.

In a multi-node smoke job every node's local rank 0 collects a compact record of its
node (``collect_node``) with the keys of ddp-doctor's ``NodeSummary`` (nodes/summary.py),
and ``exchange_nodes`` gathers every node's record on every rank over the job's own
process group (gloo or NCCL, whatever the job uses), right after it is created. Each
node's supervisor then holds the same records and judges them the same way, so every
node reports the same differences.

Only what is cheap to read is collected (no subprocess, no GPU work beyond what torch
already knows), and values are left as torch and the OS give them: the NCCL version as
torch returns it, the driver as the first line of /proc/driver/nvidia/version, the
driver's CUDA version as its integer code. The supervisor decodes them with the same
helpers the doctor's own probes use, so no parsing is copied here. ``ENV_PREFIXES`` is a
coarse filter that keeps secrets and unrelated variables out of the event file; the
exact rule (which per-process variables torchrun sets are ignored) is applied by the
supervisor with ``nodes.summary.relevant_env``, and a test keeps the prefixes equal.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import socket
from typing import Any

import torch
import torch.distributed as dist

ENV_PREFIXES = ("NCCL_", "TORCH_", "CUDA_VISIBLE_DEVICES", "TORCH_NCCL_", "GLOO_")
PACKAGES = ("torchvision", "ultralytics", "numpy")
"""The training packages whose versions are compared (a subset of nodes.summary's)."""

DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
IB_PORTS = "/sys/class/infiniband/*/ports/*/state"


def _try(fn: Any, default: Any = None) -> Any:
    """One field that cannot be read is left out; it never stops the job."""
    try:
        return fn()
    except Exception:
        return default


def _package_versions() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for name in PACKAGES:
        version = _try(lambda n=name: metadata.version(n))
        if version:
            found[name] = version
    return found


def _first_line(path: str) -> str | None:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.readline().strip() or None


def _ib_active() -> list[str] | None:
    """Active InfiniBand/RoCE ports as "device:port" (none without /sys/class/infiniband)."""
    if not os.path.isdir("/sys/class/infiniband"):
        return []
    active = []
    for path in sorted(glob.glob(IB_PORTS)):
        state = _try(lambda p=path: _first_line(p), "") or ""
        if "ACTIVE" in state:
            parts = path.split(os.sep)  # .../infiniband/<device>/ports/<port>/state
            active.append(f"{parts[-4]}:{parts[-2]}")
    return active


def _gpus() -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {"gpu_count": 0, "gpu_models": [], "gpu_memory": []}
    count = torch.cuda.device_count()
    props = [torch.cuda.get_device_properties(i) for i in range(count)]
    return {"gpu_count": count, "gpu_models": [p.name for p in props],
            "gpu_memory": [int(p.total_memory) for p in props]}


def collect_node(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """This node's record: NodeSummary's keys, raw values where a decoder exists upstream."""
    environ = dict(os.environ if environ is None else environ)
    cuda_build = torch.version.cuda
    record: dict[str, Any] = {
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": cuda_build,
        "torch_git": getattr(torch.version, "git_version", None),
        "env": {k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES)},
        "interfaces": _try(lambda: sorted(name for _, name in socket.if_nameindex())),
        "ib_active": _try(_ib_active),
        "packages": _try(_package_versions, {}),
    }
    if torch.backends.cudnn.is_available():
        record["cudnn"] = _try(lambda: str(torch.backends.cudnn.version()))
    if cuda_build and torch.cuda.is_available():
        record["nccl"] = _try(torch.cuda.nccl.version)
        record["cuda_driver"] = _try(torch._C._cuda_getDriverVersion)
    if os.path.exists(DRIVER_VERSION_FILE):
        record["driver"] = _try(lambda: _first_line(DRIVER_VERSION_FILE))
    record.update(_try(_gpus, {}))
    return {k: v for k, v in record.items() if v is not None}


def all_gather_json(obj: Any, device: torch.device) -> list[Any]:
    """``obj`` of every rank, in rank order, sent as JSON bytes over the job's group.

    ``dist.all_gather_object`` would do, but it pickles, and torch decodes the result
    through NumPy (``tensor.numpy()``), which a training interpreter need not have; and a
    pickle may not load on a node with another Python, the very difference this exchange
    is meant to find. JSON bytes in a uint8 tensor need neither: one all-gather of the
    lengths, one of the padded bytes.
    """
    world = dist.get_world_size()
    data = json.dumps(obj, separators=(",", ":"), default=str).encode("utf-8")
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    lengths = [int(s.item()) for s in sizes]
    mine = torch.zeros(max(lengths), dtype=torch.uint8)
    mine[:len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    mine = mine.to(device)
    gathered = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    return [json.loads(bytes(g[:n].cpu().tolist()).decode("utf-8"))
            for g, n in zip(gathered, lengths)]


def exchange_nodes(local_rank: int, node_rank: int, device: torch.device,
                   local_world: int = 1) -> list[dict[str, Any]]:
    """Every node's record, on every rank, ordered by node rank.

    Only local rank 0 of each node collects (the others send null), so the cost is one
    collection per node and two small all-gathers, whatever the number of ranks per node.
    Each record says how many ranks its node runs (``ranks``): nodes that run different
    numbers (one short of a GPU) are named from it on every node alike.
    """
    mine = None
    if local_rank == 0:
        mine = {"node_rank": node_rank, "rank": dist.get_rank(), "ranks": local_world,
                **collect_node()}
    gathered = all_gather_json(mine, device)
    return sorted((g for g in gathered if isinstance(g, dict)),
                  key=lambda g: int(g.get("node_rank", 0)))
