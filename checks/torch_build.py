"""PyTorch install checks: can torch be imported, was it built with CUDA, for these GPUs?

Sources:
- Wheel variants and their index URLs: https://pytorch.org/get-started/locally/
- ``torch.version.cuda`` is None and ``torch.__version__`` ends in ``+cpu`` for CPU
  builds; using CUDA then raises "Torch not compiled with CUDA enabled"
  (pytorch/pytorch ``torch/cuda/__init__.py``).
- A half-installed or mixed install fails at import with a missing shared library,
  e.g. "libcudnn.so.9: cannot open shared object file" (pytorch/pytorch#122924 and
  similar threads): reinstalling into a clean environment is the fix.
- ROCm builds carry ``+rocmX.Y`` and set ``torch.version.hip``: https://pytorch.org/get-started/locally/
- Kernels per GPU (cubin/PTX rules, wheel arch lists): see ``ddp_doctor.knowledge.arch``;
  "sm_120 is not compatible with the current PyTorch installation" on an RTX 5090 with a
  cu121 wheel: pytorch/pytorch#150733, magicyuan876/mineru-tianshu#62.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import TorchBuild
from ddp_doctor.facts.view import FactsView
from ddp_doctor.knowledge.arch import (
    Support,
    parse_arch,
    parse_capability,
    support_for,
)
from ddp_doctor.knowledge.wheels import INSTALL_GUIDE
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check

from ._util import MORE_PROBE_TIME, install_steps

TORCH_MISSING = declare(
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

TORCH_CPU_ONLY = declare(
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


def _python_evidence(facts: FactsView) -> Evidence:
    python = facts.python()
    exe = python.get("executable") or "path not shown"
    version = python.get("version")
    return Evidence("interpreter", f"{exe} (Python {version})" if version else exe,
                    "interpreter probe")


def _cuda_build_evidence(cuda: str | None) -> Evidence:
    """``torch.version.cuda`` as a person reads it: a version, or that there is none."""
    return Evidence("torch.version.cuda", cuda or "absent: this build has no CUDA",
                    "interpreter probe")


@check(
    id="torch.import",
    title="PyTorch import",
    area="pytorch",
    requires=("torch", "python"),
    codes=(TORCH_MISSING,),
)
def torch_importable(facts: FactsView) -> Iterator[Finding | Summary]:
    torch = facts.torch()
    if torch.get("importable"):
        build = facts.torch_build()
        file = build.get("file")
        where = f" from {file}" if file else ""
        yield Summary(f"torch {build.get('version') or '(version not reported)'}{where}")
        return
    error = torch.get("import_error") or {}
    kind = error.get("type") or "ImportError"
    message = error.get("message") or "unknown error"
    install = (_cpu_only_steps(facts) if _no_gpu_here(facts)
               else install_steps(facts, "torch torchvision"))
    evidence = [_python_evidence(facts), Evidence("import torch", f"{kind}: {message}",
                                                  "interpreter probe")]
    stderr_tail = (torch.get("probe") or {}).get("stderr_tail")
    if stderr_tail:
        evidence.append(Evidence("stderr", stderr_tail[-1500:], "interpreter probe"))
    probe = torch.get("probe") or {}
    if kind == "ProbeFailure" and probe.get("timed_out") and \
            probe.get("last_stage") == "import torch":
        # The deadline cut the import short (seen with --probe-timeout 1 on an H200, where
        # import torch takes 3-4 s): nothing says the install is broken, so no reinstall.
        python = facts.target_python()
        yield Finding(
            code=TORCH_MISSING,
            title="import torch did not finish before the probe's deadline"
                  + (f" ({probe['duration_s']:.1f} s)" if probe.get("duration_s") else ""),
            evidence=tuple(evidence),
            remediation=(
                Step("Time the import by hand: a CUDA build loads gigabytes of libraries, "
                     "slow from a cold cache or a network filesystem.",
                     command=f'time {python} -c "import torch"'),
                MORE_PROBE_TIME,
                Step("If it never finishes, interrupt it after two minutes: the traceback "
                     "shows where it waits.",
                     command=f'timeout -s INT 120 {python} -c "import torch"'),
            ),
            docs_url=TORCH_MISSING.docs_url)
        return
    if kind == "ModuleNotFoundError" and message == "No module named 'torch'":
        title = "PyTorch is not installed in this interpreter"
        steps = [
            *install,
            Step("Make sure you run the doctor with the interpreter that runs training "
                 "(activate its virtual environment, or pass `--python /path/to/python`)."),
        ]
    else:
        title = f"import torch fails: {kind}"
        steps = [
            Step("Create a clean virtual environment; a half-upgraded torch or mixed "
                 "CUDA libraries in one environment are the usual cause.",
                 command=f"{facts.target_python()} -m venv ~/venvs/train && "
                         ". ~/venvs/train/bin/activate"),
            *[Step("Reinstall torch there with one command, so every CUDA library comes from "
                   f"the same build. {step.text}",
                   command=step.command and step.command.replace(
                       facts.target_pip(), "python -m pip", 1), url=step.url)
              for step in install],
            Step("If the error names a missing .so, check that LD_LIBRARY_PATH does not point "
                 "at another CUDA or cuDNN installation.", command="echo $LD_LIBRARY_PATH"),
        ]
    yield Finding(code=TORCH_MISSING, title=title, evidence=tuple(evidence),
                  remediation=tuple(steps))


CPU_INDEX = "https://download.pytorch.org/whl/cpu"
"""PyTorch's index of CPU-only wheels (https://pytorch.org/get-started/locally/)."""


def _no_gpu_here(facts: FactsView) -> bool:
    """NVML or the PCI scan was looked at and shows no NVIDIA GPU: no CUDA build of torch
    can run on this machine, whatever driver a later one gets."""
    gpus_known = facts.available("nvml") or facts.available("driver")
    return gpus_known and not facts.nvidia_gpus_present()


def _cpu_only_steps(facts: FactsView) -> list[Step]:
    """TOR001's install steps on a machine without a GPU, the same answer TOR002 gives
    there: the CPU build runs here; a CUDA build belongs on the machine that trains."""
    return [
        Step("This machine shows no NVIDIA GPU (see DRV001), so the CPU build is the one "
             "that runs here: install it for CPU jobs and tests.",
             command=f"{facts.target_pip()} install torch torchvision --index-url "
                     f"{CPU_INDEX}"),
        Step("Where the job will train on GPUs, install the CUDA build that machine's driver "
             "runs (ddp-doctor check there names it).", url=INSTALL_GUIDE),
    ]


@check(
    id="torch.cuda_build",
    title="PyTorch CUDA build",
    area="pytorch",
    requires=("torch",),
    codes=(TORCH_CPU_ONLY,),
    blocked_by=("torch.import",),
)
def torch_cuda_build(facts: FactsView) -> Iterator[Finding | Summary]:
    build = facts.torch().get("build")
    if not build:
        # The probe imported torch but died (hang, crash) before reporting the build: an
        # unknown build is not a CPU build; the probe's own failure is reported elsewhere.
        yield Summary("torch build not reported by the probe: cannot tell whether it has CUDA")
        return
    if build.get("cuda"):
        yield Summary(f"built for CUDA {build.get('cuda')}")
        return
    if build.get("hip"):
        yield Summary(f"built for ROCm {build.get('hip')}")
        return
    gpus_present = facts.nvidia_gpus_present()
    confirm = Step("Confirm that torch sees the GPUs.",
                   command=f'{facts.target_python()} -c "import torch; '
                           'print(torch.version.cuda, torch.cuda.device_count())"')
    if _no_gpu_here(facts):
        # No GPU here: swapping the wheel changes nothing until there is a GPU to use.
        steps = [
            Step("Nothing to reinstall yet: this machine shows no NVIDIA GPU, so the missing "
                 "GPU or driver is the cause to fix first (see DRV001). A CPU-only torch is "
                 "right for a machine without GPUs."),
            Step("Where the job will train on GPUs, install a CUDA build of torch there.",
                 url=INSTALL_GUIDE),
            confirm,
        ]
    else:
        steps = [
            Step("Remove the CPU-only build.",
                 command=f"{facts.target_pip()} uninstall -y torch torchvision torchaudio"),
            *install_steps(facts),
            confirm,
        ]
    yield Finding(
        code=TORCH_CPU_ONLY,
        title=f"torch {build.get('version')} is a CPU-only build"
        + (" (this machine has no NVIDIA GPU either)" if _no_gpu_here(facts) else ""),
        severity=Severity.ERROR if gpus_present else Severity.WARNING,
        evidence=(
            Evidence("torch.__version__", str(build.get("version")), "interpreter probe"),
            _cuda_build_evidence(build.get("cuda")),
            _python_evidence(facts),
        ),
        remediation=tuple(steps),
    )


# ---------------------------------------------------------------- ROCm build, GPU kernels

TORCH_ROCM_ON_NVIDIA = declare(
    id="TOR005",
    category=Category.TORCH_CPU_ONLY,
    summary="A ROCm (AMD) build of PyTorch on a machine with NVIDIA GPUs",
    what=(
        "The installed torch was built for AMD's ROCm (`torch.version.hip` is set, the "
        "version ends in `+rocmX.Y`), but this machine's GPUs are NVIDIA GPUs."
    ),
    why="A ROCm build has no CUDA support: it cannot use an NVIDIA GPU at all.",
    fix="Uninstall torch and install the CUDA build that matches the NVIDIA driver.",
    docs_url=INSTALL_GUIDE,
)

TORCH_ARCH_UNSUPPORTED = declare(
    id="TOR003",
    category=Category.TORCH_ARCH_UNSUPPORTED,
    summary="The torch build has no kernels for a GPU's compute capability",
    what=(
        "`torch.cuda.get_arch_list()` lists the GPU architectures the build carries code "
        "for. A cubin sm_XY runs on the same major capability with an equal or newer minor; "
        "PTX compute_XY can be compiled for any newer GPU. Neither covers this GPU."
    ),
    why=(
        "torch.cuda.is_available() is True, but every kernel launch fails with 'CUDA error: "
        "no kernel image is available for execution on the device'."
    ),
    fix=(
        "Install a torch wheel variant whose arch list includes the GPU (RTX 50xx / "
        "Blackwell needs CUDA 12.8 or newer wheels; Maxwell/Pascal/Volta need the CUDA 12.6 "
        "wheels)."
    ),
    docs_url="https://docs.nvidia.com/cuda/blackwell-compatibility-guide/index.html",
)

TORCH_ARCH_PTX_ONLY = declare(
    id="TOR004",
    category=Category.TORCH_ARCH_UNSUPPORTED,
    summary="A GPU runs torch only through PTX JIT compilation",
    what=(
        "The build has no cubin for this GPU's architecture, only PTX for an older one, "
        "which the driver compiles at first use."
    ),
    why=(
        "It works, but the first run of every kernel is compiled on the spot (minutes at "
        "start-up, per process, until the compute cache holds them), and some libraries "
        "ship no PTX and fail anyway."
    ),
    fix="Install a wheel variant with native kernels for the GPU.",
    severity=Severity.WARNING,
    docs_url="https://docs.nvidia.com/cuda/blackwell-compatibility-guide/index.html",
)


@dataclass(frozen=True)
class _Gpu:
    """A GPU as the arch checks compare it: from torch's view, or NVML's."""

    index: int | None
    name: str | None
    capability: str | None
    source: str


def _gpus(facts: FactsView) -> list[_Gpu]:
    """Index, name and capability of each GPU: torch's own view first, else NVML's."""
    devices = facts.cuda_devices()
    if devices:
        return [_Gpu(d.get("index"), d.get("name"), d.get("capability"),
                     "torch.cuda.get_device_properties") for d in devices]
    return [_Gpu(g.get("index"), g.get("name"), g.get("compute_capability"), "NVML")
            for g in facts.nvml_gpus()]


def _cuda_build(facts: FactsView) -> TorchBuild | None:
    build = facts.torch_build()
    return build if build.get("cuda") else None


@check(
    id="torch.rocm_on_nvidia",
    title="PyTorch build vendor",
    area="pytorch",
    requires=("torch",),
    codes=(TORCH_ROCM_ON_NVIDIA,),
    blocked_by=("torch.import",),
)
def torch_rocm_on_nvidia(facts: FactsView) -> Iterator[Finding | Summary]:
    build = facts.torch_build()
    hip = build.get("hip")
    if not hip:
        yield Summary("not a ROCm build")
        return
    if not facts.nvidia_gpus_present():
        yield Summary(f"ROCm {hip} build, no NVIDIA GPU here")
        return
    yield Finding(
        code=TORCH_ROCM_ON_NVIDIA,
        title=f"torch {build.get('version')} is a ROCm {hip} (AMD) build on a machine "
              "with NVIDIA GPUs",
        evidence=(
            Evidence("torch.__version__", str(build.get("version")), "interpreter probe"),
            Evidence("torch.version.hip", str(hip), "interpreter probe"),
            _cuda_build_evidence(build.get("cuda")),
            _python_evidence(facts),
        ),
        remediation=(
            Step("Remove the ROCm build.",
                 command=f"{facts.target_pip()} uninstall -y torch torchvision torchaudio"),
            *install_steps(facts),
        ),
    )


def _arch_rows(facts: FactsView) -> list[tuple[_Gpu, tuple[int, int], Support]]:
    build = _cuda_build(facts) or {}
    arch_list = build.get("arch_list") or []
    rows = []
    for gpu in _gpus(facts):
        capability = parse_capability(gpu.capability)
        if capability is not None and arch_list:
            rows.append((gpu, capability, support_for(capability, arch_list)))
    return rows


def _gpu_label(gpu: _Gpu) -> str:
    return f"GPU {gpu.index} ({gpu.name})"


def _sm(capability: tuple[int, int]) -> str:
    return f"sm_{capability[0]}{capability[1]}"


def _arch_steps(facts: FactsView, capabilities: list[tuple[int, int]]) -> list[Step]:
    """Replace the build with one that has kernels for every GPU and runs on this driver."""
    newest = _sm(max(capabilities))
    install = install_steps(facts)
    first = install[0]
    install[0] = Step(f"Install a build with kernels for {newest}. {first.text}",
                      command=first.command, url=first.url)
    return [
        Step("Remove the build without kernels for this GPU.",
             command=f"{facts.target_pip()} uninstall -y torch torchvision torchaudio"),
        *install,
        Step("Confirm the GPU's architecture is in the new build's list.",
             command=f'{facts.target_python()} -c "import torch; '
                     'print(torch.cuda.get_arch_list(), torch.cuda.get_device_capability(0))"'),
    ]


def _arch_span(arch_list: list[str]) -> str:
    """``sm_75 … sm_120`` from the cubins of an arch list (PTX entries named after it)."""
    cubins = sorted({a.capability for a in (parse_arch(x) for x in arch_list)
                     if a is not None and a.kind == "sm"})
    if not cubins:
        return " ".join(arch_list) or "nothing"
    span = _sm(cubins[0]) if len(cubins) == 1 else f"{_sm(cubins[0])}…{_sm(cubins[-1])}"
    ptx = [x for x in arch_list if x.startswith("compute_")]
    return span + (f" (+ PTX {', '.join(ptx)})" if ptx else "")


@check(
    id="torch.arch_support",
    title="GPU kernels in torch",
    area="pytorch",
    requires=("torch",),
    codes=(TORCH_ARCH_UNSUPPORTED,),
    blocked_by=("torch.import", "torch.cuda_build"),
)
def torch_arch_support(facts: FactsView) -> Iterator[Finding | Summary]:
    build = _cuda_build(facts)
    rows = _arch_rows(facts)
    if build is None or not rows:
        yield Summary("no CUDA arch list or no GPU capability to compare")
        return
    missing = [(gpu, cap) for gpu, cap, support in rows if support is Support.NONE]
    if not missing:
        caps = sorted({_sm(cap) for _, cap, _ in rows})
        yield Summary(f"kernels for {', '.join(caps)} in torch {build.get('version')}")
        return
    arch_list = " ".join(build.get("arch_list") or [])
    names = sorted({f"{gpu.name} ({_sm(cap)})" for gpu, cap in missing})
    absent = ", ".join(sorted({_sm(cap) for _, cap in missing}))
    title = (f"torch {build.get('version')} has no kernels for {', '.join(names)}: its "
             f"arch list covers {_arch_span(build.get('arch_list') or [])} (no {absent})")
    evidence = [Evidence(_gpu_label(gpu), f"compute capability {cap[0]}.{cap[1]}",
                         gpu.source) for gpu, cap in missing]
    evidence.append(Evidence("torch.cuda.get_arch_list()", arch_list, "interpreter probe"))
    evidence.append(Evidence("torch.__version__", str(build.get("version")), "interpreter probe"))
    yield Finding(code=TORCH_ARCH_UNSUPPORTED, title=title, evidence=tuple(evidence),
                  remediation=tuple(_arch_steps(facts, [cap for _, cap in missing])),
                  affects=tuple(f"gpu:{gpu.index}" for gpu, _ in missing))


@check(
    id="torch.arch_native",
    title="Native GPU kernels",
    area="pytorch",
    requires=("torch",),
    codes=(TORCH_ARCH_PTX_ONLY,),
    blocked_by=("torch.import", "torch.cuda_build"),
)
def torch_arch_native(facts: FactsView) -> Iterator[Finding | Summary]:
    build = _cuda_build(facts)
    ptx = [(gpu, cap) for gpu, cap, support in _arch_rows(facts) if support is Support.PTX]
    if build is None or not ptx:
        yield Summary("no GPU depends on PTX JIT compilation")
        return
    names = sorted({f"{gpu.name} ({_sm(cap)})" for gpu, cap in ptx})
    evidence = [Evidence(_gpu_label(gpu), f"compute capability {cap[0]}.{cap[1]}",
                         gpu.source) for gpu, cap in ptx]
    evidence.append(Evidence("torch.cuda.get_arch_list()",
                             " ".join(build.get("arch_list") or []), "interpreter probe"))
    yield Finding(code=TORCH_ARCH_PTX_ONLY,
                  title=f"torch {build.get('version')} runs on {', '.join(names)} only "
                        "through PTX JIT compilation",
                  evidence=tuple(evidence),
                  remediation=tuple(_arch_steps(facts, [cap for _, cap in ptx])),
                  affects=tuple(f"gpu:{gpu.index}" for gpu, _ in ptx))

