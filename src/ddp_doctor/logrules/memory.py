"""Memory: the GPU's, the host's, and the shared memory DataLoader workers pass tensors in.

Sources: PyTorch's CUDA memory notes (https://pytorch.org/docs/stable/notes/cuda.html),
torch's CPU allocator message (c10/core/impl/alloc_cpu.cpp), pytorch/pytorch#81620
(CUDNN_STATUS_INTERNAL_ERROR / NOT_INITIALIZED when cuDNN cannot allocate), the
DataLoader's worker signal handling (torch/utils/data/_utils/signal_handling.py,
torch/csrc/DataLoader.cpp), PyTorch multiprocessing notes
(https://pytorch.org/docs/stable/multiprocessing.html), torchrun's failure report
(torch/distributed/elastic/multiprocessing/errors/__init__.py), the kernel's OOM killer
(https://github.com/torvalds/linux/blob/master/mm/oom_kill.c), Slurm's cgroup OOM report
(https://slurm.schedmd.com/cgroup.conf.html) and the Windows paging-file error
ultralytics/yolov5 users meet (ultralytics/yolov5#1643).
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.logrules.rule import ANY_ERROR, Rule, rx
from ddp_doctor.model import Step

NCCL_TROUBLE = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
SHM = Step("Check the size and use of /dev/shm.", command="df -h /dev/shm")
OOM_KILLER = Step("Look for the OOM killer in the kernel log.",
                  command="sudo dmesg -T | grep -i -E 'killed process|out of memory|oom'")

CUDA_OOM = declare(
    "LOG005", Category.GPU_OUT_OF_MEMORY, "CUDA out of memory",
    what="A rank asked for more GPU memory than was free.",
    why="The rank dies and takes the job with it.",
    fix="Lower the batch size per GPU, enable AMP, or free the GPU (nvidia-smi shows who "
        "else uses it).",
    docs_url="https://pytorch.org/docs/stable/notes/cuda.html#memory-management")
HOST_OOM = declare(
    "LOG006", Category.HOST_OUT_OF_MEMORY, "Host memory exhausted",
    what="A rank could not allocate host (CPU) memory.",
    why="Each rank and each DataLoader worker needs its own RAM; too many of them exhaust it.",
    fix="Use fewer DataLoader workers or a smaller batch, or run on a node with more RAM.",
    docs_url="https://pytorch.org/docs/stable/data.html#multi-process-data-loading")
KILLED = declare(
    "LOG007", Category.HOST_OUT_OF_MEMORY, "A rank was killed by SIGKILL (exit code -9)",
    what="A rank was ended by signal 9. The kernel's OOM killer (or a cgroup, Slurm or "
         "Kubernetes memory limit) is the usual sender.",
    why="torchrun then stops every other rank: the whole job dies.",
    fix="Look for 'Out of memory: Killed process' in `sudo dmesg -T` or "
        "`journalctl -k`; lower the batch or DataLoader workers, or raise the memory limit.",
    docs_url="https://pytorch.org/docs/stable/elastic/errors.html")
BUS_ERROR = declare(
    "LOG008", Category.NCCL_SHARED_MEMORY, "A rank died of SIGBUS (exit code -7)",
    what="A rank (often a DataLoader worker) touched shared memory that could not be "
         "backed: /dev/shm is full.",
    why="DataLoader workers and NCCL both need /dev/shm; a small one kills the job.",
    fix="Enlarge /dev/shm (docker run --shm-size=16g or --ipc=host), or use fewer workers.",
    docs_url=NCCL_TROUBLE)
HANDLE_OOM = declare(
    "LOG037", Category.GPU_OUT_OF_MEMORY,
    "cuDNN/cuBLAS/cuSOLVER could not create a handle (GPU memory)",
    what="cuDNN, cuBLAS or cuSOLVER failed to initialise (TensorFlow's 'could not create "
         "cudnn handle', CUDNN_STATUS_INTERNAL_ERROR, CUBLAS_STATUS_NOT_INITIALIZED, "
         "cusolverDnCreate failing). These "
         "libraries load hundreds of MB of kernels and a workspace on first use; on a nearly "
         "full GPU that allocation fails and surfaces as this status rather than as 'out of "
         "memory'.",
    why="The first convolution or matmul fails.",
    fix="Lower the batch size, free the GPU of other processes, then retry; if memory is "
        "plentiful, check the cuDNN install.",
    docs_url="https://github.com/pytorch/pytorch/issues/81620")
OOM_KILL = declare(
    "LOG038", Category.HOST_OUT_OF_MEMORY,
    "The kernel's OOM killer (or a memory limit) killed a process",
    what="The kernel, a cgroup (Docker, Kubernetes, Slurm) or the shell reports a process "
         "killed for memory: a rank or DataLoader worker used more RAM than the node or its "
         "limit allows.",
    why="The killed process vanishes without a Python error; the others then fail.",
    fix="Fewer DataLoader workers, a smaller batch, no dataset cache in RAM (Ultralytics "
        "cache=ram, YOLOv5 --cache ram), or a higher memory limit.",
    docs_url="https://github.com/torvalds/linux/blob/master/mm/oom_kill.c")
PAGING = declare(
    "LOG039", Category.HOST_OUT_OF_MEMORY, "Windows: the paging file is too small (WinError 1455)",
    what="On Windows each DataLoader worker maps torch's CUDA DLLs into its own address "
         "space, committing gigabytes of virtual memory; the paging file cannot back it.",
    why="Workers fail to import torch and the DataLoader dies.",
    fix="Use fewer DataLoader workers (num_workers; Ultralytics workers=2, YOLOv5 --workers "
        "2) or enlarge the Windows paging file.",
    docs_url="https://github.com/ultralytics/yolov5/issues/1643")
LOADER_SHM = declare(
    "LOG040", Category.NCCL_SHARED_MEMORY, "DataLoader workers ran out of shared memory (/dev/shm)",
    what="DataLoader workers pass batches to the main process through /dev/shm; it is full "
         "or too small (Docker's default is 64 MB).",
    why="Workers die with a bus error and training stops.",
    fix="docker run --ipc=host or --shm-size=16g (Kubernetes: a memory-backed emptyDir on "
        "/dev/shm), or fewer workers.",
    docs_url="https://pytorch.org/docs/stable/multiprocessing.html")
LOADER_EXIT = declare(
    "LOG041", Category.NCCL_SHARED_MEMORY, "A DataLoader worker exited unexpectedly",
    what="A DataLoader worker died without a Python error. Shared memory (/dev/shm) too "
         "small is the usual cause in containers; the OOM killer and native crashes are the "
         "others.",
    why="The DataLoader, and the training, stop.",
    fix="Check /dev/shm and the kernel log; retry with num_workers=0 to see the real error.",
    docs_url="https://pytorch.org/docs/stable/data.html#multi-process-data-loading")

RULES: tuple[Rule, ...] = (
    # Not the kernel's "PCIe Bus Error: severity=..." (AER, a hardware report: driver.py).
    Rule(BUS_ERROR, rx(r"exitcode\s*:\s*-7\b", r"signal 7 \(sigbus\)",
                       r"(?<!pcie )(?<!pci )\bbus error\b",
                       r"terminated with signal sigbus"),
         ("exitcode", "signal", "error"),
         (SHM, Step("Give the container more shared memory.",
                    command="docker run --ipc=host ...")),
         examples=("  exitcode  : -7 (pid: 12)", "Bus error (core dumped)",
                   "ERROR: Unexpected bus error encountered in worker. This might be caused by "
                   "insufficient shared memory (shm)."),
         alternatives=("host_out_of_memory: a memory-mapped file on a full disk also raises "
                       "SIGBUS",),
         decide=(SHM,)),
    # The DataLoader names the worker's signal with strsignal() (torch/utils/data/
    # dataloader.py, torch/csrc/DataLoader.cpp): "Bus error" is SIGBUS, whose word "Bus"
    # is what stays on the line when a terminal wraps the message there
    # (fastai/docker-containers#21).
    Rule(LOADER_SHM, rx(r"insufficient shared memory \(shm\)",
                        r"killed by signal: bus error",
                        r"dataloader worker \(pids?[^)]*\) (?:is|are) killed by signal: bus\b",
                        r"out of shared memory",
                        r"unable to open shared memory object",
                        r"error: unable to write to file </torch_\w+>",
                        r"error[^\n]*no space left on device[^\n]*/dev/shm",
                        r"error[^\n]*/dev/shm[^\n]*no space left on device"),
         ("memory", "killed", "error"),
         (SHM, Step("Give the container more shared memory (--ipc=host, or a fixed "
                    "--shm-size=16g).", command="docker run --ipc=host ...")),
         examples=(
             "RuntimeError: DataLoader worker (pid 2477) is killed by signal: Bus error. It is "
             "possible that dataloader's workers are out of shared memory. Please try to raise "
             "your shared memory limit.",
             "RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus",
             "RuntimeError: unable to open shared memory object </torch_4125_3470187468> in "
             "read-write mode",
             "RuntimeError: unable to write to file </torch_18692_1954506624>: No space left on "
             "device (28)")),
    # Ray's OutOfMemoryError is its memory monitor killing a worker for the node's host
    # memory ("Task was killed due to the node running low on memory": the `ray` catalogue),
    # and its RayTaskError(OutOfMemoryError) wrapper names no memory (a CUDA OOM inside the
    # task says so on its own line); torch's Inductor raises OutOfMemoryError for a kernel that
    # needs more shared memory than the GPU has ("out of resource: ...": LOG118).
    Rule(CUDA_OOM, rx(r"cuda out of memory", r"cublas_status_alloc_failed",
                      r"(?<!raytaskerror\()outofmemoryerror"
                      r"(?![^\n]*(?:node running low on memory|out of resource))",
                      r"cuda error: out of memory",
                      r"cudnn_status_alloc_failed", r"cuda_error_out_of_memory",
                      r"cuda failure \d* ?'out of memory'",
                      r"fail\w* to cuda calloc", r"cudaerrormemoryallocation"),
         ("cud", "memory", "fail"),
         (Step("See who else uses the GPU.", command="nvidia-smi"),
          Step("Lower the per-GPU batch size, or train in mixed precision "
               "(torch.autocast('cuda', dtype=torch.float16) with torch.amp.GradScaler).")),
         examples=(
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
             "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
             "`cublasCreate(handle)`",
             "RuntimeError: CUDA error: out of memory",
             "NCCL WARN Cuda failure 'out of memory'",
             "NCCL WARN Failed to CUDA calloc 4194304 bytes")),
    # Caffe's CUDNN_CHECK ("status == CUDNN_STATUS_SUCCESS (4 vs. 0)") is left to the `caffe`
    # catalogue: Caffe has no memory pool in front of cuDNN, and its INTERNAL_ERROR is
    # cudnnCreate refusing the handles a grouped convolution asks for (three per group).
    # torch's "cuDNN error: CUDNN_STATUS_NOT_INITIALIZED" is not read here: in the corpus
    # three of its four threads were a torch build whose CUDA/cuDNN did not fit the machine
    # and one a full GPU, so it is the cuDNN catalogue's LOG079 (cudnn_failure, with memory
    # as its alternative). TensorFlow's "could not create cudnn handle" stays: TensorFlow
    # maps nearly all GPU memory at start, and growing it on demand is the established fix
    # (https://github.com/tensorflow/tensorflow/issues/24496).
    Rule(HANDLE_OOM, rx(r"could not create cudnn handle",
                        r"^(?!.*status == cudnn_status_success).*cudnn_status_internal_error",
                        # cuDNN finds no algorithm when none fits the free workspace
                        r"unable to find a valid cudnn algorithm",
                        r"error: cublas_status_(?:not_initialized|internal_error)",
                        r"create cublas handle fail\w*"),
         ("cud", "fail", "error"),
         (Step("See how full the GPUs are and who uses them.", command="nvidia-smi"),
          Step("Retry with a smaller per-GPU batch, on a GPU no other process uses.")),
         examples=(
             "E tensorflow/stream_executor/cuda/cuda_dnn.cc:359] could not create cudnn "
             "handle: CUDNN_STATUS_NOT_INITIALIZED",
             "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR",
             "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling "
             "`cublasCreate(handle)`"),
         symptom_of=("LOG005", "LOG028", "LOG032", "LOG033", "LOG035", "LOG017", "LOG018"),
         alternatives=("cudnn_failure: a broken or mismatched cuDNN when memory is plentiful",
                       "hardware_fault: when an illegal memory access follows one GPU"),
         decide=(Step("How much is free on the GPU just before the job?",
                      command="nvidia-smi --query-gpu=index,memory.used,memory.total "
                              "--format=csv"),
                 Step("Does a tiny convolution work?",
                      command='python -c "import torch; print(torch.nn.Conv2d(3,8,3).cuda()'
                              '(torch.randn(1,3,32,32).cuda()).shape)"'))),
    Rule(PAGING, rx(r"winerror 1455", r"error 1455\W"), ("error",),
         (Step("Use fewer DataLoader workers: in the script DataLoader(..., num_workers=2)."),
          Step("Or enlarge the Windows paging file (System > Advanced system settings > "
               "Performance > Virtual memory).")),
         examples=("OSError: [WinError 1455] The paging file is too small for this operation to "
                   "complete. Error loading \"C:\\Users\\user\\anaconda3\\lib\\site-packages\\"
                   "torch\\lib\\cudnn_cnn_infer64_8.dll\" or one of its dependencies.",)),
    Rule(HOST_OOM, rx(r"defaultcpuallocator: can't allocate memory",
                      r"defaultcpuallocator: not enough memory",
                      r"std::bad_alloc",
                      # ENOMEM's string, except where an RDMA library quotes it for a memory
                      # registration: that is the locked-memory limit (ulimit -l), not the
                      # host's memory (NVIDIA/nccl-tests#206: 'Call to ibv_reg_mr_iova2
                      # failed with error Cannot allocate memory' under ulimit -l 8192)
                      r"^(?![^\n]*\b(?:ibv_\w+|fi_mr_reg)\b)[^\n]*cannot allocate memory",
                      r"(?<![\w.])memoryerror\b", r"arraymemoryerror"),
         ("memory", "bad_alloc"),
         (Step("Check free memory.", command="free -h"),
          Step("Use fewer DataLoader workers (DataLoader(..., num_workers=2)) or a smaller "
               "batch.")),
         examples=(
             "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: "
             "can't allocate memory: you tried to allocate 1073741824 bytes. Error code 12 "
             "(Cannot allocate memory)",
             "RuntimeError: [enforce fail at ..\\c10\\core\\impl\\alloc_cpu.cpp:72] data. "
             "DefaultCPUAllocator: not enough memory: you tried to allocate 88473600 bytes.",
             "  what():  std::bad_alloc",
             "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.52 GiB for an "
             "array with shape (1000, 640, 640, 3) and data type uint8")),
    Rule(KILLED, rx(r"exitcode\s*:\s*-9\b", r"signal 9 \(sigkill\)",
                    r"terminated with signal sigkill", r"signals\.sigkill: 9",
                    # DeepSpeed's launcher and subprocess-based launchers (accelerate)
                    r"error[^\n]*return code = -9\b",
                    r"error[^\n]*returned non-zero exit status -9\b",
                    # the shells' reports of a background job SIGKILL ended, read only as
                    # a whole line: zsh's job number, pid, "killed" and the command (zsh 5.9
                    # Src/jobs.c printjob: "[1]  + 2843557 killed     python train.py"),
                    # bash's job number, "Killed" and the command (bash 5.2 jobs.c
                    # pretty_print_job: "[1]+  Killed                  python train.py"),
                    # the command after the shells' column padding (two blanks or more)
                    r"^\s*\[[1-9]\d*\]\s*(?:[+-]\s+)?(?:\d+\s+)?killed(?:\s{2,}\S|\s*$)"),
         ("exitcode", "signal", "error", "killed"),
         (OOM_KILLER,
          Step("Use fewer DataLoader workers (DataLoader(..., num_workers=2)) or a smaller "
               "batch, or raise the memory limit.")),
         examples=("  exitcode  : -9 (pid: 812917)",
                   "[ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', "
                   "'train.py', '--local_rank=3'] exits with return code = -9",
                   "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' "
                   "returned non-zero exit status -9.",
                   "  traceback : Signal 9 (SIGKILL) received by PID 812917",
                   "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated "
                   "with signal SIGKILL",
                   "[1]    2843557 killed     python train.py",
                   "[1]+  Killed                  nohup python train.py"),
         alternatives=("unknown: a person or a scheduler (time limit, preemption) can send "
                       "SIGKILL too",),
         decide=(OOM_KILLER,)),
    Rule(OOM_KILL, rx(r"out of memory: killed process", r"memory cgroup out of memory",
                      r"error: detected \d+ oom[-_]kill event", r"oomkilled",
                      r"killed by signal\w*: killed", r"^\s*killed\s*$",
                      r"killed process \d+ \([^)]*\) total-vm"),
         ("memory", "error", "killed"),
         (OOM_KILLER, Step("Use fewer DataLoader workers (DataLoader(..., num_workers=2)) or "
                           "a smaller batch.")),
         examples=(
             "Out of memory: Killed process 14750 (python) total-vm:89392312kB, "
             "anon-rss:61234216kB, file-rss:0kB, shmem-rss:0kB",
             "slurmstepd: error: Detected 1 oom_kill event(s) in StepId=123.0. Some of the step "
             "tasks have been OOM Killed.",
             "RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed.",
             "Killed")),
    Rule(LOADER_EXIT, rx(r"error: dataloader worker \(pid\(?s?\)?[^)]*\) exited unexpectedly"),
         ("error",),
         (SHM, OOM_KILLER,
          Step("Rerun with DataLoader(..., num_workers=0) to see the worker's own error.")),
         examples=("RuntimeError: DataLoader worker (pid(s) 3084) exited unexpectedly",),
         symptom_of=(ANY_ERROR,),
         alternatives=("host_out_of_memory: the OOM killer ended the worker (dmesg says so)",
                       "unknown: a native crash (segfault) in a worker"),
         decide=(SHM, OOM_KILLER)),
)
