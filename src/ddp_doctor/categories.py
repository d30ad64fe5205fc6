"""The failure-category contract.

Every finding names exactly one of these categories. The ids are the public contract
that CI pipelines, dashboards and support teams key on, so they never change once
released; ``docs/categories.md`` documents them and a test keeps the two equal, ids and
descriptions alike.
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
    NODE_MISMATCH = "node_mismatch"
    PERFORMANCE_DEGRADED = "performance_degraded"
    COMMAND_FAILED = "command_failed"
    REQUIREMENT_UNCHECKED = "requirement_unchecked"
    UNKNOWN = "unknown"

    def __str__(self) -> str:  # enums render as their id everywhere (JSON, Markdown, CLI)
        return self.value

    @property
    def description(self) -> str:
        """What went wrong, in one sentence: the category's row in docs/categories.md.

        ``ddp-doctor explain CATEGORY`` prints it, so a category read in a terminal means
        what the published table says (a test keeps the two equal, word for word).
        """
        return DESCRIPTIONS[self]


DESCRIPTIONS: dict[Category, str] = {
    Category.DRIVER_MISSING: (
        "No usable NVIDIA kernel driver: NVML and `nvidia-smi` cannot reach a driver, there "
        "are no `/dev/nvidia*` device nodes, or PyTorch reports that it found no NVIDIA "
        "driver."
    ),
    Category.DRIVER_TOO_OLD: (
        'The installed driver predates the CUDA runtime that PyTorch (or its NCCL) was '
        'compiled against, so CUDA refuses to start ("CUDA driver version is insufficient for'
        ' CUDA runtime version").'
    ),
    Category.DRIVER_LIBRARY_MISMATCH: (
        'The user-space driver libraries and the loaded kernel module come from different '
        'driver versions, typically after a driver upgrade without a reboot ("Driver/library '
        'version mismatch").'
    ),
    Category.TORCH_MISSING: (
        "`import torch` fails in the interpreter that will run training: PyTorch is not "
        "installed there, or the import breaks on a missing shared library, an ABI mismatch "
        "or a half-finished install."
    ),
    Category.TORCH_CPU_ONLY: (
        'The installed PyTorch is a CPU-only build (`+cpu` version, `torch.version.cuda` is '
        '`None`), so no GPU can be used ("Torch not compiled with CUDA enabled").'
    ),
    Category.TORCH_ARCH_UNSUPPORTED: (
        "PyTorch was built with CUDA but ships no kernels for this GPU's compute capability, "
        "e.g. a new GPU generation on an older wheel (\"no kernel image is available for "
        "execution on the device\")."
    ),
    Category.CUDA_INIT_FAILURE: (
        'A driver is present, yet CUDA cannot initialise or open a device: "CUDA unknown '
        'error" (error 999), devices busy or unavailable, exclusive-process compute mode, or '
        'a misconfigured MIG or container setup.'
    ),
    Category.GPU_NOT_VISIBLE: (
        'The process sees fewer GPUs than the job needs: `CUDA_VISIBLE_DEVICES` hides some, a'
        ' device index beyond the GPU count is requested ("invalid device ordinal"), or more '
        'ranks per node are launched than there are GPUs.'
    ),
    Category.CUDNN_FAILURE: (
        "cuDNN is absent, of an incompatible version, or fails while running "
        "(`CUDNN_STATUS_NOT_INITIALIZED`, `CUDNN_STATUS_INTERNAL_ERROR`)."
    ),
    Category.GPU_OUT_OF_MEMORY: (
        'Device memory runs out ("CUDA out of memory", `CUBLAS_STATUS_ALLOC_FAILED`).'
    ),
    Category.NCCL_SHARED_MEMORY: (
        "NCCL or DataLoader workers cannot create shared-memory segments, most often because "
        "a container's `/dev/shm` is left at its 64 MB default (\"unhandled system error\", "
        "\"Bus error\" in workers)."
    ),
    Category.NCCL_P2P: (
        "Direct GPU-to-GPU (peer-to-peer) transfers hang or fail, e.g. behind IOMMU/ACS, on "
        "consumer GPUs, in VMs or under WSL; setting `NCCL_P2P_DISABLE=1` or changing "
        "`NCCL_P2P_LEVEL` changes the outcome."
    ),
    Category.NCCL_NETWORK: (
        "NCCL cannot find or use a working network path between ranks: the wrong interface is"
        " picked, or InfiniBand/RoCE misbehaves; `NCCL_SOCKET_IFNAME` or `NCCL_IB_DISABLE` is"
        " the usual lever."
    ),
    Category.COLLECTIVE_TIMEOUT: (
        "Ranks start, but a collective operation never finishes: the NCCL watchdog reports a "
        "collective timeout, or the job hangs at its first barrier or all-reduce because "
        "ranks fell out of step."
    ),
    Category.NCCL_UNAVAILABLE: (
        "This PyTorch build contains no NCCL at all (native Windows, macOS, some CPU builds),"
        " so the `nccl` backend cannot be used (\"Distributed package doesn't have NCCL built "
        "in\")."
    ),
    Category.RENDEZVOUS_PORT_IN_USE: (
        'The rendezvous port (`MASTER_PORT`) is already taken, for instance by a second job '
        'on the same node ("Address already in use", `EADDRINUSE`).'
    ),
    Category.RENDEZVOUS_FAILURE: (
        'The processes cannot find each other at start-up: `MASTER_ADDR` is unreachable, a '
        'firewall blocks it, a rank never joins, or the world size is wrong ("Connection '
        'refused" or a timeout in `init_process_group`).'
    ),
    Category.DDP_USAGE_ERROR: (
        'The training script uses DistributedDataParallel incorrectly: parameters that never '
        'reach the loss ("Expected to have finished reduction"), a wrongly passed device '
        'index, a batch size that does not divide across the GPUs, SyncBatchNorm used outside'
        ' DDP.'
    ),
    Category.HOST_OUT_OF_MEMORY: (
        "A rank runs out of host RAM or swap and is killed by the kernel's OOM killer (exit "
        "code -9, SIGKILL, \"Killed\") or fails with `std::bad_alloc`."
    ),
    Category.WSL_SETUP: (
        "A problem specific to Windows Subsystem for Linux: WSL1 instead of WSL2, a Linux "
        "NVIDIA driver installed inside WSL, `libcuda` missing from `/usr/lib/wsl/lib`, or "
        "memory limited by `.wslconfig`."
    ),
    Category.HARDWARE_FAULT: (
        'The GPU or its interconnect is faulty: Xid errors, uncorrectable ECC errors, pending'
        ' page retirements, or the GPU "fell off the bus".'
    ),
    Category.PACKAGE_CONFLICT: (
        'Installed Python packages do not fit together: torchvision built for another torch '
        '("operator torchvision::nms does not exist"), two torch installs side by side, a '
        'NumPy ABI break, or an outdated training library.'
    ),
    Category.NODE_MISMATCH: (
        "The nodes of a multi-node job differ in a way that breaks or slows DDP: NCCL, "
        "torch, CUDA or driver versions, GPU counts or models, or NCCL settings."
    ),
    Category.PERFORMANCE_DEGRADED: (
        "Training runs, but slower than this hardware should: a narrowed link, throttling, "
        "a slow transport or a slow rank, too few CPU cores per GPU."
    ),
    Category.COMMAND_FAILED: (
        "The command `ddp-doctor run` supervised ended with an error status or a signal; "
        "the findings read from its output name the cause where the output shows one."
    ),
    Category.REQUIREMENT_UNCHECKED: (
        "A requirement of the CI policy file could not be checked by this run: the smoke "
        "job that measures it did not run, or the value it needs could not be read."
    ),
    Category.UNKNOWN: (
        "The evidence does not establish any other failure category: the finding shows what "
        "was seen, and what to add to the log for a diagnosis."
    ),
}
"""Each category's description, worded as in docs/categories.md (Markdown included)."""
