"""NOD codes: differences between the nodes of one job (``compare`` and the smoke job).

Sources for what breaks and what only hurts:
- NCCL requires the same NCCL version on every rank; a mismatch fails or hangs at
  communicator init (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html,
  and "NCCL version mismatch" threads such as https://github.com/NVIDIA/nccl/issues/1019).
- torch.distributed assumes one torch build everywhere: pickled objects, the c10d wire
  format and collective kernels are only tested within one release
  (https://pytorch.org/docs/stable/distributed.html).
- torchrun's world size is nnodes x nproc_per_node; nodes with different GPU counts need
  different --nproc-per-node and break the rank-to-GPU arithmetic of most scripts
  (https://pytorch.org/docs/stable/elastic/run.html).
- NCCL_* variables change algorithms, transports and interfaces per process; ranks that
  disagree pick different protocols (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
- NCCL_SOCKET_IFNAME is matched against each node's own interfaces (prefix match, ``=``
  for an exact name, ``^`` to exclude): a name only one node has leaves the others without
  a socket interface (same page).
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.model import Severity

NCCL_ENV_DOCS = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
DIST_DOCS = "https://pytorch.org/docs/stable/distributed.html"
RUN_DOCS = "https://pytorch.org/docs/stable/elastic/run.html"

NCCL_DIFFERS = declare(
    "NOD001", Category.NODE_MISMATCH, "The nodes run different NCCL versions",
    what="The NCCL that torch uses differs in major or minor version between nodes.",
    why="NCCL's wire protocol is only guaranteed within one version: communicator init "
        "fails, or the first collective hangs or corrupts.",
    fix="Install the same torch wheel (which bundles its NCCL) on every node, or the same "
        "nvidia-nccl-cu* package where NCCL comes from pip.",
    docs_url="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html")
TORCH_DIFFERS = declare(
    "NOD002", Category.NODE_MISMATCH, "The nodes run different torch versions or builds",
    what="torch's version or build (its +cuXXX tag or git revision) differs between nodes.",
    why="Ranks of one job exchange pickled objects and run collectives that are only tested "
        "within one build; mixed builds fail in ways that point elsewhere.",
    fix="Install the same torch wheel on every node (the same version and index URL).",
    docs_url=DIST_DOCS)
CUDA_MAJOR_DIFFERS = declare(
    "NOD003", Category.NODE_MISMATCH, "torch is built for different CUDA major versions",
    what="The CUDA version torch was built with (torch.version.cuda) has a different major "
         "version on some node, or is a CPU build there.",
    why="Each node then bundles another NCCL and cuBLAS generation; a CPU build has no NCCL "
        "at all.",
    fix="Install the same CUDA build of torch on every node, e.g. "
        "`pip install torch==X --index-url https://download.pytorch.org/whl/cu124`.",
    docs_url="https://pytorch.org/get-started/locally/")
GPU_COUNT_DIFFERS = declare(
    "NOD004", Category.NODE_MISMATCH, "The nodes have different numbers of GPUs",
    what="The GPU count per node differs, so one --nproc-per-node cannot fit every node.",
    why="world size = nnodes x nproc_per_node: with too many ranks on a node two share a GPU "
        "(or fail with invalid device ordinal); with too few a node's GPUs sit idle.",
    fix="Use nodes with the same GPU count, or set CUDA_VISIBLE_DEVICES and "
        "--nproc-per-node per node so that every node runs the same number of ranks.",
    docs_url=RUN_DOCS)
NCCL_SETTINGS_DIFFER = declare(
    "NOD005", Category.NODE_MISMATCH, "NCCL/torch settings differ between nodes",
    what="Some NCCL_*, TORCH_* or CUDA_VISIBLE_DEVICES variables are set on some nodes only, "
         "or to other values.",
    why="Ranks that disagree on NCCL's protocol, transport or interface settings can hang or "
        "run far slower; a debug variable set on one node only hides its output elsewhere.",
    fix="Set NCCL_* and TORCH_* variables the same way on every node (in the job script, "
        "not a node's shell profile).",
    severity=Severity.WARNING, docs_url=NCCL_ENV_DOCS)
DRIVER_BRANCH_DIFFERS = declare(
    "NOD006", Category.NODE_MISMATCH, "The nodes run different NVIDIA driver branches",
    what="The driver's major version (its branch, e.g. 535 vs 550) differs between nodes.",
    why="Branches support different CUDA versions and carry different NCCL-relevant fixes; a "
        "node on an older branch is the usual suspect when one node fails.",
    fix="Install the same driver branch on every node.",
    severity=Severity.WARNING,
    docs_url="https://docs.nvidia.com/datacenter/tesla/drivers/index.html")
GPU_MODEL_DIFFERS = declare(
    "NOD007", Category.NODE_MISMATCH, "The nodes have different GPU models",
    what="The GPU model differs between nodes (or within one).",
    why="Synchronous DDP runs at the pace of the slowest GPU, and mixed generations can need "
        "kernels the wheel has for one of them only.",
    fix="Schedule the job on one GPU model (a node feature or constraint in the scheduler).",
    severity=Severity.WARNING, docs_url=DIST_DOCS)
PYTHON_DIFFERS = declare(
    "NOD008", Category.NODE_MISMATCH, "The nodes run different Python minor versions",
    what="Python's minor version (3.10 vs 3.11) differs between nodes.",
    why="Objects pickled by one rank (all_gather_object, broadcast_object_list) may not "
        "unpickle on another, and each node has another set of wheels.",
    fix="Use the same environment (a container image or one shared venv) on every node.",
    severity=Severity.WARNING, docs_url=DIST_DOCS)
PACKAGES_DIFFER = declare(
    "NOD009", Category.NODE_MISMATCH, "Training packages differ between nodes",
    what="A package the training uses (torchvision, ultralytics, numpy, accelerate, "
         "deepspeed, an nvidia-nccl wheel, ...) has another version on some node.",
    why="Ranks then run different code: data augmentation, loss or checkpoint format may "
        "differ, and a mismatched NCCL wheel breaks collectives.",
    fix="Install from one lock file or image on every node.",
    severity=Severity.WARNING)
LIMITS_DIFFER = declare(
    "NOD010", Category.NODE_MISMATCH, "Container limits differ between nodes",
    what="/dev/shm or the memory limit differs between nodes.",
    why="NCCL and DataLoader workers need shared memory; the node with the smaller limit "
        "fails first (Bus error, unhandled system error).",
    fix="Give every node's container the same --shm-size (or --ipc=host) and memory limit.",
    severity=Severity.WARNING,
    docs_url="https://docs.nvidia.com/deeplearning/frameworks/user-guide/index.html")
KERNEL_DIFFERS = declare(
    "NOD011", Category.NODE_MISMATCH, "The nodes run different kernels",
    what="The Linux kernel release differs between nodes.",
    why="Rarely a cause by itself; worth knowing when one node's driver module or IOMMU "
        "behaves differently.",
    fix="Nothing to do unless that node misbehaves.",
    severity=Severity.INFO)
IFNAME_MISSING = declare(
    "NOD012", Category.NODE_MISMATCH, "NCCL_SOCKET_IFNAME names an interface a node lacks",
    what="NCCL_SOCKET_IFNAME selects network interfaces by name, and on some node no "
         "interface matches it.",
    why="NCCL on that node finds no socket interface (\"no socket interface found\") or the "
        "bootstrap picks another network, and the job fails or hangs at init.",
    fix="Name interfaces every node has (a common prefix such as `eth`, or several names "
        "separated by commas), e.g. `export NCCL_SOCKET_IFNAME=eth0,ens5`.",
    docs_url=NCCL_ENV_DOCS)
IB_PARTIAL = declare(
    "NOD013", Category.NODE_MISMATCH, "InfiniBand is active on some nodes only",
    what="Some nodes have more active InfiniBand/RoCE ports than others, or some have none.",
    why="NCCL picks its network per node: the IB nodes try IB, the others sockets, and "
        "connections between them fail or fall back to slow sockets. A node with fewer "
        "active ports (rails) drives fewer NICs at once, and every all-reduce of the job "
        "runs at its pace.",
    fix="Bring the IB ports up on every node (`ibstat` shows each port's State; a port "
        "that is Down needs its cable, switch port or subnet manager checked), or set "
        "NCCL_IB_DISABLE=1 on all of them.",
    severity=Severity.WARNING, docs_url=NCCL_ENV_DOCS)
NODE_MISSING = declare(
    "NOD014", Category.RENDEZVOUS_FAILURE, "A node never joined the job",
    what="The job expected more nodes than reached the rendezvous.",
    why="Training cannot start without every node; the others wait until their timeout.",
    fix="Start the job on every node with the same --rdzv-endpoint (or MASTER_ADDR/PORT) "
        "and --nnodes, and check that the missing node can reach it.",
    docs_url=RUN_DOCS)
RANKS_DIFFER = declare(
    "NOD016", Category.NODE_MISMATCH, "The nodes run different numbers of ranks",
    what="The smoke job's nodes started different numbers of processes (by default one "
         "per GPU the node's torch sees).",
    why="torchrun numbers ranks by every node's real count, so training still runs, but "
        "scripts that compute rank = node_rank x nproc + local_rank collide or skip "
        "numbers, each node's share of the data and the global batch change, and a node "
        "short of a GPU is usually one whose GPU fell off or is hidden.",
    fix="Find why the node with fewer ranks sees fewer GPUs (`nvidia-smi -L`, "
        "CUDA_VISIBLE_DEVICES), or give every node the same --nproc.",
    severity=Severity.WARNING, docs_url=RUN_DOCS)
NETWORK_DIFFERS = declare(
    "NOD015", Category.NODE_MISMATCH, "NCCL uses another network on some nodes",
    what="NCCL chose a different network (InfiniBand, sockets, a plugin such as the AWS OFI "
         "or RDMA plugin) or loaded its network plugin on some nodes only.",
    why="Ranks whose NCCL speaks different transports cannot connect: the job fails or "
        "hangs at the first inter-node collective.",
    fix="Install the same NCCL network plugin (libnccl-net.so) and the same NCCL_NET/"
        "NCCL_IB_* settings on every node, or force one transport everywhere (e.g. "
        "NCCL_IB_DISABLE=1 for sockets).",
    docs_url=NCCL_ENV_DOCS)
