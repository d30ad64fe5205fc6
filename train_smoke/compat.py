"""The calls whose form depends on the torch version the user trains with.

The job runs in the user's interpreter, which may hold a torch as old as the containers
people still train in (torch 2.0-2.2). Each helper here uses the newer API where torch has
it and the older one otherwise, so the smoke job never dies on an ``AttributeError`` or
``TypeError`` that would read like a fault of the machine:

- ``torch.amp.GradScaler("cuda", ...)`` exists from torch 2.3 on; before, the same scaler
  is ``torch.cuda.amp.GradScaler(...)`` (deprecated since 2.4, still present)
  (https://pytorch.org/docs/stable/amp.html#gradient-scaling).
- ``init_process_group(device_id=...)`` exists from torch 2.3 on. It binds the process
  to its GPU and makes NCCL create its communicator inside ``init_process_group`` instead
  of lazily inside the first collective, so an NCCL bootstrap hang is seen in the phase
  that caused it; without it older torch may also open a context on GPU 0
  (https://pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group).
- ``barrier(device_ids=[...])`` (NCCL only) tells the barrier which GPU the rank uses,
  where torch would otherwise guess it from the rank number (same page, ``barrier``).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.distributed as dist


def grad_scaler(enabled: bool) -> Any:
    """A CUDA gradient scaler, from whichever API this torch has."""
    amp = getattr(torch, "amp", None)
    scaler = getattr(amp, "GradScaler", None) if amp is not None else None
    if scaler is not None:
        return scaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def accepts(function: Any, name: str) -> bool:
    """True when ``function`` takes a keyword argument ``name`` (False if unreadable)."""
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def init_kwargs(device: torch.device, backend: str = "nccl") -> dict[str, Any]:
    """``device_id`` for an NCCL rank on CUDA where this torch's init_process_group takes
    it (its eager communicator is NCCL's; gloo ranks sharing a GPU need no binding)."""
    if (device.type == "cuda" and backend == "nccl"
            and accepts(dist.init_process_group, "device_id")):
        return {"device_id": device}
    return {}


def barrier(device: torch.device) -> None:
    """A barrier on the rank's own GPU under NCCL, a plain one otherwise."""
    if device.type == "cuda" and dist.get_backend() == "nccl" and accepts(dist.barrier,
                                                                           "device_ids"):
        dist.barrier(device_ids=[device.index if device.index is not None else 0])
    else:
        dist.barrier()
