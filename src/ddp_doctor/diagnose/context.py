"""Judgements one line cannot make: what the rest of the log says about a finding.

Some errors mean different things in different jobs. NCCL's "unhandled system error" on
one node in a container is usually /dev/shm, but on a job that spans nodes, or where NCCL
lists Docker bridge interfaces (``br-*``, ``veth*``), it is the network interface NCCL
picked (NVIDIA/nccl#697). "Some NCCL operations have failed or timed out" across nodes is
usually the inter-node transport (karpathy/nanoGPT#55: fixed by NCCL_IB_DISABLE=1). And a
job that hangs says nothing at all: its log stops after NCCL set up its channels, which
on a single PCIe machine is most often broken peer-to-peer transport
(Lightning-AI/pytorch-lightning#19425, NVIDIA/nccl#2079: NCCL_P2P_DISABLE=1 fixes it);
where each rank stopped is read in last_lines.py, and the transport NCCL shows decides:
peer-to-peer inside a node, the network across nodes, or (neither) a rank that never
reached the collective.

What the log shows about the machine comes first, as it does for the checks: a CUDA
failure in a log from WSL is WSL's to explain; "GPU access blocked" with a container
around it is the container runtime's; a torch that will not load next to two CUDA builds
of one NVIDIA wheel is the package conflict; a `docker run` that asked for no GPUs beside a
CUDA that finds none is the container's start. A first collective that timed out while a
progress bar ran for the whole timeout is one rank busy alone, not the transport; so is a
distributed job's bar that ran that long with a cut traceback right after it. Lightning
announcing one global rank twice while others never join is nodes that each act as node
0. And a torch message pasted without its exception type, which no gate word marks, is
still read when nothing else was.
These refinements read the start and the end of each document (bounded, see scan.py).
Which findings each reading applies to is not written here: the rules and codes declare it
(``Explains``, ``ReadAs`` in logrules/rule.py, each with its reason; ``WSL_READING`` and
``WHEELS_READING`` below), and relations.py collects and checks them; ``ENVIRONMENTS``
says how each environment shows in a log and in which order they decide.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.accelerate_state import CAUSES as ACCELERATE_CAUSES
from ddp_doctor.diagnose.accelerate_state import SAME_DEVICE, ranks_on_one_device
from ddp_doctor.diagnose.bare_messages import find_bare
from ddp_doctor.diagnose.checkpoint_keys import CHECKPOINT_WRAPPER_PREFIX, prefix_mismatch
from ddp_doctor.diagnose.compose import line_label
from ddp_doctor.diagnose.last_lines import where_ranks_stopped
from ddp_doctor.diagnose.literals import required_literals
from ddp_doctor.diagnose.relations import Declared, Relations, declared_on
from ddp_doctor.diagnose.scan import DocumentContext, ScanResult, read_window
from ddp_doctor.diagnose.transport import CAUSES as TRANSPORT_CAUSES
from ddp_doctor.diagnose.transport import CODES as TRANSPORT_CODES
from ddp_doctor.diagnose.transport import VIRTUAL_INTERFACE_NAME
from ddp_doctor.logrules import LOG_CODES, RULES
from ddp_doctor.logrules.packages import CPU_TORCH_BUILD, SHOW_TORCH
from ddp_doctor.logrules.rule import ReadAs, Rule
from ddp_doctor.model import Code, Evidence, Finding, Severity, Step
from ddp_doctor.redact.secrets import redact_text

MULTI_NODE = re.compile(
    r"--nnodes[= ](?:[2-9]|\d{2,})\b|--num[_-]machines[= ](?:[2-9]|\d{2,})\b"
    r"|\bNNODES=(?:[2-9]|\d{2,})\b|--node[_-]rank[= ][1-9]|\bNODE_RANK=[1-9]"
    r"|SLURM_NNODES=(?:[2-9]|\d{2,})\b|--nodes[= ](?:[2-9]|\d{2,})\b", re.IGNORECASE)
# a virtual interface in NCCL's numbered interface lists ("NET/Socket : Using [0]eth0:...
# [1]veth8739016:..."), named as transport.py's DIAG026 names them
BRIDGE_INTERFACE = re.compile(rf"\[\d+\]\s*{VIRTUAL_INTERFACE_NAME}[\w.-]*")
# torch's heartbeat monitor (ProcessGroupNCCL.cpp, torch 2.2 and later) says the same of a
# NCCL or CUDA call that never returns: "ProcessGroupNCCL's watchdog got stuck for 480
# seconds without making progress ..." ("Heartbeat monitor timed out!" before 2.4), which it
# reports before any collective's own timeout (warpem/miss-alignment#105).
# A hang the user states beside NCCL, P2P or the GPU count ("NCCL 2.30.4 hangs",
# "NCCL might hang with P2P enabled", "training with 4 GPUs gets stuck") is the same silent
# hang (local-inference-lab/rtx6kpro#15, dmlc/xgboost#11242): NCCL's troubleshooting guide
# names P2P through PCIe ACS/IOMMU first for a hang without an error.
HANG_TEXT = re.compile(
    r"\bwatchdog got stuck for \d+ seconds|\bheartbeat monitor timed out\b"
    r"|\b(?:hangs?|hung|hanging|stuck|deadlock\w*|freez\w*|spin-wait\w*|no (?:forward )?"
    r"progress)\b.{0,120}\b(?:all_?reduce|all_?gather|barrier|broadcast|first (?:collective|"
    r"iteration|step|batch)|init_process_group|DistributedDataParallel|DDP)\b"
    r"|\b(?:ncclAllReduce|all_?reduce|barrier|broadcast|first collective)\b.{0,120}"
    r"\b(?:hangs?|hung|hanging|stuck|deadlock\w*|freez\w*|never (?:returns|finishes|completes))"
    # beside NCCL, P2P or the GPU count only the words for a hang, not "freeze" (fine-tuning
    # freezes layers), and "P2P" only after the verb (NCCL INFO lines say "via P2P/IPC")
    r"|\b(?:hangs?|hung|hanging|stuck|deadlock\w*)\b.{0,120}\b(?:NCCL|P2P|multi-?GPUs?"
    r"|multiple GPUs|\d+ GPUs)\b"
    r"|\b(?:NCCL \d[\d.]*|multi-?GPUs?|multiple GPUs|\d+ GPUs)\b.{0,120}"
    r"\b(?:hangs?|hung|hanging|stuck|deadlock\w*)\b",
    re.IGNORECASE)

SILENT_HANG = declare(
    "DIAG002", Category.NCCL_P2P,
    "The job hangs at its first collective (likely GPU peer-to-peer transport)",
    what="The log stops right after NCCL set up its channels (or the text says the job hangs "
         "at all-reduce / barrier) and no error follows: the ranks wait forever in the first "
         "collective. On one machine with PCIe GPUs this is most often peer-to-peer transport "
         "that the platform breaks (IOMMU or PCIe ACS on, consumer GPUs, VMs).",
    why="Nothing fails, so nothing says why: the job just never trains.",
    fix="Run the job once with NCCL_P2P_DISABLE=1. If it then trains, P2P is the cause: turn "
        "off IOMMU/ACS (or use iommu=pt), or keep P2P disabled (slower).",
    severity=Severity.ERROR,
    docs_url="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
             "#pci-access-control-services-acs")

# The user's own experiment settles it: "with NCCL_P2P_DISABLE=1 it works" (the contract's
# definition of nccl_p2p; NVIDIA/nccl#667).
# The variable as a shell, a Python script or a YAML file sets it: NCCL_P2P_DISABLE=1,
# NCCL_P2P_DISABLE="1", os.environ["NCCL_P2P_DISABLE"] = "1", NCCL_P2P_DISABLE: 1.
_P2P_OFF = (r"NCCL_P2P_(?:DISABLE[\"'\]]{0,2}\s*[=:]\s*[\"']?1\b"
            r"|LEVEL[\"'\]]{0,2}\s*[=:]\s*[\"']?\w+)")
P2P_OFF_HELPS = re.compile(
    # the outcome, not denied ("... but it doesn't work"), nor a path ("runs/exp1")
    _P2P_OFF + r"[^\n]{0,80}(?<!n't )(?<!not )(?<!no )\b(?:work(?:s|ed|around)?|fix(?:es|ed)?|solv"
    r"(?:es|ed)|resolv(?:es|ed)|help(?:s|ed)?|runs(?!/)|passe[sd])\b"
    r"|\b(?:works?|worked|workaround|fix(?:es|ed)?|solved|resolved)\b[^\n]{0,60}" + _P2P_OFF,
    re.IGNORECASE)
# What broken P2P looks like when NCCL reports it at all.
_P2P_SYMPTOMS = {Category.COLLECTIVE_TIMEOUT, Category.NCCL_NETWORK, Category.CUDA_INIT_FAILURE,
                 Category.NCCL_P2P, Category.UNKNOWN}
# What a machine prints (a WSL kernel release, the WSL driver path), or the user saying the
# job runs in WSL; not a contrast ("it works under WSL2 on my laptop, but the server...").
# WSL also shows in the Windows drives it mounts (/mnt/c/Users/...) and in its GPU
# paravirtualisation device (/dev/dxg, the dxgkrnl driver's "misc dxg:" kernel lines), and
# in a Linux shell prompt on a host with a name Windows made up (DESKTOP-XXXXXXX,
# LAPTOP-XXXXXXXX): WSL takes the Windows computer name as its host name.
WSL_MARK = re.compile(r"microsoft-standard-wsl2|\d+\.\d+\.\d+-\d*-?microsoft\b|/usr/lib/wsl/"
                      r"|/mnt/[a-z]/(?:users|windows|program files)/|/dev/dxg\b|\bdxg(?:krnl)?:"
                      r"|^\s*\w[\w.-]*@(?-i:(?:DESKTOP|LAPTOP)-[A-Z0-9]{7,8}):"
                      r"|^(?!.*\b(?:but|works?|worked|fine|except)\b).*\bwsl ?2?\b",
                      re.IGNORECASE)
# The Windows build a report states beside a Linux error: the WSL issue template's
# "Windows build number: 10.0.19045.0", `wsl --version`'s "Windows version: 10.0.22631.3447",
# `ver`'s "Microsoft Windows [Version 10.0.20231.1005]", or "windows: 20231.1005" in the
# user's words (microsoft/WSL#6098). The Linux that printed the error runs on that Windows,
# which is WSL - unless the log shows Windows paths (C:\...), a native Windows program's.
WINDOWS_BUILD = re.compile(r"\bmicrosoft windows \[version 10\.0\.\d{5}"
                           r"|\bwindows(?: build)?(?: number| version)?\s*[:\uff1a]\s*"
                           r"(?:10\.0\.)?\d{5}(?:\.\d+)?\b", re.IGNORECASE)
WINDOWS_PATH = re.compile(r"(?:^|[\s\"'(\[=])[A-Za-z]:\\")
NATIVE_KERNEL = re.compile(r"\b\d+\.\d+\.\d+-\d+-(?:generic|aws|azure|gcp|oracle|lowlatency)\b"
                           r"|\.el[789]_?\d*\.x86_64")
UNDER_WSL = declare(
    "DIAG003", Category.WSL_SETUP, "The GPU cannot be reached from inside WSL",
    what="CUDA or NVML fails to find or open the GPU, and the log comes from WSL. Under WSL "
         "the GPU is reached only through the Windows driver's libraries in /usr/lib/wsl/lib: "
         "a Linux NVIDIA driver or libcuda installed inside the distribution shadows them, "
         "WSL 1 has no GPU at all, and GPUs in TCC mode are not offered to WSL.",
    why="Nothing CUDA can run until the process loads the WSL driver libraries.",
    fix="Remove any Linux NVIDIA driver inside WSL, make /usr/lib/wsl/lib come first for the "
        "loader, run WSL 2 (`wsl -l -v` in Windows), and keep GPUs in WDDM mode.",
    severity=Severity.ERROR,
    docs_url="https://docs.nvidia.com/cuda/wsl-user-guide/index.html")
WSL_STEPS = (
    Step("Check that the loader finds the WSL libcuda, not a Linux driver's copy.",
         command="ldconfig -p | grep -E 'libcuda|libnvidia-ml'; ls -l /usr/lib/wsl/lib"),
    Step("Put the WSL driver libraries first for this shell (and the training job).",
         command="export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH"),
    Step("Remove Linux NVIDIA driver packages installed inside the distribution.",
         command="dpkg -l | grep -E 'nvidia-(driver|utils|compute)' "),
    Step("In Windows, check the distribution runs WSL 2 (VERSION column) and update WSL.",
         command="wsl -l -v && wsl --update"),
    Step("If it shows VERSION 1, convert it (WSL 1 has no GPU); use the name from the list.",
         command="wsl --set-version Ubuntu 2"),
)
# What a GPU that WSL does not hand over looks like to CUDA and NVML.
WSL_READING = ReadAs(
    "wsl", code=UNDER_WSL.id,
    categories=(Category.GPU_NOT_VISIBLE, Category.CUDA_INIT_FAILURE, Category.DRIVER_MISSING,
                Category.HARDWARE_FAULT, Category.TORCH_CPU_ONLY),
    reason="Under WSL the GPU is reached only through the Windows driver's libraries in "
           "/usr/lib/wsl/lib: a CUDA or NVML failure in a log from WSL is WSL's to explain "
           "(https://docs.nvidia.com/cuda/wsl-user-guide/index.html).")

# A container around the job: Docker, its marker file, the NVIDIA container runtime,
# Kubernetes (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/).
CONTAINER_MARK = re.compile(
    r"/\.dockerenv|\bdocker(?:d|file)?\b|nvidia-container-(?:cli|runtime|toolkit)"
    r"|\bkubernetes\b|\bkubectl\b|\bkubelet\b|\bpodman\b|\bcontainerd\b", re.IGNORECASE)
# microsoft/WSL#9962 and #9938: nvidia-smi works in WSL, not in its Docker containers.
CONTAINER_BLOCKED = declare(
    "DIAG005", Category.CUDA_INIT_FAILURE,
    "The GPU is blocked inside the container, not in WSL",
    what="NVML reports 'GPU access blocked by the operating system' in a log that shows a "
         "container. WSL 2 hands its GPU to containers through the NVIDIA container runtime; "
         "when the runtime is set not to manage device cgroups (no-cgroups = true in "
         "/etc/nvidia-container-runtime/config.toml) or is too old for WSL, the container is "
         "refused the GPU that WSL itself can use.",
    why="Nothing in the container can use the GPU.",
    fix="Check that nvidia-smi works in WSL outside the container; then set no-cgroups = false "
        "in /etc/nvidia-container-runtime/config.toml (or update the NVIDIA Container "
        "Toolkit) and restart Docker.",
    severity=Severity.ERROR,
    docs_url="https://docs.nvidia.com/cuda/wsl-user-guide/index.html")
CONTAINER_STEPS = (
    Step("In WSL itself, outside any container: if this fails too, WSL's own GPU setup is the "
         "cause.", command="nvidia-smi"),
    Step("Look at the container runtime's cgroup setting.",
         command="grep -n no-cgroups /etc/nvidia-container-runtime/config.toml"),
    Step("After setting no-cgroups = false, restart Docker and try a CUDA container.",
         command="sudo systemctl restart docker && docker run --rm --gpus all "
                 "nvidia/cuda:12.4.1-base-ubuntu22.04 nvidia-smi"),
)

# Two CUDA builds of one NVIDIA library wheel (nvidia-nccl-cu11 next to nvidia-nccl-cu12, as
# pip, pip freeze, conda and collect_env list them): both unpack into site-packages/nvidia/
# <library>, so torch loads files it was not built against (rwth-i6/returnn#1802).
CUDA_WHEEL = re.compile(r"\bnvidia[-_]([a-z]+(?:[-_][a-z]+)*?)[-_]cu(\d{2})\b", re.IGNORECASE)
TWO_CUDA_WHEELS = declare(
    "DIAG006", Category.PACKAGE_CONFLICT,
    "Two CUDA builds of one NVIDIA library are installed side by side",
    what="The environment lists the same NVIDIA library wheel for two CUDA major versions "
         "(for example nvidia-nccl-cu11 and nvidia-nccl-cu12). Both install into "
         "site-packages/nvidia/<library>, so one overwrites the other's files and torch "
         "loads a library it was not built against: an undefined symbol, or a library that "
         "will not load.",
    why="torch (or cuDNN, NCCL) fails to load until only the matching wheels remain.",
    fix="Uninstall the wheels of the CUDA version torch was not built for (pip uninstall "
        "nvidia-nccl-cu11 ...), then reinstall torch so its own wheels are complete.",
    severity=Severity.ERROR,
    docs_url="https://pytorch.org/get-started/locally/")
# What a library torch cannot load looks like.
WHEELS_READING = ReadAs(
    "two-cuda-wheels", code=TWO_CUDA_WHEELS.id,
    categories=(Category.TORCH_MISSING, Category.CUDNN_FAILURE),
    reason="Two CUDA builds of one NVIDIA library wheel unpack into the same "
           "site-packages/nvidia/<library>, so torch loads files it was not built against "
           "(rwth-i6/returnn#1802).")
# torch's own import failing: the line of torch/__init__.py that loads its native libraries
# ("from torch._C import *"), a frame in torch/__init__.py, or an interpreter line that only
# imports torch. A shared library missing under it is torch's install problem (LOG022), while
# the same loader line from TensorFlow, Paddle or nnabla means the library itself is absent.
TORCH_IMPORT = re.compile(r"from torch\._C import|torch[/\\]__init__\.py|^\W*import torch\s*$",
                          re.IGNORECASE)

# The YOLO trainers build their dataset on local rank 0 alone while the other ranks wait in
# a barrier (``torch_distributed_zero_first`` in yolov5 utils/torch_utils.py and
# ultralytics/utils/torch_utils.py): the label scan and the image cache print a progress bar
# from rank 0 only ("train: Scanning '...' images and labels... 113162 found, 0 missing",
# Ultralytics' "Scanning ...labels... 128 images, 2 backgrounds, 0 corrupt", "Caching images
# (4.2GB ram)"). When the first collective times out beside that bar, rank 0 was still busy
# there: the watchdog's timeout, not a broken transport (ultralytics/yolov5#9163).
DATA_PREPARATION = re.compile(
    r"\bScanning\b[^\n]*(?:\bimages and labels\b|\b\d+ images, \d+ backgrounds\b)"
    r"|\bCaching images \(\d", re.IGNORECASE)
# A DataLoader worker hands each batch's shared memory to the main process as a file
# descriptor sent over a local socket (torch/multiprocessing/reductions.py rebuild_storage_fd,
# multiprocessing's resource_sharer); a traceback through those frames is that handoff.
DATALOADER_HANDOFF = re.compile(r"\brebuild_storage_fd\b|multiprocessing/resource_sharer\.py")
DATA_PREPARATION_STEPS = (
    Step("Build the label cache once before launching the DDP job (a single-process run "
         "writes the .cache files next to the labels), or raise the process group's timeout "
         "for the first epoch."),
)

# A progress bar (tqdm: "1582/1818 [30:02<04:26, 1.13s/it]") whose elapsed time reaches
# the process group's timeout shows one rank working alone outside any collective for that
# long - latent caching, tokenising - while the others waited: the watchdog's timeout, not
# a transport that hangs (kohya-ss/sd-scripts#971: caching latents for 30 minutes beside
# "Timeout(ms)=1800000"). Ranks stuck in a broken peer-to-peer collective print no progress.
BAR_ELAPSED = re.compile(r"\|\s*\d+/\d+\s*\[(?:(\d+):)?(\d+):(\d\d)<")
COLLECTIVE_TIMEOUT_MS = re.compile(r"Timeout\(ms\)=(\d+)", re.IGNORECASE)
DEFAULT_TIMEOUT_S = 1800  # init_process_group's default for NCCL
TRACEBACK_START = "Traceback (most recent call last)"
# What says a log is a distributed job's: a launcher, torch.distributed, DeepSpeed's or
# accelerate's rank-tagged lines, NCCL.
DISTRIBUTED_MARK = re.compile(r"\btorchrun\b|torch\.distributed|\bdeepspeed\b|\[Rank \d+\]"
                              r"|\bLOCAL_RANK\b|\bNCCL\b|--nproc[_-]per[_-]node", re.IGNORECASE)
LONG_WORK_STEPS = (
    Step("Do the long work one rank does alone (caching, tokenising, preprocessing) before "
         "the distributed run, in one process, so the ranks start in step."),
    Step("Or raise the process group's timeout above that work's duration in the script: "
         "dist.init_process_group('nccl', timeout=datetime.timedelta(hours=2)) "
         "(accelerate: InitProcessGroupKwargs(timeout=...); HF Trainer: --ddp_timeout)."),
)

# Lightning announces each process's place as it joins: "initializing ddp: GLOBAL_RANK: 1,
# MEMBER: 2/8" ("Initializing distributed: ..." from 1.6). The same global rank announced
# twice while other ranks of the world never are is two processes that each believe they
# are that rank - every node thinks it is node 0 - so the world never fills and the job
# hangs in init. The usual cause is a Slurm allocation that does not match the Trainer
# (Lightning-AI/pytorch-lightning#10098: the job asked for 1 node while num_nodes=2;
# https://lightning.ai/docs/pytorch/stable/clusters/cluster_advanced.html: --nodes and
# --ntasks-per-node must equal num_nodes and devices). Made here, from the whole log.
SAME_RANK_TWICE = declare(
    "DIAG010", Category.RENDEZVOUS_FAILURE,
    "Two processes announced the same global rank, and other ranks never joined",
    what="The log shows a global rank announced more than once while some ranks of the "
         "world size were never announced: the nodes do not know their node rank (each "
         "acts as node 0), as when a Slurm job's --nodes/--ntasks-per-node do not match "
         "the Trainer's num_nodes/devices, or NODE_RANK is not set per node.",
    why="The process group waits for ranks that no process will take: the job hangs at "
        "start-up and fails at the rendezvous timeout.",
    fix="Give each node its own node rank: in Slurm, request as many nodes and tasks per "
        "node as the Trainer uses (#SBATCH --nodes=N --ntasks-per-node=G with "
        "Trainer(num_nodes=N, devices=G)) and start with srun; elsewhere set NODE_RANK (or "
        "torchrun --node_rank) per node.",
    docs_url="https://lightning.ai/docs/pytorch/stable/clusters/cluster_advanced.html")

SAME_RANK_STEPS = (
    Step("See how many nodes and tasks per node the job really got (inside the job).",
         command="echo nodes=$SLURM_NNODES tasks/node=$SLURM_NTASKS_PER_NODE "
                 "node=$SLURM_NODEID"),
    Step("Request what the Trainer uses, and start the script with srun so that each task "
         "learns its rank: #SBATCH --nodes=N --ntasks-per-node=G with "
         "Trainer(num_nodes=N, devices=G).", command="srun python train.py"),
    Step("Without Slurm, give every node its own rank.",
         command="torchrun --nnodes=N --node_rank=K --nproc_per_node=G ... train.py"),
)

# A container started without a GPU request: a `docker run` (or podman) command line with no
# --gpus, no --runtime=nvidia, no nvidia.com/gpu or /dev/nvidia* device (nvidia-docker adds
# the GPUs itself, so it is no such line). Beside a CUDA that finds no GPU or no driver, the
# container never got them (logrules/driver.py LOG085; floydhub/dockerfiles#3).
CONTAINER_RUN = re.compile(r"(?<![\w-])(?:docker|podman)\s+(?:container\s+)?run\b",
                           re.IGNORECASE)
GPU_REQUEST = re.compile(r"--gpus\b|--runtime[= ]nvidia\b|nvidia\.com/gpu|--device[= ]\S*nvidia"
                         r"|NVIDIA_VISIBLE_DEVICES", re.IGNORECASE)
IS_AVAILABLE = re.compile(r"\bcuda\.is_available\(\)", re.IGNORECASE)
FALSE_AFTER = re.compile(r"\bcuda\.is_available\(\)[^\n]*?\bFalse\b")
FALSE_LINE = re.compile(r"^\s*(?:Out\[\d+\]:\s*)?False\s*$")

HANG_STEPS = (
    Step("Run the same job with peer-to-peer transport off; if it now trains, P2P is the "
         "cause.", command="NCCL_P2P_DISABLE=1 NCCL_DEBUG=INFO torchrun ... 2>&1 | tee "
                           "train.log"),
    Step("See how the GPUs are connected (PIX/PXB/PHB/NODE/SYS: P2P over PCIe bridges is "
         "the fragile case).", command="nvidia-smi topo -m"),
    Step("Check whether the IOMMU is on (intel_iommu=on / amd_iommu=on without iommu=pt).",
         command="cat /proc/cmdline"),
    Step("Run ddp-doctor on the machine: its P2P check tests every GPU pair with a deadline.",
         command="ddp-doctor check"),
)
# A hang at a collective where NCCL shows its transports and none is peer-to-peer: the
# ranks fell out of step (one busy elsewhere), which the watchdog would report after its
# timeout (the contract's collective_timeout).
HANG_NOT_P2P = declare(
    "DIAG007", Category.COLLECTIVE_TIMEOUT,
    "The job hangs in a collective that does not use GPU peer-to-peer transport",
    what="The ranks stopped after NCCL set up its communicator (or inside a collective) and "
         "no error follows, but NCCL's channel lines show no peer-to-peer (P2P/IPC) "
         "transport: the usual reason is a rank that never reached the collective - busy "
         "elsewhere (rank 0 alone evaluating, caching or saving), with fewer batches than the "
         "others, or calling a different collective.",
    why="The waiting ranks block until the watchdog's timeout (30 minutes by default).",
    fix="Find the rank that did not reach the collective: run with TORCH_DISTRIBUTED_DEBUG="
        "DETAIL and a short init_process_group(timeout=...), and make every rank run the same "
        "collectives in the same order.",
    severity=Severity.ERROR,
    docs_url="https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-"
             "applications")
HANG_NOT_P2P_STEPS = (
    Step("Let torch check that every rank runs the same collectives, with a short timeout so "
         "the watchdog reports the rank that is missing.",
         command="TORCH_DISTRIBUTED_DEBUG=DETAIL TORCH_NCCL_DUMP_ON_TIMEOUT=1 torchrun ..."),
    Step("See where each rank is while it hangs (replace PID with each rank's process id).",
         command="py-spy dump --pid PID"),
)
# NCCL names the transport of each channel: peer-to-peer inside a node (P2P/IPC, P2P/CUMEM,
# P2P/direct pointer), shared memory, or the network (NET/IB, NET/Socket).
P2P_TRANSPORT = re.compile(r"NCCL INFO .*\bvia P2P\b|P2P/(?:IPC|CUMEM|direct)", re.IGNORECASE)
ANY_TRANSPORT = re.compile(r"NCCL INFO Channel \d+(?:/\d+)?\s*:.*\bvia\b", re.IGNORECASE)
NET_TRANSPORT = re.compile(r"NCCL INFO Channel \d+(?:/\d+)?\s*:.*\bvia NET/", re.IGNORECASE)

HANG_ALTERNATIVES = (
    "collective_timeout: one rank is still busy elsewhere (rank 0 validating, caching or "
    "saving) while the others wait; the default timeout is 30 minutes",
    "nccl_network: in a multi-node job, the network path between the nodes",
)


@dataclass(frozen=True)
class Seen:
    """A context line: where it is and what it says."""

    where: str
    text: str


def _lines_with(pattern: re.Pattern[str], context: DocumentContext, many: bool,
                limit: int = 2) -> list[Seen]:
    # A line without any of the phrases the pattern cannot match without is not searched
    # (literals.py, as the scan does): most lines of a long head hold none.
    phrases = required_literals(pattern)
    found: list[Seen] = []
    for number, whole in enumerate(context.head.split("\n"), start=1):
        line = read_window(whole)  # (as the scan reads it: a search of a huge line is slow)
        if phrases is not None and not any(map(line.lower().__contains__, phrases)):
            continue
        if pattern.search(line):
            label = line_label(context.document, number, many)
            found.append(Seen(label, redact_text(line.strip())[:300]))
            if len(found) >= limit:
                break
    return found


def _network_finding(finding: Finding, network_code: Code, reasons: list[Seen]) -> Finding:
    evidence = [Evidence(seen.where, seen.text) for seen in reasons]
    evidence += [Evidence(e.label, e.value, e.source) for e in finding.evidence
                 if e.label != "other possible cause"]
    evidence.append(Evidence("other possible cause",
                             f"{finding.code.category.value}: {finding.code.summary}"))
    steps = (
        Step("Name the interface the nodes share (see `ip -br addr`); never a docker bridge.",
             command="NCCL_SOCKET_IFNAME=eth0 NCCL_DEBUG=INFO torchrun ..."),
        Step("Rule out InfiniBand/RoCE: if the job then runs, the IB fabric or its driver is "
             "the cause.", command="NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO torchrun ..."),
        Step("Test the network alone between the nodes.",
             url="https://github.com/NVIDIA/nccl-tests"),
    )
    remediation = steps + tuple(s for s in finding.remediation if s not in steps)
    return replace(finding, code=network_code, title=network_code.summary,
                   evidence=tuple(evidence), remediation=remediation,
                   docs_url=network_code.docs_url)


# Generic NCCL failures whose cause the network context can name.
_NETWORK_AMBIGUOUS = {Category.NCCL_SHARED_MEMORY, Category.COLLECTIVE_TIMEOUT,
                      Category.NCCL_NETWORK}
_SPECIFIC_SHM = re.compile(r"shared memory|/dev/shm|shm_open|posix_fallocate|bus error",
                           re.IGNORECASE)


def _replaced_lead(findings: list[tuple[Finding, int]], lead: Finding, code: Code,
                   markers: list[Seen], source: str, steps: tuple[Step, ...]
                   ) -> list[tuple[Finding, int]]:
    """The findings with ``lead`` read anew through what the log shows about the machine
    (``markers``: the first is the environment's evidence, the others quoted after it)."""
    evidence = [Evidence(markers[0].where, markers[0].text, source),
                *(Evidence(seen.where, seen.text) for seen in markers[1:]),
                *(e for e in lead.evidence if e.label != "other possible cause"),
                Evidence("other possible cause",
                         f"{lead.code.category.value}: {lead.code.summary}")]
    finding = Finding(code, code.summary, evidence=tuple(evidence),
                      remediation=steps + lead.remediation, affects=lead.affects,
                      docs_url=code.docs_url)
    return [(finding, order) if f is lead else (f, order) for f, order in findings]


LIGHTNING_RANK = re.compile(r"\binitializing (?:ddp|distributed): GLOBAL_RANK: (\d+), "
                            r"MEMBER: \d+/(\d+)", re.IGNORECASE)
_QUOTED_LINE = re.compile(r"^(?:.+ )?line \d+$")  # compose.py's label of a quoted line
_RULES = {rule.code.id: rule for rule in RULES if not rule.catalogue}  # the hand-written


CHECKPOINT_STEPS = (
    Step("Load the weights into the bare model without the wrapper's prefix, or save the "
         "wrapped model's own weights.",
         command="python -c \"import torch; from torch.nn.modules.utils import "
                 "consume_prefix_in_state_dict_if_present as strip; sd = torch.load('ckpt.pt', "
                 "map_location='cpu'); strip(sd, 'module.'); torch.save(sd, 'ckpt_bare.pt')\"",
         url=CHECKPOINT_WRAPPER_PREFIX.docs_url),
    Step("When saving from DDP, save model.module.state_dict(); when loading into a wrapped "
         "model, call model.module.load_state_dict(...)."),
)


def _made(code: Code, evidence: tuple[Evidence, ...], steps: tuple[Step, ...],
          title: str | None = None) -> tuple[Finding, int]:
    """A finding of ``code`` made from the whole log (no rule's line), ranked first."""
    return (Finding(code, title or code.summary, evidence=evidence, remediation=steps,
                    docs_url=code.docs_url), 0)


def _rule(code: Code) -> Rule:
    """The log rule that declares ``code``: its steps and alternatives, when a finding of
    that code is made from the whole log instead of one line."""
    return _RULES[code.id]


def _explained(findings: list[tuple[Finding, int]], lead: Finding
               ) -> list[tuple[Finding, int]] | None:
    """The findings with a finding declared to explain ``lead`` (``Explains``: Gloo's
    loopback fallback explains a failed connection between ranks) as the error that leads,
    ``lead`` folded into it; None when the log shows no such finding."""
    causes = RELATIONS.explainers(lead.code.id)
    fallback = next((f for f, _ in findings if f.code.id in causes), None)
    if fallback is None:
        return None
    own = next((e for e in lead.evidence if _QUOTED_LINE.match(e.label)
                and not e.label.startswith("consequence, ")), None)
    evidence = [*fallback.evidence]
    if own is not None:
        evidence.append(Evidence(f"consequence, {own.label}", f"{own.value} ({lead.code.id})",
                                 own.source))
    evidence += [e for e in lead.evidence if e.label.startswith("consequence, ")]
    cause = replace(fallback, severity=Severity.ERROR, evidence=tuple(evidence))
    return [(cause, order) if f is fallback else (f, order)
            for f, order in findings if f is not lead]


def _same_rank_twice(scan: ScanResult, many: bool) -> list[Seen]:
    """Lightning's rank announcements when one global rank is announced twice and some
    rank of the world never is (``DIAG010``); empty otherwise. A restarted job announces
    every rank again, which this does not take for the fault."""
    seen: dict[int, list[Seen]] = {}
    world = 0
    for context in scan.contexts:
        for found in _lines_with(LIGHTNING_RANK, context, many, limit=64):
            match = LIGHTNING_RANK.search(found.text)
            if match is not None:
                seen.setdefault(int(match.group(1)), []).append(found)
                world = max(world, int(match.group(2)))
    twice = sorted(rank for rank, lines in seen.items() if len(lines) > 1)
    if not twice or not world or set(seen) >= set(range(world)):
        return []
    return seen[twice[0]][:2]


def _two_cuda_wheels(scan: ScanResult, many: bool) -> list[Seen]:
    """Lines listing one NVIDIA library wheel built for two CUDA major versions."""
    seen: dict[str, dict[str, Seen]] = {}
    for context in scan.contexts:
        for number, line in enumerate(context.head.split("\n"), start=1):
            for found in CUDA_WHEEL.finditer(line):
                library = found.group(1).lower().replace("_", "-")
                majors = seen.setdefault(library, {})
                majors.setdefault(found.group(2), Seen(line_label(context.document, number, many),
                                                        redact_text(line.strip())[:300]))
                if len(majors) > 1:
                    return list(majors.values())[:2]
    return []


def _long_bars(scan: ScanResult, lead: Finding, many: bool) -> list[Seen]:
    """Progress bars whose elapsed time reaches the collective's timeout (90% of it: the bar
    is redrawn only as items finish), the longest first."""
    stated = next((COLLECTIVE_TIMEOUT_MS.search(e.value) for e in lead.evidence
                   if COLLECTIVE_TIMEOUT_MS.search(e.value)), None)
    timeout_s = int(stated.group(1)) / 1000 if stated else DEFAULT_TIMEOUT_S
    found: list[tuple[int, Seen]] = []
    for context in scan.contexts:
        for number, line in context.numbered_lines():
            for bar in BAR_ELAPSED.finditer(line):
                elapsed = _seconds(bar)
                if elapsed >= 0.9 * timeout_s:
                    found.append((elapsed, Seen(line_label(context.document, number, many),
                                                redact_text(line.strip())[:300])))
    return [seen for _, seen in sorted(found, key=lambda item: -item[0])[:1]]


def _bar_then_traceback(scan: ScanResult, many: bool) -> list[Seen]:
    """A distributed job's progress bar that ran for init_process_group's default timeout
    and a traceback straight after it (a paste cut before the exception's last line);
    empty otherwise. Rank 0 alone tokenising a dataset for 30 minutes while the other ranks
    wait in a collective ends exactly so (hiyouga/LlamaFactory#956)."""
    for context in scan.contexts:
        if not DISTRIBUTED_MARK.search(context.head):
            continue
        lines = context.numbered_lines()
        for position, (number, line) in enumerate(lines):
            bars = [bar for bar in BAR_ELAPSED.finditer(line)
                    if _seconds(bar) >= 0.9 * DEFAULT_TIMEOUT_S]
            if bars and any(TRACEBACK_START in later for _, later in
                            lines[position:position + 3]):
                return [Seen(line_label(context.document, number, many),
                             redact_text(line.strip())[:300])]
    return []


def _seconds(bar: re.Match[str]) -> int:
    hours, minutes, seconds = (int(g or 0) for g in bar.groups())
    return hours * 3600 + minutes * 60 + seconds


def _ungated(scan: ScanResult, many: bool) -> list[tuple[Finding, int]]:
    """A finding from a bare torch message no gate word marks (``Rule.bare_message``: what
    a message torch raises says when it is pasted without its exception type, an issue
    title or a quoted sentence), looked for in the start of each document."""
    for rule in _RULES.values():
        pattern = rule.bare_message
        if pattern is None:
            continue
        seen = [found for context in scan.contexts
                for found in _lines_with(pattern, context, many, 1)]
        if seen:
            return [_bare_finding(rule, seen[0], "the message without its exception type")]
    return []


def _bare_finding(rule: Rule, seen: Seen, source: str) -> tuple[Finding, int]:
    """A finding of ``rule``'s code made from one line that holds its message without the
    words that mark it: the line, the rule's other possible causes, its steps then the
    steps that decide between them."""
    evidence = (Evidence(seen.where, seen.text, source),
                *(Evidence("other possible cause", a) for a in rule.alternatives))
    return _made(rule.code, evidence,
                 (*rule.steps, *(s for s in rule.decide if s not in rule.steps)))


def _bare_catalogued(scan: ScanResult, many: bool) -> tuple[Finding, int] | None:
    """A finding from a catalogued message pasted without the words that gate it
    (``bare_messages``), in a log where no rule read an error; None otherwise."""
    bare = find_bare(scan)
    if bare is None:
        return None
    seen = Seen(line_label(bare.document, bare.line, many),
                redact_text(bare.text.strip())[:300])
    return _bare_finding(bare.rule.read(bare.text), seen,
                         "the message without the words that mark it")


def _shared_device(scan: ScanResult, many: bool) -> list[tuple[str, str]]:
    """accelerate's state lines showing every process on one GPU (``accelerate_state``)."""
    return ranks_on_one_device(
        (line_label(context.document, number, many), line)
        for context in scan.contexts for number, line in context.numbered_lines())


def _container_without_gpus(scan: ScanResult, many: bool) -> list[Seen]:
    """The `docker run` lines of a log where none asks for GPUs; empty otherwise."""
    runs = [seen for context in scan.contexts
            for seen in _lines_with(CONTAINER_RUN, context, many, limit=8)]
    if not runs or any(GPU_REQUEST.search(seen.text) for seen in runs):
        return []
    return runs[:1]


def _cuda_unavailable(scan: ScanResult, many: bool) -> list[Seen]:
    """Where the log shows torch.cuda.is_available() answering False."""
    for context in scan.contexts:
        lines = context.head.split("\n")
        for index, line in enumerate(lines):
            if not IS_AVAILABLE.search(line):
                continue
            asked = Seen(line_label(context.document, index + 1, many),
                         redact_text(line.strip())[:300])
            if FALSE_AFTER.search(line) is not None:
                return [asked]
            after = next((n for n in range(index + 1, min(index + 4, len(lines)))
                          if lines[n].strip()), None)
            if after is not None and FALSE_LINE.match(lines[after]):
                # Each line quoted under its own number (an interpreter prints the answer
                # on the next line: "In [2]: torch.cuda.is_available()" / "Out[2]: False").
                return [asked, Seen(line_label(context.document, after + 1, many),
                                    redact_text(lines[after].strip())[:300])]
    return []


@dataclass(frozen=True)
class Environment:
    """What a log can show about the machine, for the ``ReadAs`` relations that need it.

    ``detect`` finds the lines that show it (empty: not shown); the first ``quoted`` of
    them become the evidence of the new reading, the first labelled ``source``, and
    ``steps`` gives the steps that come before the lead's own.
    """

    name: str
    detect: Callable[[ScanResult, Finding, bool], list[Seen]]
    source: str
    steps: Callable[[Code], tuple[Step, ...]]
    quoted: int = 1


def _marked(pattern: re.Pattern[str]) -> Callable[[ScanResult, Finding, bool], list[Seen]]:
    def detect(scan: ScanResult, lead: Finding, many: bool) -> list[Seen]:
        return [seen for context in scan.contexts for seen in _lines_with(pattern, context,
                                                                           many, 1)]
    return detect


def _under_wsl(scan: ScanResult, lead: Finding, many: bool) -> list[Seen]:
    """The WSL markers of a log (a Windows build number when nothing else, unless the log
    shows Windows paths); none in a log that also shows a native Linux kernel."""
    wsl = [seen for context in scan.contexts for seen in _lines_with(WSL_MARK, context, many, 1)]
    if not wsl and not any(_lines_with(WINDOWS_PATH, context, many, 1)
                           for context in scan.contexts):
        wsl = [seen for context in scan.contexts
               for seen in _lines_with(WINDOWS_BUILD, context, many, 1)]
    native = any(_lines_with(NATIVE_KERNEL, context, many, 1) for context in scan.contexts)
    return [] if native else wsl


# torch does not import beside two wheel builds, so nothing that imports it; the import
# failure's own steps (list the wheels, reinstall a pinned torch) follow.
WHEEL_STEPS = (Step("Uninstall the NVIDIA wheels built for the CUDA version torch was not "
                    "built for (torch's +cuXXX suffix names its own), keeping one build of "
                    "each library."),)
CONTAINER_WITHOUT_GPUS = "container-without-gpus"

ENVIRONMENTS: tuple[Environment, ...] = (
    Environment(CONTAINER_WITHOUT_GPUS, lambda scan, lead, many: _container_without_gpus(
        scan, many), "container started without GPUs", lambda code: _rule(code).steps),
    Environment("container", _marked(CONTAINER_MARK), "container marker",
                lambda code: CONTAINER_STEPS),
    Environment("two-cuda-wheels", lambda scan, lead, many: _two_cuda_wheels(scan, many),
                "installed packages", lambda code: WHEEL_STEPS, quoted=2),
    # a CPU-only torch build named in the log (logrules/packages.py): no GPU can be used by
    # it, whatever CUDA says elsewhere in the log
    Environment("cpu-torch", _marked(CPU_TORCH_BUILD), "torch build",
                lambda code: (SHOW_TORCH,)),
    Environment("torch-import", _marked(TORCH_IMPORT), "torch's own import",
                lambda code: ()),
    Environment("dataloader-handoff", _marked(DATALOADER_HANDOFF),
                "a DataLoader worker's shared-memory handoff",
                lambda code: _rule(code).steps),
    Environment("data-preparation", _marked(DATA_PREPARATION),
                "rank 0 still preparing the dataset", lambda code: DATA_PREPARATION_STEPS),
    Environment("long-progress-bar", _long_bars, "one rank busy for the whole timeout",
                lambda code: LONG_WORK_STEPS),
    Environment("wsl", _under_wsl, "WSL marker", lambda code: WSL_STEPS),
)
"""What the log shows about the machine, in the order it decides between causes (as the
checks do): the first that applies to the lead and is shown reads it anew."""

RELATIONS = Relations(
    [*declared_on(RULES), *(Declared(reading.code, reading)
                            for reading in (WSL_READING, WHEELS_READING)), *TRANSPORT_CAUSES,
     *ACCELERATE_CAUSES],
    {**{code.id: code for code in LOG_CODES}, **{code.id: code for code in TRANSPORT_CODES},
     **{code.id: code for code in (SILENT_HANG, UNDER_WSL, CONTAINER_BLOCKED,
                                   TWO_CUDA_WHEELS, HANG_NOT_P2P, SAME_RANK_TWICE,
                                   SAME_DEVICE)}},
    (environment.name for environment in ENVIRONMENTS))
"""Every relation declared beside the rules and the whole-log codes, checked on load."""


def _made_in_container(scan: ScanResult, many: bool) -> tuple[Finding, int] | None:
    """A finding made from a `docker run` without GPUs beside torch finding no CUDA, in a
    log where nothing else was read; None when the log does not show both."""
    container = _container_without_gpus(scan, many)
    unavailable = _cuda_unavailable(scan, many) if container else []
    readings = RELATIONS.readings(CONTAINER_WITHOUT_GPUS)
    if not unavailable or not readings:
        return None
    code = RELATIONS.code(readings[0].code)
    shown = (Evidence(container[0].where, container[0].text, "container started without GPUs"),
             *(Evidence(seen.where, seen.text) for seen in unavailable))
    return _made(code, shown, _rule(code).steps)


def _read_in_environment(findings: list[tuple[Finding, int]], scan: ScanResult, lead: Finding,
                         many: bool) -> list[tuple[Finding, int]] | None:
    """The findings with ``lead`` read as the first ``ReadAs`` relation that applies to it
    says, where the log shows that relation's environment; None where none applies."""
    for environment in ENVIRONMENTS:
        reading = RELATIONS.reading(environment.name, lead)
        if reading is None:
            continue
        shown = environment.detect(scan, lead, many)
        if shown:
            code = RELATIONS.code(reading.code)
            return _replaced_lead(findings, lead, code, shown[:environment.quoted],
                                  environment.source, environment.steps(code))
    return None


def refine(findings: list[tuple[Finding, int]], scan: ScanResult,
           network_code: Code) -> list[tuple[Finding, int]]:
    """The findings, with what the whole log says about the ambiguous ones."""
    from ddp_doctor.diagnose.causal_order import rank, warning_only

    many = len(scan.documents) > 1
    multi_node: list[Seen] = []
    bridges: list[Seen] = []
    for context in scan.contexts:
        multi_node += _lines_with(MULTI_NODE, context, many)
        bridges += _lines_with(BRIDGE_INTERFACE, context, many, limit=1)
    reasons = multi_node[:1] + bridges[:1]
    errors = [f for f, _ in rank(findings) if f.effective_severity is Severity.ERROR]
    lead = errors[0] if errors else None
    # What the log shows about the machine decides between causes first, as the checks do.
    if lead is not None:
        explained = _explained(findings, lead)
        if explained is not None:
            return explained
    # accelerate's state lines with every rank on one GPU (a whole-log finding): it leads a
    # log where nothing else does, and the leads declared beside it as its consequences
    # (``accelerate_state.CAUSES``), not any other cause the log shows.
    shared = _shared_device(scan, many) if not multi_node else []
    if shared:
        on_one_gpu = _made(SAME_DEVICE, tuple(Evidence(where, text,
                                                       "accelerate's state: the job's processes")
                                              for where, text in shared),
                           (Step(SAME_DEVICE.fix,
                                 command="nvidia-smi -L; echo $CUDA_VISIBLE_DEVICES"),))
        if lead is None:
            return [on_one_gpu, *findings]
        explained = _explained([on_one_gpu, *findings], lead)
        if explained is not None:
            return explained
    if lead is None:
        ungated = _ungated(scan, many)
        if ungated:
            return [*ungated, *findings]
        waited = _bar_then_traceback(scan, many)
        if waited:
            from ddp_doctor.logrules.nccl import WATCHDOG

            waited_shown = (
                Evidence(waited[0].where, waited[0].text,
                         "a progress bar ran for the default 30-minute timeout, then a "
                         "traceback"),
                Evidence("other possible cause", "unknown: the traceback is cut before its "
                                                 "last line, which would name the error"))
            return [_made(WATCHDOG, waited_shown, LONG_WORK_STEPS,
                          "One rank worked alone for the whole collective timeout, then the "
                          "job died"), *findings]
        twice = _same_rank_twice(scan, many)
        if twice:
            twice_shown = tuple(Evidence(seen.where, seen.text, "the same global rank "
                                                                "announced twice")
                                for seen in twice)
            return [_made(SAME_RANK_TWICE, twice_shown, SAME_RANK_STEPS), *findings]
    if lead is None:
        made = _made_in_container(scan, many)
        if made is not None:
            return [made, *findings]
        wrapped = tuple(Evidence(line_label(context.document, number, many),
                                 redact_text(text)[:300], "load_state_dict's report")
                        for context in scan.contexts
                        for number, text in prefix_mismatch(context.numbered_lines()))
        if wrapped:
            return [_made(CHECKPOINT_WRAPPER_PREFIX, wrapped[:2], CHECKPOINT_STEPS), *findings]
        # last: the whole-log readings above say more than one quoted phrase does
        bare = _bare_catalogued(scan, many)
        if bare is not None:
            return [bare, *findings]
    else:
        read = _read_in_environment(findings, scan, lead, many)
        if read is not None:
            return read
    out: list[tuple[Finding, int]] = []
    if reasons and errors and all(f.code.category in _NETWORK_AMBIGUOUS for f in errors) \
            and not any(_SPECIFIC_SHM.search(e.value) for f in errors for e in f.evidence
                        if e.label != "other possible cause"):
        for finding, order in findings:
            if finding is lead and finding.code.category is not Category.NCCL_NETWORK:
                finding = _network_finding(finding, network_code, reasons)
            out.append((finding, order))
        return out
    p2p_helps = [seen for context in scan.contexts
                 for seen in _lines_with(P2P_OFF_HELPS, context, many, 1)]
    # A warning every process prints at import does not say the job failed.
    failures = [f for f in errors if not warning_only(f)]
    if failures and not (p2p_helps and all(f.code.category in _P2P_SYMPTOMS for f in failures)):
        return findings
    hang = list(p2p_helps)
    stopped = [stop for context in scan.contexts for stop in where_ranks_stopped(context, many)]
    stops = [Seen(stop.where, stop.text) for stop in stopped]
    hang += stops
    for context in scan.contexts:
        hang += _lines_with(HANG_TEXT, context, many, limit=1)
    if not hang:
        return findings
    code: Code = SILENT_HANG
    steps: tuple[Step, ...] = HANG_STEPS
    alternatives: tuple[str, ...] = HANG_ALTERNATIVES
    severity: Severity | None = None
    if stops and not p2p_helps and all(stop.at_rendezvous for stop in stopped):
        # The ranks never got past meeting each other: no NCCL transport is involved yet.
        from ddp_doctor.logrules.distributed import RDZV_WAITING

        rule = _rule(RDZV_WAITING)
        code, steps, alternatives = RDZV_WAITING, rule.steps, rule.alternatives
        severity = Severity.ERROR  # the log ends there: the job hangs
    elif stops and not p2p_helps:
        transports = [seen for context in scan.contexts
                      for pattern in (P2P_TRANSPORT, NET_TRANSPORT, ANY_TRANSPORT)
                      for seen in _lines_with(pattern, context, many, 1)]
        p2p = any(P2P_TRANSPORT.search(seen.text) for seen in transports)
        net = any(NET_TRANSPORT.search(seen.text) for seen in transports)
        if net or (multi_node and not p2p):
            # Across nodes the first collective is the network's to explain first.
            hang += [seen for seen in transports if NET_TRANSPORT.search(seen.text)][:1]
            hang += multi_node[:1]
            code, steps = network_code, ()
        elif transports and not p2p:
            code, steps = HANG_NOT_P2P, HANG_NOT_P2P_STEPS
        elif p2p:
            hang += [seen for seen in transports if P2P_TRANSPORT.search(seen.text)][:1]
    evidence = [Evidence(seen.where, seen.text) for seen in hang[:4]]
    folded = [f for f, _ in findings if f in failures]
    for finding in folded:  # NCCL's own words for the same failure
        first = next((e for e in finding.evidence if e.label.startswith("line ")), None)
        if first is not None:
            evidence.append(Evidence(f"consequence, {first.label}",
                                     f"{first.value} ({finding.code.id})"))
    evidence += [Evidence("other possible cause", alt) for alt in alternatives
                 if not alt.startswith(code.category.value)]
    if code is network_code:
        steps = _network_finding(Finding(code, code.summary), code, []).remediation
    finding = Finding(code, code.summary, evidence=tuple(evidence),
                      remediation=steps, docs_url=code.docs_url, severity=severity)
    # the same code read from a line (a rule's warning) is this finding's own evidence
    return [(finding, 0), *((f, o) for f, o in findings
                            if f not in folded and f.code is not code)]
