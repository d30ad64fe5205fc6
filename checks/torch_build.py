"""PyTorch install checks: can torch be imported, and was it built with CUDA?

Sources:
- Wheel variants and their index URLs: https://pytorch.org/get-started/locally/
- ``torch.version.cuda`` is None and ``torch.__version__`` ends in ``+cpu`` for CPU
  builds; using CUDA then raises "Torch not compiled with CUDA enabled"
  (pytorch/pytorch ``torch/cuda/__init__.py``).
- A half-installed or mixed install fails at import with a missing shared library,
  e.g. "libcudnn.so.9: cannot open shared object file" (pytorch/pytorch#122924 and
  similar threads): reinstalling into a clean environment is the fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpu_doctor.checks._util import nvidia_gpus_present, wheel_advice, wheel_for_machine

from gpu_doctor.categories import Category
from gpu_doctor.knowledge.wheels import INSTALL_GUIDE, install_command
from gpu_doctor.model import Code, Evidence, Finding, Severity, Step
from gpu_doctor.registry import Summary, check

TORCH_MISSING = Code(
    id="TOR001",
    category=Category.TORCH_MISSING,
    summary="PyTorch cannot be imported",
    what=(
        "`import torch` fails in the interpreter that will run training: torch is not "
        "installed there, or its import breaks (a missing shared library, an ABI error, "
        "a half-finished install)."
    ),
    why="Nothing can train: every launcher and rank dies at its first line.",
    fix=(
        "Install a CUDA build of PyTorch into this interpreter with the command from "
        "pytorch.org that matches your driver; if it is installed but broken, reinstall it "
        "into a fresh virtual environment."
    ),
    docs_url=INSTALL_GUIDE,
)

TORCH_CPU_ONLY = Code(
    id="TOR002",
    category=Category.TORCH_CPU_ONLY,
    summary="PyTorch was built without CUDA",
    what=(
        "The installed torch is a CPU-only build (`+cpu` in its version, "
        "`torch.version.cuda` is None). pip picks this build from PyPI on some platforms "
        "or when installed without PyTorch's CUDA index URL."
    ),
    why=(
        "It cannot use any GPU: `torch.cuda.is_available()` is False, `.cuda()` raises "
        "'Torch not compiled with CUDA enabled', and DDP can only use the gloo backend."
    ),
    fix=(
        "Uninstall torch (and torchvision/torchaudio) and install the CUDA build that "
        "matches your driver from https://download.pytorch.org/whl/cuXYZ."
    ),
    docs_url=INSTALL_GUIDE,
)


def _python_evidence(facts: Any) -> Evidence:
    python = facts.get("python") or {}
    return Evidence("interpreter", f"{python.get('executable')} (Python {python.get('version')})",
                    "interpreter probe")


@check(
    id="torch.import",
    title="PyTorch import",
    area="pytorch",
    requires=("torch", "python"),
    codes=(TORCH_MISSING,),
)
def torch_importable(facts: Any) -> Iterator[Finding | Summary]:
    torch = facts["torch"]
    if torch.get("importable"):
        build = torch.get("build") or {}
        yield Summary(f"torch {build.get('version')} from {build.get('file')}")
        return
    error = torch.get("import_error") or {}
    kind = error.get("type") or "ImportError"
    message = error.get("message") or "unknown error"
    variant = wheel_for_machine(facts)
    command = install_command(variant)
    evidence = [_python_evidence(facts), Evidence("import torch", f"{kind}: {message}",
                                                  "interpreter probe")]
    probe = torch.get("probe") or {}
    if probe.get("stderr_tail"):
        evidence.append(Evidence("stderr", probe["stderr_tail"][-1500:], "interpreter probe"))
    if kind == "ModuleNotFoundError" and message == "No module named 'torch'":
        title = "PyTorch is not installed in this interpreter"
        steps = [
            Step(f"Install a CUDA build of PyTorch: {wheel_advice(facts, variant)}.",
                 command=command, url=INSTALL_GUIDE),
            Step("Make sure you run the doctor with the interpreter that runs training "
                 "(activate its virtual environment, or pass `--python /path/to/python`)."),
        ]
    else:
        title = f"import torch fails: {kind}"
        steps = [
            Step("Create a clean virtual environment; a half-upgraded torch or mixed "
                 "CUDA libraries in one environment are the usual cause.",
                 command="python -m venv ~/venvs/train && . ~/venvs/train/bin/activate"),
            Step("Reinstall torch there with one command, so every CUDA library comes from "
                 "the same build.", command=command, url=INSTALL_GUIDE),
            Step("If the error names a missing .so, check that LD_LIBRARY_PATH does not point "
                 "at another CUDA or cuDNN installation.", command="echo $LD_LIBRARY_PATH"),
        ]
    yield Finding(code=TORCH_MISSING, title=title, evidence=tuple(evidence),
                  remediation=tuple(steps))


@check(
    id="torch.cuda_build",
    title="PyTorch CUDA build",
    area="pytorch",
    requires=("torch",),
    codes=(TORCH_CPU_ONLY,),
    blocked_by=("torch.import",),
)
def torch_cuda_build(facts: Any) -> Iterator[Finding | Summary]:
    build = facts["torch"].get("build")
    if not build:
        # The probe imported torch but died (hang, crash) before reporting the build: an
        # unknown build is not a CPU build; the probe's own failure is reported elsewhere.
        yield Summary("torch build not reported by the probe: cannot tell whether it has CUDA")
        return
    if build.get("cuda"):
        yield Summary(f"built for CUDA {build['cuda']}")
        return
    if build.get("hip"):
        yield Summary(f"built for ROCm {build['hip']}")
        return
    gpus_present = nvidia_gpus_present(facts)
    variant = wheel_for_machine(facts)
    steps = [
        Step("Remove the CPU-only build.", command="pip uninstall -y torch torchvision torchaudio"),
        Step(
            f"Install a CUDA build: {wheel_advice(facts, variant)}.",
            command=install_command(variant, "torch torchvision torchaudio"),
            url=INSTALL_GUIDE,
        ),
        Step("Confirm that torch sees the GPUs.",
             command='python -c "import torch; print(torch.version.cuda, '
                     'torch.cuda.device_count())"'),
    ]
    yield Finding(
        code=TORCH_CPU_ONLY,
        title=f"torch {build.get('version')} is a CPU-only build"
        + ("" if gpus_present else " (this machine has no NVIDIA GPU either)"),
        severity=Severity.ERROR if gpus_present else Severity.WARNING,
        evidence=(
            Evidence("torch.__version__", str(build.get("version")), "interpreter probe"),
            Evidence("torch.version.cuda", str(build.get("cuda")), "interpreter probe"),
            _python_evidence(facts),
        ),
        remediation=tuple(steps),
    )
