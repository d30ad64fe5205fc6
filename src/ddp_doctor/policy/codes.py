"""The codes a CI policy file reports (POL…), one per requirement the machine misses.

No check emits them (the policy is applied to the finished Report, see ``policy.load``);
each is declared in the code registry (``ddp_doctor.codes``), which is where
``ddp-doctor explain`` and docs/codes.md find them.
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.model import Severity

CUDA_ENV_URL = ("https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/"
                "environment-variables.html")
NVIDIA_DRIVERS_URL = "https://www.nvidia.com/en-us/drivers/"
PEP440_SPECIFIERS_URL = "https://packaging.python.org/en/latest/specifications/version-specifiers/"
NCCL_TESTS_PERF_URL = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"

FEWER_GPUS = declare(
    "POL001", Category.GPU_NOT_VISIBLE, "Fewer usable GPUs than the policy requires",
    what="The policy's `min-gpus` asks for more GPUs than a process started here can use "
         "(torch.cuda.device_count(), or NVML's count narrowed by CUDA_VISIBLE_DEVICES when "
         "torch cannot tell).",
    why="The pipeline was written for that many GPUs: with fewer, the job either fails at "
        "launch (invalid device ordinal) or trains with a different global batch.",
    fix="Run the job on a machine (or allocation) with enough GPUs, widen "
        "CUDA_VISIBLE_DEVICES, or lower `min-gpus` in the policy if the job was resized.",
    docs_url=CUDA_ENV_URL)
DRIVER_OLDER = declare(
    "POL002", Category.DRIVER_TOO_OLD, "The NVIDIA driver is older than the policy requires",
    what="The driver version NVML reports (e.g. 535.104.05) is below the policy's "
         "`min-driver-version`, compared number by number.",
    why="The pipeline pins a driver floor because something it runs (a CUDA release, an "
        "NCCL feature, a known bug fix) needs it; an older driver fails later and less "
        "clearly.",
    fix="Upgrade the driver to the required version or newer (your distribution's driver "
        "packages or NVIDIA's installer), then reboot, or schedule the job on newer nodes.",
    docs_url=NVIDIA_DRIVERS_URL)
TORCH_NOT_ALLOWED = declare(
    "POL003", Category.PACKAGE_CONFLICT, "The installed torch is outside the allowed versions",
    what="torch's version does not satisfy the policy's `torch-versions` specifier set "
         "(PEP 440, e.g. \">=2.3,<2.7\"; a local label such as +cu121 is ignored, as PEP 440 "
         "says).",
    why="The training code was tested against those releases; another torch changes "
        "defaults, removes APIs, or needs other companion packages.",
    fix="Install an allowed release with the wheel index matching the machine's CUDA "
        "(https://pytorch.org/get-started/previous-versions/), or widen `torch-versions` "
        "after testing the new release.",
    docs_url=PEP440_SPECIFIERS_URL)
# A single-node smoke job's all-reduce runs over NVLink or PCIe peer-to-peer; a bus
# bandwidth far below the floor there most often means NCCL is not using P2P (ACS/IOMMU
# redirection, a VM, NCCL_P2P_DISABLE) and staging through host memory, which is the
# `nccl_p2p` family. (Across nodes the network would be the suspect; the smoke job the
# doctor runs is single-node unless --nnodes is given to `ddp-doctor smoke`.)
BUSBW_LOW = declare(
    "POL004", Category.NCCL_P2P, "All-reduce bus bandwidth below the policy's minimum",
    what="The smoke job's all-reduce bus bandwidth (nccl-tests' busbw definition: algorithm "
         "bandwidth × 2(n-1)/n) is below the policy's `min-allreduce-busbw-gbps`.",
    why="Gradient all-reduce runs every step: a slow interconnect path makes every step of "
        "the real job slower, often several times, without any error.",
    fix="Run `nvidia-smi topo -m` and NCCL_DEBUG=INFO to see the transport NCCL picks "
        "(P2P/NVLink vs SHM); disable ACS or set the IOMMU to passthrough "
        "(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-"
        "access-control-services-acs), and check that no other job shares the GPUs.",
    docs_url=NCCL_TESTS_PERF_URL)
# Low scaling efficiency alone does not establish a cause: the input pipeline, CPU cores,
# communication and GPU clocks all lower it. The contract's `unknown` says exactly that;
# a POL004 (bandwidth) finding beside it, when present, points at the interconnect.
SCALING_LOW = declare(
    "POL005", Category.UNKNOWN, "Scaling efficiency below the policy's minimum",
    what="With the smoke job run on 1 rank and on all ranks, throughput on N ranks divided "
         "by N × the 1-rank throughput is below the policy's `min-scaling-efficiency`.",
    why="Poor scaling means paying for N GPUs and getting the speed of fewer; the real job "
        "inherits it.",
    fix="Look at the smoke measurements: a low all-reduce bandwidth points at the "
        "interconnect; few CPU cores or DataLoader workers per rank point at the input "
        "pipeline (`ddp-doctor check --gpus N --workers W`).")
# A requirement that could not be established is `unknown` by the contract's definition.
NOT_MEASURED = declare(
    "POL006", Category.REQUIREMENT_UNCHECKED, "A policy requirement could not be checked",
    what="The policy asks for something this run did not measure: the smoke job did not run "
         "(`ddp-doctor check`, `--no-smoke`, `--facts`), was skipped, or failed before the "
         "measurement; or the driver or torch version could not be read.",
    why="An unchecked requirement is not a met one; the run says so instead of passing it "
        "silently. It is a warning: it fails the run under --strict or `fail-on-warnings`.",
    fix="Run `ddp-doctor doctor` (which runs the smoke job) where the policy has smoke "
        "requirements, fix the finding that kept the value from being read, or ignore "
        "POL006 in the policy with a reason when this step deliberately runs no smoke job.",
    severity=Severity.WARNING)
# The run trained, but not on the GPUs it was meant to prove: the GPUs were not usable.
GPU_TRAINING_NOT_PROVEN = declare(
    "POL007", Category.GPU_NOT_VISIBLE, "The policy requires GPU training, the run proved none",
    what="The policy's `require-gpu-training = true` asks that the smoke job trained on the "
         "GPUs with NCCL; it fell back to the CPU (SMK017: no usable GPU), failed before it "
         "trained, or did not run.",
    why="A GPU pre-flight that passes on the CPU lets the real job start on a machine whose "
        "GPUs cannot be used, and fail there after the pre-flight said yes.",
    fix="Make the GPUs usable (the checks' findings name the cause: driver, torch build, "
        "CUDA_VISIBLE_DEVICES), then run `ddp-doctor doctor` (or `ddp-doctor smoke`) again.",
    docs_url="https://pytorch.org/docs/stable/notes/cuda.html")
