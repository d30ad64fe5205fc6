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
from ddp_doctor.model import Code

EXTENSION_BUILD = declare(
    "LOG089", Category.PACKAGE_CONFLICT,
    "A compiled extension was built for another PyTorch or CUDA than the one installed",
    what="A package with its own compiled CUDA/C++ code (torch_sparse, torch_scatter, "
         "torch_cluster, mmcv, apex, detectron2, xFormers, flash-attn) checked the torch or "
         "CUDA version it was built against and found a different one, or its compiled "
         "module failed to load: it was installed for another torch release or CUDA variant, "
         "or torch was upgraded after it.",
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

CODES: tuple[Code, ...] = (EXTENSION_BUILD, FATAL_SIGNAL)
"""Every code declared here, for the catalogue loader."""
