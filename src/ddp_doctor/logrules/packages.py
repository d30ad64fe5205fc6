"""Python packages that are missing or disagree: torch that will not import, a CPU-only
build, torchvision built for another torch, NumPy's 1.x/2.x ABI break.

Sources: torch's import errors and CPU-build assertion (pytorch/pytorch torch/__init__.py,
torch/cuda/__init__.py ``_lazy_init``), torchvision's op registration
(pytorch/vision torchvision/extension.py, pytorch/vision#1405, #8985), NumPy 2 migration
(https://numpy.org/devdocs/numpy_2_0_migration_guide.html, pytorch/pytorch#107302),
the NumPy 1.24 alias removal (https://numpy.org/devdocs/release/1.24.0-notes.html),
Ultralytics' device selection (ultralytics/ultralytics ultralytics/utils/torch_utils.py
``select_device``), the fp16 checks of accelerate's ``Accelerator`` and transformers'
``TrainingArguments`` (both refuse fp16 when torch.cuda.is_available() is False;
https://github.com/yangjianxin1/CLIP-Chinese/issues/4) pip's resolver report
(https://pip.pypa.io/en/stable/topics/dependency-resolution/), xFormers' build check
(facebookresearch/xformers xformers/_cpp_lib.py, which prints the torch it was built for
beside ``torch.__version__``), and the launcher's change of option in torch 2.0
(https://pytorch.org/docs/stable/distributed.html#launch-utility).
"""

from __future__ import annotations

import re

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.logrules.rule import ReadAs, Rule, rx
from ddp_doctor.model import Severity, Step

GET_STARTED = "https://pytorch.org/get-started/locally/"
SHOW_TORCH = Step("Show what is installed and what CUDA torch was built for.",
                  command='python -c "import torch, sys; print(sys.executable, torch.__version__, '
                          'torch.version.cuda, torch.cuda.is_available())"')
WHICH_TORCH = Step("Show which interpreter runs and which torch it has installed (without "
                   "importing it).", command='python -c "import sys; print(sys.executable)"; '
                                             'python -m pip show torch')
INSTALL_CUDA_TORCH = Step(
    "Install a CUDA build of torch from the index of a CUDA version not above nvidia-smi's "
    "'CUDA Version' (cu126 here is an example; https://pytorch.org/get-started/locally/ "
    "lists them).",
    command="pip install --force-reinstall torch torchvision --index-url "
            "https://download.pytorch.org/whl/cu126")
# A CPU-only torch build as pip, conda, collect_env, a trainer's banner or an application's
# system report names it ("torch 2.1.0+cpu", "torch==2.1.0+cpu", "torch-2.1.0+cpu",
# "PyTorch version: 2.1.0+cpu", "torch_version: 1.13.1+cpu", "torch.__version__ =
# '2.0.1+cpu'"): the +cpu local version tag is the CPU wheel's (download.pytorch.org/whl/cpu).
# In the corpus, every log that shows one (3 of 598) is a torch_cpu_only thread.
# A requirement an installer wrote with the tag ("torch>=2+cpu", anomalib's installer choosing
# https://download.pytorch.org/whl/cpu where it found no CUDA: open-edge-platform/anomalib#2068)
# names the same build.
CPU_TORCH_BUILD = re.compile(r"\b(?:py)?torch(?:==|-|\s+|[\s_.]*version[_\s]*(?:[:=]\s*)?['\"]?)"
                             r"v?\d+\.\d+(?:\.\d+)?(?:\.?(?:a|b|rc|post|dev)\d*)?\+cpu\b"
                             r"|\btorch\s*(?:>=|<=|~=|>|<)\s*\d+(?:\.\d+)*\+cpu\b",
                             re.IGNORECASE)
PAIR = Step("Reinstall torch and torchvision as a pair from the index of torch's CUDA "
            "variant (the +cuXYZ suffix printed above; cu126 here is an example), or check "
            "the pairs at https://github.com/pytorch/vision#installation.",
            command="pip install --force-reinstall torch torchvision --index-url "
                    "https://download.pytorch.org/whl/cu126")

NO_TORCH = declare(
    "LOG021", Category.TORCH_MISSING, "No module named 'torch'",
    what="The interpreter that ran the job has no PyTorch: another venv or conda env, "
         "another python than the one pip installed into, or torch._C missing because the "
         "job ran from inside a PyTorch source tree.",
    why="Nothing can train.",
    fix="Activate the environment with torch, or install torch into this interpreter "
        "(`python -m pip install torch`).",
    docs_url=GET_STARTED)
TORCH_IMPORT = declare(
    "LOG022", Category.TORCH_MISSING,
    "PyTorch fails to import (a shared library is missing or broken)",
    what="Importing torch failed while loading its native libraries: a CUDA library it needs "
         "(libcudart, libcublas, libcudnn, libnccl) was not found, or a symbol did not resolve "
         "because another copy of a library on LD_LIBRARY_PATH shadows the one torch ships, "
         "or the install is half finished.",
    why="torch cannot be used at all in this environment.",
    fix="Unset LD_LIBRARY_PATH entries that point at other CUDA/cuDNN/NCCL copies, uninstall "
        "NVIDIA wheels of another CUDA major (nvidia-*-cu11 beside -cu12), or reinstall torch "
        "in a clean environment.",
    docs_url=GET_STARTED)
CPU_BUILD = declare(
    "LOG023", Category.TORCH_CPU_ONLY, "Torch not compiled with CUDA enabled (CPU-only build)",
    what="The installed torch is a CPU-only build (+cpu wheel, the default on Windows and "
         "macOS pip, or a conda cpuonly package).",
    why="It cannot use any GPU, however healthy the driver.",
    fix="Install a CUDA build (pick the cuXXX index for your driver on pytorch.org).",
    docs_url=GET_STARTED)
CPU_BUILD_NAMED = declare(
    "LOG112", Category.TORCH_CPU_ONLY, "The log names a CPU-only torch build (+cpu)",
    what="A torch version with the +cpu local tag is shown (pip, conda, collect_env, a "
         "trainer's or an application's system report): the CPU-only wheel.",
    why="That torch can use no GPU, whatever the driver and CUDA are; a job that expects "
        "one runs on the CPU or stops.",
    fix="Install a CUDA build of torch (pick the cuXXX index for your driver on "
        "pytorch.org) in place of the +cpu one.",
    severity=Severity.WARNING,
    docs_url=GET_STARTED)
NO_CUDA = declare(
    "LOG024", Category.TORCH_CPU_ONLY, "torch.cuda.is_available() is False",
    what="PyTorch found no usable GPU. The commonest reason in tickets is a CPU-only torch; "
         "a missing or too-old driver and hidden GPUs give the same result.",
    why="The job runs on the CPU or refuses to start.",
    fix="Check torch.version.cuda (None = CPU build) and nvidia-smi; install a CUDA build "
        "or fix the driver.",
    docs_url=GET_STARTED)
TV_MISMATCH = declare(
    "LOG025", Category.PACKAGE_CONFLICT, "torchvision does not match torch",
    what="torchvision's compiled operators (nms, roi_align), or another compiled extension "
         "(detectron2, mmcv), could not load or register: it was built for another torch "
         "version or for another CUDA/CPU variant.",
    why="Detection models (YOLO, Faster R-CNN) fail at their first NMS.",
    fix="Install torch and torchvision as a matching pair from the same index URL.",
    docs_url="https://github.com/pytorch/vision#installation")
NUMPY = declare(
    "LOG026", Category.PACKAGE_CONFLICT, "NumPy version does not match the compiled packages",
    what="A package compiled against NumPy 1.x runs under NumPy 2 (ABI break), or code uses "
         "NumPy aliases removed in 1.24/2.0 (np.int, np.float, np.NaN).",
    why="Imports fail, or torch cannot exchange arrays with NumPy.",
    fix="pip install 'numpy<2' (or upgrade torch/ultralytics to releases built for NumPy 2).",
    docs_url="https://numpy.org/devdocs/numpy_2_0_migration_guide.html")
PKG_WARNING = declare(
    "LOG027", Category.PACKAGE_CONFLICT, "Package versions reported as incompatible",
    what="pip's resolver or a framework's own check reported packages that do not fit "
         "together (for example torchvision built for another torch).",
    why="It is the usual cause of later import or operator errors.",
    fix="Install the pair the message names, or upgrade torch and torchvision together.",
    severity=Severity.WARNING,
    docs_url="https://pip.pypa.io/en/stable/topics/dependency-resolution/")
LOCAL_RANK_OPTION = declare(
    "LOG078", Category.PACKAGE_CONFLICT,
    "The script rejects the --local-rank option torch's launcher passes (torch newer than "
    "the script)",
    what="From torch 2.0 on, torch.distributed.launch hands each process its rank as "
         "--local-rank=N (dashed); a script written for torch 1.x declares only --local_rank, "
         "so its argparse refuses the option. The installed torch is newer than the one the "
         "script was written for.",
    why="Every rank exits while parsing its arguments, before training starts.",
    fix="Make the script accept both spellings (and fall back to the LOCAL_RANK variable "
        "torchrun sets), or install the torch 1.x release the repository pins.",
    docs_url="https://pytorch.org/docs/stable/distributed.html#launch-utility")

# A package calls an API that a newer release of one of its dependencies removed: the
# package is older than the dependency pip installed beside it. Read only where the removed
# name is a known, stable one, since "unexpected keyword argument" or "cannot import name"
# alone is as often a bug in the user's own code:
# - yapf 0.40.2 dropped FormatCode's verify= argument, which mmcv 1.x's Config.pretty_text
#   (and so every OpenMMLab 1.x trainer dumping its config) passes
#   (https://github.com/google/yapf/blob/main/CHANGELOG.md,
#   https://github.com/WoojuLee24/OA-DG/issues/3);
# - torch dropped container_abcs (and its other Python 2 shims) from torch/_six.py after
#   1.8, and deleted the module in 2.0, which older timm, apex and detection repositories
#   import; Python 3.6 and older print the failed from-import without its module
#   ("ImportError: cannot import name 'container_abcs'", pengzhiliang/Conformer#2), so the
#   names only torch/_six.py defined (container_abcs, int_classes, string_classes: torch
#   v1.8.1 torch/_six.py) are read alone too;
# - setuptools 59.6 stopped importing distutils.version, which torch < 1.11's
#   torch.utils.tensorboard uses as distutils.version.LooseVersion
#   (https://github.com/pytorch/pytorch/issues/69894).
API_REMOVED = declare(
    "LOG083", Category.PACKAGE_CONFLICT,
    "A package calls an API that the installed release of its dependency removed",
    what="A library was written for an older release of a package it uses, and pip "
         "installed a newer one without it: mmcv 1.x's Config with yapf >= 0.40.2 "
         "(FormatCode's verify= removed), code importing torch._six with a newer torch, "
         "torch < 1.11's TensorBoard writer with setuptools >= 59.6 (distutils.version).",
    why="The job stops at the call, usually before the first training step.",
    fix="Pin the dependency to the release the library was written for (yapf==0.40.1, "
        "setuptools<59.6) or upgrade the library to a release that knows the new API.",
    docs_url="https://pip.pypa.io/en/stable/topics/dependency-resolution/")

# bitsandbytes before 0.43 looked for a CUDA runtime library of its own and loaded the
# binary built for that CUDA version; when it found none that fitted it raised "CUDA Setup
# failed despite GPU being available. Please run the following command to get more
# information: python -m bitsandbytes" (bitsandbytes/cuda_setup/main.py). Its maintainer
# diagnosed an outdated release whose CUDA setup did not know the environment, fixed by
# upgrading (bitsandbytes-foundation/bitsandbytes#492); 0.43 and later use torch's CUDA.
BNB_SETUP = declare(
    "LOG088", Category.PACKAGE_CONFLICT,
    "bitsandbytes found no CUDA library it can load, although the GPU works",
    what="bitsandbytes (8-bit optimizers and quantisation) could not load a native CUDA "
         "library matching this environment: its release predates the installed CUDA or "
         "torch, or cannot find the CUDA runtime beside them. torch itself sees the GPU.",
    why="Every model or optimizer that imports bitsandbytes (8-bit Adam, QLoRA) stops at "
        "start-up, on every rank.",
    fix="Upgrade bitsandbytes (from 0.43 it uses torch's own CUDA); `python -m bitsandbytes` "
        "shows which libraries it looked for.",
    docs_url="https://github.com/bitsandbytes-foundation/bitsandbytes/issues/492")

RULES: tuple[Rule, ...] = (
    Rule(NO_TORCH, rx(r"no module named ['\"]?torch(?:\._c)?(?:['\"]|\s*$)",
                      # Python 2 names only the last part of the module: its "No module
                      # named _C" comes from torch/__init__.py's "from torch._C import *"
                      # (https://github.com/pytorch/pytorch/issues/574: a torch/ folder in
                      # the working directory shadowed the installed package)
                      r"error: no module named _c\s*$",
                      # torch's own words when torch._C turns out to be a folder, not the
                      # compiled extension: a source checkout in the working directory, or
                      # a torch wheel made for another Python (torch/__init__.py)
                      r"fail\w* to load pytorch c extensions"),
         ("no module named", "fail"),
         (WHICH_TORCH, Step("Install torch into this interpreter (the selector on the page "
                           "gives the command for a CUDA build).",
                           command="python -m pip install torch", url=GET_STARTED)),
         examples=("ModuleNotFoundError: No module named 'torch'",
                   "ModuleNotFoundError: No module named 'torch._C'",
                   "/usr/bin/python3: No module named torch",
                   "ImportError: No module named _C",
                   "ImportError: Failed to load PyTorch C extensions:")),
    # Not cuDNN 8's own loader ("Could not load library libcudnn_X.so.8. Error: ..."): it
    # opens its sub-libraries lazily at the first cuDNN call, after torch imported (LOG033).
    # A missing libcudnn is not read here: TensorFlow, Paddle, onnxruntime and nnabla print
    # the same loader line when cuDNN is absent (cudnn_failure, the `loader` catalogue's
    # LOG033 entry); that entry is read as this code where the log shows torch's own import
    # failing (the "torch-import" environment of diagnose/context.py). Nor TensorFlow's
    # dso_loader warning ("Could not load dynamic library 'libcudart.so.11.0'; dlerror: ..."):
    # TensorFlow then skips the GPUs ("Cannot dlopen some GPU libraries", the `tensorflow`
    # catalogue), and a torch job that imports it in passing trains on regardless.
    Rule(TORCH_IMPORT, rx(r"^(?!.*could not load (?:dynamic )?library)[^\n]*"
                          r"error: \S*lib(?:cudart|cublas\w*|nccl|cusparse\w*|cufft\w*"
                          r"|curand|cusolver\w*|nvjitlink|nvrtc|c10\w*|torch\w*|shm)"
                          r"\.so[.\d]*: cannot open shared object file",
                          # torch's own libraries (libtorch_cuda.so, libc10.so), not those of
                          # packages built on it (torchaudio's libtorchaudio.so, torch_npu's
                          # libtorch_npu.so, Habana's .../habana_frameworks/torch/lib/: LOG025)
                          r"error: \S*(?:[-/]packages/torch/lib/|/pytorch/torch/lib/"
                          r"|/torch/_c\.|libtorch(?:_cpu|_cuda(?:_cpp|_cu|_linalg)?|_python"
                          r"|_global_deps|_hip)?\.so|libc10(?:_cuda|_hip)?\.so)\S*: undefined "
                          r"symbol",
                          r"dll load fail\w* while importing _c\b",
                          # a system libstdc++ older than the one torch was built against
                          r"error: [^\n]*version .glibcxx_[\d.]+. not found[^\n]*torch",
                          r"error loading \S*torch\\lib\\\S+\.dll"),
         ("error", "fail"),
         (WHICH_TORCH,
          Step("Look for other CUDA/cuDNN/NCCL copies shadowing torch's own.",
               command="echo $LD_LIBRARY_PATH"),
          Step("List torch and the NVIDIA wheels: cu11 and cu12 copies installed side by side "
               "shadow each other; uninstall the ones this torch does not use.",
               command="pip list 2>/dev/null | grep -i -E '^(torch|nvidia-)'"),
          Step("Reinstall torch cleanly at the version and CUDA variant pip shows (2.5.1 and "
               "cu124 here are an example).",
               command="pip install --force-reinstall torch==2.5.1 --index-url "
                       "https://download.pytorch.org/whl/cu124")),
         examples=(
             "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or "
             "directory",
             "OSError: libnccl.so.2: cannot open shared object file: No such file or directory",
             "ImportError: /opt/conda/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so: "
             "undefined symbol: ncclCommRegister",
             "ImportError: DLL load failed while importing _C: The specified module could not "
             "be found.",
             'OSError: [WinError 126] The specified module could not be found. Error loading '
             '"C:\\Python310\\lib\\site-packages\\torch\\lib\\c10.dll" or one of its '
             'dependencies.'),
         symptom_of=("LOG039",),
         alternatives=("package_conflict: an nccl* undefined symbol means a second NCCL (an "
                       "extra nvidia-nccl wheel or LD_LIBRARY_PATH) shadows torch's",),
         decide=(Step("Which libraries does torch resolve?",
                      command="ldd $(python -c 'import importlib.util,os;print(os.path."
                              "dirname(importlib.util.find_spec(\"torch\").origin))')"
                              "/lib/libtorch_cuda.so | grep -E 'not found|nccl|cudnn'"),)),
    Rule(CPU_BUILD, rx(r"torch not compiled with cuda enabled",
                       # xFormers' build check prints "PyTorch <built for> with CUDA <n>
                       # (you have <torch.__version__>)": a "+cpu" there is the CPU wheel
                       # (https://github.com/open-mmlab/PIA/issues/30)
                       r"with cuda \S+ \(you have [^)\s]*\+cpu\)"),
         ("cud",),
         (SHOW_TORCH, INSTALL_CUDA_TORCH),
         examples=("AssertionError: Torch not compiled with CUDA enabled",
                   "    PyTorch 2.1.2+cu121 with CUDA 1201 (you have 2.1.2+cpu)"),
         relations=(ReadAs("cpu-torch", code="LOG023",
                           categories=(Category.GPU_NOT_VISIBLE, Category.CUDA_INIT_FAILURE),
                           reason="A CPU-only torch build named in the log (torch 2.1.0+cpu "
                                  "as pip, conda or collect_env print it) can use no GPU, "
                                  "whatever CUDA says elsewhere."),)),
    # Warning, not error: a job that trains on purpose on the CPU (gloo) shows the same
    # version, and its own error must lead; where nothing failed in words (an application's
    # system report with "device: cpu", brycedrennan/imaginAIry#398) it is the finding.
    Rule(CPU_BUILD_NAMED, CPU_TORCH_BUILD, ("+cpu",), (SHOW_TORCH, INSTALL_CUDA_TORCH),
         examples=("torch_version:                 1.13.1+cpu",
                   "PyTorch version: 2.1.0+cpu", "torch==2.3.1+cpu",
                   "Successfully installed torch-2.1.0+cpu"),
         # the version line is then the evidence of the CPU build those name
         symptom_of=("LOG023", "LOG024")),
    Rule(NO_CUDA, rx(r"torch\.cuda\.is_available\(\)(?::| is| returns?) false",
                     r"cuda unavailable, invalid device \S+ requested",
                     r"error: processgroupnccl is only supported with gpus, no gpus found",
                     r"torch\.cuda\.device_count\(\): 0\b",
                     # fp16 asked of a process without CUDA: accelerate's Accelerator and
                     # transformers' TrainingArguments check torch.cuda.is_available() first
                     r"error: fp16 mixed precision requires a gpu",
                     # a library's own check of torch.cuda.is_available(), raised as an error
                     # (FATE's "ValueError: Cuda is not available on this machine",
                     # FederatedAI/FATE#5034: a CPU-only torch)
                     r"(?:error|exception):\s*cuda is not available\b",
                     r"fp16 mixed precision training with amp or apex \(`--fp16`\)[^\n]*can "
                     r"only be used on cuda"),
         ("cud", "error"),
         (SHOW_TORCH, Step("See whether the driver sees GPUs.", command="nvidia-smi")),
         examples=(
             "torch.cuda.is_available(): False",
             "AssertionError: CUDA unavailable, invalid device 0 requested",
             "RuntimeError: Attempting to deserialize object on a CUDA device but "
             "torch.cuda.is_available() is False. If you are running on a CPU-only machine, "
             "please use torch.load with map_location=torch.device('cpu') to map your storages "
             "to the CPU.",
             "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
             "ValueError: fp16 mixed precision requires a GPU",
             "ValueError: Cuda is not available on this machine",
             "FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half precision "
             "evaluation (`--fp16_full_eval`) can only be used on CUDA devices."),
         symptom_of=("LOG009", "LOG010", "LOG011", "LOG013", "LOG014", "LOG015", "LOG016",
                     "LOG018", "LOG020", "LOG023", "LOG030", "LOG071", "LOG072"),
         alternatives=(
             "driver_missing: no driver loaded (nvidia-smi fails)",
             "driver_too_old: the driver supports an older CUDA than torch.version.cuda",
             "gpu_not_visible: CUDA_VISIBLE_DEVICES is empty or invalid",
             "cuda_init_failure: the driver is there but CUDA cannot start"),
         decide=(SHOW_TORCH, Step("See whether the driver sees GPUs.", command="nvidia-smi"),
                 Step("Hidden GPUs?", command="echo \"$CUDA_VISIBLE_DEVICES\""))),
    Rule(TV_MISMATCH, rx(r"error: operator torchvision::\w+ does not exist",
                         r"error: no such operator torchvision::\w+",
                         r"fail\w* to register operator torchvision::",
                         r"error: could not run 'torchvision::\w+' with arguments from the "
                         r"'cuda' backend",
                         r"error: couldn.t load custom c\+\+ ops",
                         r"error: \S*torchvision\S*: undefined symbol",
                         r"detected that pytorch and torchvision were compiled with different "
                         r"cuda (?:major )?versions",
                         # the same check when the terminal wrapped the line before "CUDA"
                         r"error: detected that pytorch and torchvision were compiled with "
                         r"different"),
         ("error", "fail", "cud"),
         (Step("Show both versions.",
               command='python -c "import torch, torchvision; print(torch.__version__, '
                       'torchvision.__version__)"'), PAIR),
         examples=(
             "RuntimeError: operator torchvision::nms does not exist",
             "RuntimeError: No such operator torchvision::nms",
             "NotImplementedError: Could not run 'torchvision::nms' with arguments from the "
             "'CUDA' backend.",
             "OSError: /usr/local/lib/python3.8/dist-packages/torchvision/_C.so: undefined "
             "symbol: _ZN3c106detail19maybe_wrap_dim_slowEllb",
             "RuntimeError: Detected that PyTorch and torchvision were compiled with different "
             "CUDA versions. PyTorch has CUDA Version=11.8 and torchvision has CUDA "
             "Version=12.1. Please reinstall the torchvision that matches your PyTorch "
             "install.",
             "RuntimeError: Detected that PyTorch and torchvision were compiled with different")),
    # A C++ symbol (mangled, "_Z...") that a compiled extension needs and the loaded torch
    # (or library) lacks: the extension was built against another version. The loader's
    # line is enough, with or without the ImportError users often leave out.
    # The loader's message starts with the file it refused; when that file is a CPython
    # extension module (name.cpython-<abi>-<platform>.so) other than torch's own _C, the
    # extension itself would not load against what is installed - most often built by pip in
    # an isolated build environment that fetched another torch
    # (https://github.com/toshas/torch-discounted-cumsum/issues/9). A pasted log often keeps
    # only the path, cut before the symbol.
    Rule(TV_MISMATCH, rx(r"error: \S+\.so: undefined symbol: _z",
                         r"(?:^|[\s\"'])(?:\S+\.so(?:\.\d+)*: )?undefined symbol: _z\w",
                         r"importerror: (?!\S*/torch/_c\.)\S*\.cpython-\w+-[\w-]+\.so\b"),
         ("error", "undefined symbol"),
         (Step("Rebuild that extension (the package in the path above) from source against "
               "the installed torch, without letting pip replace torch or build in an isolated "
               "environment with another torch; or install the wheel built for this torch.",
               command="pip install --no-cache-dir --force-reinstall --no-deps "
                       "--no-build-isolation --no-binary PACKAGE PACKAGE"),),
         examples=("ImportError: /envs/detect2/lib/python3.6/site-packages/detectron2/_C.cpython-"
                   "36m-x86_64-linux-gnu.so: undefined symbol: "
                   "_ZNK2at10TensorBase8data_ptrIdEEPT_v",
                   "undefined symbol: _ZN2at4_ops5zeros4callEN3c108ArrayRefINS2_6SymIntEEE",
                   "/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined "
                   "symbol: _ZN3c104cuda9SetDeviceEi",
                   "'ImportError: .../lib/python3.7/site-packages/torch_discounted_cumsum_cpu."
                   "cpython-37m-x86_64-linux-gnu.so'"),
         symptom_of=("LOG022", "LOG033")),
    Rule(NUMPY, rx(r"compiled using numpy 1\.x cannot be run in",
                   # not torch's import-time warning when NumPy is simply absent
                   # ("Failed to initialize NumPy: No module named 'numpy'"): torch
                   # works without it; the ABI break says "_ARRAY_API not found"
                   r"fail\w* to initialize numpy(?!: no module named)",
                   r"error: _array_api not found",
                   r"numpy\.core\.multiarray failed to import",
                   r"error: numpy is not available",
                   r"error: numpy\.dtype size changed",
                   r"error: module 'numpy' has no attribute '(?:int|float|bool|object|str|long"
                   r"|complex)'",
                   r"error: `?np\.\w+`? was removed in the numpy 2\.0 release"),
         ("error", "fail", "numpy"),
         (Step("Show the NumPy version.",
               command='python -c "import numpy; print(numpy.__version__)"'),
          Step("Go back to NumPy 1.x (or upgrade the packages built for 1.x).",
               command="pip install 'numpy<2'")),
         examples=(
             "UserWarning: Failed to initialize NumPy: _ARRAY_API not found (Triggered "
             "internally at ../torch/csrc/utils/tensor_numpy.cpp:84.)",
             "RuntimeError: Numpy is not available",
             "AttributeError: module 'numpy' has no attribute 'int'.",
             "AttributeError: `np.NaN` was removed in the NumPy 2.0 release. Use `np.nan` "
             "instead.",
             "ImportError: numpy.core.multiarray failed to import",
             "A module that was compiled using NumPy 1.x cannot be run in")),
    Rule(PKG_WARNING, rx(r"error: pip's dependency resolver does not currently take into account",
                         r"warning\W[^\n]*torchvision==\S+ is incompatible with torch==",
                         r"fail\w* to load image python extension",
                         # xFormers' build check ("xFormers can't load C++/CUDA extensions.
                         # xFormers was built for:" then this line): its wheel was built for
                         # another torch than the installed one, so its kernels cannot load
                         # (xformers/_cpp_lib.py; https://github.com/Doubiiu/DynamiCrafter/
                         # issues/86, https://github.com/sdbds/musubi-tuner-scripts/issues/4).
                         # The same torch on both sides (only Python differs) says nothing of
                         # torch, and a "+cpu" torch is the CPU build (LOG023).
                         r"pytorch (?P<xformers_torch>\S+) with cuda \S+ \(you have "
                         r"(?!(?P=xformers_torch)\))(?![^)\s]*\+cpu\))[^)\s]+\)"),
         ("error", "warn", "fail", "cud"),
         (PAIR,),
         examples=(
             "ERROR: pip's dependency resolver does not currently take into account all the "
             "packages that are installed. This behaviour is the source of the following "
             "dependency conflicts.",
             "WARNING ⚠️ torchvision==0.16 is incompatible with torch==2.3.",
             "UserWarning: Failed to load image Python extension: '/usr/lib/python3/"
             "site-packages/torchvision/image.so: undefined symbol: _ZN3c1017RegisterOperators"
             "D1Ev'",
             "    PyTorch 2.5.1+cu124 with CUDA 1204 (you have 2.6.0+cu124)",
             "    PyTorch 2.3.0+cu121 with CUDA None (you have 2.0.0+cu117)")),
    # torch 2.0's torch.distributed.launch passes "--local-rank=N" where 1.x passed
    # "--local_rank=N" (https://pytorch.org/docs/stable/distributed.html#launch-utility), so
    # argparse's "error: unrecognized arguments: --local-rank=N" is a script written for
    # torch 1.x run under torch 2.x (https://github.com/huggingface/pytorch-image-models/
    # issues/1728, https://github.com/lmy98129/VLPD/issues/6). The underscored spelling
    # refused is not read here: DeepSpeed's launcher passes it too, to scripts that take
    # their rank from the environment, which is a different mistake.
    Rule(LOCAL_RANK_OPTION, rx(r"error: unrecognized arguments:[^\n]*--local-rank\b"),
         ("error",),
         (Step("Show the torch version: its launcher passes --local-rank from 2.0 on.",
               command='python -c "import torch; print(torch.__version__)"'),
          Step("Make the script accept both spellings, with torchrun's LOCAL_RANK variable "
               "as the default: parser.add_argument('--local-rank', '--local_rank', "
               "dest='local_rank', type=int, default=int(os.environ.get('LOCAL_RANK', 0)))."),
          Step("Then launch with torchrun, which sets LOCAL_RANK instead of passing an option "
               "(2 GPUs here); or install the torch 1.x release the repository pins.",
               command="torchrun --nproc_per_node=2 train.py")),
         examples=("train.py: error: unrecognized arguments: --local-rank=0",
                   "trainval_distributed.py: error: unrecognized arguments: --local-rank=1")),
    Rule(API_REMOVED, rx(r"error: formatcode\(\) got an unexpected keyword argument "
                         r"'verify'",
                         r"error: cannot import name '\w+' from 'torch\._six'",
                         r"error: cannot import name '(?:container_abcs|int_classes|"
                         r"string_classes)'(?! from)",
                         r"error: no module named 'torch\._six'",
                         r"error: module 'distutils' has no attribute 'version'"),
         ("error",),
         (Step("Show the installed releases of the packages in the traceback's last frames "
               "(the caller's and the callee's).",
               command="python -m pip list 2>/dev/null | grep -i -E "
                       "'^(yapf|mmcv|mmengine|setuptools|torch|timm|apex) '"),
          Step("Pin the dependency to the release the caller was written for (mmcv 1.x's "
               "Config needs yapf before 0.40.2; torch < 1.11's TensorBoard writer needs "
               "setuptools before 59.6), or upgrade the caller.",
               command="python -m pip install 'yapf==0.40.1'")),
         examples=(
             "TypeError: FormatCode() got an unexpected keyword argument 'verify'",
             "ImportError: cannot import name 'container_abcs' from 'torch._six' "
             "(/usr/local/lib/python3.8/dist-packages/torch/_six.py)",
             "ModuleNotFoundError: No module named 'torch._six'",
             "ImportError: cannot import name 'container_abcs'",
             "AttributeError: module 'distutils' has no attribute 'version'")),
    Rule(BNB_SETUP, rx(r"cuda setup failed despite gpu being available"),
         ("fail", "cud"),
         (Step("See which CUDA libraries bitsandbytes looked for and which it found.",
               command="python -m bitsandbytes"),
          Step("Upgrade bitsandbytes to a release that loads its kernels through torch's CUDA.",
               command="python -m pip install -U bitsandbytes")),
         examples=("        CUDA Setup failed despite GPU being available. Please run the "
                   "following",  # the message under "RuntimeError: ", on its own line
                   "│   21 │   │   CUDA Setup failed despite GPU being available. Please run "
                   "the f │"),  # rich's traceback box
         alternatives=("cuda_init_failure: where torch.cuda.is_available() is False too, CUDA "
                       "itself cannot start",),
         decide=(Step("Does torch see the GPU in the same environment?",
                      command="python -c \"import torch; print(torch.cuda.is_available())\""),)),
)
