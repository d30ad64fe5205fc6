"""Failure text -> code: the signature table for what ranks print when they fail.

The first set covers what the smoke job itself meets (a taken port, NCCL errors, out of
memory, a rank killed by a signal); the diagnosis of pasted logs extends the same table.
Rules are tried in order and the most specific comes first, so "unhandled system error"
is read as the /dev/shm problem it usually is before the generic "NCCL error" rule.

Sources for the texts: torchrun's failure report (pytorch/pytorch
torch/distributed/elastic/multiprocessing/errors/__init__.py; exit code -9 = SIGKILL, the
OOM killer's signal: https://github.com/torvalds/linux/blob/master/mm/oom_kill.c), NCCL's
result codes (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/types.html),
the NCCL troubleshooting guide on /dev/shm in containers
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpu_doctor.categories import Category
from gpu_doctor.model import Code, Step

NCCL_TROUBLE = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"

PORT_IN_USE = Code(
    "LOG001", Category.RENDEZVOUS_PORT_IN_USE, "Address already in use (rendezvous port taken)",
    what="Rank 0 could not listen on MASTER_PORT: another process (often an earlier training "
         "that is still running) holds it.",
    why="No rank can join, so the job dies before training.",
    fix="Use another --master_port (or MASTER_PORT), or stop the process holding it "
        "(`ss -ltnp 'sport = :PORT'`).",
    docs_url="https://pytorch.org/docs/stable/elastic/run.html")
NCCL_SYSTEM = Code(
    "LOG002", Category.NCCL_SHARED_MEMORY, "NCCL 'unhandled system error' (usually /dev/shm)",
    what="NCCL failed a system call; in containers this is almost always its shared-memory "
         "segment in a /dev/shm that is too small (Docker's default is 64 MB).",
    why="Every multi-GPU job on this machine fails at its first collective.",
    fix="Give the container more shared memory (docker run --shm-size=16g or --ipc=host; a "
        "memory-backed emptyDir on /dev/shm in Kubernetes), or NCCL_SHM_DISABLE=1 as a "
        "slower workaround.",
    docs_url=NCCL_TROUBLE)
NCCL_CUDA = Code(
    "LOG003", Category.CUDA_INIT_FAILURE, "NCCL 'unhandled cuda error'",
    what="A CUDA call inside NCCL failed: a device that cannot be used, peer access that "
         "fails, or a CUDA error left behind by an earlier kernel.",
    why="The collective, and so the training step, cannot complete.",
    fix="Re-run with NCCL_DEBUG=INFO to see the CUDA error; run `gpu-doctor check` for the "
        "device and peer-access findings; try NCCL_P2P_DISABLE=1.",
    docs_url=NCCL_TROUBLE)
NCCL_OTHER = Code(
    "LOG004", Category.NCCL_NETWORK, "NCCL error between ranks",
    what="NCCL reported an error (internal, remote or invalid usage) while the ranks "
         "connected or communicated.",
    why="The job cannot train while its ranks cannot communicate.",
    fix="Re-run with NCCL_DEBUG=INFO; set NCCL_SOCKET_IFNAME to the interface the nodes "
        "share, and try NCCL_IB_DISABLE=1 to rule out InfiniBand.",
    docs_url=NCCL_TROUBLE)
CUDA_OOM = Code(
    "LOG005", Category.GPU_OUT_OF_MEMORY, "CUDA out of memory",
    what="A rank asked for more GPU memory than was free.",
    why="The rank dies and takes the job with it.",
    fix="Lower the batch size per GPU, enable AMP, or free the GPU (nvidia-smi shows who "
        "else uses it).",
    docs_url="https://pytorch.org/docs/stable/notes/cuda.html#memory-management")
HOST_OOM = Code(
    "LOG006", Category.HOST_OUT_OF_MEMORY, "Host memory exhausted",
    what="A rank could not allocate host (CPU) memory.",
    why="Each rank and each DataLoader worker needs its own RAM; too many of them exhaust it.",
    fix="Use fewer DataLoader workers or a smaller batch, or run on a node with more RAM.")
KILLED = Code(
    "LOG007", Category.HOST_OUT_OF_MEMORY, "A rank was killed by SIGKILL (exit code -9)",
    what="A rank was ended by signal 9. The kernel's OOM killer (or a cgroup, Slurm or "
         "Kubernetes memory limit) is the usual sender.",
    why="torchrun then stops every other rank: the whole job dies.",
    fix="Look for 'Out of memory: Killed process' in `sudo dmesg -T` or "
        "`journalctl -k`; lower the batch or DataLoader workers, or raise the memory limit.",
    docs_url="https://pytorch.org/docs/stable/elastic/errors.html")
BUS_ERROR = Code(
    "LOG008", Category.NCCL_SHARED_MEMORY, "A rank died of SIGBUS (exit code -7)",
    what="A rank (often a DataLoader worker) touched shared memory that could not be "
         "backed: /dev/shm is full.",
    why="DataLoader workers and NCCL both need /dev/shm; a small one kills the job.",
    fix="Enlarge /dev/shm (docker run --shm-size=16g or --ipc=host), or use fewer workers.",
    docs_url=NCCL_TROUBLE)

LOG_CODES: tuple[Code, ...] = (PORT_IN_USE, NCCL_SYSTEM, NCCL_CUDA, NCCL_OTHER, CUDA_OOM,
                               HOST_OOM, KILLED, BUS_ERROR)


@dataclass(frozen=True)
class Rule:
    """A signature: a regular expression and the code it means, with first fix steps."""

    code: Code
    pattern: re.Pattern[str]
    steps: tuple[Step, ...] = ()


def _rx(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(alternatives), re.IGNORECASE)


RULES: tuple[Rule, ...] = (
    Rule(PORT_IN_USE, _rx(r"address already in use", r"EADDRINUSE"),
         (Step("Find the process that holds the port.", command="ss -ltnp"),
          Step("Launch on a free port: omit --master-port, or pick another one."))),
    Rule(CUDA_OOM, _rx(r"CUDA out of memory", r"CUBLAS_STATUS_ALLOC_FAILED"),
         (Step("See who else uses the GPU.", command="nvidia-smi"),
          Step("Lower the per-GPU batch size or enable AMP."))),
    Rule(HOST_OOM, _rx(r"DefaultCPUAllocator: can't allocate memory", r"std::bad_alloc"),
         (Step("Check free memory.", command="free -h"),
          Step("Use fewer DataLoader workers or a smaller batch."))),
    Rule(NCCL_SYSTEM, _rx(r"unhandled system error", r"ncclSystemError"),
         (Step("Check the size of /dev/shm.", command="df -h /dev/shm"),
          Step("Give the container more shared memory (or use --ipc=host).",
               command="docker run --shm-size=16g ..."),
          Step("Rerun with NCCL's own diagnosis.", command="NCCL_DEBUG=INFO gpu-doctor smoke"))),
    Rule(NCCL_CUDA, _rx(r"unhandled cuda error", r"ncclUnhandledCudaError"),
         (Step("Rerun with NCCL's own diagnosis.", command="NCCL_DEBUG=INFO gpu-doctor smoke"),
          Step("Rule out peer-to-peer transport.",
               command="NCCL_P2P_DISABLE=1 gpu-doctor smoke"))),
    Rule(NCCL_OTHER, _rx(r"NCCL error", r"ncclInternalError", r"ncclRemoteError",
                         r"ncclInvalidUsage"),
         (Step("Rerun with NCCL's own diagnosis.", command="NCCL_DEBUG=INFO gpu-doctor smoke"),
          Step("Name the network interface the nodes share.",
               command="NCCL_SOCKET_IFNAME=eth0 gpu-doctor smoke"))),
    Rule(BUS_ERROR, _rx(r"exitcode\s*:\s*-7\b", r"Signal 7 \(SIGBUS\)", r"\bBus error\b",
                        r"terminated with signal SIGBUS"),
         (Step("Check the size of /dev/shm.", command="df -h /dev/shm"),)),
    Rule(KILLED, _rx(r"exitcode\s*:\s*-9\b", r"Signal 9 \(SIGKILL\)",
                     r"terminated with signal SIGKILL"),
         (Step("Look for the OOM killer in the kernel log.",
               command="sudo dmesg -T | grep -i -E 'killed process|out of memory'"),
          Step("Lower the batch size or DataLoader workers, or raise the memory limit."))),
)


@dataclass(frozen=True)
class Match:
    """A rule that matched, with the line of text that matched it."""

    rule: Rule
    line: str


def match_text(text: str) -> list[Match]:
    """Every rule that matches ``text``, in rule order (most specific first)."""
    found: list[Match] = []
    lines = text.splitlines()
    for rule in RULES:
        for line in lines:
            if rule.pattern.search(line):
                found.append(Match(rule, line.strip()[:300]))
                break
    return found
