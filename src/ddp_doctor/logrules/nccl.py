"""NCCL: the communication library's own failures, read from what torch wraps them in and
from NCCL's WARN lines (printed with NCCL_DEBUG=WARN or INFO).

torch wraps every NCCL failure in one of a few result strings ("unhandled system error",
"unhandled cuda error", "internal error", "remote process exited or there was a network
error", "invalid usage"). Those name a class of failure, not its cause; the NCCL WARN
lines next to them do. So the wrappers here are ``symptom_of`` the specific WARN rules and
carry ``alternatives`` and ``decide`` steps for when the WARN lines are missing.

Sources: NCCL result codes (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/
types.html), NCCL troubleshooting (https://docs.nvidia.com/deeplearning/nccl/user-guide/
docs/troubleshooting.html: /dev/shm in containers, PCI ACS and P2P), NCCL environment
variables (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html), NCCL's
shared-memory and socket code (NVIDIA/nccl src/misc/shmutils.cc, src/misc/socket.cc) and
threads NVIDIA/nccl#210 (no socket interface), #199 (P2P hang under ACS), #342 and #328
(shared memory), ray-project/ray_lightning#24 (CUDA IPC 217); torch's watchdog
(torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, pytorch/pytorch#135352) and the
collective fingerprint check (TORCH_DISTRIBUTED_DEBUG=DETAIL, https://pytorch.org/docs/
stable/distributed.html#debugging-torch-distributed-applications).
"""

from __future__ import annotations

import re

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.logrules.rule import ANY_ERROR, Explains, ReadAs, Rule, rx
from ddp_doctor.model import Step

NCCL_TROUBLE = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
DEBUG = Step("Rerun with NCCL's own diagnosis; its WARN lines name the cause.",
             command="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,SHM,P2P torchrun ...")
SHM = Step("Check the size of /dev/shm.", command="df -h /dev/shm")
P2P_OFF = Step("Rule out GPU peer-to-peer transport.", command="NCCL_P2P_DISABLE=1 torchrun ...")
TOPO = Step("Show how the GPUs connect (PIX/PXB/PHB/SYS/NV#).", command="nvidia-smi topo -m")
IFACES = Step("List the network interfaces and pick the one the nodes share.",
              command="ip -br addr")

NCCL_SYSTEM = declare(
    "LOG002", Category.NCCL_SHARED_MEMORY, "NCCL 'unhandled system error' (usually /dev/shm)",
    what="NCCL failed a system call; in containers this is almost always its shared-memory "
         "segment in a /dev/shm that is too small (Docker's default is 64 MB).",
    why="Every multi-GPU job on this machine fails at its first collective.",
    fix="Give the container more shared memory (docker run --shm-size=16g or --ipc=host; a "
        "memory-backed emptyDir on /dev/shm in Kubernetes), or NCCL_SHM_DISABLE=1 as a "
        "slower workaround.",
    docs_url=NCCL_TROUBLE)
NCCL_CUDA = declare(
    "LOG003", Category.CUDA_INIT_FAILURE, "NCCL 'unhandled cuda error'",
    what="A CUDA call inside NCCL failed: a device that cannot be used, peer access that "
         "fails, or a CUDA error left behind by an earlier kernel.",
    why="The collective, and so the training step, cannot complete.",
    fix="Re-run with NCCL_DEBUG=INFO to see the CUDA error; run `ddp-doctor check` for the "
        "device and peer-access findings; try NCCL_P2P_DISABLE=1.",
    docs_url=NCCL_TROUBLE)
NCCL_OTHER = declare(
    "LOG004", Category.NCCL_NETWORK, "NCCL error between ranks",
    what="NCCL reported an error (internal, remote or invalid usage) while the ranks "
         "connected or communicated.",
    why="The job cannot train while its ranks cannot communicate.",
    fix="Re-run with NCCL_DEBUG=INFO; set NCCL_SOCKET_IFNAME to the interface the nodes "
        "share, and try NCCL_IB_DISABLE=1 to rule out InfiniBand.",
    docs_url=NCCL_TROUBLE)
NCCL_SHM = declare(
    "LOG042", Category.NCCL_SHARED_MEMORY, "NCCL cannot create its shared-memory segment",
    what="NCCL could not create or grow its /dev/shm/nccl-* segment: /dev/shm is full or "
         "too small (Docker's 64 MB default), or not writable.",
    why="Ranks on one node cannot exchange data; the communicator fails to initialise.",
    fix="docker run --ipc=host (or --shm-size=16g --ulimit memlock=-1); in Kubernetes mount "
        "a memory-backed emptyDir on /dev/shm.",
    docs_url=NCCL_TROUBLE)
NCCL_SOCKET = declare(
    "LOG043", Category.NCCL_NETWORK, "NCCL cannot reach the other ranks over the network",
    what="NCCL found no usable network interface, or could not connect its sockets to "
         "another rank: the wrong interface (docker0, a VPN, a link-local NIC), a firewall, "
         "or a NCCL_SOCKET_IFNAME that names no interface.",
    why="The communicator never forms; multi-node jobs fail or hang at start.",
    fix="Set NCCL_SOCKET_IFNAME to the interface the nodes share (e.g. eth0, or '^docker,lo' "
        "to exclude), and open the ports between nodes.",
    docs_url=NCCL_ENV)
NCCL_IB = declare(
    "LOG044", Category.NCCL_NETWORK, "InfiniBand/RoCE transport failed in NCCL",
    what="NCCL's IB verbs transport reported an error (a work completion error, a port "
         "error, failed QP creation or memory registration): a link, subnet manager, GID or "
         "memlock problem.",
    why="Inter-node collectives fail or the job hangs.",
    fix="Check the IB ports (`ibstat`), raise memlock (--ulimit memlock=-1), set "
        "NCCL_IB_HCA / NCCL_IB_GID_INDEX; NCCL_IB_DISABLE=1 to fall back to sockets.",
    docs_url=NCCL_ENV)
NCCL_P2P = declare(
    "LOG045", Category.NCCL_P2P, "GPU peer-to-peer (P2P/CUDA IPC) transport failed",
    what="NCCL could not use direct GPU-to-GPU access: peer access unsupported between the "
         "GPUs (consumer cards, VMs), CUDA IPC failing, or PCIe ACS/IOMMU redirecting "
         "peer traffic.",
    why="Collectives between GPUs of one node fail or hang.",
    fix="Run with NCCL_P2P_DISABLE=1 (or NCCL_P2P_LEVEL=NVL); disable ACS / IOMMU in the "
        "BIOS (or iommu=pt) for a lasting fix.",
    docs_url="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
             "#pci-access-control-services-acs")
FIRST_HANG = declare(
    "LOG046", Category.NCCL_P2P, "The very first collective timed out (likely P2P transport)",
    what="The process group's first collective (sequence number 0 or 1: DDP's parameter "
         "check or broadcast, or the first barrier) never finished. When all ranks are alive, "
         "a peer-to-peer path that hangs (PCIe ACS, IOMMU, consumer GPUs) is the commonest "
         "reason.",
    why="Training never starts; the watchdog kills the job after the timeout.",
    fix="Rerun with NCCL_P2P_DISABLE=1: if it now works, disable ACS/IOMMU or keep P2P off.",
    docs_url="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
             "#pci-access-control-services-acs")
WATCHDOG = declare(
    "LOG047", Category.COLLECTIVE_TIMEOUT, "A collective timed out (watchdog)",
    what="torch's NCCL watchdog saw a collective run longer than the process-group timeout: "
         "one rank did not join it - it was slower (rank 0 alone evaluating, caching or "
         "saving), it crashed, or the ranks called different collectives.",
    why="The watchdog aborts the communicator and tears the job down.",
    fix="Find the rank that did not reach the collective (its own error comes first); raise "
        "init_process_group(timeout=...) for long rank-0-only work (YOLO trainers: update "
        "them, or validate less: val=False, --noval).",
    docs_url="https://pytorch.org/docs/stable/distributed.html#torch.distributed."
             "init_process_group")
ABORTED = declare(
    "LOG048", Category.COLLECTIVE_TIMEOUT, "NCCL operations failed or the communicator was aborted",
    what="torch tore down NCCL after an earlier failure or timeout on this or another rank.",
    why="It is the consequence of the first failure, which is where the cause is.",
    fix="Read the earliest error in the log, or the first failing rank's output.",
    docs_url="https://pytorch.org/docs/stable/torch_nccl_environment_variables.html")
PEER_GONE = declare(
    "LOG049", Category.COLLECTIVE_TIMEOUT,
    "A peer rank disappeared (connection reset, broken pipe)",
    what="This rank lost its connection to another rank: the other process died or was "
         "killed (often by the OOM killer) or the network dropped.",
    why="The survivors fail too; their messages hide the first failure.",
    fix="Find the first rank that failed (torchrun's 'Root Cause' section) and read its error; "
        "check dmesg for the OOM killer.",
    docs_url="https://pytorch.org/docs/stable/elastic/errors.html")
NO_NCCL = declare(
    "LOG050", Category.NCCL_UNAVAILABLE, "This PyTorch build has no NCCL",
    what="torch was built without NCCL: native Windows and macOS builds, and CPU-only builds.",
    why="backend='nccl' cannot work; multi-GPU training must use gloo or run under Linux/WSL2.",
    fix="Use backend='gloo' on Windows (slower), or run on Linux/WSL2 with a CUDA build.",
    docs_url="https://pytorch.org/docs/stable/distributed.html#backends")
DESYNC = declare(
    "LOG051", Category.COLLECTIVE_TIMEOUT, "Ranks called different collectives (desynchronised)",
    what="torch's collective check found the ranks in different collectives or with "
         "different tensor shapes: code paths that differ by rank (a branch on rank, uneven "
         "data so one rank runs an extra step).",
    why="A desynchronised job hangs until the watchdog kills it.",
    fix="Make every rank run the same collectives in the same order (same number of "
        "batches per rank: DistributedSampler with drop_last, no rank-only collectives).",
    docs_url="https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-"
             "applications")
# NCCL_DEBUG=INFO prints every function an error passes back through, innermost first, as
# "NCCL INFO <file>.cc:<line> -> <ncclResult_t>" (NVIDIA/nccl src/include/checks.h, NCCLCHECK):
# the first file names where the failure began. NVIDIA/nccl#1000: the trace began in
# misc/socket.cc and bootstrap.cc, and NCCL_SOCKET_IFNAME fixed it.
NCCL_NET_TRACE = declare(
    "LOG073", Category.NCCL_NETWORK, "NCCL's error trace begins in its network code",
    what="NCCL's own trace of a failure starts in its socket, bootstrap or network-transport "
         "code (misc/socket.cc, bootstrap.cc, transport/net_socket.cc, transport/net_ib.cc): "
         "the ranks could not connect or keep their connections, usually because NCCL picked "
         "an interface the other ranks cannot reach (an IPoIB or docker interface, a VPN) "
         "or a firewall blocks the ports.",
    why="The communicator never forms, or breaks, and every rank's collective fails.",
    fix="Set NCCL_SOCKET_IFNAME to the interface the nodes share (the bootstrap uses it "
        "even when the data goes over InfiniBand), open the ports between nodes, and rerun "
        "with NCCL_DEBUG=INFO to see the WARN line before the trace.",
    docs_url=NCCL_ENV)
# NCCL looks every device of its topology up by id (ncclTopoIdToIndex, NVIDIA/nccl
# src/graph/topo.h) and warns "Could not find <type> with id <id>" before returning an
# internal error. For a network device (NET, or the NIC holding it) the network layer
# - NCCL's IB or socket transport, or an external net plugin - reported a device the
# topology does not hold: a net plugin built for another NCCL, an NCCL_TOPO_FILE that does
# not describe the machine, or a bug of that NCCL release (NVIDIA-NeMo/Speech#13996:
# multi-node InfiniBand, fixed by upgrading NCCL in the container).
NCCL_NET_TOPO = declare(
    "LOG081", Category.NCCL_NETWORK,
    "NCCL's topology has no entry for a network device it was given",
    what="NCCL could not find a network device (NET or NIC) in its topology graph while "
         "setting up the communicator: the devices its network transport or net plugin "
         "reports do not match the topology it detected or was given (NCCL_TOPO_FILE) - a "
         "plugin or NCCL version mismatch, or a bug in that NCCL release.",
    why="The communicator is never created, so every multi-node collective fails at start.",
    fix="Use an NCCL release without the bug (upgrade NCCL in the image, or a newer "
        "framework container), a net plugin built for that NCCL, and unset NCCL_TOPO_FILE "
        "unless it describes this machine.",
    docs_url=NCCL_ENV)
# Before its first NCCL operation on a group, every rank but the group's first fetches that
# rank's ncclUniqueId from the c10d store (ProcessGroupNCCL.cpp broadcastUniqueNCCLID):
# "[1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d
# key-value store by key '0', but store->get('0') got error: ...". The store answered -
# the ranks had met - but the first rank never published its id within the store's timeout:
# it had not reached that collective (busy alone: preprocessing under main_process_first,
# evaluating; or a different collective, group or device order) or it died. That is ranks
# out of step, not a rendezvous failure (hiyouga/ChatGLM-Efficient-Tuning#137: rank 0
# tokenising a large dataset for 30 minutes while rank 1 waited in the barrier).
NCCL_ID_WAIT = declare(
    "LOG086", Category.COLLECTIVE_TIMEOUT,
    "A rank waited for the first rank's NCCL id in vain (that rank never reached the "
    "collective)",
    what="Before the first NCCL operation of a group each rank fetches the group's first "
         "rank's ncclUniqueId from the store; this rank reached that operation, but the first "
         "rank did not publish its id before the store's timeout: it was still busy elsewhere "
         "(rank-0-only preprocessing, caching, evaluation), called a different collective or "
         "used another device or group order, or it died.",
    why="The waiting rank fails (or the job hangs until the timeout) and takes the job down.",
    fix="Make every rank reach the same NCCL operations in the same order; keep long "
        "rank-0-only work under the timeout (pre-process once beforehand, or raise "
        "init_process_group(timeout=...)); bind each rank to its GPU with "
        "torch.cuda.set_device(local_rank) before the first collective.",
    docs_url="https://pytorch.org/docs/stable/distributed.html#torch.distributed."
             "init_process_group")

SHM_ROOTS = ("LOG042", "LOG008", "LOG040")
NET_ROOTS = ("LOG043", "LOG044", "LOG073")

RULES: tuple[Rule, ...] = (
    Rule(NCCL_SHM, rx(r"error while creating shared memory segment",
                      r"fail\w* to extend \S*/dev/shm",
                      r"fail\w* to create shared memory file",
                      r"posix_fallocate failed",
                      r"shm_open failed",
                      r"warn[^\n]*/dev/shm/nccl[^\n]*"),
         ("error", "fail", "warn"),
         (SHM, Step("Give the container more shared memory.",
                    command="docker run --ipc=host --ulimit memlock=-1 ...")),
         examples=(
             "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-hBPyzf (size "
             "9637888)",
             "NCCL WARN Call to posix_fallocate failed : No space left on device",
             "NCCL WARN Error: failed to extend /dev/shm/nccl-03v824 to 9637892 bytes")),
    Rule(NCCL_P2P, rx(r"cuda[^\n]*peer access is not supported between these two devices",
                      r"warn[^\n]*cuda ipc",
                      r"fail\w*[^\n]*cudaipc\w+",
                      r"warn[^\n]*p2p[^\n]*fail",
                      r"cuda error: peer mapping resources exhausted",
                      r"cuda runtime error \(60\) : peer mapping resources exhausted",
                      r"cuda failure \d* ?'peer mapping resources exhausted'",
                      r"cuda_error_too_many_peers", r"cudaerrortoomanypeers"),
         ("cud", "warn", "fail"),
         (P2P_OFF, TOPO),
         examples=(
             "transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217 peer access "
             "is not supported between these two devices",
             "RuntimeError: CUDA error: peer access is not supported between these two devices",
             "NCCL WARN Cuda failure 'peer access is not supported between these two devices'",
             "RuntimeError: cuda runtime error (60) : peer mapping resources exhausted at "
             "/opt/conda/conda-bld/pytorch/work/aten/src/THC/THCGeneral.cpp:164"),
         alternatives=("wsl_setup: WSL2 has no CUDA IPC between processes",),
         decide=(P2P_OFF, Step("Is this WSL?", command="uname -r"))),
    Rule(NCCL_SOCKET, rx(r"warn[^\n]*no socket interface found",
                         r"warn[^\n]*no nccl_socket_ifname interface found",
                         r"warn[^\n]*socket creation failed",
                         r"warn[^\n]*connect to \S+ failed",
                         r"warn[^\n]*(?:bootstrap|net/socket)[^\n]*(?:fail|error|unable|"
                         r"no usable|refused|unreachable)",
                         r"call to connect returned connection refused",
                         r"nccl[^\n]*connection refused",
                         r"warn[^\n]*neither af_inet"),
         ("warn", "refused"),
         (IFACES, Step("Name that interface for NCCL.",
                       command="NCCL_SOCKET_IFNAME=eth0 torchrun ...")),
         examples=(
             "NCCL WARN Bootstrap : no socket interface found",
             "include/socket.h:344 WARN Socket creation failed : Address family not supported "
             "by protocol",
             "NCCL WARN socketStartConnect: Connect to 10.0.0.2<43271> failed : No route to host",
             "NCCL INFO Call to connect returned Connection refused, retrying"),
         alternatives=("rendezvous_failure: when MASTER_ADDR itself is unreachable the ranks "
                       "fail before NCCL starts",),
         decide=(IFACES, DEBUG)),
    Rule(NCCL_IB, rx(r"warn net/ib[^\n]*", r"warn[^\n]*ibv_\w+ failed",
                     r"warn[^\n]*ib[^\n]*(?:port error|async event)"),
         ("warn",),
         (Step("Check the InfiniBand ports.", command="ibstat"),
          Step("Fall back to sockets to confirm.", command="NCCL_IB_DISABLE=1 torchrun ...")),
         examples=(
             "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<55921> with status=12 "
             "opcode=1 len=0 vendor err 129 (Send)",
             "NCCL WARN NET/IB : mlx5_0:1 Got async event : port error",
             "NCCL WARN Call to ibv_create_qp failed"),
         # NCCL picks NET/IB when it can open an HCA and falls back to NET/Socket otherwise
         # (src/transport/net_ib.cc, net.cc of https://github.com/NVIDIA/nccl): the sockets
         # chosen beside a listed HCA (DIAG020, diagnose/transport.py) are what this failure
         # leaves behind, not a second cause.
         relations=(Explains(("DIAG020",),
                             reason="NCCL's IB transport failed on this host, so NCCL fell "
                                    "back to TCP sockets beside the HCA it listed: the "
                                    "fallback is this failure's consequence (NCCL net_ib.cc, "
                                    "net.cc)."),)),
    Rule(NCCL_NET_TOPO, rx(r"warn could not find (?:net|nic) with id\b"),
         ("warn",),
         (Step("See the NCCL version, the net plugin and the devices NCCL finds.",
               command="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH torchrun ... 2>&1 "
                       "| grep -E 'NCCL version|NET/|Plugin|Could not find'"),
          Step("Check for a topology file that may not describe this machine.",
               command="env | grep -E 'NCCL_(TOPO|GRAPH)_FILE|NCCL_NET_PLUGIN'"),
          Step("Upgrade NCCL (the nvidia-nccl wheel of a pip-installed torch, or a newer "
               "framework container), keeping any net plugin built for that NCCL.")),
         examples=("graph/topo.h:230 NCCL WARN Could not find NET with id 0",)),
    Rule(NCCL_NET_TRACE, rx(r"nccl info (?:misc/socket|bootstrap|transport/net_socket"
                            r"|transport/net_ib|misc/ibvwrap)\.cc:\d+ -> [1-7]\b"),
         (".cc:",),
         (IFACES, Step("Name that interface for NCCL's bootstrap.",
                       command="NCCL_SOCKET_IFNAME=eth0 NCCL_DEBUG=INFO torchrun ...")),
         examples=("dso-s1-r1-a100-03:2330:2658 [2] NCCL INFO misc/socket.cc:567 -> 2",
                   "dso-s1-r1-a100-03:2330:2658 [2] NCCL INFO bootstrap.cc:270 -> 2"),
         # A watchdog that aborts the communicator, or a peer that died, leaves the same
         # trace behind in the survivors: then it is a consequence.
         symptom_of=(ANY_ERROR, "LOG046", "LOG047", "LOG048"),
         alternatives=("collective_timeout: a peer that stopped answering leaves the same "
                       "trace in the ranks that waited for it",),
         decide=(IFACES, DEBUG)),
    Rule(NCCL_SYSTEM, rx(r"unhandled system error", r"ncclsystemerror", r"nccl error 2\b"),
         ("error",),
         (SHM, Step("Give the container more shared memory (or use --ipc=host).",
                    command="docker run --shm-size=16g ..."), DEBUG),
         examples=("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                   "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "
                   "2.21.5",
                   "ncclSystemError: System call (e.g. socket, malloc) or external library call "
                   "failed or device error."),
         symptom_of=(*SHM_ROOTS, *NET_ROOTS, "LOG045", "LOG020", "LOG006", "LOG038",
                     "LOG048"),  # after "Some NCCL operations have failed": the peers left
         alternatives=(
             "nccl_network: no usable network interface or a blocked socket "
             "(NCCL_SOCKET_IFNAME), mostly in multi-node jobs",
             "wsl_setup: NCCL under WSL2, where IPC and shared memory are limited"),
         decide=(SHM, DEBUG,
                 Step("If it works without the shared-memory transport, /dev/shm is the cause.",
                      command="NCCL_SHM_DISABLE=1 torchrun ..."))),
    Rule(NCCL_CUDA, rx(r"unhandled cuda error", r"ncclunhandlederror", r"nccl error 1\b",
                       r"ncclunhandledcudaerror"),
         ("cud", "error"),
         (DEBUG, P2P_OFF),
         examples=("NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled cuda error, NCCL "
                   "version 2.18.1",),
         symptom_of=(ANY_ERROR,),
         # Where the log names no CUDA error, the threads that found one cause were most
         # often versions that do not fit: NVIDIA/caffe#492 (NCCL packages for CUDA 9 under a
         # CUDA 8 build), alpa's install guide (CUDA, NCCL and driver), Pai-Megatron-Patch's
         # FAQ (an older pip NCCL).
         alternatives=(
             "nccl_p2p: peer access or CUDA IPC between the GPUs fails",
             "gpu_out_of_memory: NCCL could not allocate its buffers",
             "package_conflict: the NCCL loaded was built for another CUDA than the framework "
             "(a second libnccl on LD_LIBRARY_PATH, an nvidia-nccl wheel of another CUDA, "
             "distro NCCL packages for another toolkit)",
             "hardware_fault: a GPU in a bad state"),
         decide=(DEBUG, P2P_OFF, Step("How full are the GPUs?", command="nvidia-smi"),
                 Step("Which CUDA and NCCL does the job load? Two NCCLs, or one built for "
                      "another CUDA, do not fit.",
                      command="python -c \"import torch; print(torch.version.cuda, "
                              "torch.cuda.nccl.version())\"; pip list 2>/dev/null | grep -i "
                              "nccl; ldconfig -p | grep -i libnccl"))),
    Rule(NCCL_OTHER, rx(r"nccl error", r"ncclinternalerror", r"ncclremoteerror",
                        r"error[^\n]*remote process exited or there was a network error"),
         ("error",),
         (DEBUG, Step("Name the network interface the nodes share.",
                      command="NCCL_SOCKET_IFNAME=eth0 torchrun ...")),
         examples=("NCCL error in: ProcessGroupNCCL.cpp:1269, remote process exited or there was "
                   "a network error",
                   "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL."
                   "cpp:1201, internal error, NCCL version 2.14.3"),
         symptom_of=(ANY_ERROR,),
         alternatives=("host_out_of_memory: 'remote process exited' is what survivors say when a "
                       "peer died, most often killed by the OOM killer",),
         decide=(DEBUG,)),
    # The group's first collective (SeqNum 0 or 1: ProcessGroupNCCL numbers each collective
    # as it is enqueued). From 2 on, a collective already completed across every rank, so the
    # ranks met and NCCL moved data between them (not proof that every path works: NCCL 2.22
    # and later connect each algorithm lazily); a rank that has not joined yet is the likelier
    # cause. In the
    # corpus the SeqNum=1 timeouts were P2P (determined#8915, accelerate#2062, 9566.tistory
    # 568), the SeqNum 2-3 ones a rank still tokenising, caching or evaluating (yolov5#9163,
    # sd-scripts#971, lm-evaluation-harness#1404, LLaMA-Factory#2424, xtuner#390).
    Rule(FIRST_HANG, rx(r"watchdog caught collective operation timeout: worknccl\(seqnum=[01],"
                        # barrier() is a one-element all-reduce: rank 0 busy, not P2P
                        r"(?![^\n]*optype=allreduce, numelin=1,)"),
         ("time",),
         (P2P_OFF, TOPO),
         examples=("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
                   "OpType=BROADCAST, NumelIn=23514624, NumelOut=23514624, Timeout(ms)=600000) "
                   "ran for 600087 milliseconds before timing out.",),
         symptom_of=(ANY_ERROR,),
         alternatives=(
             "nccl_network: in multi-node jobs the first collective also hangs on a wrong "
             "interface",
             "collective_timeout: one rank never reached it (stuck in data loading or a "
             "rank-0-only step)"),
         decide=(P2P_OFF, TOPO, DEBUG),
         relations=(
             ReadAs("data-preparation", code="LOG047",
                    reason="The YOLO trainers build the dataset on local rank 0 alone while "
                           "the others wait in a barrier; a first collective timing out "
                           "beside that label scan or image cache is rank 0 still busy "
                           "there, not a broken transport (ultralytics/yolov5#9163)."),
             ReadAs("long-progress-bar", code="LOG047",
                    reason="A progress bar that ran for the collective's whole timeout is "
                           "one rank working alone (caching, tokenising) while the others "
                           "waited; ranks stuck in broken P2P print no progress "
                           "(kohya-ss/sd-scripts#971)."))),
    Rule(WATCHDOG, rx(r"watchdog caught collective operation timeout",
                      r"caught collective operation timeout",
                      r"timed out waiting (?:\d+ ?ms|\.\.\.|\u2026) for (?:recv|send)\b",
                      # the watchdog's C++ frame, when the message itself was cut from the log
                      r"processgroupnccl::worknccl::checktimeout\b",
                      r"fail\w* to pass monitoredbarrier"),
         ("time", "fail"),
         (Step("Find the rank that did not join: its error, or its last progress line, comes "
               "first."),
          Step("For long rank-0-only work (evaluation, caching), raise the timeout in the "
               "script: dist.init_process_group('nccl', "
               "timeout=datetime.timedelta(hours=2)); better, let every rank do its share.")),
         examples=("[Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4211, "
                   "OpType=_ALLGATHER_BASE, NumelIn=1, NumelOut=8, Timeout(ms)=600000) ran for "
                   "600083 milliseconds before timing out.",
                   "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
                   "Timed out waiting 1800000ms for recv operation to complete",
                   "RuntimeError: [../third_party/gloo/.../unbound_buffer.cc:81] Timed out "
                   "waiting ... for recv",
                   "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::"
                   "chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x1554e9e0f8f2 in "
                   "/envs/mlpf/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so)"),
         symptom_of=(ANY_ERROR, "LOG046"),
         alternatives=("host_out_of_memory: a rank killed silently leaves the others waiting "
                       "(look for exit code -9)",
                       "nccl_p2p: a hang at the first collective"),
         decide=(Step("Was a rank killed?",
                      command="sudo dmesg -T | grep -i -E 'killed process|out of memory'"),
                 Step("Dump what each rank was doing at the timeout.",
                      command="TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 "
                              "torchrun ..."))),
    Rule(ABORTED, rx(r"some nccl operations have failed or timed out",
                     r"error: nccl communicator was aborted",
                     r"nccl communicator was aborted[^\n]*fail"),
         ("time", "fail", "error"),
         (Step("Read the earliest error in the log."),),
         examples=("Some NCCL operations have failed or timed out. Due to the asynchronous "
                   "nature of CUDA kernels, subsequent GPU operations might run on "
                   "corrupted/incomplete data.",
                   "RuntimeError: NCCL communicator was aborted on rank 1."),
         symptom_of=(ANY_ERROR, "LOG046", "LOG047")),
    Rule(PEER_GONE, rx(r"error[^\n]*connection reset by peer",
                       r"error[^\n]*broken pipe",
                       r"error[^\n]*connection closed by peer",
                       r"error[^\n]*failed to recv, got 0 bytes",
                       r"warn[^\n]*connection closed by remote peer"),
         ("error", "warn"),
         (Step("Find the first failing rank (torchrun's 'Root Cause' section)."),
          Step("Was a rank killed?",
               command="sudo dmesg -T | grep -i -E 'killed process|out of memory'")),
         examples=(
             "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection "
             "closed by peer [10.0.0.2]:40283",
             "torch.distributed.DistNetworkError: Connection reset by peer",
             "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was "
             "likely closed. Did the remote server shutdown or crash?",
             "NCCL WARN socketProgress: Connection closed by remote peer 10.10.1.3<36138>"),
         symptom_of=(ANY_ERROR,),
         alternatives=("host_out_of_memory: the peer was killed by the OOM killer",
                       "nccl_network: the network between the nodes dropped"),
         decide=(Step("Was a rank killed?",
                      command="sudo dmesg -T | grep -i -E 'killed process|out of memory'"),)),
    Rule(NCCL_ID_WAIT, rx(r"retrieving nccluniqueid from \[\d+\] via c10d key-value store"
                          r"[^\n]*got error"),
         ("error",),
         (Step("See what the first rank was doing while the others waited: its last progress "
               "or log line comes before this error (long rank-0-only preprocessing is the "
               "usual reason)."),
          Step("Keep rank-0-only work under the timeout: pre-process or cache the data in one "
               "process first, or raise the timeout in the script: "
               "dist.init_process_group('nccl', timeout=datetime.timedelta(hours=2)) "
               "(HF Trainer: --ddp_timeout)."),
          Step("Check that each rank uses its own GPU and runs the same collectives.",
               command="TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun ...")),
         examples=("RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId "
                   "from [0] via c10d key-value store by key '0', but store->get('0') got error",
                   "torch.distributed.DistBackendError: [2] is setting up NCCL communicator and "
                   "retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but "
                   "store->get('0') got error: wait timeout after 600000ms, keys: "
                   "/default_pg/0//27//cuda//0"),
         symptom_of=(ANY_ERROR,),
         alternatives=("ddp_usage_error: ranks that choose their GPU or their collectives "
                       "differently never meet in the same NCCL communicator",
                       "host_out_of_memory: a first rank killed silently never publishes its "
                       "id"),
         decide=(Step("Was a rank killed?",
                      command="sudo dmesg -T | grep -i -E 'killed process|out of memory'"),)),
    Rule(NO_NCCL, rx(r"error: distributed package doesn.t have nccl built in",
                     r"error\W[^\n]*distributed package doesn.t have nccl"),
         ("error",),
         (Step("On Windows and macOS use the gloo backend in the script: "
               "dist.init_process_group(backend='gloo') (Lightning: strategy='ddp' with "
               "process_group_backend='gloo'); or train under Linux/WSL2 with NCCL."),),
         examples=("RuntimeError: Distributed package doesn't have NCCL built in",
                   'raise RuntimeError("Distributed package doesn\'t have NCCL " "built in")'),
         # tczhangzhi/pytorch-distributed#15 quotes only the sentence; Akegarasu/lora-scripts#308
         # copied it from the source, with the two string literals' quotes ('NCCL " "built in')
         bare_message=re.compile(r"\bdistributed package doesn.t have nccl\W{0,6}built in",
                                 re.IGNORECASE)),
    Rule(DESYNC, rx(r"error: detected mismatch between collectives on ranks"),
         ("error",),
         (Step("Let torch check every collective's order and shape.",
               command="TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun ..."),),
         examples=("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is "
                   "running collective: CollectiveFingerPrint(SequenceNumber=23, "
                   "OpType=ALLREDUCE, TensorShape=[3], TensorDtypes=Float, "
                   "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda))",)),
)
