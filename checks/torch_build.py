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
from typing import Any

from ddp_doctor.checks._util import (
    install_steps,
    nvidia_gpus_present,
    target_pip,
    target_python,
)

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.knowledge.arch import (
    Support,
    parse_arch,
    parse_capability,
    support_for,
)
from ddp_doctor.knowledge.torch_pairs import (
    NUMPY2_SAFE_TORCH,
    Release,
    local_tag,
    parse,
    python_supported,
    release_for,
    torchaudio_matches,
    torchvision_matches,
)
from ddp_doctor.knowledge.wheels import INSTALL_GUIDE
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check

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
        where = f" from {build['file']}" if build.get("file") else ""
        yield Summary(f"torch {build.get('version') or '(version not reported)'}{where}")
        return
    error = torch.get("import_error") or {}
    kind = error.get("type") or "ImportError"
    message = error.get("message") or "unknown error"
    install = install_steps(facts, "torch torchvision")
    evidence = [_python_evidence(facts), Evidence("import torch", f"{kind}: {message}",
                                                  "interpreter probe")]
    probe = torch.get("probe") or {}
    if probe.get("stderr_tail"):
        evidence.append(Evidence("stderr", probe["stderr_tail"][-1500:], "interpreter probe"))
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
                 command=f"{target_python(facts)} -m venv ~/venvs/train && "
                         ". ~/venvs/train/bin/activate"),
            *[Step("Reinstall torch there with one command, so every CUDA library comes from "
                   f"the same build. {step.text}",
                   command=step.command and step.command.replace(
                       target_pip(facts), "python -m pip", 1), url=step.url)
              for step in install],
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
    # Whether GPUs are absent is known only when NVML or the PCI scan was looked at.
    gpus_known = facts.available("nvml") or facts.available("driver")
    steps = [
        Step("Remove the CPU-only build.",
             command=f"{target_pip(facts)} uninstall -y torch torchvision torchaudio"),
        *install_steps(facts),
        Step("Confirm that torch sees the GPUs.",
             command=f'{target_python(facts)} -c "import torch; print(torch.version.cuda, '
                     'torch.cuda.device_count())"'),
    ]
    yield Finding(
        code=TORCH_CPU_ONLY,
        title=f"torch {build.get('version')} is a CPU-only build"
        + ("" if gpus_present or not gpus_known else " (this machine has no NVIDIA GPU either)"),
        severity=Severity.ERROR if gpus_present else Severity.WARNING,
        evidence=(
            Evidence("torch.__version__", str(build.get("version")), "interpreter probe"),
            Evidence("torch.version.cuda", str(build.get("cuda")), "interpreter probe"),
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


def _gpus(facts: Any) -> list[dict[str, Any]]:
    """Index, name and capability of each GPU: torch's own view first, else NVML's."""
    cuda = (facts.get("torch") or {}).get("cuda") or {}
    devices = cuda.get("devices") or []
    if devices:
        return [{"index": d.get("index"), "name": d.get("name"),
                 "capability": d.get("capability"), "source": "torch.cuda.get_device_properties"}
                for d in devices]
    nvml = facts.get("nvml") or {}
    return [{"index": g.get("index"), "name": g.get("name"),
             "capability": g.get("compute_capability"), "source": "NVML"}
            for g in nvml.get("gpus") or []]


def _cuda_build(facts: Any) -> dict[str, Any] | None:
    build = (facts.get("torch") or {}).get("build") or {}
    return build if build.get("cuda") else None


@check(
    id="torch.rocm_on_nvidia",
    title="PyTorch build vendor",
    area="pytorch",
    requires=("torch",),
    codes=(TORCH_ROCM_ON_NVIDIA,),
    blocked_by=("torch.import",),
)
def torch_rocm_on_nvidia(facts: Any) -> Iterator[Finding | Summary]:
    build = facts["torch"].get("build") or {}
    if not build.get("hip"):
        yield Summary("not a ROCm build")
        return
    if not nvidia_gpus_present(facts):
        yield Summary(f"ROCm {build['hip']} build, no NVIDIA GPU here")
        return
    yield Finding(
        code=TORCH_ROCM_ON_NVIDIA,
        title=f"torch {build.get('version')} is a ROCm {build['hip']} (AMD) build on a machine "
              "with NVIDIA GPUs",
        evidence=(
            Evidence("torch.__version__", str(build.get("version")), "interpreter probe"),
            Evidence("torch.version.hip", str(build["hip"]), "interpreter probe"),
            Evidence("torch.version.cuda", str(build.get("cuda")), "interpreter probe"),
            _python_evidence(facts),
        ),
        remediation=(
            Step("Remove the ROCm build.",
                 command=f"{target_pip(facts)} uninstall -y torch torchvision torchaudio"),
            *install_steps(facts),
        ),
    )


def _arch_rows(facts: Any) -> list[tuple[dict[str, Any], tuple[int, int], Support]]:
    build = _cuda_build(facts) or {}
    arch_list = build.get("arch_list") or []
    rows = []
    for gpu in _gpus(facts):
        capability = parse_capability(gpu.get("capability"))
        if capability is not None and arch_list:
            rows.append((gpu, capability, support_for(capability, arch_list)))
    return rows


def _gpu_label(gpu: dict[str, Any]) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('name')})"


def _sm(capability: tuple[int, int]) -> str:
    return f"sm_{capability[0]}{capability[1]}"


def _arch_steps(facts: Any, capabilities: list[tuple[int, int]]) -> list[Step]:
    """Replace the build with one that has kernels for every GPU and runs on this driver."""
    newest = _sm(max(capabilities))
    install = install_steps(facts)
    first = install[0]
    install[0] = Step(f"Install a build with kernels for {newest}. {first.text}",
                      command=first.command, url=first.url)
    return [
        Step("Remove the build without kernels for this GPU.",
             command=f"{target_pip(facts)} uninstall -y torch torchvision torchaudio"),
        *install,
        Step("Confirm the GPU's architecture is in the new build's list.",
             command=f'{target_python(facts)} -c "import torch; '
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
def torch_arch_support(facts: Any) -> Iterator[Finding | Summary]:
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
    names = sorted({f"{gpu.get('name')} ({_sm(cap)})" for gpu, cap in missing})
    absent = ", ".join(sorted({_sm(cap) for _, cap in missing}))
    title = (f"torch {build.get('version')} has no kernels for {', '.join(names)}: its "
             f"arch list covers {_arch_span(build.get('arch_list') or [])} (no {absent})")
    evidence = [Evidence(_gpu_label(gpu), f"compute capability {cap[0]}.{cap[1]}",
                         gpu["source"]) for gpu, cap in missing]
    evidence.append(Evidence("torch.cuda.get_arch_list()", arch_list, "interpreter probe"))
    evidence.append(Evidence("torch.__version__", str(build.get("version")), "interpreter probe"))
    yield Finding(code=TORCH_ARCH_UNSUPPORTED, title=title, evidence=tuple(evidence),
                  remediation=tuple(_arch_steps(facts, [cap for _, cap in missing])),
                  affects=tuple(f"gpu:{gpu.get('index')}" for gpu, _ in missing))


@check(
    id="torch.arch_native",
    title="Native GPU kernels",
    area="pytorch",
    requires=("torch",),
    codes=(TORCH_ARCH_PTX_ONLY,),
    blocked_by=("torch.import", "torch.cuda_build"),
)
def torch_arch_native(facts: Any) -> Iterator[Finding | Summary]:
    build = _cuda_build(facts)
    ptx = [(gpu, cap) for gpu, cap, support in _arch_rows(facts) if support is Support.PTX]
    if build is None or not ptx:
        yield Summary("no GPU depends on PTX JIT compilation")
        return
    names = sorted({f"{gpu.get('name')} ({_sm(cap)})" for gpu, cap in ptx})
    evidence = [Evidence(_gpu_label(gpu), f"compute capability {cap[0]}.{cap[1]}",
                         gpu["source"]) for gpu, cap in ptx]
    evidence.append(Evidence("torch.cuda.get_arch_list()",
                             " ".join(build.get("arch_list") or []), "interpreter probe"))
    yield Finding(code=TORCH_ARCH_PTX_ONLY,
                  title=f"torch {build.get('version')} runs on {', '.join(names)} only "
                        "through PTX JIT compilation",
                  evidence=tuple(evidence),
                  remediation=tuple(_arch_steps(facts, [cap for _, cap in ptx])),
                  affects=tuple(f"gpu:{gpu.get('index')}" for gpu, _ in ptx))


# ---------------------------------------------------------------- companion packages

_PAIRS_URL = "https://github.com/pytorch/vision#installation"

TORCHVISION_MISMATCH = declare(
    id="PKG001",
    category=Category.PACKAGE_CONFLICT,
    summary="torchvision belongs to another torch release",
    what="Each torchvision release is built for one torch release (torch 2.x pairs with "
         "torchvision 0.(x+15)); the installed pair does not belong together.",
    why="torchvision's compiled operators fail to load ('operator torchvision::nms does not "
        "exist') or crash with undefined symbols, and detection models stop at import.",
    fix="Reinstall torch and torchvision together, in one pip command, from one index URL.",
    docs_url=_PAIRS_URL,
)
TORCHAUDIO_MISMATCH = declare(
    id="PKG002",
    category=Category.PACKAGE_CONFLICT,
    summary="torchaudio belongs to another torch release",
    what="Before 2.11 torchaudio had to match torch's minor version exactly (torch 2.x with "
         "torchaudio 2.x); from 2.11 it runs on that torch or newer.",
    why="Its compiled extension fails to load against another torch (undefined symbols).",
    fix="Reinstall torch and torchaudio together from one index URL.",
    docs_url="https://docs.pytorch.org/audio/2.11.0/installation.html",
)
CUDA_VARIANT_MISMATCH = declare(
    id="PKG003",
    category=Category.PACKAGE_CONFLICT,
    summary="torch and torchvision/torchaudio come from different CUDA variants",
    what="The local version tags differ (e.g. torch +cu121 with torchvision +cpu): the "
         "packages were installed from different wheel indexes.",
    why="torchvision refuses to run ('PyTorch and torchvision were compiled with different "
        "CUDA versions') or its CUDA operators are missing.",
    fix="Reinstall all three from the one index URL torch came from.",
    docs_url=_PAIRS_URL,
)
TORCHVISION_OPS_BROKEN = declare(
    id="PKG004",
    category=Category.PACKAGE_CONFLICT,
    summary="torchvision's compiled operators do not load",
    what="`import torchvision` or resolving `torch.ops.torchvision.nms` failed in this "
         "interpreter: its C++ library did not load against this torch.",
    why="Every detection model (YOLO, Faster R-CNN) calls torchvision.ops.nms and dies with "
        "'operator torchvision::nms does not exist'.",
    fix="Reinstall torch and torchvision as a pair from one index URL.",
    docs_url=_PAIRS_URL,
)
TWO_TORCH_INSTALLS = declare(
    id="PKG005",
    category=Category.PACKAGE_CONFLICT,
    summary="More than one torch installation is visible to this interpreter",
    what="torch is installed in more than one place on sys.path (a venv and ~/.local, or "
         "two versions in one site-packages); which one imports depends on path order.",
    why="The torch that imports may not be the one pip reports or upgrades; its CUDA "
        "libraries and its companions (torchvision) disagree.",
    fix="Uninstall every copy but the one in the training environment.",
    docs_url="https://pip.pypa.io/en/stable/cli/pip_uninstall/",
)
NUMPY2_OLD_TORCH = declare(
    id="PKG006",
    category=Category.PACKAGE_CONFLICT,
    summary="NumPy 2 with a torch built for NumPy 1",
    what="torch before 2.3.1 was compiled against NumPy 1.x; under NumPy 2 it warns 'A module "
         "that was compiled using NumPy 1.x cannot be run in NumPy 2' and cannot exchange "
         "arrays.",
    why="Every tensor<->ndarray conversion (DataLoader collation, image loading) raises "
        "'RuntimeError: Numpy is not available'.",
    fix="Install numpy<2, or upgrade torch to 2.3.1 or newer.",
    docs_url="https://github.com/pytorch/pytorch/issues/107302",
)
PYTHON_UNSUPPORTED = declare(
    id="PKG007",
    category=Category.PACKAGE_CONFLICT,
    summary="Python version outside the torch release's supported range",
    what="Each torch release publishes wheels for a range of Python versions (RELEASE.md); "
         "this interpreter is outside the range of the installed release.",
    why="pip cannot install the matching torchvision/torchaudio wheels, and such installs "
        "are source builds or leftovers that break in ways nobody tests.",
    fix="Use an interpreter inside the range, or a torch release that supports this Python.",
    docs_url="https://github.com/pytorch/pytorch/blob/main/RELEASE.md",
)


def _versions(facts: Any, name: str) -> list[str]:
    packages = (facts.get("python") or {}).get("packages") or {}
    entries = packages.get(name) if isinstance(packages, dict) else None
    return [str(e.get("version")) for e in entries or [] if e.get("version")]


def _torch_version(facts: Any) -> str | None:
    build = (facts.get("torch") or {}).get("build") or {}
    return build.get("version") or next(iter(_versions(facts, "torch")), None)


def _index_for(tag: str | None) -> str:
    return f"https://download.pytorch.org/whl/{tag or 'cpu'}"


def _pair_command(facts: Any, torch_version: str, packages: dict[str, str]) -> str:
    """Pin the companions to torch's release, from torch's own index."""
    pins = " ".join(f"{name}=={version}" for name, version in packages.items())
    return (f"{target_pip(facts)} install --force-reinstall torch=={parse(torch_version)} {pins} "
            f"--index-url {_index_for(local_tag(torch_version))}")


def _companion(release: Release, name: str) -> str:
    return release.torchvision if name == "torchvision" else release.torchaudio


@check(
    id="packages.torch_companions",
    title="torch companions",
    area="pytorch",
    requires=("python",),
    codes=(TORCHVISION_MISMATCH, TORCHAUDIO_MISMATCH, CUDA_VARIANT_MISMATCH),
)
def torch_companions(facts: Any) -> Iterator[Finding | Summary]:
    torch_version = _torch_version(facts)
    if torch_version is None:
        yield Summary("torch is not installed")
        return
    release = release_for(torch_version)
    installed = {name: _versions(facts, name)[:1] for name in ("torchvision", "torchaudio")}
    found = False
    for name, code, matches in (("torchvision", TORCHVISION_MISMATCH, torchvision_matches),
                                ("torchaudio", TORCHAUDIO_MISMATCH, torchaudio_matches)):
        if not installed[name]:
            continue
        version = installed[name][0]
        if release is not None and matches(release, version) is False:
            found = True
            expected = _companion(release, name)
            yield Finding(
                code=code,
                title=f"{name} {version} does not belong to torch {torch_version} "
                      f"(it pairs with {name} {expected}.x)",
                evidence=(Evidence("torch", torch_version, "interpreter probe"),
                          Evidence(name, version, "installed packages")),
                remediation=(Step(f"Reinstall {name} {expected} with torch, from torch's "
                                  "index, so both come from one release.",
                                  command=_pair_command(facts, torch_version,
                                                       {name: f"{expected}.*"}),
                                  url=_PAIRS_URL if name == "torchvision" else
                                  TORCHAUDIO_MISMATCH.docs_url),),
            )
        tag, other = local_tag(torch_version), local_tag(version)
        if tag and other and tag != other:
            found = True
            yield Finding(
                code=CUDA_VARIANT_MISMATCH,
                title=f"torch {torch_version} is a {tag} build but {name} {version} is "
                      f"a {other} build",
                evidence=(Evidence("torch", torch_version, "interpreter probe"),
                          Evidence(name, version, "installed packages")),
                remediation=(Step(f"Reinstall {name} from torch's own index ({tag}).",
                                  command=f"{target_pip(facts)} install --force-reinstall "
                                          f"--no-deps {name}=={parse(version)} "
                                          f"--index-url {_index_for(tag)}"),),
            )
    if not found:
        have = ", ".join(f"{n} {v[0]}" for n, v in installed.items() if v)
        yield Summary(f"torch {torch_version}" + (f" with {have}" if have else ""))


@check(
    id="packages.torchvision_ops",
    title="torchvision operators",
    area="pytorch",
    requires=("torch",),
    codes=(TORCHVISION_OPS_BROKEN,),
    blocked_by=("torch.import",),
)
def torchvision_ops(facts: Any) -> Iterator[Finding | Summary]:
    tv = facts["torch"].get("torchvision")
    if "torchvision" not in facts["torch"]:  # facts from a pasted report: not tried
        yield Summary("torchvision import not tested")
        return
    if not tv:
        yield Summary("torchvision not installed")
        return
    error = tv.get("import_error") or tv.get("ops_error")
    if not error:
        yield Summary(f"torchvision {tv.get('version')}: torchvision::nms loads")
        return
    torch_version = _torch_version(facts) or "?"
    tv_version = tv.get("version") or next(iter(_versions(facts, "torchvision")), "?")
    release = release_for(torch_version)
    pins = {"torchvision": f"{release.torchvision}.*"} if release else {}
    command = (_pair_command(facts, torch_version, pins) if pins else
               f"{target_pip(facts)} install --force-reinstall torch=={parse(torch_version)} "
               "torchvision "
               f"--index-url {_index_for(local_tag(torch_version))}")
    where = "import torchvision" if tv.get("import_error") else "torch.ops.torchvision.nms"
    yield Finding(
        code=TORCHVISION_OPS_BROKEN,
        title=f"torchvision {tv_version}'s compiled operators do not load with torch "
              f"{torch_version}",
        evidence=(Evidence(where, error, "interpreter probe"),
                  Evidence("torch", torch_version, "interpreter probe"),
                  Evidence("torchvision", str(tv_version), "installed packages")),
        remediation=(
            Step("Reinstall torchvision for this torch, from torch's index.", command=command,
                 url=_PAIRS_URL),
            Step("Confirm the operator loads.",
                 command=f'{target_python(facts)} -c "import torch, torchvision; '
                         'print(torch.ops.torchvision.nms)"'),
        ),
    )


@check(
    id="packages.single_torch",
    title="One torch install",
    area="pytorch",
    requires=("python",),
    codes=(TWO_TORCH_INSTALLS,),
)
def single_torch(facts: Any) -> Iterator[Finding | Summary]:
    python = facts["python"]
    locations = list(python.get("torch_locations") or [])
    packages = python.get("packages") or {}
    entries = packages.get("torch") or [] if isinstance(packages, dict) else []
    if len(locations) <= 1 and len(entries) <= 1:
        yield Summary(locations[0] if locations else "no torch on sys.path"
                      if "torch_locations" in python else f"{len(entries)} torch listed")
        return
    evidence = [Evidence(f"torch package {n + 1}", path, "sys.path")
                for n, path in enumerate(locations)]
    evidence += [Evidence(f"torch distribution {n + 1}",
                          f"{e.get('version')} in {e.get('location')}", "installed packages")
                 for n, e in enumerate(entries)]
    imported = ((facts.get("torch") or {}).get("build") or {}).get("file")
    if imported:
        evidence.append(Evidence("imported", imported, "interpreter probe"))
    count = max(len(locations), len(entries))
    exe = python.get("executable") or "python"
    yield Finding(
        code=TWO_TORCH_INSTALLS,
        title=f"{count} torch installations are visible to {exe}",
        evidence=tuple(evidence),
        remediation=(
            Step("Uninstall torch until pip finds none left (each run removes one copy).",
                 command=f"{exe} -m pip uninstall -y torch && {exe} -m pip uninstall -y torch"),
            Step("Check that no copy is left, then reinstall one CUDA build.",
                 command=f"{exe} -m pip list 2>/dev/null | grep -i '^torch '; "
                         f"{exe} -c \"import torch\" || echo 'no torch left'"),
            Step("Stop user-site packages (~/.local) from shadowing the environment.",
                 command="export PYTHONNOUSERSITE=1"),
        ),
    )


@check(
    id="packages.numpy_abi",
    title="NumPy ABI",
    area="pytorch",
    requires=("python",),
    codes=(NUMPY2_OLD_TORCH,),
)
def numpy_abi(facts: Any) -> Iterator[Finding | Summary]:
    torch_fact = facts.get("torch") or {}
    probe = torch_fact.get("numpy") or {}
    numpy_version = probe.get("version") or next(iter(_versions(facts, "numpy")), None)
    torch_version = _torch_version(facts)
    numpy_parsed, torch_parsed = parse(numpy_version), parse(torch_version)
    if numpy_parsed is None or torch_parsed is None:
        yield Summary("NumPy or torch not installed")
        return
    broken_bridge = probe.get("bridge_error")
    too_old = numpy_parsed.major >= 2 and torch_parsed < NUMPY2_SAFE_TORCH
    if not too_old and not (numpy_parsed.major >= 2 and broken_bridge):
        yield Summary(f"NumPy {numpy_version} with torch {torch_version}")
        return
    evidence = [Evidence("numpy", str(numpy_version), "interpreter probe"),
                Evidence("torch", str(torch_version), "interpreter probe")]
    if broken_bridge:
        evidence.append(Evidence("torch.from_numpy", broken_bridge, "interpreter probe"))
    for warning in probe.get("warnings") or []:
        evidence.append(Evidence("warning at import torch", warning, "interpreter probe"))
    yield Finding(
        code=NUMPY2_OLD_TORCH,
        title=f"NumPy {numpy_version} is installed but torch {torch_version} was built for "
              "NumPy 1.x",
        evidence=tuple(evidence),
        remediation=(
            Step("Install a NumPy 1.x release (the quick fix).",
                 command=f'{target_pip(facts)} install "numpy<2"'),
            Step("Or upgrade torch to 2.3.1 or newer, which works with NumPy 2.",
                 url=INSTALL_GUIDE),
        ),
    )


@check(
    id="packages.python_version",
    title="Python version",
    area="pytorch",
    requires=("python",),
    codes=(PYTHON_UNSUPPORTED,),
)
def python_version(facts: Any) -> Iterator[Finding | Summary]:
    torch_version = _torch_version(facts)
    release = release_for(torch_version)
    py = facts["python"].get("version")
    if release is None or python_supported(release, py) is not False:
        yield Summary(f"Python {py}" + (f" with torch {torch_version}" if torch_version else ""))
        return
    exe = facts["python"].get("executable") or "python"
    yield Finding(
        code=PYTHON_UNSUPPORTED,
        title=f"Python {py} is outside torch {release.torch}'s supported range "
              f"({release.python_min}-{release.python_max})",
        severity=Severity.WARNING,
        evidence=(Evidence("interpreter", f"{exe} (Python {py})", "interpreter probe"),
                  Evidence("torch", str(torch_version), "interpreter probe")),
        remediation=(
            Step(f"Create the training environment with a Python from {release.python_min} "
                 f"to {release.python_max}.",
                 command=f"python{release.python_max} -m venv ~/venvs/train && "
                         ". ~/venvs/train/bin/activate"),
            Step("Install torch there from its index.",
                 command=f"~/venvs/train/bin/python -m pip install torch=={parse(torch_version)} "
                         f"--index-url {_index_for(local_tag(torch_version))}",
                 url=INSTALL_GUIDE),
        ),
    )
