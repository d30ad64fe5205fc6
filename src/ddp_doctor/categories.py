"""The failure-category contract.

Every finding names exactly one of these categories. The ids are the public contract
that CI pipelines, dashboards and support teams key on, so they never change once
released; ``docs/categories.md`` documents them and a test keeps the two equal.
"""

from __future__ import annotations

from enum import Enum


class Category(str, Enum):
    """One root-cause family of a multi-GPU training failure."""

    DRIVER_MISSING = "driver_missing"
    DRIVER_TOO_OLD = "driver_too_old"
    DRIVER_LIBRARY_MISMATCH = "driver_library_mismatch"
    TORCH_MISSING = "torch_missing"
    TORCH_CPU_ONLY = "torch_cpu_only"
    TORCH_ARCH_UNSUPPORTED = "torch_arch_unsupported"
    CUDA_INIT_FAILURE = "cuda_init_failure"
    GPU_NOT_VISIBLE = "gpu_not_visible"
    CUDNN_FAILURE = "cudnn_failure"
    GPU_OUT_OF_MEMORY = "gpu_out_of_memory"
    NCCL_SHARED_MEMORY = "nccl_shared_memory"
    NCCL_P2P = "nccl_p2p"
    NCCL_NETWORK = "nccl_network"
    COLLECTIVE_TIMEOUT = "collective_timeout"
    NCCL_UNAVAILABLE = "nccl_unavailable"
    RENDEZVOUS_PORT_IN_USE = "rendezvous_port_in_use"
    RENDEZVOUS_FAILURE = "rendezvous_failure"
    DDP_USAGE_ERROR = "ddp_usage_error"
    HOST_OUT_OF_MEMORY = "host_out_of_memory"
    WSL_SETUP = "wsl_setup"
    HARDWARE_FAULT = "hardware_fault"
    PACKAGE_CONFLICT = "package_conflict"
    UNKNOWN = "unknown"

    def __str__(self) -> str:  # enums render as their id everywhere (JSON, Markdown, CLI)
        return self.value
