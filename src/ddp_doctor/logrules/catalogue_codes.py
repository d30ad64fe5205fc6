"""The LOG codes that only catalogue entries report (``catalogues/*.toml``).

An entry maps its message to an existing LOG code wherever one already means the same
cause; the codes here are for causes no hand-written rule had a code for. They are declared
like every other code (``codes.declare``), so ``ddp-doctor explain`` and docs/codes.md know
them, and ``CODES`` hands them to the catalogue loader.

Sources: the extension checks of torch_sparse / torch_scatter (rusty1s/pytorch_sparse
torch_sparse/__init__.py, rusty1s/pytorch_scatter torch_scatter/__init__.py), mmcv's
(open-mmlab/mmcv mmcv/utils/ext_loader.py), apex's setup.py, detectron2's
(facebookresearch/detectron2 detectron2/utils/collect_env.py) and xFormers'
(facebookresearch/xformers xformers/_cpp_lib.py); the signals of signal(7)
(https://man7.org/linux/man-pages/man7/signal.7.html).
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.model import Code, Severity

EXTENSION_BUILD = declare(
    "LOG089", Category.PACKAGE_CONFLICT,
    "A compiled extension does not fit the installed PyTorch and CUDA, or could not be built",
    what="A package with its own compiled CUDA/C++ code (torch_sparse, torch_scatter, "
         "torch_cluster, mmcv, apex, detectron2, xFormers, flash-attn, DeepSpeed's ops) "
         "checked the torch or CUDA version it was built against and found a different one, "
         "or its compiled module failed to load (it was installed for another torch release "
         "or CUDA variant, or torch was upgraded after it), or building it here failed (no "
         "CUDA toolkit, no ninja, a compiler error).",
    why="The extension's operators cannot run, so the model (or its data pipeline) fails as "
        "soon as it uses them.",
    fix="Reinstall the extension built for the installed torch and CUDA (the wheel index "
        "for that torch version, e.g. https://data.pyg.org/whl/torch-2.4.0+cu121.html for "
        "PyG, mim install mmcv for mmcv), or rebuild it from source in this environment.",
    docs_url="https://pytorch-geometric.readthedocs.io/en/latest/install/installation.html")
FATAL_SIGNAL = declare(
    "LOG090", Category.UNKNOWN,
    "A process died of a fatal signal (segmentation fault, abort, illegal instruction)",
    what="A rank or worker was ended by SIGSEGV, SIGABRT, SIGILL or SIGFPE: a crash inside "
         "native code (a compiled extension, a library built for another CPU or ABI, a "
         "data loader library), not a Python exception. The log seldom says which library.",
    why="The process dies without a Python traceback; the other ranks then fail or hang.",
    fix="Get the native stack: rerun with PYTHONFAULTHANDLER=1 (python -X faulthandler), "
        "or under gdb (gdb -ex r --args python train.py); then update or rebuild the "
        "library it names. SIGILL usually means a package built for a newer CPU.",
    docs_url="https://docs.python.org/3/library/faulthandler.html")

# --- causes of the catalogues read from torch, CPython and rdma-core (issue 23) -------------
# rdma-core's libibverbs (libibverbs/init.c): a uverbs device the kernel exposes with no
# userspace provider library for it, so no RDMA verbs can run in this process.
RDMA_PROVIDER_MISSING = declare(
    "LOG091", Category.PERFORMANCE_DEGRADED,
    "An RDMA device is present but its userspace driver is not: traffic falls back to TCP",
    what="libibverbs found an InfiniBand/RoCE device (/sys/class/infiniband_verbs/uverbsN) "
         "but no userspace provider library for it (libmlx5 and the others ship in "
         "rdma-core's ibverbs-providers), or could not load one. NCCL, MPI and Gloo then "
         "cannot use RDMA and send everything over TCP sockets.",
    why="Multi-node collectives run at a fraction of the fabric's bandwidth: training works "
        "but scales badly, or times out on large messages.",
    fix="Install the provider libraries where the job runs (apt-get install rdma-core "
        "ibverbs-providers libibverbs1, or the MLNX_OFED user space); in a container pass "
        "--device /dev/infiniband and install them in the image; check with ibv_devinfo.",
    severity=Severity.WARNING,
    docs_url="https://github.com/linux-rdma/rdma-core/blob/master/libibverbs/init.c")
GRAD_LAYOUT = declare(
    "LOG092", Category.PERFORMANCE_DEGRADED,
    "DDP copies gradients every step: their memory layout does not match its buckets",
    what="DDP's reducer found a gradient whose strides differ from its bucket view (a "
         "channels_last model, a layer whose weight gradient cuDNN lays out differently, or "
         "parameters whose strides changed after DDP was built).",
    why="Each step copies those gradients into the buckets: slower steps and more memory, "
        "though the results stay correct.",
    fix="Build DDP after moving the model to its final memory format "
        "(model.to(memory_format=torch.channels_last) before DistributedDataParallel), or "
        "pass gradient_as_bucket_view=True.",
    severity=Severity.WARNING,
    docs_url="https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/"
             "reducer.cpp")
WRAPPER_ATTRIBUTE = declare(
    "LOG093", Category.DDP_USAGE_ERROR,
    "The code reads a model attribute through the DDP (or DataParallel) wrapper",
    what="DistributedDataParallel and DataParallel wrap the model; its own methods and "
         "attributes (generate, config, a custom head) live on wrapper.module, so looking "
         "them up on the wrapper raises AttributeError.",
    why="The script stops at the first such access, often in evaluation or saving.",
    fix="Use model.module.<name> where the model is wrapped (or keep a reference to the "
        "unwrapped model: raw = model.module if hasattr(model, 'module') else model).",
    docs_url="https://pytorch.org/docs/stable/generated/"
             "torch.nn.parallel.DistributedDataParallel.html")
NO_MAIN_GUARD = declare(
    "LOG094", Category.DDP_USAGE_ERROR,
    "A spawned process ran the script's top level again (no __main__ guard)",
    what="With the spawn start method (the default on Windows and macOS, and what "
         "torch.multiprocessing.spawn and DataLoader workers use there) each child imports "
         "the main script; code that starts processes at module level, outside "
         "`if __name__ == '__main__':`, then starts them again from the child.",
    why="Every child fails while starting: no rank or DataLoader worker comes up.",
    fix="Put the script's entry point under `if __name__ == '__main__':` (call main() "
        "there), so that importing the script starts nothing.",
    docs_url="https://docs.python.org/3/library/multiprocessing.html"
             "#the-spawn-and-forkserver-start-methods")
SOCKET_PATH_TOO_LONG = declare(
    "LOG095", Category.NCCL_SHARED_MEMORY,
    "A Unix socket path is too long: the temporary directory is nested too deep",
    what="Python refused to bind a Unix socket whose path exceeds AF_UNIX's limit (108 bytes "
         "on Linux, 104 on macOS). torch.multiprocessing's file-descriptor sharing, used to "
         "hand DataLoader batches between processes, and multiprocessing managers create "
         "these sockets under TMPDIR, so a deep TMPDIR (a job's scratch path, pytest's "
         "tmp_path) breaks them.",
    why="DataLoader workers or the processes exchanging tensors cannot start or stall.",
    fix="Point TMPDIR at a short directory for the job (export TMPDIR=/tmp/j; mkdir -p "
        "$TMPDIR).",
    docs_url="https://man7.org/linux/man-pages/man7/unix.7.html")
MODEL_DIFFERS = declare(
    "LOG096", Category.DDP_USAGE_ERROR,
    "DDP refused the model: it differs between ranks or is not built yet",
    what="When DistributedDataParallel wraps a model it checks that every rank holds the "
         "same parameters (count, shapes, order) and that none is still uninitialised (a "
         "lazy module): a rank that built another model (a config or a random choice read "
         "per rank, a checkpoint loaded on one rank only) or a lazy layer fails the check.",
    why="Every rank stops in the DistributedDataParallel constructor.",
    fix="Build the same model on every rank (same config, same seed for any random "
        "architecture choice, load checkpoints on all ranks or broadcast them), and run a "
        "dummy forward pass before wrapping a model that has lazy modules.",
    docs_url="https://pytorch.org/docs/stable/notes/ddp.html")
INTERACTIVE_DDP = declare(
    "LOG097", Category.DDP_USAGE_ERROR,
    "A multi-process strategy was started from a notebook or an interactive session",
    what="Lightning's ddp strategy starts its ranks by running the script again, which a "
         "notebook or a Python prompt does not have, so it refuses that strategy there.",
    why="Training does not start.",
    fix="Run the training as a script (python train.py, or torchrun), or use "
        "strategy='ddp_notebook' in the notebook (with no CUDA call before the Trainer "
        "starts).",
    docs_url="https://lightning.ai/docs/pytorch/stable/accelerators/gpu_intermediate.html")
GPU_TOO_OLD_FOR_FEATURE = declare(
    "LOG098", Category.TORCH_ARCH_UNSUPPORTED,
    "The GPU is too old for a feature the job uses (bfloat16, FlashAttention, Triton)",
    what="A library checked the GPU's compute capability against what a feature needs and "
         "refused: bfloat16 autocast and bf16 training need Ampere (sm_80) or newer, "
         "FlashAttention 2 needs Ampere or newer, and torch.compile's Triton backend needs "
         "sm_70 or newer. The build is fine; the GPU generation is not enough for the option.",
    why="The step that uses the feature fails, usually the first forward pass.",
    fix="Turn the feature off for this GPU: float16 instead of bfloat16 (with a GradScaler), "
        "attn_implementation='sdpa' (or eager) instead of flash_attention_2, no "
        "torch.compile; or run on a newer GPU.",
    docs_url="https://developer.nvidia.com/cuda-gpus")
ALLOCATOR_FLUSHES = declare(
    "LOG099", Category.PERFORMANCE_DEGRADED,
    "The CUDA allocator empties its cache during steps: the GPU memory is nearly full",
    what="DeepSpeed ZeRO-3 counts how often torch's caching allocator had to free its cached "
         "blocks and retry an allocation since the last step; that happens only when memory "
         "is almost exhausted, and it synchronises the GPU each time.",
    why="Steps slow down (each flush waits for the GPU), and ranks flushing at different "
        "moments stall each other's collectives; one step further is an out-of-memory "
        "error.",
    fix="Lower memory use: a smaller micro-batch, activation checkpointing, offloading "
        "(ZeRO offload_param / offload_optimizer), or set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to reduce fragmentation.",
    severity=Severity.WARNING,
    docs_url="https://github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/zero/"
             "stage3.py")

LAUNCHER_LOCAL_RANK_OPTION = declare(
    "LOG100", Category.DDP_USAGE_ERROR,
    "The launcher passed --local_rank but the script does not accept that option",
    what="torch.distributed.launch (torch 1.x, without --use_env) and DeepSpeed's launcher "
         "append --local_rank=N to the script's arguments for every process; a script "
         "written for torchrun (which sets LOCAL_RANK in the environment instead) or never "
         "meant to be launched per GPU has no such option, so argparse refuses it.",
    why="Every rank exits with argparse's usage error (exit code 2) before training starts.",
    fix="Launch with torchrun, which passes no option and sets LOCAL_RANK; or make the script "
        "accept it: parser.add_argument('--local_rank', '--local-rank', dest='local_rank', "
        "type=int, default=int(os.environ.get('LOCAL_RANK', 0))).",
    docs_url="https://pytorch.org/docs/stable/distributed.html#launch-utility")

# CPython's "cannot import name X from Y" (Python/ceval.c import_from at v3.12.7) where Y is
# a library whose public names change from release to release (the catalogue lists them):
# the importing code was written for another release of Y. From user code such a failure
# can be a typo or a circular import, which CPython words differently ("partially
# initialized module"), so only those libraries are read.
IMPORT_NAME_MISSING = declare(
    "LOG101", Category.PACKAGE_CONFLICT,
    "A module imports a name that the installed release of a library does not have",
    what="Code (a training repository, or a library such as peft, trl, diffusers or timm) "
         "imports a name from transformers, diffusers, accelerate, peft, torchvision, timm or "
         "another library whose public names change between releases, and the installed "
         "release has no such name: it is older than the one the code was written for (the "
         "name was added later), or newer (the name was removed or moved).",
    why="The import fails, so the job stops before it starts training.",
    fix="Install the release of that library the code was written for (the repository's "
        "requirements file, or the importing package's own pins), or upgrade the importing "
        "package to one written for the installed release.",
    docs_url="https://docs.python.org/3/reference/simple_stmts.html#the-import-statement")

# torch.compile's frame cache: when a compiled function is recompiled more times than
# config.cache_size_limit (8; recompile_limit in later releases) allows, dynamo logs
# "torch._dynamo hit config.<limit> (N)" and runs that function without compiling it from
# then on (torch/_dynamo/convert_frame.py at v2.5.1; https://pytorch.org/docs/stable/
# torch.compiler_troubleshooting.html).
RECOMPILE_LIMIT = declare(
    "LOG102", Category.PERFORMANCE_DEGRADED,
    "torch.compile gave up on a function that kept recompiling: it runs uncompiled",
    what="A compiled function's guards failed again and again (a shape, a Python value or a "
         "tensor's properties changing between calls), so dynamo recompiled it until its "
         "cache limit and then stopped compiling it.",
    why="That function runs eagerly from then on, after the time spent on every "
        "recompilation: the steps are slower than the compiled run the job was set up for.",
    fix="Find what changes between calls (TORCH_LOGS=recompiles prints each reason) and make "
        "it static (fixed shapes, or dynamic=True / torch._dynamo.mark_dynamic for the "
        "dimension that varies); raise torch._dynamo.config.cache_size_limit only when the "
        "variants are few and expected.",
    severity=Severity.WARNING,
    docs_url="https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html")

# --- causes of the ultralytics catalogue (issue 23 point 1: trainers) -------------------------
# Read from ultralytics/ultralytics v8.4.190: utils/checks.py (check_amp, check_requirements,
# check_version), nn/tasks.py (torch_safe_load), data/utils.py (check_image_speed) and
# utils/downloads.py (safe_download); https://docs.ultralytics.com/guides/model-training-tips/.
AMP_CHECK_FAILED = declare(
    "LOG103", Category.PERFORMANCE_DEGRADED,
    "YOLO: the AMP check failed, so training runs without mixed precision",
    what="Before training, Ultralytics compares a small model's float32 and float16 (AMP) "
         "outputs on the GPU, and skips the test for GPU models known to give NaN losses under "
         "float16 (GeForce GTX 16xx, Quadro T400-T2000, Tesla K40m). The outputs differed, or "
         "the GPU is one of those, so it turned AMP off: on other GPUs that points at the CUDA, "
         "cuDNN or torch installation.",
    why="Training runs in float32: slower and with more GPU memory per image than the AMP run "
        "the batch size was chosen for.",
    fix="On a GTX 16xx/T-series GPU this is expected (train with amp=False, or on another "
        "GPU); elsewhere reinstall torch from the index for the driver's CUDA and rerun; the "
        "message names which case it is.",
    severity=Severity.WARNING,
    docs_url="https://github.com/ultralytics/ultralytics/blob/v8.4.190/ultralytics/utils/"
             "checks.py")
REQUIREMENT_NOT_INSTALLED = declare(
    "LOG104", Category.PACKAGE_CONFLICT,
    "YOLO: a package the trainer needs is missing and could not be installed",
    what="Ultralytics installs the packages a step needs at run time (cloudpickle for "
         "multi-GPU training from 8.4, lap, onnx and others) with pip; on a node without "
         "internet access, or with YOLO_AUTOINSTALL=False, it skips the install and the "
         "package stays missing.",
    why="The step that needs it (the DDP launch, tracking, export) fails with "
        "ModuleNotFoundError.",
    fix="Install the package the message names in the training interpreter beforehand (in "
        "the image of air-gapped nodes), e.g. pip install 'cloudpickle>=3.1.1'.",
    docs_url="https://docs.ultralytics.com/quickstart/")
FOREIGN_WEIGHTS = declare(
    "LOG105", Category.PACKAGE_CONFLICT,
    "YOLO: the weights were saved by another repository or release than the installed "
    "Ultralytics",
    what="The checkpoint pickles classes from the code that saved it: weights trained in the "
         "ultralytics/yolov5 repository (or a fork such as YOLOv7/YOLOv9's) need its "
         "'models' package, and weights from a newer Ultralytics name modules the installed "
         "release does not have.",
    why="The model cannot be loaded, so training (or fine-tuning from those weights) stops "
        "before it starts.",
    fix="Load the weights with the code that made them (the yolov5 repository for YOLOv5 "
        "weights), or upgrade Ultralytics to the release they were saved with (pip install "
        "-U ultralytics); or start from official Ultralytics weights and train again.",
    docs_url="https://docs.ultralytics.com/models/yolov5/")
SLOW_IMAGE_STORAGE = declare(
    "LOG106", Category.PERFORMANCE_DEGRADED,
    "YOLO: the training images are read from slow (remote or mounted) storage",
    what="Ultralytics timed opening and reading a sample of the dataset's images before "
         "training: the latency or the read rate is that of a network or mounted file system "
         "(NFS, SMB, a cloud bucket mount, Google Drive), not a local disk.",
    why="The DataLoader workers wait for the images, so the GPUs idle between batches and "
        "every epoch takes longer than the hardware should.",
    fix="Copy the dataset to a local disk (or the node's local scratch) and point the dataset "
        "YAML there, or cache the images with cache=ram (or cache=disk).",
    severity=Severity.WARNING,
    docs_url="https://docs.ultralytics.com/guides/model-training-tips/")
DOWNLOAD_FAILED = declare(
    "LOG107", Category.UNKNOWN,
    "YOLO: a file the trainer fetches at run time could not be downloaded",
    what="Ultralytics downloads what is not on disk when it is first needed: model weights, "
         "the font its plots use (Arial.ttf), the AMP check's model, datasets named in a "
         "YAML. The download failed after its retries: the node has no internet access (a "
         "compute node, a firewall or proxy) or the address is wrong.",
    why="The step that needs the file fails; the training never starts.",
    fix="Fetch the file on a machine with internet access and copy it where the message "
        "says (weights beside the script, fonts to the Ultralytics settings directory, "
        "datasets to the datasets directory), or set the proxy variables (HTTPS_PROXY) for "
        "the job.",
    docs_url="https://docs.ultralytics.com/quickstart/#understanding-settings")

WEIGHTS_ONLY_DEFAULT = declare(
    "LOG108", Category.PACKAGE_CONFLICT,
    "torch 2.6 or newer refused a checkpoint the loading code expects to unpickle whole",
    what="From torch 2.6, torch.load loads with weights_only=True unless told otherwise "
         "(torch/serialization.py): only tensors and allowlisted types are unpickled. A "
         "checkpoint that pickles a model class (ultralytics.nn.tasks.DetectionModel, "
         "YOLOv5's models.yolo.Model) is refused when the code loading it predates the "
         "change and does not pass weights_only=False.",
    why="The weights cannot be loaded, so training or fine-tuning from them stops.",
    fix="Upgrade the code that loads the checkpoint to a release written for torch 2.6 "
        "(pip install -U ultralytics), or install a torch before 2.6 for that code; for a "
        "checkpoint you trust, pass weights_only=False to torch.load or set "
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 for the job.",
    docs_url="https://pytorch.org/docs/stable/generated/torch.load.html")

# TensorFlow and JAX say so when they will not use the GPU (TensorFlow's dso_loader and
# gpu_device.cc, JAX's xla_bridge): a warning, because a torch job whose dependencies import
# TensorFlow or JAX in passing prints the same lines and trains on the GPU regardless. It
# leads only where nothing failed (a TensorFlow or JAX job training on the CPU).
FRAMEWORK_ON_CPU = declare(
    "LOG109", Category.TORCH_CPU_ONLY,
    "TensorFlow or JAX cannot use the GPU: its CUDA libraries or CUDA build are missing",
    what="TensorFlow could not load the CUDA libraries it was built for ('Could not load "
         "dynamic library ...', 'Cannot dlopen some GPU libraries ... Skipping registering "
         "GPU devices'), or the installed jaxlib is a CPU build ('a CUDA-enabled jaxlib is "
         "not installed. Falling back to cpu'): that framework runs on the CPU.",
    why="Training with that framework runs on the CPU, far slower, or fails where it needs a "
        "GPU; a torch job that only imports it in passing is not affected.",
    fix="Install the framework's GPU build with the CUDA versions it was built for "
        "(pip install tensorflow[and-cuda] from TF 2.14; pip install -U 'jax[cuda12]'), or "
        "put those CUDA libraries on LD_LIBRARY_PATH.",
    severity=Severity.WARNING,
    docs_url="https://www.tensorflow.org/install/pip")

# torch.multiprocessing's default file_descriptor sharing strategy passes every shared
# tensor of a DataLoader batch as an open file descriptor over a local socket (multiprocessing
# reduction.py recvfds): with the process's open-file limit reached, the descriptor never
# arrives ("received 0 items of ancdata", pytorch/pytorch#973).
DATALOADER_FD_LIMIT = declare(
    "LOG110", Category.NCCL_SHARED_MEMORY,
    "DataLoader workers ran out of file descriptors handing batches over",
    what="With torch.multiprocessing's default file_descriptor sharing strategy every shared "
         "tensor a DataLoader worker hands to the main process is an open file descriptor: "
         "many workers, large batches of small tensors or a low open-file limit exhaust them, "
         "and a descriptor never arrives.",
    why="The batch cannot be received, so the DataLoader (and the step) fails.",
    fix="Call torch.multiprocessing.set_sharing_strategy('file_system') right after importing "
        "torch, or raise the open-file limit (ulimit -n 65535), or use fewer DataLoader "
        "workers.",
    docs_url="https://pytorch.org/docs/stable/multiprocessing.html#sharing-strategies")
# Gloo's device creation (gloo/transport/tcp/device.cc, uv/device.cc): GLOO_ENFORCE(rp !=
# nullptr, "Unable to find address for: ", hostname) - no address this host's name resolves
# to could be bound, or GLOO_SOCKET_IFNAME names an interface without one. Unlike Gloo's
# loopback fallback (LOG082, a warning), the process group is not created.
GLOO_NO_ADDRESS = declare(
    "LOG111", Category.NCCL_NETWORK,
    "Gloo found no address of this host to bind (host name or GLOO_SOCKET_IFNAME)",
    what="torch's Gloo backend could not bind to an address of this host: its host name "
         "resolves to no address it owns (a Windows machine name such as DESKTOP-XXXX, a "
         "container's name), or GLOO_SOCKET_IFNAME names an interface that has none.",
    why="init_process_group fails: no process group is created.",
    fix="Make the host name resolve to one of this host's addresses (/etc/hosts), or name a "
        "real interface for Gloo (GLOO_SOCKET_IFNAME=eth0); on one machine, MASTER_ADDR="
        "127.0.0.1.",
    docs_url="https://pytorch.org/docs/stable/distributed.html#common-environment-variables")

# NCCL 2.17 made ncclConfig_t's default `blocking` NCCL_CONFIG_UNDEF_INT (INT_MIN); an older
# libnccl (2.14-2.16) given that config by a torch built against 2.17 or newer rejects it in
# init.cc's parseCommConfig ("Invalid config blocking attribute value %d", NVIDIA/nccl#1167).
# So torch loaded another NCCL than its own: a second nvidia-nccl-cu* wheel
# (imoneoi/openchat#121: nvidia-nccl-cu11 2.14.3 beside nvidia-nccl-cu12 2.18.1) or a libnccl
# on LD_LIBRARY_PATH.
NCCL_NOT_TORCHS = declare(
    "LOG113", Category.PACKAGE_CONFLICT,
    "torch loaded an older NCCL than the one it was built with",
    what="NCCL refused the communicator settings torch passed ('Invalid config blocking "
         "attribute value -2147483648'): the libnccl loaded predates the NCCL torch was "
         "built against, so another copy shadows torch's own: a second nvidia-nccl-cu* wheel "
         "or a libnccl on LD_LIBRARY_PATH.",
    why="No NCCL communicator can be created: every collective fails at once.",
    fix="Keep one NCCL, the one torch names: uninstall the nvidia-nccl-cu* wheel of the other "
        "CUDA major (or reinstall torch's own), and drop LD_LIBRARY_PATH entries that hold a "
        "libnccl.",
    docs_url="https://github.com/NVIDIA/nccl/issues/1167")

# cuDNN's status reference: CUDNN_STATUS_NOT_INITIALIZED is returned when cudnnCreate()
# fails, "usually due to an error in the CUDA Runtime API called by cudnnCreate() or by an
# error in the hardware setup" (cudnnStatus_t in the cuDNN API reference, quoted verbatim in
# https://github.com/PaddlePaddle/PaddleMIX/issues/678). Under torch ("cuDNN error:
# CUDNN_STATUS_NOT_INITIALIZED") the threads that settled it were mostly a torch build
# whose CUDA/cuDNN did not fit the GPU or driver, fixed by installing the build for the
# right CUDA (xincoder/GRIP#23, amlarraz/MSRF-Net_PyTorch#1, Turoad/CLRNet#24), and
# sometimes a GPU too full for cuDNN's handle (tinyvision/DAMO-YOLO#20: a smaller batch;
# https://github.com/pytorch/pytorch/issues/81620). A program that calls cuDNN itself
# could not bring up CUDA for cuDNN (https://github.com/ceccocats/tkDNN/issues/282: a
# container run as a user that could not open the GPU). Only catalogue entries report it
# (cudnn.toml, caffe.toml); the steps for each wording are its variants in remedies.py.
CUDNN_INIT = declare(
    "LOG079", Category.CUDNN_FAILURE, "cuDNN could not initialise (cudnnCreate failed)",
    what="cuDNN returned CUDNN_STATUS_NOT_INITIALIZED: cudnnCreate() failed because the "
         "CUDA runtime beneath it could not start for this process. Under torch this is "
         "most often a torch build whose CUDA/cuDNN does not fit the GPU or the driver "
         "(reinstalling the build for the right CUDA fixed it), less often a GPU too full "
         "for cuDNN's handle. A program that calls cuDNN itself may also be unable to "
         "open the GPU's device nodes (a container run as a user outside the video/render "
         "groups, or started without the NVIDIA runtime). In Caffe, cudnnCreate's "
         "CUDNN_STATUS_INTERNAL_ERROR: its cuDNN convolution creates three handles per "
         "group, which a depthwise layer (as many groups as channels) exhausts.",
    why="No cuDNN handle exists, so no layer can run: the program stops at start-up.",
    fix="Check that torch's CUDA and cuDNN fit the GPU and the driver (reinstall the torch "
        "build for a CUDA the driver supports, in a clean environment); check that the "
        "process can open /dev/nvidia*; and that the GPU is not already full.",
    docs_url="https://docs.nvidia.com/deeplearning/cudnn/latest/reference/troubleshooting.html")

# DCGM's diagnostic (dcgmi diag) and health watches report a GPU whose clocks are held down
# by heat or power, or whose PCIe link trains below the generation or width it should
# (NVIDIA/DCGM dcgmlib/dcgm_errors.h: DCGM_FR_CLOCK_THROTTLE_THERMAL_MSG,
# DCGM_FR_CLOCK_THROTTLE_POWER_MSG, DCGM_FR_THERMAL_VIOLATIONS_MSG, DCGM_FR_PCIE_GENERATION_MSG,
# DCGM_FR_PCIE_WIDTH_MSG): the GPU works, slower than its peers, and in DDP every rank waits
# for it. The live checks read the same from NVML (HWF010-HWF013); this is the pasted report.
GPU_HELD_DOWN = declare(
    "LOG114", Category.PERFORMANCE_DEGRADED,
    "DCGM reports a GPU slowed down by heat, power or its PCIe link",
    what="NVIDIA DCGM's diagnostic or health watch found a GPU whose clocks were throttled "
         "for heat or power, or whose PCIe link runs below the generation or width the "
         "system allows.",
    why="That GPU is slower than the others, and every step of a DDP job waits for the "
        "slowest rank.",
    fix="Check the GPU's cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER "
        "shows the reasons), reseat the card or fix the slot if the link trains low, and "
        "rerun the diagnostic.",
    severity=Severity.WARNING,
    docs_url="https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html")
# NCCL's topology search (src/graph/paths.cc, p2pCanConnect / ncclTopoCheckP2p) asks CUDA
# whether two GPUs on a PCIe path (PIX, PXB, PHB) can access each other's memory; where the
# driver or the platform says no (GeForce cards under drivers that turn P2P off, cloud
# instances whose hypervisor hides it, IOMMU/ACS), NCCL logs "P2P is disabled between
# connected GPUs N and M" and routes that pair through host memory (SHM): the job works,
# slower (cortwave.github.io's 4x RTX 4090 server: 2 GPUs at 4.5 samples/s against 15.4 on
# one). The NVLink case is a WARN and an error, read as hardware (LOG017). Context (info), not
# a warning: the line is in the NCCL INFO of many PCIe machines whose job fails for another
# reason (Oneflow-Inc/libai#415: a hang over a container's veth, DIAG026), and there it led.
P2P_DISABLED = declare(
    "LOG115", Category.PERFORMANCE_DEGRADED,
    "NCCL cannot use peer-to-peer between the GPUs: their traffic goes through host memory",
    what="NCCL reported that GPUs connected by PCIe cannot access each other's memory (P2P "
         "disabled by the driver, the platform or IOMMU/ACS), so it copies between them "
         "through host memory.",
    why="Gradient synchronisation runs at a fraction of the PCIe bandwidth; with more GPUs "
        "a step can be slower than on one.",
    fix="Measure it (nvidia-smi topo -p2p r, nccl-tests' all_reduce_perf); use GPUs or a "
        "machine with working P2P or NVLink, or fewer GPUs with larger batches; on a "
        "machine you administer, turn off IOMMU/ACS on the PCIe switches.",
    severity=Severity.INFO,
    docs_url="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html")
# NVIDIA Fabric Manager refuses to start unless its version is exactly the loaded driver's
# (the Fabric Manager user guide); NVSwitch is then never set up and CUDA answers error 802 or
# NCCL hangs (pytorch/pytorch#129749: Fabric Manager 550.90.07 against driver 550.54.15). The
# usual ways in: a driver package upgraded on disk without a reboot (the module still loaded is
# the old one), or the two packages upgraded separately.
FABRIC_MANAGER_VERSION = declare(
    "LOG116", Category.DRIVER_LIBRARY_MISMATCH,
    "Fabric Manager's version is not the loaded driver's, so it does not start",
    what="nv-fabricmanager found that the NVIDIA driver loaded in the kernel is another version "
         "than its own and stopped; NVSwitch systems (HGX/DGX A100, H100) need it running "
         "before CUDA can use the GPUs together.",
    why="CUDA reports error 802 (system not yet initialized) or NCCL's collectives hang across "
        "the NVSwitch fabric.",
    fix="Compare the loaded driver (cat /proc/driver/nvidia/version) with the installed driver "
        "and Fabric Manager packages. If the driver package on disk already matches Fabric "
        "Manager, reboot so the new module loads; otherwise install the Fabric Manager "
        "package of exactly the loaded driver's version (apt needs --allow-downgrades to go "
        "back), restart nvidia-fabricmanager and check that it stays active.",
    docs_url="https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html")
# A trainer that refuses to run one process on several visible GPUs (Coqui's trainer,
# trainer/trainer_utils.py setup_torch_training_env): only its launcher starts one process
# per GPU, so a recipe started with plain python stops at once (coqui-ai/TTS#1536).
SINGLE_PROCESS_MANY_GPUS = declare(
    "LOG117", Category.DDP_USAGE_ERROR,
    "A trainer refused to run one process on several GPUs: multi-GPU training needs its launcher",
    what="The training script was started as one plain Python process while more than one GPU "
         "was visible, and the trainer stops rather than pick one: its multi-GPU mode starts "
         "one process per GPU through its own launcher.",
    why="Training never starts; started as one process it could use one GPU only.",
    fix="Start the script through the trainer's launcher (Coqui: python -m trainer.distribute "
        "--script train.py --gpus 0,1), or make one GPU visible to the single process "
        "(CUDA_VISIBLE_DEVICES=0).",
    docs_url="https://github.com/coqui-ai/TTS/issues/1536")
# A compiled GPU kernel (Triton's, torch.compile's, a fused attention kernel) whose tiles need
# more on-chip shared memory or registers than this GPU generation has: Triton refuses it with
# OutOfResources (triton/runtime/errors.py), torch's Inductor launcher likewise
# (static_cuda_launcher.cpp).
KERNEL_RESOURCES = declare(
    "LOG118", Category.TORCH_ARCH_UNSUPPORTED,
    "A GPU kernel needs more on-chip shared memory than this GPU has",
    what="A kernel compiled for this job (Triton, torch.compile's autotuning, a fused attention "
         "or quantisation kernel) was configured with tiles sized for a GPU with more shared "
         "memory per block (up to 227 KB on an H100, 163 KB on an A100, about 100 KB on most "
         "consumer GPUs, 48 KB on older ones), and this GPU cannot launch it.",
    why="The kernel, and the layer that uses it, fails on this GPU on every step; the same code "
        "runs on the GPU it was tuned for.",
    fix="Use a kernel configuration made for this GPU: smaller block sizes or fewer num_stages "
        "where the code exposes them, a release of the library that tunes for this GPU, or "
        "the framework's non-Triton path (for torch.compile, mode='default' instead of "
        "max-autotune, or no compile).",
    docs_url="https://github.com/triton-lang/triton/blob/main/python/triton/runtime/errors.py")
# FSDP (FullyShardedDataParallel, the first version) flattens each wrapped module's parameters
# into one FlatParameter and refuses parameters that differ in dtype, requires_grad (unless
# use_orig_params=True) or device (torch/distributed/fsdp/_flat_param.py at v2.5.1): LoRA
# adapters in float32 beside a bfloat16 model, a frozen embedding, a module kept in float32.
FSDP_FLATTEN = declare(
    "LOG119", Category.DDP_USAGE_ERROR,
    "FSDP cannot flatten a module whose parameters differ in dtype, requires_grad or device",
    what="FSDP puts the parameters of each wrapped unit into one flat tensor, so they must share "
         "one dtype, one device and (without use_orig_params=True) one requires_grad; a unit "
         "mixed frozen and trained parameters, float32 and bfloat16 ones (LoRA adapters, "
         "layers a model keeps in float32), or parameters on two devices.",
    why="Wrapping fails on every rank before training starts.",
    fix="Give the unit's parameters one dtype before wrapping (model.to(torch.bfloat16), and "
        "let FSDP's MixedPrecision do the casting), pass use_orig_params=True where frozen and "
        "trained parameters share a unit, wrap the odd module in a unit of its own, or move to "
        "FSDP2 (fully_shard), which shards each parameter on its own.",
    docs_url="https://pytorch.org/docs/stable/fsdp.html")
# Slurm refusing a job's or step's GPU request (src/common/slurm_errno.c, ESLURM_INVALID_GRES
# and ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE): the partition schedules no such generic
# resource, a step asks for GPUs its job lacks, or no node has as many GPUs as asked per node.
SLURM_GPU_REQUEST = declare(
    "LOG120", Category.GPU_NOT_VISIBLE,
    "Slurm refused the job's GPU request",
    what="The controller rejected the GPUs the job or step asked for: the partition does not "
         "schedule that generic resource (no gpu in GresTypes or gres.conf, a GPU type name "
         "this cluster does not use), a step inside an allocation asked for GPUs the "
         "allocation was not given, or no node of the partition has as many GPUs (or CPUs, "
         "memory) as asked per node.",
    why="The job never starts, or starts without a GPU.",
    fix="Ask for GPUs the way this cluster schedules them (sinfo -o '%P %G' lists each "
        "partition's generic resources; --gres=gpu:N or --gpus=N on a GPU partition, at most "
        "as many per node as its nodes have), and submit from outside a CPU allocation "
        "(env -u SLURM_JOB_ID sbatch ...).",
    docs_url="https://slurm.schedmd.com/gres.html")
# JAX asked for a GPU platform it does not have (jax/_src/xla_bridge.py, canonicalize_platform):
# its own code, so that JAX's warning of a CPU-only jaxlib (LOG122) explains this refusal and
# no other framework's "no GPU" line.
JAX_NO_GPU = declare(
    "LOG121", Category.GPU_NOT_VISIBLE,
    "JAX found no GPU platform in this process",
    what="JAX was asked for the 'gpu' (or 'cuda') platform and has none: the process sees no "
         "GPU (a node without one, an empty CUDA_VISIBLE_DEVICES), or the jaxlib installed is "
         "the CPU build (JAX then warns so first).",
    why="The job stops before it computes anything on a GPU.",
    fix="Run the job where a GPU is allocated and visible (nvidia-smi in the job; Slurm "
        "--gres=gpu:1), and install JAX with its CUDA plugin (pip install -U \"jax[cuda12]\").",
    docs_url="https://docs.jax.dev/en/latest/installation.html")
# JAX's own warning that its jaxlib is the CPU build while an NVIDIA GPU is present
# (jax/_src/xla_bridge.py, _suggest_missing_backends): apart from TensorFlow's CPU fallback
# (LOG109), so that it, and nothing TensorFlow prints, explains JAX's refusal of 'gpu' (LOG121).
JAX_CPU_BUILD = declare(
    "LOG122", Category.TORCH_CPU_ONLY,
    "JAX's jaxlib is the CPU build although an NVIDIA GPU is present",
    what="JAX found an NVIDIA GPU on this machine but the jaxlib installed has no CUDA plugin, "
         "so JAX runs on the CPU.",
    why="A job that asks JAX for the GPU stops; one that does not trains on the CPU.",
    fix="Install JAX with its CUDA plugin in the environment the job runs (pip install -U "
        "\"jax[cuda12]\"). A torch job that imports JAX only through a dependency can ignore "
        "it.",
    severity=Severity.WARNING,
    docs_url="https://docs.jax.dev/en/latest/installation.html")
# libnvidia-container mounting the host's driver files into an image that already has files
# at those paths on a Linux host (src/nvc_mount.c, EEXIST); under WSL 2 the hand-written LOG076.
IMAGE_DRIVER_FILES = declare(
    "LOG123", Category.CUDA_INIT_FAILURE,
    "The image ships NVIDIA driver files where the container toolkit mounts the host's",
    what="Starting a GPU container, nvidia-container-cli could not mount the host driver's "
         "files (libraries, nvidia-smi) because the image already has files at those paths: "
         "driver packages installed in the image, or an image committed from a running GPU "
         "container.",
    why="The container does not start.",
    fix="Build the image without NVIDIA driver packages (no nvidia-driver-*, "
        "libnvidia-compute-*, nvidia-utils-* or cuda-drivers; start from an nvidia/cuda "
        "base), so that the host driver's own files are mounted.",
    docs_url="https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/"
             "troubleshooting.html")
# pdsh (DeepSpeed's default multi-node launcher) reporting that ssh to a node failed
# (chaos/pdsh src/pdsh/dsh.c, exit status 255): that node's ranks never start.
SSH_TO_NODE = declare(
    "LOG124", Category.RENDEZVOUS_FAILURE,
    "The launcher's ssh to another node failed, so that node's ranks never started",
    what="pdsh (DeepSpeed's default multi-node launcher) reported ssh's exit status 255 for a "
         "node: the session could not be opened (host key unknown, no key accepted, port "
         "closed) or was cut.",
    why="The ranks of that node never start, and the others wait for them at the rendezvous.",
    fix="Set up passwordless ssh from the launching node to every node of the hostfile "
        "('ssh NODE hostname' must answer without a prompt), or use a launcher that needs no "
        "ssh (torchrun on each node, deepspeed --launcher slurm or openmpi).",
    docs_url="https://www.deepspeed.ai/getting-started/#resource-configuration-multi-node")
# The CDI library of Podman, containerd and CRI-O finding no spec for the NVIDIA devices asked
# for (container-device-interface pkg/cdi/cache.go, InjectDevices).
NO_CDI_SPEC = declare(
    "LOG125", Category.CUDA_INIT_FAILURE,
    "The container runtime has no CDI spec for the NVIDIA GPUs",
    what="The runtime (Podman, containerd, CRI-O) gives containers their devices through CDI "
         "specs, and none names the NVIDIA devices asked for: NVIDIA's spec was never "
         "generated, is stale after a driver upgrade, or uses a schema the runtime is too old "
         "to read.",
    why="The container does not start with its GPUs.",
    fix="Generate the spec on the host (sudo nvidia-ctk cdi generate "
        "--output=/etc/cdi/nvidia.yaml), regenerate it after every driver upgrade, and check "
        "that nvidia-ctk cdi list shows the devices; update an old Podman that cannot parse it.",
    docs_url="https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/"
             "cdi-support.html")
# Megatron-LM's and verl's argument checks: the parallel sizes (tensor x pipeline x context)
# must divide the number of GPUs, and the global batch must divide into micro-batches x
# data-parallel ranks (NVIDIA/Megatron-LM megatron/training/arguments.py,
# megatron/core/num_microbatches_calculator.py, megatron/core/parallel_state.py; verl
# verl/protocol.py, verl/utils/config.py, verl/workers/config/actor.py).
PARALLEL_SIZES = declare(
    "LOG126", Category.DDP_USAGE_ERROR,
    "The parallel or batch sizes do not divide across the GPUs",
    what="The trainer splits the GPUs into tensor-, pipeline- and context-parallel groups, "
         "and what remains is the data-parallel size; the global batch must then split "
         "evenly into micro-batches per data-parallel rank. One of these products does not "
         "divide: the GPU count by the model-parallel size, or the batch by micro-batch x "
         "data-parallel size (for verl, the rollout batch by the GPUs it is spread over).",
    why="The job refuses to start (or a step cannot split its batch), on every rank.",
    fix="Recompute the sizes for the GPUs actually launched: the world size must be a "
        "multiple of tensor x pipeline x context parallel size, and the global batch a "
        "multiple of micro-batch x (world size / that product). Change the batch, the "
        "micro-batch or the parallel sizes, or launch a GPU count that fits.",
    docs_url="https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/training/arguments.py")
# transformers' check before it loads a model with attn_implementation="flash_attention_2"
# (modeling_utils.py, _check_and_enable_flash_attn_2, v4.46.0): the flash-attn package is not
# installed, or older than the release it needs.
FLASH_ATTN_MISSING = declare(
    "LOG127", Category.PACKAGE_CONFLICT,
    "FlashAttention 2 was asked for, but the flash-attn package is missing or too old",
    what="The model was configured with attn_implementation='flash_attention_2' (or a "
         "trainer's flash_attn option), and transformers found no flash_attn package in this "
         "environment, or one older than 2.1. flash-attn ships compiled kernels for one torch, "
         "CUDA and C++ ABI; its install often fails quietly (no nvcc, no wheel for this torch, "
         "Windows).",
    why="The model is not loaded, so training never starts.",
    fix="Install a flash-attn built for the installed torch (pip install flash-attn "
        "--no-build-isolation, or the release wheel whose name matches torch's version, CUDA "
        "and cxx11abi), or load the model with attn_implementation='sdpa' instead.",
    docs_url="https://huggingface.co/docs/transformers/perf_infer_gpu_one#flashattention-2")
# transformers' from_pretrained refusing to place the weights itself under ZeRO-3
# (modeling_utils.py, v4.46.0): ZeRO-3 partitions the weights over the ranks as they load.
ZERO3_DEVICE_MAP = declare(
    "LOG128", Category.DDP_USAGE_ERROR,
    "DeepSpeed ZeRO-3 was combined with a device_map or low_cpu_mem_usage when loading the model",
    what="With a ZeRO-3 config active, from_pretrained was also given a device_map (e.g. "
         "'auto', or a quantized model's map) or low_cpu_mem_usage=True. ZeRO-3 partitions "
         "every weight across the ranks as the model is built, so nothing else may place "
         "them.",
    why="The model is not loaded on any rank; training never starts.",
    fix="Drop device_map and low_cpu_mem_usage from from_pretrained when training with "
        "ZeRO-3 (each rank loads through ZeRO's partitioning), or use ZeRO-2 where a "
        "device_map or a quantized model (QLoRA) is needed.",
    docs_url="https://huggingface.co/docs/transformers/main/en/deepspeed#zero-3")
# torch.compile's Inductor backend generating GPU kernels with Triton and finding none
# (torch/_inductor/exc.py, TritonMissing, torch 2.13; the scheduler raised the same sentence
# as a RuntimeError in earlier releases).
TRITON_MISSING = declare(
    "LOG129", Category.PACKAGE_CONFLICT,
    "torch.compile needs Triton, and no working Triton is installed",
    what="torch.compile's default backend (Inductor) writes its GPU kernels in Triton, and the "
         "triton package is missing or older than this torch needs: torch's Linux CUDA wheels "
         "bring it, but Windows wheels do not, and a pip install or uv sync of another torch "
         "can remove or downgrade it.",
    why="The compiled model fails at its first call, so training stops (or every compiled "
        "function falls back, where errors are suppressed).",
    fix="Install the Triton release paired with this torch (pip install triton on Linux; the "
        "triton-windows package on Windows), or turn compilation off (no torch.compile, the "
        "trainer's compile option off, or backend='eager').",
    docs_url="https://github.com/triton-lang/triton#compatibility")
# The NVIDIA kernel module refusing a GPU whose PCI memory window (BAR) the firmware or the
# kernel left unassigned (kernel-open/nvidia/nv.c, nv_pci_probe: "This PCI I/O region assigned
# to your NVIDIA device is invalid"): large-BAR GPUs need 64-bit MMIO space the BIOS ("Above 4G
# decoding"), the hypervisor (its 64-bit PCI hole, EFI firmware) or the kernel (pci=realloc)
# must provide.
PCI_BAR_UNASSIGNED = declare(
    "LOG130", Category.CUDA_INIT_FAILURE,
    "The GPU's PCI memory window was left unassigned, so the driver cannot use the GPU",
    what="The NVIDIA driver found a BAR (PCI memory region) of the GPU with no address or size "
         "(\"BAR1 is 0M @ 0x0\"): the system firmware, the hypervisor or the kernel did not "
         "give it room. GPUs with large BARs (A100, H100, P40, B300) need 64-bit MMIO space "
         "above 4 GB.",
    why="The driver refuses that GPU at probe: nvidia-smi lists fewer GPUs (or none), and "
        "CUDA cannot use it.",
    fix="Give the GPU its address space: enable Above 4G Decoding (and Resizable BAR where "
        "offered) in the BIOS; in a VM use EFI firmware and a 64-bit MMIO window large enough "
        "for the GPUs; or let Linux reassign the resources (pci=realloc on the kernel command "
        "line), then reboot.",
    docs_url="https://forums.developer.nvidia.com/t/"
             "nvrm-this-pci-i-o-region-assigned-to-your-nvidia-device-is-invalid/229899")
# The kernel's oops report when the fault is inside the NVIDIA kernel module (Linux
# arch/x86/kernel/dumpstack.c, show_ip): the driver crashed in the kernel.
DRIVER_OOPS = declare(
    "LOG131", Category.DRIVER_MISSING,
    "The NVIDIA kernel module crashed (a kernel oops inside it)",
    what="The kernel stopped on a fault whose instruction pointer is inside nvidia.ko (or "
         "nvidia_uvm, nvidia_modeset): the driver does not fit the running kernel (a kernel "
         "update it was not built or certified for) or hit a bug of its own.",
    why="No GPU is usable until the machine reboots with a working driver; nvidia-smi and "
        "CUDA hang or fail.",
    fix="Install a driver release supported on this kernel, or boot the kernel the driver was "
        "built for, then reboot. Where the oops follows an Xid error of one GPU, that GPU is "
        "the fault.",
    docs_url="https://docs.kernel.org/admin-guide/bug-hunting.html")
# CPython's import system when a module the job imports is not installed in the interpreter
# that runs it (Lib/importlib/_bootstrap.py, _find_and_load_unlocked: "No module named %r").
# torch itself is the hand-written LOG021 (torch_missing); every other module is a package
# missing from this environment.
MODULE_NOT_INSTALLED = declare(
    "LOG132", Category.PACKAGE_CONFLICT,
    "A module the job imports is not installed in the interpreter that runs it",
    what="Python found no module of that name on its path: the package is not installed in "
         "this interpreter, or it is installed in another one (the launcher's python, a "
         "second venv or conda env, a container image, a notebook kernel), or a package that "
         "should bring it is too old or too new to have it.",
    why="The script stops at the import, before training starts.",
    fix="Install the package into the interpreter that runs the job (python -m pip install "
        "..., with that interpreter's python; the package name can differ from the module's: "
        "cv2 is opencv-python), or launch the job with the interpreter that has it.",
    docs_url="https://docs.python.org/3/library/exceptions.html#ModuleNotFoundError")
# The dynamic loader finding no system library that a Python package's compiled module needs
# (glibc elf/dl-load.c), for the libraries a slim container image or a server install lacks:
# OpenCV's libGL and GLib (cv2, imported by Ultralytics, mmcv, albumentations).
SYSTEM_LIBRARY_MISSING = declare(
    "LOG133", Category.PACKAGE_CONFLICT,
    "A system library that a Python package needs is not installed (OpenCV's libGL, Open MPI)",
    what="A wheel links against system libraries it does not ship: opencv-python against the "
         "desktop's OpenGL and GLib (libGL.so.1, libgthread-2.0.so.0), Horovod, mpi4py and the "
         "GPU builds of some frameworks against Open MPI (libmpi.so.40). Slim container images "
         "and minimal server installs do not have them, so the import fails; the trainer that "
         "imports it stops before training.",
    why="The training script fails at its imports.",
    fix="Install the system library the message names (apt-get install -y libgl1 "
        "libglib2.0-0 for OpenCV, or use opencv-python-headless; apt-get install -y "
        "libopenmpi-dev openmpi-bin for Open MPI).",
    docs_url="https://man7.org/linux/man-pages/man8/ld.so.8.html")
# libnvidia-container under WSL 2 (src/nvc.c and src/dxcore.c, dxcore_init_context and
# dxcore_add_adapter): libdxcore is there, so this is WSL, but no GPU adapter it can use was
# enumerated: none is passed to the VM, or each was skipped (a Windows driver before WDDM 2.8,
# which has no CUDA for WSL, or a driver store without NVIDIA's libraries).
WSL_NO_GPU_ADAPTER = declare(
    "LOG134", Category.WSL_SETUP,
    "WSL 2 shows no NVIDIA GPU adapter that CUDA can use",
    what="Inside WSL the GPU comes from the Windows driver through the /dev/dxg "
         "paravirtualisation device. The container toolkit found that device's library but "
         "no NVIDIA adapter behind it: the machine has no NVIDIA GPU for WSL, the Windows "
         "driver predates CUDA on WSL (WDDM 2.8), or the distribution runs under WSL 1.",
    why="No container (and no process in this distribution) can use a GPU.",
    fix="Run `nvidia-smi` in the WSL shell: if it fails, install a current NVIDIA Windows "
        "driver (it brings CUDA for WSL; install no Linux driver inside WSL), check `wsl -l "
        "-v` shows version 2, then `wsl --shutdown` and start again.",
    docs_url="https://docs.nvidia.com/cuda/wsl-user-guide/index.html")
# NCCL refusing to join a CUDA graph capture (src/misc/strongstream.cc): built with a CUDA
# runtime older than 11.3, which the CUDA 11 NCCL wheels are, or run under a driver below R465.
NCCL_NO_GRAPH_CAPTURE = declare(
    "LOG135", Category.PACKAGE_CONFLICT,
    "NCCL cannot run inside a CUDA graph: it was built with CUDA older than 11.3",
    what="A job that captures CUDA graphs (vLLM's decode graphs, torch.compile's cudagraphs, "
         "CUDA-graph training loops) called NCCL during a capture, and this NCCL cannot join "
         "one: it was built with a CUDA runtime before 11.3 (the nvidia-nccl-cu11 wheels, "
         "'NCCL version 2.x+cuda11.0') or the driver is older than R465.",
    why="The collective returns ncclInvalidUsage and the job stops while capturing.",
    fix="Install the CUDA 12 stack (torch from a cu12x index brings an NCCL built with CUDA 12), "
        "or run without graph capture (vLLM --enforce-eager); with a driver below R465, "
        "update the driver.",
    docs_url="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/cudagraph.html")
# Triton Inference Server's Python backend creating a model instance's shared-memory region
# (triton-inference-server/python_backend src/shm_manager.cc): /dev/shm could not hold it.
SHM_REGION_TOO_SMALL = declare(
    "LOG136", Category.NCCL_SHARED_MEMORY,
    "A process could not create its shared-memory region: /dev/shm is too small",
    what="A server or worker that exchanges tensors through POSIX shared memory could not size "
         "its region in /dev/shm ('No space left on device'): a container's /dev/shm is 64 MB "
         "unless it is started with more.",
    why="The model instance (or worker) does not load, so the job or the server stops.",
    fix="Give the container more shared memory (docker run --shm-size=8g or --ipc=host; in "
        "Kubernetes an emptyDir with medium: Memory mounted at /dev/shm), or start fewer "
        "instances.",
    docs_url="https://github.com/triton-inference-server/python_backend")
# torch 0.3-0.4's warning when the GPU's architecture is newer than the build's CUDA knows
# (torch/cuda/__init__.py at v0.4.1, _check_capability): the build has no native kernels for
# it and runs through PTX JIT, so the job starts slowly and the cuDNN of that CUDA may not
# support the GPU (lquirosd/P2PaLA#11: a CUDA 8 build on an RTX 2070, then
# CUDNN_STATUS_EXECUTION_FAILED). A warning: a run may go on.
BUILD_OLDER_THAN_GPU = declare(
    "LOG137", Category.TORCH_ARCH_UNSUPPORTED,
    "The GPU needs a newer CUDA than this torch was built with (old torch's warning)",
    what="torch 0.3-0.4 warned that the GPU requires a newer CUDA_VERSION than the one the "
         "build was compiled with: it has no native kernels for this GPU and compiles PTX at "
         "start-up, and the cuDNN of that CUDA may not support the GPU at all.",
    why="Start-up is slow at best; cuDNN calls may fail (CUDNN_STATUS_EXECUTION_FAILED) on "
        "the newer GPU.",
    fix="Install a torch built with a CUDA that supports this GPU (for Turing and newer, torch "
        "1.0 or later built with CUDA 10 or newer).",
    severity=Severity.WARNING,
    docs_url="https://pytorch.org/get-started/previous-versions/")
CODES: tuple[Code, ...] = (EXTENSION_BUILD, FATAL_SIGNAL, RDMA_PROVIDER_MISSING,
                           GRAD_LAYOUT, WRAPPER_ATTRIBUTE,
                           NO_MAIN_GUARD, SOCKET_PATH_TOO_LONG, MODEL_DIFFERS,
                           INTERACTIVE_DDP, GPU_TOO_OLD_FOR_FEATURE, ALLOCATOR_FLUSHES,
                           LAUNCHER_LOCAL_RANK_OPTION, IMPORT_NAME_MISSING,
                           RECOMPILE_LIMIT, AMP_CHECK_FAILED,
                           REQUIREMENT_NOT_INSTALLED, FOREIGN_WEIGHTS, SLOW_IMAGE_STORAGE,
                           DOWNLOAD_FAILED, WEIGHTS_ONLY_DEFAULT, CUDNN_INIT,
                           FRAMEWORK_ON_CPU, DATALOADER_FD_LIMIT, GLOO_NO_ADDRESS,
                           NCCL_NOT_TORCHS, GPU_HELD_DOWN, P2P_DISABLED,
                           FABRIC_MANAGER_VERSION, SINGLE_PROCESS_MANY_GPUS,
                           KERNEL_RESOURCES, FSDP_FLATTEN, SLURM_GPU_REQUEST,
                           JAX_NO_GPU, JAX_CPU_BUILD, IMAGE_DRIVER_FILES, SSH_TO_NODE,
                           NO_CDI_SPEC, PARALLEL_SIZES, FLASH_ATTN_MISSING,
                           ZERO3_DEVICE_MAP, TRITON_MISSING, PCI_BAR_UNASSIGNED,
                           DRIVER_OOPS, MODULE_NOT_INSTALLED,
                           SYSTEM_LIBRARY_MISSING, WSL_NO_GPU_ADAPTER,
                           NCCL_NO_GRAPH_CAPTURE, SHM_REGION_TOO_SMALL,
                           BUILD_OLDER_THAN_GPU)
"""Every code declared here, for the catalogue loader."""
