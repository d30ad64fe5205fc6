"""Published floors: the least a healthy machine of a kind measures, as its operator checks it.

"Is this number normal?" is asked of every figure a doctor prints. A link's nominal rate
(``bandwidth.py``, ``links.py``) says what it could carry; an operator's health check says
what a healthy machine of that exact kind is required to measure before it is given to a
user, on the same tool every time. Each floor below is one such requirement, with the
system it was set for, what was measured, the message size where that matters, and where
it is written down.

Azure's HPC/AI node health checks (azurehpc-health-checks) run NVIDIA's nvbandwidth for
host-to-device and device-to-host copies (the copy engines, ``*_memcpy_ce``: pinned host
memory, per GPU) and nccl-tests' ``all_reduce_perf`` across the node's 8 GPUs; a node below
its floor is taken out of service. Sources: the per-size configuration files
``conf/<size>.conf`` (``check_cuda_bw`` / ``check_gpu_bw`` EXP_CUDA_BW [EXP_P2P_BW],
``check_nccl_allreduce`` BUSBW ... MESSAGE_SIZE) and ``customTests/azure_gpu_bandwidth.nhc``
of https://github.com/Azure/azurehpc-health-checks.

A floor applies only where the measurement is alike: the same GPU model for a copy rate (the
host link comes with the system); for the all-reduce, also the same GPU count and a message
at least as large, since bus bandwidth grows with the message (a 64 MiB buffer never
reaches what a 16 GiB one does), so the smoke job's short all-reduce is shown beside the
floor, not judged by it.
"""

from __future__ import annotations

from dataclasses import dataclass

AZHPC = "https://github.com/Azure/azurehpc-health-checks"

# When a GPU has no published floor, its copies are judged against its PCIe link: this share
# of the link's nominal rate per direction (links.PCIE_GBPS_PER_LANE x width). Azure's
# floors are 76-83% of their nodes' nominal rates (24 of 31.5 GB/s on A100 gen4 x16, 48 and
# 52 of 63 GB/s on H200/H100 gen5 x16); the smoke job copies 64 MiB a few times, so it is
# allowed less.
LINK_SHARE = 0.6


@dataclass(frozen=True)
class Floor:
    """One published minimum: on ``system``, ``metric`` measures at least ``gbps``."""

    system: str  # "Azure ND H100 v5 (8x H100 SXM 80GB)"
    gpu_names: tuple[str, ...]  # substrings of the CUDA/NVML GPU name it is set for
    metric: str  # "h2d" | "d2h" | "p2p" | "allreduce_busbw"
    gbps: float  # GB/s (10^9 bytes), per GPU for copies, bus bandwidth for the all-reduce
    gpus: int | None = None  # GPUs in the measurement (the all-reduce)
    message_bytes: int | None = None  # the all-reduce's message size
    source: str = AZHPC

    @property
    def label(self) -> str:
        size = (f" at {self.message_bytes / 2**30:g} GiB messages"
                if self.message_bytes else "")
        return f"{self.system} health check: {self.metric} >= {self.gbps:g} GB/s{size}"


def _conf(name: str) -> str:
    return f"{AZHPC}/blob/main/conf/{name}.conf"


FLOORS: tuple[Floor, ...] = (
    # ND H100 v5: check_cuda_bw 52, check_nccl_allreduce 460.0 ... 16G.
    *(Floor("Azure ND H100 v5 (8x H100 SXM 80GB)", ("H100 80GB HBM3",), metric, 52.0,
            source=_conf("nd96isr_h100_v5")) for metric in ("h2d", "d2h")),
    Floor("Azure ND H100 v5 (8x H100 SXM 80GB)", ("H100 80GB HBM3",), "allreduce_busbw",
          460.0, gpus=8, message_bytes=16 << 30, source=_conf("nd96isr_h100_v5")),
    # ND H200 v5: check_gpu_bw 48 335, check_nccl_allreduce 431.0 ... 16G.
    *(Floor("Azure ND H200 v5 (8x H200 141GB)", ("H200",), metric, 48.0,
            source=_conf("nd96isr_h200_v5")) for metric in ("h2d", "d2h")),
    Floor("Azure ND H200 v5 (8x H200 141GB)", ("H200",), "p2p", 335.0,
          source=_conf("nd96isr_h200_v5")),
    Floor("Azure ND H200 v5 (8x H200 141GB)", ("H200",), "allreduce_busbw", 431.0, gpus=8,
          message_bytes=16 << 30, source=_conf("nd96isr_h200_v5")),
    # ND A100 v4: check_cuda_bw 24, check_nccl_allreduce 228.0 10 ... 8G.
    *(Floor("Azure ND A100 v4 (8x A100 SXM4 40GB)", ("A100-SXM4-40GB",), metric, 24.0,
            source=_conf("nd96asr_v4")) for metric in ("h2d", "d2h")),
    Floor("Azure ND A100 v4 (8x A100 SXM4 40GB)", ("A100-SXM4-40GB",), "allreduce_busbw",
          228.0, gpus=8, message_bytes=8 << 30, source=_conf("nd96asr_v4")),
)


def floor_for(gpu_name: str | None, metric: str) -> Floor | None:
    """The published floor of ``metric`` for a GPU of this name, None when none is known."""
    if not gpu_name:
        return None
    return next((f for f in FLOORS if f.metric == metric
                 and any(part in gpu_name for part in f.gpu_names)), None)


def comparable_allreduce(floor: Floor, gpus: int, message_bytes: int) -> bool:
    """Whether a measured all-reduce can be judged by ``floor``: same GPU count, a message
    at least as large (bus bandwidth grows with the message size)."""
    return (floor.gpus is None or floor.gpus == gpus) and (
        floor.message_bytes is None or message_bytes >= floor.message_bytes)
