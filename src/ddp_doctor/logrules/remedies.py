"""Remediation that depends on what the matched line says, or on which trainer wrote the log.

A rule's own ``steps`` fit every line it matches. Where one signature covers lines that
need different fixes, or where the fix is an option a trainer spells its own way, the
variants below (``Rule.variants``, by code id, attached in ``logrules/__init__.py``) give
the steps that fit. They are kept in this one table rather than beside each rule so that
the trainers' options are spelt the same way everywhere, and so that the area modules
hold the signatures alone.

Sources: the trainers' options - Ultralytics' https://docs.ultralytics.com/usage/cfg/
(``batch`` is the total over all GPUs in DDP; ``batch=-1`` is AutoBatch, single GPU only;
``workers`` is per rank; ``cache=ram``; ``val``; ``device=0,1``) and
https://docs.ultralytics.com/modes/train/#multi-gpu-training, YOLOv5's train.py argparse
options and https://docs.ultralytics.com/yolov5/tutorials/multi_gpu_training/
(``--batch-size`` is the total over all GPUs; ``--workers`` is per rank; ``--cache``,
``--noval``, ``--device 0,1`` under ``python -m torch.distributed.run``) and the DDP
timeouts both trainers pass to init_process_group (ultralytics/engine/trainer.py
``_setup_ddp``, yolov5 train.py: 3 hours; older YOLOv5: 60 s, ultralytics/yolov5#4409).
torch: device placement and buffers (https://pytorch.org/docs/stable/notes/cuda.html,
https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_buffer),
NCCL's tensor requirement and gloo for CPU tensors
(https://pytorch.org/docs/stable/distributed.html#backends), SyncBatchNorm
(https://pytorch.org/docs/stable/generated/torch.nn.SyncBatchNorm.html), NumPy 1.24's
removal of the ``np.int``-style aliases (https://numpy.org/devdocs/release/1.24.0-notes.html),
torch's "run from another directory" for a missing torch._C (torch/__init__.py), Blackwell
(sm_100/sm_120) wheels from CUDA 12.8 on (https://pytorch.org/blog/pytorch-2-7/), and
mmcv's installer (https://mmcv.readthedocs.io/en/latest/get_started/installation.html).
"""

from __future__ import annotations

import re

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.logrules.catalogue_codes import EXTENSION_BUILD
from ddp_doctor.logrules.cuda import ARCH_LIST, LIST_GPUS
from ddp_doctor.logrules.memory import OOM_KILLER, SHM
from ddp_doctor.logrules.packages import WHICH_TORCH
from ddp_doctor.logrules.rule import ULTRALYTICS, YOLOV5, Variant
from ddp_doctor.model import Step

YOLO = "yolo train model=yolo11n.pt data=data.yaml"
"""The Ultralytics command the options are shown on (put your own model= and data=)."""
YOLOV5_TRAIN = "python train.py --data data.yaml --weights yolov5s.pt"
YOLOV5_DDP = ("python -m torch.distributed.run --nproc_per_node 2 train.py --data data.yaml "
              "--weights yolov5s.pt")
"""YOLOv5's documented DDP launch, here for 2 GPUs."""

CPU_TENSOR = declare(
    "LOG070", Category.DDP_USAGE_ERROR, "A tensor left on the CPU met tensors on the GPU",
    what="An operation got tensors on the GPU and on the CPU: a batch (inputs, targets) that "
         "was not moved to the model's GPU, a tensor created without device= (the CPU is "
         "the default), or a tensor kept as a plain attribute of a module, which model.to() "
         "does not move. A bug in the training script's device handling, not in DDP, NCCL "
         "or the GPUs.",
    why="The operation refuses to run, so the step fails (on every rank).",
    fix="Move each batch to the model's device in the training loop (imgs.to(device), "
        "targets.to(device)), create new tensors with device=, and register module tensors "
        "as buffers so that model.to() moves them.",
    docs_url="https://pytorch.org/docs/stable/notes/cuda.html")
# NCCL's socket code accepts only IPv4/IPv6 peers ("ncclSocketInit: connecting to address with
# family N is neither AF_INET(2) nor AF_INET6(10)", misc/socket.cc). A family that is neither
# those nor AF_UNIX (1) is not an address at all: the peer wrote its connection info in
# another NCCL's layout. NVIDIA/nccl#1267 (family 0): one node had nvidia-nccl-cu12 2.20.5, the
# others 2.19.3, and one NCCL version on every node fixed it; aws/aws-ofi-nccl#715 shows
# the same line with family 33022 between two different network plugins' ranks. Family 1
# is NCCL's own bug with P2P and SHM both disabled (NVIDIA/nccl#2057), so it keeps LOG043.
NCCL_WIRE_MISMATCH = declare(
    "LOG077", Category.NODE_MISMATCH,
    "A peer sent NCCL connection data this NCCL cannot read (NCCL differs between ranks)",
    what="NCCL received a peer address whose family is neither IPv4 nor IPv6 - a value like "
         "0 or 33022 that no socket has: the peer encoded its connection info in another "
         "layout, because the ranks (usually on different nodes) load different NCCL "
         "versions or different network plugins.",
    why="The ranks cannot connect, so the communicator never forms.",
    fix="Install the same NCCL on every node (the same torch build, the same "
        "nvidia-nccl-cu* wheel, no other libnccl on LD_LIBRARY_PATH) and the same "
        "libnccl-net.so plugin, then compare the nodes with ddp-doctor compare.",
    docs_url="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html")

_LOOK = Step("Find the operation: the last frame of your own code in the traceback names it "
             "(the message says which argument was on which device).")


def _line(*alternatives: str) -> re.Pattern[str]:
    """A variant's line condition: case-insensitive, like the rules' own patterns."""
    return re.compile("|".join(alternatives), re.IGNORECASE)


# -- batch, workers, devices: each trainer's own spelling ------------------------------------

_BATCH_DOWN = (
    Step("Ultralytics: a smaller batch (the total over all GPUs; batch=-1 lets AutoBatch "
         "size it on a single GPU); a smaller imgsz= helps too. AMP is already on (amp=True).",
         command=f"{YOLO} batch=8"),
    Step("YOLOv5 train.py: a smaller --batch-size (the total over all GPUs; --batch-size -1 "
         "lets AutoBatch size it on a single GPU) or a smaller --img.",
         command=f"{YOLOV5_TRAIN} --batch-size 8 --img 512"),
)
_WORKERS_DOWN = (
    Step("Ultralytics: fewer DataLoader workers per GPU and no dataset cache in RAM "
         "(cache=ram holds the decoded images in memory, once per rank).",
         command=f"{YOLO} workers=2 cache=False"),
    Step("YOLOv5 train.py: fewer DataLoader workers per GPU (--workers, default 8), and leave "
         "out --cache (ram), which holds the decoded images in memory once per rank.",
         command=f"{YOLOV5_TRAIN} --workers 2"),
)
_WORKERS_ZERO = (
    Step("Ultralytics: rerun with the data loaded in the main process, to see the worker's "
         "own error.", command=f"{YOLO} workers=0"),
    Step("YOLOv5 train.py: rerun with the data loaded in the main process, to see the "
         "worker's own error.", command=f"{YOLOV5_TRAIN} --workers 0"),
)
_DEVICES = (
    Step("Ultralytics starts one DDP process per GPU listed in device= itself: list only GPUs "
         "that nvidia-smi -L shows (device=0 on a one-GPU machine).",
         command=f"{YOLO} device=0,1"),
    Step("YOLOv5 train.py: start as many processes as GPUs in --device, and list only GPUs "
         "that nvidia-smi -L shows (here 2).", command=f"{YOLOV5_DDP} --device 0,1"),
)
_LABEL_IDS = Step("YOLO: every class id (the first number of each label line) must be below "
                  "the number of classes in the dataset YAML (nc, or the length of names); "
                  "list the ids used (replace the labels path).",
                  command="cat datasets/mydata/labels/train/*.txt | awk '{print $1}' | sort -n "
                          "| uniq -c")


def _both(steps: tuple[Step, Step], *before: Step, after: tuple[Step, ...] = ()
          ) -> tuple[Variant, Variant]:
    """One remedy for both YOLO trainers, each with its own spelling of the option (the
    first of ``steps`` for Ultralytics, the second for YOLOv5), between ``before`` and
    ``after``."""
    ultralytics, yolov5 = steps
    return (Variant(trainer=ULTRALYTICS, steps=(*before, ultralytics, *after)),
            Variant(trainer=YOLOV5, steps=(*before, yolov5, *after)))


_LATE_RANK = Step("Find the rank that did not join: its error, or its last progress line, "
                  "comes first.")
_NVIDIA_SMI = Step("See who else uses the GPU.", command="nvidia-smi")
_FREE = Step("Check free memory.", command="free -h")

VARIANTS: dict[str, tuple[Variant, ...]] = {
    # -- NCCL network --------------------------------------------------------------------------
    "LOG043": (
        Variant(code=NCCL_WIRE_MISMATCH,
                line=_line(r"with family (?!1 )\d+ is neither af_inet"),
                steps=(
                    Step("Print the NCCL version each node loads (run on every node); they "
                         "must be equal.", command="python -c \"import torch; "
                         "print(torch.__version__, torch.cuda.nccl.version())\"; pip list "
                         "2>/dev/null | grep -i nccl"),
                    Step("Look for a second NCCL that may win on some nodes.",
                         command="echo $LD_LIBRARY_PATH; ldconfig -p | grep libnccl"),
                    Step("Or compare saved facts of every node in one step.",
                         command="ddp-doctor check --save-facts facts-$(hostname).json  "
                                 "# on each node, then: ddp-doctor compare facts-*.json")),
                alternatives=("nccl_network: a peer on a network NCCL reads wrongly (rare; "
                              "the family would still be 2 or 10)",),
                examples=(
                    "NCCL WARN ncclSocketInit: connecting to address with family 0 is neither "
                    "AF_INET(2) nor AF_INET6(10)",
                    "algo-1:17774:17862 [1] misc/socket.cc:717 NCCL WARN ncclSocketInit: "
                    "connecting to address with family 33022 is neither AF_INET(2) nor "
                    "AF_INET6(10)")),
    ),
    "LOG044": (
        # misc/ibvwrap.cc's WARN for a failed verbs call quotes errno: ENOMEM from a memory
        # registration (ibv_reg_mr, ibv_reg_mr_iova2, ibv_reg_dmabuf_mr) is the process's
        # locked-memory limit, not the host's memory (NVIDIA/nccl-tests#206: ulimit -l was
        # 8192, raising it in limits.conf fixed it; NCCL's troubleshooting guide,
        # InfiniBand section).
        Variant(line=_line(r"ibv_reg_\w+ failed with error cannot allocate memory"), steps=(
            Step("See the locked-memory limit the job's processes get (inside the launcher: "
                 "srun, mpirun, the container).", command="ulimit -l"),
            Step("Raise it to unlimited: for logins in limits.conf, for a container with "
                 "--ulimit memlock=-1, under Slurm with PropagateResourceLimits or the "
                 "slurmd service's LimitMEMLOCK=infinity.",
                 command="echo '* soft memlock unlimited' | sudo tee -a "
                         "/etc/security/limits.conf; echo '* hard memlock unlimited' | sudo "
                         "tee -a /etc/security/limits.conf"),
            Step("Fall back to sockets to confirm the rest works.",
                 command="NCCL_IB_DISABLE=1 torchrun ...")),
            examples=("misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with "
                      "error Cannot allocate memory",)),
    ),
    # -- driver ------------------------------------------------------------------------------
    "LOG009": (
        Variant(line=_line(r"nvidia probe routine was not called"), steps=(
            Step("Another driver (usually nouveau) holds the GPU: see which one.",
                 command="lsmod | grep -E 'nvidia|nouveau'; sudo dmesg -T | grep -i nvrm"),
            Step("Blacklist nouveau, rebuild the initramfs and reboot (Ubuntu/Debian).",
                 command="printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee "
                         "/etc/modprobe.d/blacklist-nouveau.conf && sudo update-initramfs -u "
                         "&& sudo reboot"),
            Step("See whether the driver answers.", command="nvidia-smi")),
            examples=("NVRM: The NVIDIA probe routine was not called for 1 device(s).",)),
        # EKEYREJECTED / ENOKEY from the module signature check: Secure Boot is on and the
        # module is not signed by a key the machine trusts (Ubuntu's UEFI Secure Boot
        # signing guide; the threads of other out-of-tree modules say the same).
        Variant(line=_line(r"key was rejected by service|required key not available"), steps=(
            Step("Is Secure Boot on? It refuses kernel modules no enrolled key signed.",
                 command="mokutil --sb-state; sudo dmesg | grep -i -E 'module verification|"
                         "rejected|nvidia'"),
            Step("Sign the driver with a Machine Owner Key and enroll it (Ubuntu: the DKMS "
                 "key; confirm the enrolment at the next boot's blue MOK screen), or install "
                 "the distribution's signed driver packages, or turn Secure Boot off in the "
                 "firmware; then reboot.", command="sudo update-secureboot-policy --enroll-key"),
            Step("See whether the driver answers.", command="nvidia-smi")),
            examples=("modprobe: ERROR: could not insert 'nvidia': Key was rejected by "
                      "service",)),
    ),
    # -- memory ------------------------------------------------------------------------------
    "LOG005": _both(_BATCH_DOWN, _NVIDIA_SMI),
    "LOG037": (
        *_both(_BATCH_DOWN, Step("See how full the GPUs are and who uses them.",
                                 command="nvidia-smi")),
    ),
    "LOG079": (
        # torch's report: a build that does not fit the machine, or a full GPU.
        Variant(line=_line(r"cudnn error\b.*cudnn_status_not_initialized"),
                steps=(
                    Step("Show torch's build (its CUDA and cuDNN) and the GPU it runs on.",
                         command='python -c "import torch; print(torch.__version__, '
                                 'torch.version.cuda, torch.backends.cudnn.version(), '
                                 'torch.cuda.get_device_name(0), '
                                 'torch.cuda.get_device_capability(0))"'),
                    Step("Show the driver and the highest CUDA it supports.",
                         command="nvidia-smi"),
                    Step("Reinstall torch for a CUDA the driver supports and the GPU has "
                         "kernels for (https://pytorch.org/get-started/previous-versions/), "
                         "in a clean environment, with no other cuDNN on LD_LIBRARY_PATH.",
                         command="pip install --force-reinstall torch --index-url "
                                 "https://download.pytorch.org/whl/cu121")),
                examples=("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED",)),
        # A program that calls cuDNN itself (Caffe, tkDNN): no memory pool filled the GPU
        # first, so the process could not bring up CUDA for cuDNN (CUDNN_INIT in
        # catalogue_codes.py).
        Variant(line=_line(r"^(?!.*cudnn error\b).*cudnn_status_not_initialized"),
                steps=(
                    Step("Can this user open the GPU's device nodes? (In a container, run it "
                         "as root or add the user to the groups that own them.)",
                         command="ls -l /dev/nvidia*; id"),
                    Step("Does CUDA start at all for this process?", command="nvidia-smi"),
                    Step("Show the cuDNN and CUDA versions installed, which must belong "
                         "together.",
                         command="ls /usr/lib/x86_64-linux-gnu/libcudnn* /usr/local/cuda/lib64/"
                                 "libcudnn* 2>/dev/null; nvcc --version")),
                alternatives=("gpu_out_of_memory: another process already fills the GPU",),
                decide=(Step("How much is free on the GPU before the program starts?",
                             command="nvidia-smi --query-gpu=index,memory.used,memory.total "
                                     "--format=csv"),),
                examples=("CUDNN failure: CUDNN_STATUS_NOT_INITIALIZED",
                          "Check failed: status == CUDNN_STATUS_SUCCESS (1 vs. 0) "
                          "CUDNN_STATUS_NOT_INITIALIZED")),
    ),
    "LOG006": _both(_WORKERS_DOWN, _FREE),
    "LOG007": _both(_WORKERS_DOWN, OOM_KILLER),
    "LOG038": _both(_WORKERS_DOWN, OOM_KILLER),
    "LOG039": _both((Step("Ultralytics: fewer DataLoader workers (each maps torch's CUDA "
                          "DLLs into its own memory).", command=f"{YOLO} workers=2"),
                     Step("YOLOv5 train.py: fewer DataLoader workers (each maps torch's CUDA "
                          "DLLs into its own memory).", command=f"{YOLOV5_TRAIN} --workers 2")),
                    after=(Step("Or enlarge the Windows paging file (System > Advanced system "
                                "settings > Performance > Virtual memory)."),)),
    "LOG040": _both(_WORKERS_DOWN, SHM,
                    Step("Give the container more shared memory.",
                         command="docker run --ipc=host ...")),
    "LOG041": _both(_WORKERS_ZERO, SHM, OOM_KILLER),
    # -- devices -----------------------------------------------------------------------------
    "LOG029": (
        # Lightning names the GPU indices it was given (Trainer(devices=[1]), a config's
        # trainer.devices) and the ones it found: the fix is the Trainer option, not the
        # launcher's process count.
        Variant(line=_line(r"misconfigurationexception: you requested gpus?: \["), steps=(
            LIST_GPUS,
            Step("Lightning: give Trainer GPU indices that exist (the list after 'your "
                 "machine only has'), or a count: Trainer(devices=1) uses the first GPU. In a "
                 "config or on the command line it is trainer.devices.",
                 command="python train.py trainer.devices=[0]")),
            examples=("lightning_fabric.utilities.exceptions.MisconfigurationException: You "
                      "requested gpu: [1]",)),
        # torch's own index check names no launcher: the index came from the script
        # (DataParallel's device_ids, a cuda:N, get_device_properties(N)).
        Variant(line=_line(r"assertionerror: invalid (?:peer )?device id\b"), steps=(
            LIST_GPUS,
            Step("Give DataParallel (device_ids=) and .cuda()/cuda:N only indices below "
                 "torch.cuda.device_count(), e.g. "
                 "device_ids=list(range(torch.cuda.device_count())).")),
            examples=("AssertionError: Invalid device id",)),
        *_both(_DEVICES, LIST_GPUS),
    ),
    "LOG031": (
        Variant(line=_line(r"invalid cuda 'device="), steps=(
            LIST_GPUS,
            Step("Ultralytics: ask only for GPUs torch counts (device=0 on a one-GPU machine, "
                 "device=0,1 for two); when it counts none, fix torch or the driver first.",
                 command=f"{YOLO} device=0")),
            examples=("ValueError: Invalid CUDA 'device=0,1' requested. Use 'device=cpu' or "
                      "pass valid CUDA device(s) if available, i.e. 'device=0' or "
                      "'device=0,1,2,3' for Multi-GPU.",)),
        Variant(line=_line(r"invalid cuda '--device"), steps=(
            LIST_GPUS,
            Step("YOLOv5 train.py: ask only for GPUs torch counts (--device 0 on a one-GPU "
                 "machine, --device 0,1 for two); when it counts none, fix torch or the "
                 "driver first.", command=f"{YOLOV5_TRAIN} --device 0")),
            examples=("AssertionError: Invalid CUDA '--device 0,1' requested, use '--device "
                      "cpu' or pass valid CUDA device(s)",)),
    ),
    # -- DDP usage ---------------------------------------------------------------------------
    "LOG057": (
        Variant(code=CPU_TENSOR,
                line=_line(r"expected all tensors to be on the same device[^\n]*\bcpu\b"),
                steps=(
                    Step("Move each batch to the model's device in the training loop: imgs, "
                         "targets = imgs.to(device), targets.to(device), with device = "
                         "next(model.parameters()).device (under DDP: torch.device('cuda', "
                         "local_rank))."),
                    Step("Create new tensors on that device: torch.zeros(n, device=x.device) or "
                         "torch.tensor(values, device=device); without device= they are made "
                         "on the CPU."),
                    Step("A tensor kept as a plain attribute of a module stays on the CPU when "
                         "the model moves: register it (self.register_buffer('anchors', t)) "
                         "and keep sub-modules in nn.ModuleList, not a Python list."),
                    _LOOK),
                examples=(
                    "RuntimeError: Expected all tensors to be on the same device, but found at "
                    "least two devices, cuda:0 and cpu!",
                    "RuntimeError: Expected all tensors to be on the same device, but got index "
                    "is on cpu, different from other tensors on cuda:0 (when checking argument "
                    "in method wrapper_CUDA__index_select)")),
        Variant(line=_line(r"tensors must be cuda and dense"),
                steps=(Step("NCCL only communicates GPU tensors: move the tensor to the rank's "
                            "GPU before the collective (t = t.to(local_rank); "
                            "dist.all_reduce(t)), or reduce CPU tensors in a gloo group "
                            "(dist.new_group(backend='gloo'))."),),
                examples=("RuntimeError: Tensors must be CUDA and dense",)),
        Variant(line=_line(r"device_ids and output_device arguments[^\n]*type='cpu'"),
                steps=(Step("The model was still on the CPU when DDP wrapped it: move it to the "
                            "rank's GPU first (model = model.to(local_rank); model = "
                            "DistributedDataParallel(model, device_ids=[local_rank]))."),),
                examples=(
                    "ValueError: DistributedDataParallel device_ids and output_device arguments "
                    "only work with single-device/multiple-device GPU modules or CPU modules, "
                    "but got device_ids [0], output_device 0, and module parameters "
                    "{device(type='cpu')}.",)),
    ),
    "LOG056": (
        Variant(line=_line(r"syncbatchnorm"), steps=(
            Step("SyncBatchNorm works only in a DDP job on GPUs: launch the script with "
                 "torchrun, and move the model to the rank's GPU.",
                 command="torchrun --nproc_per_node=2 train.py"),
            Step("For a single-process run keep plain BatchNorm: in the script convert with "
                 "nn.SyncBatchNorm.convert_sync_batchnorm(model) only when "
                 "torch.distributed.is_initialized().")),
            examples=("AttributeError: SyncBatchNorm is only supported within torch.nn."
                      "parallel.DistributedDataParallel",
                      "ValueError: SyncBatchNorm expected input tensor to be on GPU")),
    ),
    "LOG058": (
        Variant(line=_line(r"'batch=-?\d+' must be a multiple of gpu count"), steps=(
            Step("Ultralytics: use a batch that divides by the GPU count (the message names "
                 "the nearest ones); each GPU gets batch / GPU count.",
                 command=f"{YOLO} device=0,1 batch=16"),),
            examples=("AssertionError: 'batch=15' must be a multiple of GPU count 2. Try "
                      "'batch=14' or 'batch=16', the nearest batch sizes evenly divisible by "
                      "2.",)),
        Variant(line=_line(r"autobatch with batch<1"), steps=(
            Step("Ultralytics: AutoBatch (batch=-1) sizes a single GPU only; give an explicit "
                 "batch, a multiple of the GPU count.", command=f"{YOLO} device=0,1 batch=16"),),
            examples=("ValueError: AutoBatch with batch<1 not supported for Multi-GPU training, "
                      "please specify a valid batch size, i.e. batch=16.",)),
        Variant(line=_line(r"batch-size -?\d+ not multiple of gpu count",
                           r"--batch-size \d+ must be multiple of world_size"), steps=(
            Step("YOLOv5 train.py: --batch-size is the total over all GPUs; make it a multiple "
                 "of the GPU count (here 64 for 2 GPUs).",
                 command=f"{YOLOV5_DDP} --batch-size 64 --device 0,1"),),
            examples=("AssertionError: batch-size 64 not multiple of GPU count 9",
                      "AssertionError: --batch-size 30 must be multiple of WORLD_SIZE")),
        Variant(line=_line(r"autobatch with --batch-size -1"), steps=(
            Step("YOLOv5 train.py: AutoBatch (--batch-size -1) sizes a single GPU only; give "
                 "an explicit --batch-size, a multiple of the GPU count.",
                 command=f"{YOLOV5_DDP} --batch-size 64 --device 0,1"),),
            examples=("AssertionError: AutoBatch with --batch-size -1 is not compatible with "
                      "YOLOv5 Multi-GPU DDP training, please pass a valid --batch-size",)),
    ),
    "LOG047": (
        Variant(trainer=ULTRALYTICS, steps=(
            _LATE_RANK,
            Step("Ultralytics ran validation (or built its label cache) on rank 0 while the "
                 "other ranks waited; current releases give DDP a 3-hour timeout and validate "
                 "on every GPU: update.", command="pip install -U ultralytics"),
            Step("Or validate only after training.", command=f"{YOLO} device=0,1 val=False"))),
        Variant(trainer=YOLOV5, steps=(
            _LATE_RANK,
            Step("YOLOv5 ran validation (or built its label cache) on rank 0 while the other "
                 "ranks waited; old train.py gave DDP a 60-second timeout, current ones 3 "
                 "hours: update the repository.", command="git pull"),
            Step("Or validate only the final epoch.",
                 command=f"{YOLOV5_DDP} --device 0,1 --noval"))),
    ),
    "LOG065": (
        Variant(line=_line(r"--image-weights"), steps=(
            Step("See whether a LOCAL_RANK left in the environment makes a single-GPU run look "
                 "like DDP.", command="env | grep -E 'LOCAL_RANK|WORLD_SIZE'"),
            Step("YOLOv5 train.py: drop --image-weights for DDP runs, or run it on one GPU "
                 "without the DDP launcher.", command=f"{YOLOV5_TRAIN} --device 0 "
                                                      "--image-weights")),
            examples=("AssertionError: --image-weights is not compatible with YOLOv5 Multi-GPU "
                      "DDP training",)),
    ),
    # -- data and code bugs ------------------------------------------------------------------
    "LOG036": (
        Variant(trainer=ULTRALYTICS, steps=(
            Step("Ultralytics: rerun on one GPU with synchronous kernel launches so the "
                 "failing call is named.",
                 command=f"CUDA_LAUNCH_BLOCKING=1 {YOLO} device=0"), _LABEL_IDS)),
        Variant(trainer=YOLOV5, steps=(
            Step("YOLOv5 train.py: rerun on one GPU with synchronous kernel launches so the "
                 "failing call is named.",
                 command=f"CUDA_LAUNCH_BLOCKING=1 {YOLOV5_TRAIN} --device 0"), _LABEL_IDS)),
    ),
    # -- packages ----------------------------------------------------------------------------
    "LOG021": (
        # Python 2 names only "_C"; torch's own "Failed to load PyTorch C extensions" is
        # the same torch._C that is a folder rather than the compiled extension.
        Variant(line=_line(r"torch\._c\b", r"no module named _c\s*$",
                           r"load pytorch c extensions"), steps=(
            Step("'torch._C' is missing when the torch/ folder of a PyTorch source checkout "
                 "shadows the installed package: run from another directory.",
                 command='cd ~ && python -c "import torch; print(torch.__file__)"'),
            WHICH_TORCH),
            examples=("ModuleNotFoundError: No module named 'torch._C'",
                      "ImportError: No module named _C",
                      "ImportError: Failed to load PyTorch C extensions:")),
    ),
    "LOG025": (
        # flash-attn's compiled module (flash_attn_2_cuda) refusing this torch: its wheels are
        # built per torch release, CUDA major and C++ ABI (Dao-AILab/flash-attention's release
        # names), and a torch upgrade after it leaves an undefined c10/at symbol.
        Variant(code=EXTENSION_BUILD, line=_line(r"\bflash_attn"), steps=(
            Step("Show torch's version, CUDA and C++ ABI, which the flash-attn build must match.",
                 command='python -c "import torch; print(torch.__version__, torch.version.cuda, '
                         'torch._C._GLIBCXX_USE_CXX11_ABI)"'),
            Step("Reinstall flash-attn built against this torch: compile it here, or take the "
                 "release wheel whose name carries this torch version, CUDA major and "
                 "cxx11abi value.",
                 command="pip uninstall -y flash-attn && pip install flash-attn "
                         "--no-build-isolation --no-cache-dir")),
            examples=("ImportError: /usr/local/lib/python3.10/dist-packages/flash_attn_2_cuda."
                      "cpython-310-x86_64-linux-gnu.so: undefined symbol: "
                      "_ZN3c104cuda9SetDeviceEi",)),
        Variant(line=_line(r"\bmmcv\b"), steps=(
            Step("Show torch's version and CUDA.",
                 command='python -c "import torch; print(torch.__version__, '
                         'torch.version.cuda)"'),
            Step("Install the mmcv build made for this torch and CUDA with OpenMMLab's "
                 "installer.", command="pip install -U openmim && mim install mmcv")),
            examples=("ImportError: /usr/local/lib/python3.8/dist-packages/mmcv/_ext.cpython-38-"
                      "x86_64-linux-gnu.so: undefined symbol: _ZN2at5sliceERKNS_6TensorElll",)),
    ),
    # libtorch_cpu.so of conda's torch builds calls MKL's iJIT_NotifyEvent, which MKL 2024.1
    # and later no longer export (pytorch/pytorch#123097; the loader catalogue's entry): the
    # fix is pinning MKL, not reinstalling torch (yoraish/mmd#3, Zhen-Dong/Magic-Me#15).
    "LOG022": (
        Variant(line=_line(r"undefined symbol: ijit_notifyevent\b"),
                steps=(
                    Step("Show which MKL the environment has.",
                         command="conda list mkl; pip list 2>/dev/null | grep -i mkl"),
                    Step("Pin MKL to 2024.0, the last release that exports the symbol this "
                         "torch build calls (or use the pip wheels of torch).",
                         command="conda install 'mkl==2024.0'")),
                examples=("ImportError: /home/ltl/anaconda3/envs/mmd/lib/python3.8/site-packages/"
                          "torch/lib/libtorch_cpu.so: undefined symbol: iJIT_NotifyEvent",)),
    ),
    "LOG026": (
        Variant(line=_line(r"has no attribute '(?:int|float|bool|object|str|long|complex)'"),
                steps=(
                    Step("Show the NumPy version.",
                         command='python -c "import numpy; print(numpy.__version__)"'),
                    Step("np.int, np.float, np.bool and the like were removed in NumPy 1.24: "
                         "write int, float, bool (or np.int64, np.float64) in the code, or "
                         "pin an older NumPy.", command="pip install 'numpy<1.24'")),
                examples=("AttributeError: module 'numpy' has no attribute 'int'.",)),
    ),
    "LOG028": (
        Variant(line=_line(r"\bsm_1[02]\d\b"), steps=(
            ARCH_LIST,
            Step("Blackwell GPUs (sm_100, sm_120: B200, RTX 50xx) need a torch built with CUDA "
                 "12.8 or newer (torch 2.7 and later).",
                 command="pip install --force-reinstall torch torchvision --index-url "
                         "https://download.pytorch.org/whl/cu128")),
            examples=("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible "
                      "with the current PyTorch installation.",)),
    ),
}
"""Code id -> the variants of every rule of that code (first match wins)."""
