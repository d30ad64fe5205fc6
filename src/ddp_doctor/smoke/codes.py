"""The codes the smoke-training job reports (SMK…), one per failed criterion.

They are not emitted by a check (a check never spawns processes); each is declared in the
code registry (``ddp_doctor.codes``), which is where ``ddp-doctor explain`` and
docs/codes.md find them.
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.model import Severity

RUN_URL = "https://pytorch.org/docs/stable/elastic/run.html"
DDP_URL = "https://pytorch.org/docs/stable/notes/ddp.html"

RANK_FAILED = declare(
    "SMK001", Category.UNKNOWN, "A rank of the smoke-training job failed",
    what="A process of the DDP smoke job exited with a non-zero code (or a signal) and its "
         "error text matched none of the known failure signatures.",
    why="The same failure will stop a real training job at the same phase.",
    fix="Read the rank's error lines in the evidence; re-run with `ddp-doctor smoke -v` and "
        "NCCL_DEBUG=INFO for more detail, and search the first error line.",
    docs_url=RUN_URL)
RANK_STALLED = declare(
    "SMK002", Category.COLLECTIVE_TIMEOUT, "A rank stopped making progress (hang)",
    what="A rank wrote no event for longer than the stall deadline while the job was "
         "running; the finding names the rank that fell behind and the phase it was in.",
    why="A real job would sit in the same place until the process-group timeout (10 to 30 "
        "minutes by default) or forever, holding every GPU.",
    fix="Look at the phase: a hang in a collective points at NCCL transport (try "
        "NCCL_P2P_DISABLE=1, then NCCL_IB_DISABLE=1, with NCCL_DEBUG=INFO); a hang in data "
        "points at DataLoader workers and /dev/shm.",
    docs_url="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html")
DEADLINE = declare(
    "SMK003", Category.PERFORMANCE_DEGRADED, "The smoke job did not finish within its deadline",
    what="Every rank kept making progress but the whole job ran past the wall-clock "
         "deadline (--timeout) and was stopped.",
    why="The smoke job is sized to finish in about a minute; far slower means the machine "
        "is overloaded, throttled, or training on the CPU by mistake.",
    fix="Check that nothing else is using the GPUs or CPUs (nvidia-smi, top); give a longer "
        "--timeout or fewer --steps to see the measurements.")
STEPS_MISSING = declare(
    "SMK004", Category.UNKNOWN, "Ranks exited without finishing every training step",
    what="The launcher reported success but some ranks did not record every step or the "
         "final phases.",
    why="A rank that silently stops early would desynchronise a real job.",
    fix="Re-run the smoke job; if it repeats, read the ranks' stderr in the run directory.")
LOSS_NOT_FINITE = declare(
    "SMK005", Category.UNKNOWN, "The training loss became NaN or infinite",
    what="A loss value of the smoke job was not a finite number.",
    why="On fixed synthetic data with a known-good model this points at broken numerics: "
        "a faulty GPU, a broken AMP/cuDNN path, or memory corruption.",
    fix="Re-run with --no-amp; if the loss is finite then, report the AMP problem; if not, "
        "run the GPU diagnostics (dcgmi diag -r 2) on this machine.")
LOSS_FLAT = declare(
    "SMK006", Category.UNKNOWN, "The training loss did not fall",
    what="Over the smoke job's repeated synthetic batches a least-squares line through the "
         "loss of every step (averaged over every rank of every node) fell less than 10%, or "
         "its slope was within the noise of the steps (a one-sided t-test at 1%).",
    why="On a small data set seen again and again any working setup memorises it quickly; "
        "a flat loss means gradients are not reaching the weights (or not being averaged).",
    fix="Re-run with more --steps; if the loss stays flat, run with --no-amp and --mode dp to "
        "see whether DDP or mixed precision is at fault.")
PARAMS_DIFFER = declare(
    "SMK007", Category.NCCL_P2P, "Model parameters differ between ranks after training",
    what="After the last step, a bit-exact fingerprint of every parameter differs between "
         "ranks, so the gradient all-reduce did not give every rank the same result.",
    why="DDP relies on identical replicas; silently diverging replicas train a wrong model. "
        "Corrupted peer-to-peer transfers (IOMMU/ACS on PCIe, broken P2P in VMs) are the "
        "usual cause.",
    fix="Re-run with NCCL_P2P_DISABLE=1; if the parameters then agree, disable IOMMU/ACS or "
        "keep P2P disabled; run nccl-tests all_reduce_perf with -c 1 to confirm.",
    docs_url="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html")
ALLREDUCE_WRONG = declare(
    "SMK008", Category.NCCL_P2P, "All-reduce returned a wrong value",
    what="Each rank contributed rank + 1 to an all-reduce; the sum was not n(n+1)/2 on some "
         "element.",
    why="A collective that returns wrong numbers corrupts every gradient average.",
    fix="Re-run with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 one at a time to find the "
        "broken transport; run nccl-tests with -c 1 (check results).",
    docs_url="https://github.com/NVIDIA/nccl-tests")
PORT_TAKEN = declare(
    "SMK009", Category.RENDEZVOUS_PORT_IN_USE, "The rendezvous port is already in use",
    what="The --master-port given for the smoke job is already bound by another process, so "
         "rank 0 cannot listen on it.",
    why="torchrun fails with 'Address already in use' before training starts; two jobs on "
        "one MASTER_PORT is the usual cause.",
    fix="Pick a free port (without --master-port the doctor finds one itself), or stop the "
        "process that holds it (`ss -ltnp 'sport = :PORT'`).")
LAUNCH_FAILED = declare(
    "SMK010", Category.TORCH_MISSING, "The smoke job could not be started",
    what="The interpreter being diagnosed could not start torch.distributed.run (or the "
         "worker): torch is missing or fails to import there.",
    why="A training job launched with the same interpreter fails the same way.",
    fix="Install torch into the interpreter you train with, or point the doctor at the "
        "right one with --python.")
RENDEZVOUS = declare(
    "SMK011", Category.RENDEZVOUS_FAILURE, "The ranks never met (rendezvous did not complete)",
    what="A rank stayed in init_process_group until the stall deadline: not every rank (or "
         "node) joined at the master address and port.",
    why="Multi-node jobs hang the same way when MASTER_ADDR is unreachable, a firewall "
        "blocks the port, or a node was started with another world size.",
    fix="Check that every node runs the same command with the same --nnodes, --master-addr "
        "and --master-port, that MASTER_ADDR resolves and the port is open "
        "(`nc -zv ADDR PORT` from the other nodes).",
    docs_url=RUN_URL)
NO_GPU = declare(
    "SMK012", Category.GPU_NOT_VISIBLE, "The smoke job asks for more GPUs than are usable",
    what="CUDA was requested for the smoke job (or more processes than GPUs), but the "
         "interpreter being diagnosed sees fewer usable CUDA devices.",
    why="torchrun with one process per GPU fails the same way ('invalid device ordinal').",
    fix="Run `ddp-doctor check` to see why the GPUs are not usable (driver, CUDA build, "
        "CUDA_VISIBLE_DEVICES), or pass --nproc no larger than the GPU count.")

NOT_STARTED = declare(
    "SMK013", Category.UNKNOWN, "Ranks did not start within the deadline",
    what="A rank wrote no event at all (it was still starting its interpreter and importing "
         "torch) when the wall-clock deadline passed; the launcher's output is the evidence.",
    why="Cold page caches, NFS-mounted environments and overloaded nodes can make `import "
        "torch` take minutes; a real job pays the same start-up cost on every launch.",
    fix="Time `python -c 'import torch'` in the same interpreter, check the speed of the "
        "filesystem the environment lives on, and rerun with a longer --timeout.")
PARAMS_DIFFER_GLOO = declare(
    "SMK014", Category.UNKNOWN, "Model parameters differ between ranks after CPU (gloo) training",
    what="After the last step of a CPU/gloo run, a bit-exact fingerprint of every parameter "
         "differs between ranks.",
    why="No GPU transport is involved, so NCCL peer-to-peer is not the cause; gloo itself, "
        "the torch build, or nondeterministic CPU kernels are.",
    fix="Rerun the smoke job; if it repeats, report it with the run directory's event files.")
ALLREDUCE_WRONG_GLOO = declare(
    "SMK015", Category.UNKNOWN, "All-reduce returned a wrong value on CPU (gloo)",
    what="Each rank contributed rank + 1 to a gloo all-reduce; the sum was not n(n+1)/2 on "
         "some element.",
    why="A collective that returns wrong numbers corrupts every gradient average; with gloo "
        "no GPU transport is involved.",
    fix="Rerun the smoke job; if it repeats, check the torch build and report it.")
LOSS_NOT_JUDGED = declare(
    "SMK016", Category.UNKNOWN, "Too few steps to judge whether the loss falls",
    what="The run had fewer than 10 training steps, so the loss-fell criterion compares "
         "single noisy batches and is skipped.",
    why="With so few steps a working setup can show a flat loss by chance.",
    fix="Run with --steps 10 or more (the default is 30) to check that the loss falls.",
    severity=Severity.INFO)
GPU_NOT_PROVEN = declare(
    "SMK017", Category.GPU_NOT_VISIBLE, "GPU training not proven: the smoke job ran on the CPU",
    what="The smoke job was asked to use the GPUs when torch can (--device auto), torch could "
         "use none, and the job fell back to the CPU with gloo. It trained, but no GPU, CUDA "
         "kernel or NCCL collective was exercised.",
    why="A pre-flight that passes on the CPU says nothing about GPU training: on a GPU runner "
        "whose driver just broke, the real job fails right after a green pre-flight.",
    fix="Fix what keeps the GPUs from torch (`ddp-doctor check` names it: no driver, a "
        "CPU-only torch build, CUDA_VISIBLE_DEVICES), then run `ddp-doctor smoke --device "
        "cuda`. To test the CPU on purpose, pass --device cpu. Under --strict, or with a "
        "policy's require-gpu-training, this warning fails the run.",
    severity=Severity.WARNING,
    docs_url="https://pytorch.org/docs/stable/notes/cuda.html")

# The Ultralytics trainer (`ddp-doctor smoke --trainer ultralytics`).
ULTRA_URL = "https://docs.ultralytics.com/modes/train/"
ULTRA_MISSING = declare(
    "SMK018", Category.PACKAGE_CONFLICT, "Ultralytics cannot be imported by the interpreter",
    what="`--trainer ultralytics` was asked for, but `import ultralytics` fails in the "
         "interpreter being diagnosed: it is not installed, or the installed version does not "
         "work with that interpreter's torch.",
    why="A training script that uses Ultralytics fails the same way at its first line.",
    fix="Install (or upgrade) it in that interpreter: `<python> -m pip install -U "
        "ultralytics`, the exact command is in the finding.",
    docs_url="https://docs.ultralytics.com/quickstart/")
ULTRA_TORCH_MISSING = declare(
    "SMK019", Category.TORCH_MISSING, "Ultralytics cannot import torch",
    what="`import ultralytics` fails because torch (or torchvision) is missing or broken in "
         "the interpreter being diagnosed.",
    why="Ultralytics trains with torch; without it no training starts.",
    fix="Install torch and torchvision for that interpreter (pytorch.org/get-started), then "
        "`<python> -m pip install ultralytics`.",
    docs_url="https://pytorch.org/get-started/locally/")
ULTRA_FAILED = declare(
    "SMK020", Category.UNKNOWN, "Ultralytics training failed",
    what="Ultralytics' own training (its DDP launch on GPUs, one process on the CPU) exited "
         "with an error before finishing.",
    why="The same error stops a real Ultralytics training run on this machine.",
    fix="Read the error in the evidence and the trainer's output kept in the run directory; "
        "rerun with -v.",
    docs_url=ULTRA_URL)
ULTRA_DDP_NEEDS = declare(
    "SMK029", Category.PACKAGE_CONFLICT,
    "Ultralytics' multi-GPU training needs a package this interpreter lacks",
    what="Ultralytics hands its trainer to its DDP processes through a module it does not "
         "declare as a dependency (cloudpickle, from Ultralytics 8.4 on: "
         "ultralytics/utils/dist.py, generate_ddp_file); it is missing here.",
    why="Ultralytics installs it with pip at the first multi-GPU run; on a node without "
        "internet access (or with YOLO_OFFLINE set) that install is skipped and every "
        "multi-GPU run fails with ModuleNotFoundError before training. One-GPU and CPU "
        "training are not affected.",
    fix="Install it in the training interpreter (the exact command is in the finding), or "
        "bake it into the image of air-gapped nodes.",
    docs_url="https://docs.ultralytics.com/modes/train/#multi-gpu-training")
ULTRA_EPOCHS_MISSING = declare(
    "SMK021", Category.UNKNOWN, "Ultralytics did not finish every epoch",
    what="results.csv holds fewer rows than the epochs asked for.",
    why="A run that stops early without an error hides its cause; a real run would lose "
        "its last epochs the same way.",
    fix="Rerun with -v and read the trainer's output in the run directory.",
    docs_url=ULTRA_URL)
ULTRA_LOSS_NOT_FINITE = declare(
    "SMK022", Category.UNKNOWN, "Ultralytics' training loss is NaN or infinite",
    what="A loss column of results.csv is not a finite number.",
    why="On a small synthetic data set with AMP off this points at broken numerics "
        "(a faulty GPU, a broken cuDNN, memory corruption).",
    fix="Rerun; if it repeats on the GPU and not with --device cpu, run the GPU diagnostics "
        "(dcgmi diag -r 2).")
ULTRA_LOSS_FLAT = declare(
    "SMK023", Category.UNKNOWN, "Ultralytics' box loss did not fall",
    what="The last epoch's train/box_loss in results.csv is not lower than the first's.",
    why="Over a few epochs of a small synthetic set a working setup lowers the box loss; "
        "its first epochs can rise before they fall, so this is a warning, not a failure.",
    fix="Rerun; if it stays flat, compare with `ddp-doctor smoke --trainer builtin`, which "
        "checks that gradients are averaged across ranks.",
    severity=Severity.WARNING)
ULTRA_NO_WEIGHTS = declare(
    "SMK024", Category.UNKNOWN, "Ultralytics wrote no weights file",
    what="Training ended but weights/last.pt is missing from the run directory.",
    why="A real run's checkpoint would be lost the same way (a full disk, an unwritable "
        "directory, a rank that died while saving).",
    fix="Check free space and permissions of the temporary directory ($TMPDIR).")
ULTRA_RANKS_MISSING = declare(
    "SMK025", Category.UNKNOWN, "Not every DDP rank of Ultralytics started training",
    what="Ultralytics launched its DDP processes, but fewer ranks than GPUs reached training.",
    why="Ultralytics' DDP path starts one process per device; a rank that never starts "
        "leaves the others waiting in their first collective.",
    fix="Read the trainer's output in the run directory; run `ddp-doctor smoke` with the "
        "builtin trainer to see the failing rank and phase.",
    docs_url=ULTRA_URL)

# Performance of a run that trained: the transport NCCL chose, its bandwidth, slow ranks.
NCCL_TRANSPORT_URL = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
SLOW_TRANSPORT = declare(
    "SMK026", Category.PERFORMANCE_DEGRADED,
    "NCCL used a slower transport than the GPUs' links offer",
    what="NCCL's own INFO output for the smoke job shows a connection through a slower path "
         "than the machine has: shared host memory (SHM) or the network between two GPUs "
         "joined by NVLink, or TCP sockets between nodes that have active InfiniBand ports.",
    why="All gradient traffic of a real job takes the same path: NVLink carries 10 to 20 "
        "times what host memory does, and InfiniBand several times what sockets do, so "
        "every all-reduce waits on the slow path.",
    fix="Look for NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_SHM_DISABLE, NCCL_IB_DISABLE, "
        "NCCL_NET or NCCL_SOCKET_IFNAME in the environment; in a container pass the IB "
        "devices (--device /dev/infiniband, --ipc=host) and check `nvidia-smi topo -m`.",
    severity=Severity.WARNING, docs_url=NCCL_TRANSPORT_URL)
COPIES_SLOW = declare(
    "SMK030", Category.PERFORMANCE_DEGRADED,
    "Host-to-GPU copies are slower than this GPU's machines are required to be",
    what="A rank's pinned host-to-device or device-to-host copy rate (64 MiB, CUDA events) is "
         "below the floor an operator's health check sets for this GPU model, or, for a GPU "
         "without one, below 60% of its PCIe link's nominal rate (generation x width).",
    why="Every step copies its batch to the GPU over this link; a link trained down to fewer "
        "lanes or an older generation, a GPU behind a slow switch or root port, or unpinned "
        "memory starves the GPU between steps, and data-parallel training waits for the "
        "slowest rank.",
    fix="Compare the link's current and maximum generation and width (`nvidia-smi -q -d PCI`, "
        "`sudo lspci -vv` LnkSta against LnkCap) under load, reseat or move the card, check "
        "the BIOS PCIe settings; NVIDIA's nvbandwidth measures the same copies per GPU.",
    severity=Severity.WARNING, docs_url="https://github.com/NVIDIA/nvbandwidth")
BUSBW_LOW = declare(
    "SMK027", Category.PERFORMANCE_DEGRADED,
    "All-reduce bus bandwidth is far below what the GPUs' links carry",
    what="The smoke job's all-reduce reached less than a quarter of the nominal rate of the "
         "slowest link its ring crosses (NVLink links x the generation's rate, the PCIe "
         "generation x width, or one InfiniBand port), measured as nccl-tests' bus bandwidth.",
    why="nccl-tests reaches 70-90 % of that rate on healthy systems; a quarter or less means "
        "a link trained down, traffic routed through the CPU (IOMMU, ACS), or a slower "
        "transport than the topology allows.",
    fix="Run nccl-tests' all_reduce_perf over the same GPUs; compare the PCIe links (`sudo "
        "lspci -vv`, LnkSta against LnkCap) and NVLink status (`nvidia-smi nvlink --status`).",
    severity=Severity.WARNING,
    docs_url="https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md")
SLOW_RANK = declare(
    "SMK028", Category.PERFORMANCE_DEGRADED, "A rank computes much slower than the others",
    what="Over the training steps, one rank's median compute time (to the moment its last "
         "gradient bucket was ready for the all-reduce, the wait for its peers left out) was "
         "more than 1.5 times the median of the other ranks.",
    why="DDP waits for the slowest rank at every gradient all-reduce, so the whole job runs "
        "at that rank's pace; a throttled, shared or wrongly clocked GPU is the usual cause.",
    fix="Check that GPU: clocks and throttle reasons (`nvidia-smi -q -d "
        "PERFORMANCE,CLOCK,TEMPERATURE`), other processes on it (`nvidia-smi`), and its "
        "PCIe link.",
    severity=Severity.WARNING)
