"""Collectives the smoke job checks before training: a checked all-reduce and its bandwidth.

The checked all-reduce proves the ranks really exchange data (each rank contributes
rank + 1, the sum must be n(n+1)/2 everywhere). The bandwidth figure is bus bandwidth as
nccl-tests reports it, so it can be compared with published link speeds regardless of
the number of ranks:

    algbw = S / t,  busbw = algbw * 2(n - 1) / n   (all-reduce)

Source: https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist


def allreduce_bus_factor(world_size: int) -> float:
    """nccl-tests' all-reduce bus factor 2(n-1)/n (0 for a single rank: no traffic)."""
    return 2.0 * (world_size - 1) / world_size if world_size > 0 else 0.0


def bus_bandwidth(nbytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes per second for one all-reduce of ``nbytes`` per rank."""
    algbw = nbytes / seconds if seconds > 0 else 0.0
    return algbw, algbw * allreduce_bus_factor(world_size)


def checked_all_reduce(device: torch.device) -> dict[str, Any]:
    """Sum rank + 1 over all ranks and compare with n(n+1)/2 on every element."""
    rank, world = dist.get_rank(), dist.get_world_size()
    tensor = torch.full((4096,), float(rank + 1), device=device)
    dist.all_reduce(tensor)
    expected = world * (world + 1) / 2
    wrong = int((tensor != expected).sum().item())
    return {"value": float(tensor[0].item()), "expected": expected, "ok": wrong == 0,
            "wrong_elements": wrong}


def measure_all_reduce(device: torch.device, nbytes: int, iters: int = 5,
                       warmup: int = 2) -> dict[str, Any]:
    """Time ``iters`` all-reduces of a float32 buffer of ``nbytes`` (after ``warmup``)."""
    world = dist.get_world_size()
    tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
    size = tensor.numel() * 4

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        dist.all_reduce(tensor)
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    sync()
    seconds = (time.perf_counter() - start) / iters
    algbw, busbw = bus_bandwidth(size, seconds, world)
    return {"bytes": size, "seconds": seconds, "algbw_gbps": algbw / 1e9,
            "busbw_gbps": busbw / 1e9, "iters": iters, "ranks": world}


def measure_host_copies(device: torch.device, nbytes: int = 64 << 20, iters: int = 5,
                        warmup: int = 2) -> dict[str, Any]:
    """Host-to-device and device-to-host copy rates from pinned memory, in GB/s.

    The transfer every training step makes (a pinned batch to the GPU), timed with CUDA
    events on one stream as NVIDIA's bandwidth tools time it (nvbandwidth's copy-engine
    ``host_to_device_memcpy_ce`` / ``device_to_host_memcpy_ce``), so the figure compares
    with operators' published floors (knowledge/floors.py) and the PCIe link's rate.
    """
    host = torch.empty(max(1, nbytes), dtype=torch.uint8).pin_memory()
    gpu = torch.empty(host.numel(), dtype=torch.uint8, device=device)
    rates: dict[str, Any] = {"bytes": int(host.numel()), "iters": iters, "pinned": True}
    for name, dst, src in (("h2d", gpu, host), ("d2h", host, gpu)):
        for _ in range(warmup):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1000 / iters
        rates[f"{name}_gbps"] = host.numel() / seconds / 1e9 if seconds > 0 else None
    del host, gpu
    return rates
