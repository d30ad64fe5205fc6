"""Driver checks that need a working driver: is it new enough for torch's CUDA build, and
has an NVSwitch board's fabric come up?

Sources:
- CUDA toolkit/driver tables and minor-version compatibility: see
  ``ddp_doctor.knowledge.cuda_driver``. torch does not fail at import on an old driver;
  ``torch.cuda.is_available()`` is False with "The NVIDIA driver on your system is too old
  (found version 12080)" (pytorch/pytorch ``torch/cuda/__init__.py``; e.g. pytorch#131742
  and the collect_env of pytorch#28321: driver 410.104 under a CUDA 10.1 build).
- PTX JIT is outside minor-version compatibility ("the provided PTX was compiled with an
  unsupported toolchain"): https://docs.nvidia.com/deploy/cuda-compatibility/ and
  NVIDIA/cccl#268. cubins (sm_XY) run on GPUs of the same major with minor >= Y:
  https://docs.nvidia.com/cuda/cuda-c-programming-guide/#binary-compatibility
- Fabric Manager on NVSwitch systems (HGX/DGX A100, H100, H800, H200, B200): without it
  CUDA fails with error 802 "system not yet initialized" (pytorch/pytorch#35710,
  google/jax#34113); its package must match the driver version exactly, restarting it may
  need a GPU reset (NVIDIA/nccl#1488); "Fabric State: In Progress" on an H800 whose CUDA
  never came up: NVIDIA/DCGM#120. Guide:
  https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/

Deliberate deviation from the reference's rule D1.1 (which warns whenever a build runs only
through minor-version compatibility): DRV003 is raised only when a GPU would need PTX JIT
(an error: that fails) or when the GPUs' kernels cannot be checked (a warning). When torch has
a cubin for every GPU, the check passes with a summary that names MVC. PyTorch's own CUDA 12
and 13 wheels are built to run on any driver of their major through MVC (that is how the
cu126 wheel serves R535-R575 drivers), the APIs that need a newer driver are not ones torch's
training paths call, and a warning there would fire on healthy, supported machines such as
the V100 server fixture (torch 2.0.1+cu117 on driver 470, CUDA 11.4) without telling its
owner anything to do.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import NvmlGpu
from ddp_doctor.facts.view import FactsView
from ddp_doctor.knowledge.cuda_driver import (
    MVC_DOC,
    RELEASE_NOTES,
    Compatibility,
    Verdict,
    compatibility,
)
from ddp_doctor.knowledge.wheels import DRIVER_GUIDE, RECOMMENDED_BRANCH, RECOMMENDED_BRANCH_MIN
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check
from ddp_doctor.wording import count, plural

from ._util import install_steps, recommendation

DRIVER_DOWNLOAD = "https://www.nvidia.com/Download/index.aspx"
DRIVER_BRANCHES = DRIVER_GUIDE

DRIVER_TOO_OLD = declare(
    id="DRV002",
    category=Category.DRIVER_TOO_OLD,
    summary="The driver is too old for the CUDA version torch was built with",
    what=(
        "The installed NVIDIA driver supports an older CUDA major version than the one the "
        "installed torch was built with (or, for CUDA 10 and older and below the "
        "minor-version-compatibility minimum, an older CUDA version at all)."
    ),
    why=(
        "CUDA cannot initialise: torch.cuda.is_available() is False with 'The NVIDIA driver "
        "on your system is too old', and other CUDA programs fail with 'CUDA driver version "
        "is insufficient for CUDA runtime version' (error 35)."
    ),
    fix=(
        "Install a driver of the branch the CUDA build needs (on WSL2: update the Windows "
        "driver), or install the torch wheel built for the CUDA version this driver supports."
    ),
    docs_url=RELEASE_NOTES,
)

MINOR_COMPAT_ONLY = declare(
    id="DRV003",
    category=Category.DRIVER_TOO_OLD,
    summary="torch's CUDA build runs on this driver only through minor-version compatibility",
    what=(
        "The driver supports an older CUDA minor version of the same major than torch was "
        "built with. CUDA minor-version compatibility lets such builds run, with a limited "
        "feature set: PTX cannot be JIT-compiled by the older driver, and APIs that need the "
        "newer driver fail."
    ),
    why=(
        "A GPU for which torch ships only PTX (no cubin for its architecture) fails at the "
        "first kernel with 'the provided PTX was compiled with an unsupported toolchain'; "
        "newer-driver APIs fail with cudaErrorCallRequiresNewerDriver."
    ),
    fix=(
        "Upgrade the driver to the branch of torch's CUDA version, or install the torch "
        "wheel built for the CUDA version this driver supports."
    ),
    severity=Severity.WARNING,
    docs_url=MVC_DOC,
)

FABRIC_NOT_READY = declare(
    id="DRV005",
    category=Category.CUDA_INIT_FAILURE,
    summary="NVSwitch system without a working Fabric Manager",
    what=(
        "This board connects its GPUs through NVSwitch chips, which the nvidia-fabricmanager "
        "service must configure before CUDA can use any GPU. The service is not running, or "
        "the GPUs have not finished joining the NVSwitch fabric."
    ),
    why=(
        "CUDA fails with error 802 'system not yet initialized': torch.cuda.is_available() "
        "is False although nvidia-smi lists every GPU."
    ),
    fix=(
        "Install the nvidia-fabricmanager package of exactly the driver's version, enable and "
        "start the service, and reset the GPUs if they stay 'in progress'."
    ),
    docs_url="https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/",
)


# --------------------------------------------------------------------------- CUDA build


def _capability(text: object) -> tuple[int, int] | None:
    match = re.fullmatch(r"(\d+)\.(\d+)", str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def _arch(entry: str, prefix: str) -> tuple[int, int] | None:
    """'sm_86' -> (8, 6), 'sm_120' -> (12, 0); suffixed ('sm_90a') and other entries -> None."""
    match = re.fullmatch(prefix + r"_(\d+)(\d)", entry)
    return (int(match.group(1)), int(match.group(2))) if match else None


def needs_ptx_jit(capability: tuple[int, int], arch_list: list[str]) -> bool:
    """True when torch has no cubin this GPU runs but has PTX it could JIT-compile.

    A cubin for sm_XY runs on compute capability X.Z for Z >= Y; PTX for compute_XY is
    JIT-compiled for any GPU of capability >= X.Y.
    """
    cubins = [a for a in (_arch(e, "sm") for e in arch_list) if a]
    if any(a[0] == capability[0] and a[1] <= capability[1] for a in cubins):
        return False
    ptx = [a for a in (_arch(e, "compute") for e in arch_list) if a]
    return any(a <= capability for a in ptx)


def _evidence(facts: FactsView, compat: Compatibility) -> list[Evidence]:
    nvml, build = facts.nvml(), facts.torch_build()
    supported = compat.driver_cuda or "unknown"
    if compat.driver_cuda_derived:
        supported += " (from the release notes' driver table; the driver did not say)"
    return [
        Evidence("driver", nvml.get("driver_version") or "unknown", "nvmlSystemGetDriverVersion"),
        Evidence("newest CUDA the driver supports", supported, "nvmlSystemGetCudaDriverVersion"),
        Evidence("torch", f"{build.get('version')} (built with CUDA {build.get('cuda')})",
                 "torch.version.cuda"),
    ]


def _upgrade_steps(facts: FactsView, compat: Compatibility) -> list[Step]:
    # WSL2 runs on the Windows driver, whose version numbers are Windows ones.
    if facts.driver_os() == "windows":
        return [
            Step(f"Update the NVIDIA driver on Windows to {compat.needed_driver} or newer "
                 f"(CUDA {compat.build_cuda}); WSL2 uses the Windows driver.",
                 url=DRIVER_DOWNLOAD),
            Step("Restart WSL so it picks up the new driver.", command="wsl --shutdown"),
        ]
    # Not the build's own branch (R530 for CUDA 12.1 was a short-lived feature branch, long
    # gone): R580, the long-term support branch that runs every CUDA 11-13 build.
    full = (f"; its full feature set needs {compat.full_driver} ({compat.branch}) or newer"
            if compat.full_driver and compat.branch and compat.branch != f"R{RECOMMENDED_BRANCH}"
            else "")
    text = (f"Install driver branch R{RECOMMENDED_BRANCH} ({RECOMMENDED_BRANCH_MIN} or newer, "
            f"long-term support to August 2028). torch's CUDA {compat.build_cuda} build needs "
            f"driver {compat.needed_driver} or newer{full}")
    if facts.in_container():
        return [Step(text + ". The driver belongs to the host: upgrade it there, not in the "
                     "container.", url=DRIVER_BRANCHES)]
    if facts.distro_id() in {"ubuntu", "pop", "linuxmint"}:
        package = f"nvidia-driver-{RECOMMENDED_BRANCH}"
        if facts.looks_like_server():
            package += "-server"  # Ubuntu's build of the branch for compute servers
        return [Step(text + ".", command=f"sudo apt install {package}", url=DRIVER_BRANCHES),
                Step("Reboot to load the new kernel module.", command="sudo reboot")]
    return [Step(text + ", from your distribution's or NVIDIA's repository.",
                 url="https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/"),
            Step("Reboot to load the new kernel module.", command="sudo reboot")]


def _wheel_step(facts: FactsView, compat: Compatibility) -> list[Step]:
    """Or keep the driver: the build ``knowledge.wheels.recommend`` finds for it."""
    rec = recommendation(facts, compat.driver_cuda)
    if rec.install is None or rec.install.cuda == compat.build_cuda:
        return []  # nothing runs on this driver, or the same CUDA version again
    first = install_steps(facts, "torch torchvision torchaudio", cuda=compat.driver_cuda)[0]
    return [Step(f"Or keep the driver. {first.text}", command=first.command, url=first.url)]


@check(
    id="driver.cuda_compat",
    title="Driver vs torch CUDA",
    area="driver",
    requires=("nvml", "torch", "os"),
    codes=(DRIVER_TOO_OLD, MINOR_COMPAT_ONLY),
    blocked_by=("driver.present",),
)
def driver_cuda_compat(facts: FactsView) -> Iterator[Finding | Summary]:
    nvml = facts.nvml()
    build = facts.torch_build()
    if not facts.torch().get("importable"):
        yield Summary("torch cannot be imported: no CUDA build to compare with the driver")
        return
    build_cuda = build.get("cuda")
    if not build_cuda:
        yield Summary("torch has no CUDA build to compare with the driver")
        return
    compat = compatibility(build_cuda, nvml.get("driver_version"),
                           nvml.get("cuda_driver_version"), facts.driver_os())
    driver = nvml.get("driver_version")
    if compat.verdict is Verdict.UNKNOWN:
        yield Summary(f"cannot tell: driver {driver} does not say which CUDA it supports")
        return
    if compat.verdict is Verdict.SUPPORTED:
        yield Summary(f"driver {driver} supports CUDA {compat.driver_cuda} >= torch's "
                      f"CUDA {compat.build_cuda}")
        return
    evidence = _evidence(facts, compat)
    steps = _upgrade_steps(facts, compat) + _wheel_step(facts, compat)
    if compat.verdict is Verdict.TOO_OLD:
        yield Finding(
            code=DRIVER_TOO_OLD,
            title=(f"Driver {driver} supports CUDA {compat.driver_cuda}, but torch "
                   f"{build.get('version')} needs CUDA {compat.build_cuda} (driver "
                   f"{compat.needed_driver} or newer): CUDA cannot initialise"),
            evidence=tuple(evidence),
            remediation=tuple(steps),
        )
        return
    # Minor-version compatibility: fine for cubins, fatal for PTX JIT.
    arch_list = build.get("arch_list") or []
    gpus = [(g, _capability(g.get("compute_capability"))) for g in facts.nvml_gpus()]
    known = [(g, cap) for g, cap in gpus if cap]
    jit = [(g, cap) for g, cap in known if needs_ptx_jit(cap, arch_list)]
    mvc = (f"torch's CUDA {compat.build_cuda} build runs on driver {driver} (CUDA "
           f"{compat.driver_cuda}) through minor-version compatibility")
    if known and not jit:
        yield Summary(f"{mvc}; it has cubins for every GPU, so no PTX JIT is needed")
        return
    evidence.append(Evidence("torch architectures", " ".join(arch_list) or "unknown",
                             "torch.cuda.get_arch_list()"))
    if jit:
        names = ", ".join(f"GPU {g.get('index')} ({g.get('name')}, sm_{c[0]}{c[1]})"
                          for g, c in jit)
        yield Finding(
            code=MINOR_COMPAT_ONLY,
            title=(f"{names}: torch has only PTX for it, which driver {driver} (CUDA "
                   f"{compat.driver_cuda}) cannot JIT-compile from CUDA {compat.build_cuda}"),
            severity=Severity.ERROR,
            evidence=tuple(evidence),
            remediation=tuple(steps),
            affects=tuple(f"gpu:{g.get('index')}" for g, _ in jit),
        )
        return
    yield Finding(
        code=MINOR_COMPAT_ONLY,
        title=f"{mvc} only: PTX JIT and newer-driver APIs will fail",
        evidence=tuple(evidence),
        remediation=tuple(steps),
    )


# --------------------------------------------------------------------------- fabric


_WAITING = ("not_started", "in_progress")


def _fabric_state(gpu: NvmlGpu) -> str:
    """The GPU's NVSwitch fabric state ("in_progress"), "" where it has none."""
    return (gpu.get("fabric") or {}).get("state") or ""
_DNF_DISTROS = frozenset({"rhel", "centos", "rocky", "almalinux", "ol", "fedora", "amzn"})


def _fabric_install_step(facts: FactsView, driver: str, branch: str) -> Step:
    """The Fabric Manager package of exactly the driver's version, per package manager.

    apt: the version string differs by repository (NVIDIA's ``570.133.20-1``, Ubuntu's own
    ``580.159.03-0ubuntu0.24.04.1``, https://packages.ubuntu.com/source/noble/fabric-manager-580),
    so the command picks the listed version that starts with the driver's. dnf (NVIDIA's
    RHEL repository): ``nvidia-fabric-manager-{driver}`` (Fabric Manager user guide).
    """
    text = (f"Install the Fabric Manager of exactly the driver's version ({driver}); the "
            "package version must equal the driver's, so hold it against upgrades.")
    if facts.distro_id() in _DNF_DISTROS:
        return Step(text, command=f"sudo dnf install nvidia-fabric-manager-{driver}",
                    url=FABRIC_NOT_READY.docs_url)
    package = f"nvidia-fabricmanager-{branch}"
    return Step(text + " `apt-cache madison` lists the versions your repositories carry.",
                command=f"sudo apt install \"{package}=$(apt-cache madison {package} | "
                        f"awk '{{print $3}}' | grep -m1 '^{driver}-')\" && "
                        f"sudo apt-mark hold {package}",
                url=FABRIC_NOT_READY.docs_url)


@check(
    id="driver.fabric_manager",
    title="NVSwitch fabric",
    area="driver",
    requires=("nvml", "driver", "os"),
    codes=(FABRIC_NOT_READY,),
    blocked_by=("driver.present",),
)
def fabric_manager(facts: FactsView) -> Iterator[Finding | Summary]:
    nvml, drv = facts.nvml(), facts.driver()
    in_container = facts.in_container()
    switches = drv.get("nvswitch_count") or 0
    gpus = [g for g in facts.nvml_gpus() if not g.get("error")]
    waiting = [g for g in gpus if _fabric_state(g) in _WAITING]
    # Inside a container the daemon runs on the host, out of sight of the process list.
    daemon_down = (switches > 0 and drv.get("fabric_manager_running") is False
                   and not in_container)
    if not waiting and not daemon_down:
        if switches or any(g.get("fabric") for g in gpus):
            yield Summary(f"{switches} NVSwitch(es); fabric ready")
        else:
            yield Summary("no NVSwitch fabric")
        return
    driver = nvml.get("driver_version") or "unknown"
    branch = driver.split(".")[0]
    evidence = [
        Evidence("NVSwitches on the PCI bus", str(switches), "/sys/bus/pci/devices (class 0680)"),
        Evidence("nv-fabricmanager process", {True: "running", False: "not running",
                                              None: "unknown"}[drv.get("fabric_manager_running")]
                 if not in_container else "not visible from a container", "process list"),
        Evidence("driver", driver, "nvmlSystemGetDriverVersion"),
    ]
    if waiting:
        evidence.append(Evidence(
            "GPU fabric state",
            ", ".join(f"GPU {g.get('index')}: {_fabric_state(g).replace('_', ' ')}"
                      for g in waiting),
            "nvmlDeviceGetGpuFabricInfo (nvidia-smi -q: Fabric / State)"))
    init_error = facts.torch_cuda().get("init_error")
    if init_error:
        evidence.append(Evidence("torch CUDA init", init_error, "torch.cuda.is_available()"))
    if daemon_down:
        title = (f"NVSwitch system ({switches} NVSwitches) without a running Fabric Manager: "
                 "CUDA fails with error 802 'system not yet initialized'")
    else:
        title = (f"{count(len(waiting), 'GPU')} {plural('has', len(waiting))} not joined the "
                 "NVSwitch fabric (state: "
                 f"{_fabric_state(waiting[0]).replace('_', ' ')}): CUDA fails with error "
                 "802 'system not yet initialized'")
    steps = [
        _fabric_install_step(facts, driver, branch),
        Step("Enable and start the service, then read its log if it stops.",
             command="sudo systemctl enable --now nvidia-fabricmanager && "
                     "systemctl status nvidia-fabricmanager"),
        Step("Check that every GPU reports 'Fabric State: Completed'; if they stay 'In "
             "Progress' after a restart of the service, reset the idle GPUs or reboot.",
             command="nvidia-smi -q | grep -A 2 Fabric"),
    ]
    if in_container:
        steps.insert(0, Step("The Fabric Manager runs on the host, not in the container: "
                             "run these steps on the host."))
    yield Finding(code=FABRIC_NOT_READY, title=title, evidence=tuple(evidence),
                  remediation=tuple(steps),
                  affects=tuple(f"gpu:{g.get('index')}" for g in waiting))
