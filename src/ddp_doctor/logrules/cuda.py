"""CUDA and cuDNN at run time: kernels missing for this GPU, device indices that do not
exist, cuDNN that cannot load or fails, and kernel faults whose cause the text cannot tell.

Sources: torch's capability checks (pytorch/pytorch torch/cuda/__init__.py
``_check_capability``/``_check_cubins``), the CUDA runtime error strings
(https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html), torch's cuDNN
version check (torch/backends/cudnn/__init__.py), cuDNN troubleshooting
(https://docs.nvidia.com/deeplearning/cudnn/latest/reference/troubleshooting.html),
pytorch/pytorch#81620 (cuDNN handle failures that are out-of-memory), Ultralytics'
``select_device`` (ultralytics/utils/torch_utils.py) and YOLOv5's
(utils/torch_utils.py), and the Xid catalog for application-class Xids 13/31/43
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html).
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.logrules.rule import Rule, rx
from ddp_doctor.model import Step

LIST_GPUS = Step("List the GPUs the driver sees and the ones this process may use.",
                 command='nvidia-smi -L; echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; '
                         'python -c "import torch; print(torch.cuda.device_count())"')
ARCH_LIST = Step("Compare the GPU's compute capability with torch's compiled architectures.",
                 command='python -c "import torch; print(torch.cuda.get_device_capability(), '
                         'torch.cuda.get_arch_list(), torch.__version__)"')
SYNC_ERRORS = Step("Rerun with synchronous kernel launches so the failing call is named.",
                   command="CUDA_LAUNCH_BLOCKING=1 python train.py")
XID = Step("Look for hardware Xid errors.", command="sudo dmesg -T | grep -i xid")

ARCH = declare(
    "LOG028", Category.TORCH_ARCH_UNSUPPORTED, "No kernels for this GPU's architecture",
    what="The GPU's compute capability (sm_XX) is not among the architectures this torch "
         "build (or a compiled extension such as mmcv, detectron2 or a custom op) was built "
         "for: a brand-new GPU (RTX 50xx needs a cu128 build) or an old one dropped by newer "
         "wheels.",
    why="The first CUDA kernel launch fails with 'no kernel image is available'.",
    fix="Install a torch build whose arch list includes this GPU (see pytorch.org), and "
        "rebuild compiled extensions for it (TORCH_CUDA_ARCH_LIST).",
    docs_url="https://pytorch.org/get-started/locally/")
ORDINAL = declare(
    "LOG029", Category.GPU_NOT_VISIBLE,
    "A GPU was asked for that this process cannot see (invalid device ordinal)",
    what="The program selected a GPU index that this process cannot see: more ranks "
         "(nproc_per_node) than visible GPUs, a hard-coded cuda:N, or CUDA_VISIBLE_DEVICES "
         "hiding GPUs.",
    why="The rank that asked for the missing GPU dies at start-up.",
    fix="Launch at most as many ranks as visible GPUs, and select cuda:LOCAL_RANK.",
    docs_url="https://pytorch.org/docs/stable/elastic/run.html")
NO_DEVICE = declare(
    "LOG030", Category.GPU_NOT_VISIBLE, "no CUDA-capable device is detected",
    what="CUDA started but found no GPU for this process: CUDA_VISIBLE_DEVICES is empty, -1 "
         "or wrong, or a container was started without GPUs.",
    why="torch sees zero GPUs.",
    fix="Unset or fix CUDA_VISIBLE_DEVICES; start containers with --gpus all.",
    docs_url="https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/"
             "environment-variables.html")
YOLO_DEVICE = declare(
    "LOG031", Category.GPU_NOT_VISIBLE, "YOLO: the requested --device is not available",
    what="Ultralytics/YOLOv5 checked the requested devices against "
         "torch.cuda.device_count() and found fewer GPUs than asked for.",
    why="Training refuses to start.",
    fix="Request only GPUs that exist (device=0 for `yolo`, --device 0 for YOLOv5's "
        "train.py, on a one-GPU box), or fix why torch sees none (see the lines printed with "
        "it: is_available, device_count).",
    docs_url="https://docs.ultralytics.com/modes/train/#multi-gpu-training")
CUDNN_VERSION = declare(
    "LOG032", Category.CUDNN_FAILURE, "cuDNN version does not match the one torch was built with",
    what="A different cuDNN (a system copy on LD_LIBRARY_PATH, a conda package) was loaded "
         "instead of the one torch ships, or cuDNN refuses this GPU generation.",
    why="torch refuses to use cuDNN: every convolution fails.",
    fix="Remove the other cuDNN from LD_LIBRARY_PATH so torch loads its bundled one.",
    docs_url="https://docs.nvidia.com/deeplearning/cudnn/latest/reference/troubleshooting.html")
CUDNN_LOAD = declare(
    "LOG033", Category.CUDNN_FAILURE, "A cuDNN library could not be loaded",
    what="One of cuDNN's sub-libraries (libcudnn_cnn_infer, libcudnn_ops, ...) was not found "
         "or did not link, usually because two cuDNN installs are mixed.",
    why="The first convolution fails.",
    fix="Drop other cuDNN copies from LD_LIBRARY_PATH so torch loads the cuDNN wheel it was "
        "installed with; a program other than torch that needs that cuDNN gets the wheel's "
        "nvidia/cudnn/lib directory on LD_LIBRARY_PATH.",
    docs_url="https://docs.nvidia.com/deeplearning/cudnn/latest/reference/troubleshooting.html")
CUDNN_RUNTIME = declare(
    "LOG034", Category.CUDNN_FAILURE, "cuDNN failed at run time",
    what="A cuDNN call failed (CUDNN_STATUS_EXECUTION_FAILED, MAPPING_ERROR, NOT_SUPPORTED, "
         "BAD_PARAM): a build without kernels for this GPU, memory pressure, or an input cuDNN "
         "does not support.",
    why="The layer, and so the step, fails.",
    fix="Check memory and the GPU/torch arch match; rerun with "
        "torch.backends.cudnn.enabled=False to confirm cuDNN is involved.",
    docs_url="https://docs.nvidia.com/deeplearning/cudnn/latest/reference/troubleshooting.html")
ILLEGAL_ACCESS = declare(
    "LOG035", Category.UNKNOWN, "A CUDA kernel faulted (illegal memory access)",
    what="A kernel read or wrote memory it does not own (illegal address, misaligned "
         "address, unspecified launch failure). Most often a bug in a custom op or in the "
         "model; sometimes failing GPU memory.",
    why="The CUDA context is dead: every later call on that rank fails.",
    fix="Rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; check dmesg for Xid 48/63/64/"
        "94/95 and the ECC counters before blaming the hardware.",
    docs_url="https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html")
DEVICE_ASSERT = declare(
    "LOG036", Category.UNKNOWN, "A device-side assertion failed (a data or code bug)",
    what="A CUDA kernel's own check failed, typically an index out of range: a class id "
         "larger than the model's class count, a label of -1, an embedding index too big.",
    why="The step fails; it is a bug in data or code, not in the environment.",
    fix="Rerun on the CPU or with CUDA_LAUNCH_BLOCKING=1 to get the real message; check the "
        "dataset's labels against the model's number of classes.",
    docs_url="https://pytorch.org/docs/stable/notes/cuda.html")

OOM_IDS = ("LOG005", "LOG037")

RULES: tuple[Rule, ...] = (
    # torch's own check of the GPU against its compiled architectures: no other cause. The
    # line naming the GPU's sm_XX is the one read (its next line lists what the build
    # supports); a terminal or an issue form may wrap it before "PyTorch"
    # (jhj0517/Whisper-WebUI#653). A terminal that wraps it before "sm_" leaves that line
    # holding no gate word; the warning's next line ("The current PyTorch install supports
    # CUDA capabilities sm_50 ...", torch/cuda/__init__.py _check_capability), which comes
    # only with it, is then read where the same wrap left it starting with "install".
    Rule(ARCH, rx(r"cuda capability sm_\d+ is not compatible with the current(?: pytorch|\s*$)",
                  r"^\s*install supports cuda capabilities (?:sm|compute)_\d",
                  r"which is of cuda capability \d+\.\d+",
                  r"minimum cuda capability supported by this library"),
         ("cud",),
         (ARCH_LIST, Step("Install a build that supports the GPU.",
                          url="https://pytorch.org/get-started/locally/")),
         examples=(
             "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the "
             "current PyTorch installation.",
             "NVIDIA GeForce GTX 1080 Ti with CUDA capability sm_61 is not compatible with "
             "the current",
             "Found GPU0 GeForce GTX 770 which is of cuda capability 3.0.",
             "install supports CUDA capabilities sm_37 sm_50 sm_60 sm_70 sm_75 sm_80 "
             "sm_86.")),
    Rule(ARCH, rx(r"cuda[^\n]*no kernel image is available for execution",
                  r"cudaerrornokernelimagefordevice",
                  r"cuda error: invalid device function",
                  # NCCL's own CUDA check: its kernels lack the GPU's architecture
                  # (NVIDIA/nccl#444, NCCL 2.7.8 without sm_35 on a K40m). cudaError 98,
                  # "the requested device function does not exist or is not compiled for
                  # the proper device architecture" (CUDA Runtime API, cudaError_t).
                  r"cuda failure 'invalid device function'",
                  r"cudnn_status_arch_mismatch"),
         ("cud",),
         (ARCH_LIST, Step("Install a build that supports the GPU.",
                          url="https://pytorch.org/get-started/locally/")),
         examples=(
             "RuntimeError: CUDA error: no kernel image is available for execution on the "
             "device",
             "NCCL WARN Cuda failure 'no kernel image is available for execution on the device'",
             "[3] enqueue.cc:215 NCCL WARN Cuda failure 'invalid device function'"),
         alternatives=("package_conflict: a compiled extension (mmcv, detectron2, torchvision) "
                       "built for another torch gives the same error",),
         decide=(ARCH_LIST,)),
    # torch's own index check before it asks the driver (torch/cuda/__init__.py
    # get_device_properties, can_device_access_peer: "Invalid device id" when the index is
    # not below device_count(); DataParallel's device_ids go through it,
    # https://github.com/torralba-lab/im2recipe-Pytorch/issues/11), and Lightning's check of
    # Trainer(devices=[...]) against the GPUs it finds (lightning_fabric/utilities/
    # device_parser.py: MisconfigurationException "You requested gpu: [1]\n But your
    # machine only has: [0]"; "You requested GPUs:" in older releases;
    # https://github.com/bene-ges/nemo_compatible/issues/16).
    Rule(ORDINAL, rx(r"cuda error: invalid device ordinal",
                     r"(?:cuda|error)[^\n]*invalid device ordinal",
                     r"assertionerror: invalid (?:peer )?device id\b",
                     r"misconfigurationexception: you requested gpus?: \[",
                     r"assertionerror: assert [^\n]*<=\s*(?:torch\.cuda\.device_count\(\)"
                     r"|\w*get_num_devices\(\))",
                     r"assertionerror: assert [^\n]*torch\.cuda\.device_count\(\)\s*>=",
                     r"cuda runtime error \(101\)",
                     r"cuda failure \d* ?'invalid device ordinal'",
                     r"cuda_error_invalid_device\b", r"cudaerrorinvaliddevice\b"),
         ("cud", "error", "exception"),
         (LIST_GPUS, Step("Launch at most one process per visible GPU (e.g. 2 GPUs):",
                          command="torchrun --nproc_per_node=2 train.py"),
          Step("In the script, select the GPU by LOCAL_RANK, not the global rank: "
               "local_rank = int(os.environ['LOCAL_RANK']); "
               "torch.cuda.set_device(local_rank).")),
         examples=("RuntimeError: CUDA error: invalid device ordinal",
                   "RuntimeError: cuda runtime error (10) : invalid device ordinal at "
                   "/pytorch/aten/src/THC/THCGeneral.cpp:51",
                   "AssertionError: assert num_gpu <= torch.cuda.device_count()",
                   "AssertionError: assert torch.cuda.device_count() >= args.world_size",
                   "NCCL WARN Cuda failure 'invalid device ordinal'",
                   "AssertionError: Invalid device id",
                   "lightning_fabric.utilities.exceptions.MisconfigurationException: You "
                   "requested gpu: [1]",
                   "pytorch_lightning.utilities.exceptions.MisconfigurationException: You "
                   "requested GPUs: [0, 1]"),
         alternatives=("ddp_usage_error: the script selects cuda:RANK instead of "
                       "cuda:LOCAL_RANK, which only breaks on the second node",),
         decide=(LIST_GPUS,)),
    Rule(NO_DEVICE, rx(r"no cuda-capable device is detected", r"cuda_error_no_device",
                       r"cudaerrornodevice", r"no cuda gpus are available"),
         ("cud",),
         (LIST_GPUS,
          Step("If CUDA_VISIBLE_DEVICES is empty, -1 or names a GPU that does not exist, "
               "unset it (or list the GPUs nvidia-smi -L shows).",
               command="unset CUDA_VISIBLE_DEVICES"),
          Step("In a container, start it with the GPUs.", command="docker run --gpus all ...")),
         examples=("RuntimeError: CUDA error: no CUDA-capable device is detected",
                   "RuntimeError: No CUDA GPUs are available"),
         alternatives=("driver_missing: a container started without --gpus, or no driver",),
         decide=(Step("Are the device nodes there?", command="ls -l /dev/nvidia*"),
                 LIST_GPUS)),
    Rule(YOLO_DEVICE, rx(r"invalid cuda '[^']*' requested"),
         ("cud",), (LIST_GPUS,),
         examples=(
             "ValueError: Invalid CUDA 'device=0,1' requested. Use 'device=cpu' or pass valid "
             "CUDA device(s) if available, i.e. 'device=0' or 'device=0,1,2,3' for Multi-GPU.",
             "AssertionError: Invalid CUDA '--device 0,1' requested, use '--device cpu' or pass "
             "valid CUDA device(s)"),
         symptom_of=("LOG009", "LOG010", "LOG011", "LOG013", "LOG014", "LOG015", "LOG016",
                     "LOG018", "LOG020", "LOG023", "LOG024", "LOG030", "LOG071", "LOG072"),
         alternatives=("torch_cpu_only: when torch.cuda.is_available() is False with a +cpu "
                       "torch, no --device value can work",),
         decide=(LIST_GPUS,)),
    Rule(CUDNN_VERSION, rx(r"cudnn version incompatibility",
                           r"cudnn version mismatch",
                           r"cudnn version \S+ is not compatible with devices with sm"),
         ("cud",),
         (Step("Show the cuDNN torch loads.",
               command='python -c "import torch; print(torch.backends.cudnn.version())"'),
          Step("Look for other cuDNN copies on the path.", command="echo $LD_LIBRARY_PATH"),
          Step("Run once without them: if it works, torch's own cuDNN is fine and the other "
               "copy on LD_LIBRARY_PATH is the cause.", command="env -u LD_LIBRARY_PATH "
                                                                 "python train.py")),
         examples=("RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against "
                   "(8, 9, 2) but found runtime version (8, 5, 0).",)),
    Rule(CUDNN_LOAD, rx(r"could not load library \S*cudnn\w*",
                        r"unable to load any of \{?\S*libcudnn",
                        r"error: \S*libcudnn\S*: undefined symbol"),
         ("cud",),
         (Step("Look for other cuDNN copies on the path.", command="echo $LD_LIBRARY_PATH"),
          Step("Run once without them, so torch loads the cuDNN wheel it was installed with.",
               command="env -u LD_LIBRARY_PATH python train.py"),
          Step("A program other than torch (CTranslate2, ONNX Runtime) that wants the cuDNN "
               "torch installed: put that wheel's lib directory on the loader path.",
               command="export LD_LIBRARY_PATH=$(python -c \"import nvidia.cudnn; "
                       "print(nvidia.cudnn.__path__[0])\")/lib:$LD_LIBRARY_PATH")),
         examples=(
             "Could not load library libcudnn_cnn_infer.so.8. Error: libcudnn_ops_infer.so.8: "
             "cannot open shared object file: No such file or directory",
             "Unable to load any of {libcudnn_engines_precompiled.so.9.1.0, "
             "libcudnn_engines_precompiled.so.9.1, libcudnn_engines_precompiled.so.9}",
             "Could not load library cudnn_cnn_infer64_8.dll. Error code 126"),
         symptom_of=("LOG018", "LOG039")),
    # torch 2.3+ prints "UserWarning: Plan failed with a cudnnException: ... cudnnFinalize
    # Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED" while it tries cuDNN
    # plans and falls back to another: harmless (pytorch/pytorch#121834), so not a match.
    Rule(CUDNN_RUNTIME, rx(r"^(?!.*plan failed with a cudnnexception)[^\n]*"
                           r"cudnn_status_(?:execution_failed|mapping_error|not_supported"
                           r"|bad_param|runtime_\w+|license_error|version_mismatch)",
                           r"error: (?:get|find) was unable to find an engine"),
         ("cud", "error"),
         (ARCH_LIST, Step("Check free GPU memory.", command="nvidia-smi")),
         examples=("RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
                   "RuntimeError: GET was unable to find an engine to execute this "
                   "computation"),
         symptom_of=(*OOM_IDS, "LOG028", "LOG032", "LOG033", "LOG017"),
         alternatives=(
             "torch_arch_unsupported: a build for an older CUDA on a newer GPU (e.g. RTX 30xx on "
             "CUDA 10) fails this way",
             "gpu_out_of_memory: cuDNN could not get its workspace"),
         decide=(ARCH_LIST,
                 Step("Rerun with cuDNN off (add torch.backends.cudnn.enabled = False at the "
                      "top of the training script): if it then works, cuDNN itself is the "
                      "problem."))),
    Rule(ILLEGAL_ACCESS, rx(r"cuda error: an illegal memory access was encountered",
                            r"cuda error: misaligned address",
                            r"cuda error: unspecified launch failure",
                            r"cuda failure \d* ?'an illegal memory access",
                            r"cuda_error_illegal_address",
                            r"nvrm: xid \([^)]*\): (?:13|31|43)\b"),
         ("cud", "nvrm"),
         (SYNC_ERRORS, XID),
         examples=("RuntimeError: CUDA error: an illegal memory access was encountered",
                   "NVRM: Xid (PCI:0000:02:00): 31, pid=3357, Ch 00000008, intr 00000000. MMU "
                   "Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2c_00000000."),
         symptom_of=("LOG017", *OOM_IDS),
         alternatives=(
             "hardware_fault: when dmesg shows Xid 48/63/64/94/95 or the ECC counters rise, or "
             "it follows one GPU",
             "package_conflict: a compiled extension built for another torch"),
         decide=(SYNC_ERRORS, XID,
                 Step("Read the ECC and row-remapping counters.",
                      command="nvidia-smi -q -d ECC,ROW_REMAPPER"),
                 Step("Does it follow one GPU? Run on each GPU alone.",
                      command="CUDA_VISIBLE_DEVICES=1 python train.py"))),
    Rule(DEVICE_ASSERT, rx(r"cuda error: device-side assert triggered",
                           r"assertion `[^`]*` failed"),
         ("cud", "fail"),
         (SYNC_ERRORS,
          Step("Check that every label is below the model's number of classes.")),
         examples=("RuntimeError: CUDA error: device-side assert triggered",
                   "../aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_"
                   "kernel_2d: block: [0,0,0], thread: [0,0,0] Assertion `t >= 0 && t < "
                   "n_classes` failed."),
         symptom_of=("LOG017",)),
)
