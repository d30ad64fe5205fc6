"""A rank's own work per step, apart from its wait for the other ranks.

In DDP every rank waits for the slowest one inside backward: the gradient all-reduce of
the last bucket cannot finish before every rank has produced that bucket. The step time
is therefore the same on every rank and says nothing about which one is slow. What
differs is when each rank's *own* gradients were ready: DDP calls the communication hook
of a bucket the moment all its gradients are computed on that rank, so

- ``compute_s``: the step's start to the call of the hook for the last bucket (data
  fetch, forward, loss and backward on this rank, nothing waited for);
- ``sync_s``: from then until ``backward()`` returned with every bucket reduced (the
  all-reduce itself plus the wait for slower peers).

On the CPU (gloo) both are host clock times: the hook runs when the bucket is ready. On
CUDA the host runs ahead of the GPU, so CUDA events are recorded on the compute stream at
the step's start, in the hook and after backward (DDP makes the stream wait for the
reduced gradients), and the split is read from the GPU's own timeline. The hook itself is
DDP's default all-reduce (``default_hooks.allreduce_hook``), so the job computes exactly
what it did without it. What this does not separate: a wait inside the forward pass
(DDP broadcasts BatchNorm buffers from rank 0 there) counts as compute.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


def pci_bus_id(device: torch.device) -> str | None:
    """The GPU's PCI address as NVML writes it (``00000000:18:00.0``), None on the CPU."""
    if device.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(device)
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    return (f"{int(getattr(props, 'pci_domain_id', 0) or 0):08x}:{int(bus):02x}:"
            f"{int(getattr(props, 'pci_device_id', 0) or 0):02x}.0").upper()


class SyncTimer:
    """Times each step's own work and its sync wait through DDP's communication hook."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.attached = False
        self._t0 = 0.0
        self._ready: float | None = None
        self._events: dict[str, Any] = {}

    def attach(self, model: nn.Module) -> None:
        """Register the timing hook on a DistributedDataParallel model."""
        model.register_comm_hook(None, self._hook)  # type: ignore[operator]
        self.attached = True

    def _hook(self, state: Any, bucket: Any) -> Any:
        # Called once per bucket, in the order buckets become ready: the last call marks
        # the end of this rank's own backward.
        self._ready = time.monotonic()
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._events["ready"] = event
        return default_hooks.allreduce_hook(state, bucket)

    def start(self, t0: float) -> None:
        self._t0, self._ready = t0, None
        if self.cuda and self.attached:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._events = {"start": event}

    def stop(self) -> dict[str, float]:
        """The step's split, once backward returned ({} when no hook ran)."""
        if not self.attached or self._ready is None:
            return {}
        if self.cuda:
            done = torch.cuda.Event(enable_timing=True)
            done.record()
            done.synchronize()
            start, ready = self._events.get("start"), self._events.get("ready")
            if start is None or ready is None:
                return {}
            return {"compute_s": round(start.elapsed_time(ready) / 1000, 6),
                    "sync_s": round(ready.elapsed_time(done) / 1000, 6)}
        now = time.monotonic()
        return {"compute_s": round(self._ready - self._t0, 6),
                "sync_s": round(now - self._ready, 6)}


# DDP checks a hook's annotations as objects (bucket: dist.GradBucket, returning
# Future[Tensor]); under ``from __future__ import annotations`` they are strings, so the
# objects are put back on the function.
SyncTimer._hook.__annotations__.update(
    bucket=dist.GradBucket, state=object, **{"return": torch.futures.Future[torch.Tensor]})
