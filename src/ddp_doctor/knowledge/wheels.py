"""Which PyTorch wheel to install on a machine, and the exact command.

``recommend`` is the one answer every check gives when it tells a user to (re)install
torch: a build that (a) runs on the installed driver, preferring a CUDA version the driver
fully supports over minor-version compatibility, (b) has kernels for every GPU, and (c)
exists for the interpreter's Python. When the current release cannot do all three, it says
which constraint fails, which driver would lift it, and which older release works now.

Sources:
- Current CUDA variants and their architectures: torch 2.13.0's own table
  (``PYTORCH_RELEASES_CODE_CC`` in ``torch/cuda/__init__.py``: 12.6, 13.0, 13.2 for x86_64);
  pytorch/pytorch RELEASE.md; torch 2.12 made CUDA 13.0 the default and dropped the CUDA 12.8
  build (googlecolab/colabtools#5982). Index URLs: https://pytorch.org/get-started/locally/
  (``https://download.pytorch.org/whl/cuXYZ``).
- Older builds (exact versions, architectures, Python ranges): pytorch/pytorch
  ``.ci/manywheel/build_cuda.sh`` per release branch and observed ``get_arch_list()``
  outputs: torch 2.11 cu128 ``sm_75 … sm_120`` (pytorch#172352, #172598), 2.10 and 2.8 cu128
  keep sm_70 (#157517, #160269), 2.0 cu117 stops at sm_86 and cu118 adds sm_90 (#95648);
  companions from the pytorch/vision README table (see ``torch_pairs``).
- A CUDA 12.x build runs on any driver from 525.60.13, a 13.x build from 580.65.06, through
  minor-version compatibility:
  https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html
- Driver branch to install: R580 is a long-term support branch (to August 2028) that runs
  every current build (CUDA 13.0 natively, 13.x through MVC):
  https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html
  and it is the last branch for Maxwell, Pascal and Volta GPUs; R470 was the last for Kepler
  (NVIDIA's "Unix graphics feature deprecation schedule",
  https://forums.developer.nvidia.com/t/unix-graphics-feature-deprecation-schedule/60588).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ddp_doctor.knowledge.arch import CURRENT_WHEEL_ARCHS, Support, support_for
from ddp_doctor.knowledge.cuda_driver import MVC_MINIMUM, parse_driver
from ddp_doctor.knowledge.torch_pairs import RELEASES

WHEEL_INDEX = "https://download.pytorch.org/whl"
INSTALL_GUIDE = "https://pytorch.org/get-started/locally/"
DRIVER_GUIDE = "https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html"

# The branch to install when the driver must be upgraded (see the docstring).
RECOMMENDED_BRANCH = "580"
RECOMMENDED_BRANCH_MIN = "580.65.06"
# Kepler (compute capability 3.x): R470 is its last branch, so no upgrade helps there.
LAST_KEPLER_BRANCH = "470"


@dataclass(frozen=True)
class WheelVariant:
    tag: str  # "cu126"
    cuda: str  # "12.6"
    min_linux_driver: str  # lowest driver that runs it (minor-version compatibility)

    @property
    def archs(self) -> tuple[str, ...]:
        return CURRENT_WHEEL_ARCHS[self.tag]


# Current release's variants, newest CUDA first.
CURRENT_VARIANTS: tuple[WheelVariant, ...] = (
    WheelVariant("cu132", "13.2", MVC_MINIMUM[13]["linux"]),
    WheelVariant("cu130", "13.0", MVC_MINIMUM[13]["linux"]),
    WheelVariant("cu126", "12.6", MVC_MINIMUM[12]["linux"]),
)


@dataclass(frozen=True)
class OlderBuild:
    """An exact older release that still helps machines the current one cannot serve."""

    torch: str
    torchvision: str
    torchaudio: str
    tag: str
    cuda: str
    archs: tuple[str, ...]
    python_min: str
    python_max: str


_SM_50_90 = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
OLDER_BUILDS: tuple[OlderBuild, ...] = (
    OlderBuild("2.11.0", "0.26.0", "2.11.0", "cu128", "12.8",
               ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"), "3.10", "3.14"),
    OlderBuild("2.10.0", "0.25.0", "2.10.0", "cu128", "12.8",
               ("sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"), "3.10", "3.14"),
    OlderBuild("2.8.0", "0.23.0", "2.8.0", "cu128", "12.8",
               ("sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"), "3.9", "3.13"),
    OlderBuild("2.8.0", "0.23.0", "2.8.0", "cu126", "12.6", _SM_50_90, "3.9", "3.13"),
    OlderBuild("2.4.1", "0.19.1", "2.4.1", "cu121", "12.1", _SM_50_90, "3.8", "3.12"),
    OlderBuild("2.4.1", "0.19.1", "2.4.1", "cu118", "11.8", ("sm_37", *_SM_50_90), "3.8",
               "3.12"),
    OlderBuild("2.0.1", "0.15.2", "2.0.2", "cu117", "11.7",
               ("sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"), "3.8", "3.11"),
)


@dataclass(frozen=True)
class Install:
    """What to install: the current release (``torch is None``) or an exact older one."""

    tag: str
    cuda: str
    torch: str | None = None
    torchvision: str | None = None
    torchaudio: str | None = None
    minor_compat: bool = False  # runs on this driver only through minor-version compatibility

    @property
    def index_url(self) -> str:
        return f"{WHEEL_INDEX}/{self.tag}"

    def command(self, pip: str = "python -m pip", packages: str = "torch torchvision") -> str:
        """``{pip} install ... --index-url ...``; exact versions for an older release."""
        if self.torch is None:
            return f"{pip} install --upgrade {packages} --index-url {self.index_url}"
        pins = {"torch": self.torch, "torchvision": self.torchvision,
                "torchaudio": self.torchaudio}
        wanted = " ".join(f"{name}=={pins[name]}" if pins.get(name) else name
                          for name in packages.split())
        return f"{pip} install {wanted} --index-url {self.index_url}"


@dataclass(frozen=True)
class Recommendation:
    install: Install | None  # what runs here now; None when nothing does
    driver_needed: str | None  # for the current release: the lowest driver that runs it
    driver_branch: str | None  # the branch to install when the driver is the obstacle
    current: Install | None  # the current build to install after a driver upgrade
    blocked: tuple[str, ...]  # why the current release does not fit: "driver", "python", "gpu"
    python_min: str  # the current release's Python range
    python_max: str


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def _cuda(text: str | None) -> tuple[int, int] | None:
    parsed = _version(text)
    return (parsed.major, parsed.minor) if parsed is not None else None


def _python(text: str | None) -> tuple[int, int] | None:
    parsed = _version(str(text).split("+")[0]) if text else None
    return (parsed.major, parsed.minor) if parsed is not None else None


def _runs(cuda: str, driver_cuda: tuple[int, int] | None,
          driver_version: str | None) -> str | None:
    """"full", "mvc" or None: how a build of CUDA ``cuda`` runs on the driver."""
    build = _cuda(cuda)
    if build is None:
        return None
    if driver_cuda is None:
        return "full"  # nothing to check against: the caller says so
    if driver_cuda >= build:
        return "full"
    if driver_cuda[0] != build[0] or build[0] not in MVC_MINIMUM:
        return None
    have, floor = parse_driver(driver_version), parse_driver(MVC_MINIMUM[build[0]]["linux"])
    if have is not None and floor is not None and have < floor:
        return None
    return "mvc"


def _kernels(archs: tuple[str, ...], capabilities: list[tuple[int, int]]) -> bool:
    return all(support_for(cap, list(archs)) is not Support.NONE for cap in capabilities)


def _python_ok(python: tuple[int, int] | None, low: str, high: str) -> bool:
    return python is None or _python(low) <= python <= _python(high)  # type: ignore[operator]


def _current_python() -> tuple[str, str]:
    newest = RELEASES[-1]
    return newest.python_min, newest.python_max


def recommend(driver_cuda: str | None, capabilities: list[tuple[int, int]] | None = None,
              python: str | None = None, driver_version: str | None = None) -> Recommendation:
    """The build to install here, or what stands in the way (see the module docstring).

    ``driver_cuda`` is the newest CUDA the driver supports (NVML / nvidia-smi "CUDA
    Version"), None when no driver answered: then the newest build with kernels for the GPUs
    is chosen and the caller must say it was not checked against a driver.
    """
    caps = list(capabilities or [])
    have = _cuda(driver_cuda)
    py = _python(python)
    py_min, py_max = _current_python()
    python_fits = _python_ok(py, py_min, py_max)

    with_kernels = [v for v in CURRENT_VARIANTS if _kernels(v.archs, caps)]
    # The build for a driver of the recommended branch (or an unknown driver): R580 runs
    # CUDA 13.0 natively, so no 13.2 build that would depend on minor-version compatibility.
    steady = next((v for v in reversed(with_kernels)
                   if v.tag != "cu126" or len(with_kernels) == 1), None)
    runnable = [(v, _runs(v.cuda, have, driver_version)) for v in with_kernels]
    full = [v for v, how in runnable if how == "full"]
    mvc = [v for v, how in runnable if how == "mvc"]
    # Full support first (newest CUDA the driver has); minor-version compatibility only
    # when nothing is fully supported, and then the closest CUDA version.
    fitting = full[:1] or mvc[-1:]
    chosen = steady if have is None else (fitting[0] if fitting else None)

    blocked: list[str] = []
    if not with_kernels:
        blocked.append("gpu")
    elif chosen is None:
        blocked.append("driver")
    if not python_fits:
        blocked.append("python")

    kepler = any(cap[0] < 5 for cap in caps)
    driver_needed = driver_branch = None
    current_install = None
    if "driver" in blocked and steady is not None and not kepler:
        driver_needed = steady.min_linux_driver
        driver_branch = RECOMMENDED_BRANCH
        current_install = Install(steady.tag, steady.cuda)

    install: Install | None = None
    if chosen is not None and python_fits:
        install = Install(chosen.tag, chosen.cuda, minor_compat=chosen in mvc and not full)
    else:
        install = _older(have, caps, py, driver_version)
    return Recommendation(install, driver_needed, driver_branch, current_install,
                          tuple(blocked), py_min, py_max)


def _older(have: tuple[int, int] | None, caps: list[tuple[int, int]],
           py: tuple[int, int] | None, driver_version: str | None) -> Install | None:
    """The best older release for this driver, GPUs and Python: fully supported by the
    driver first (newest release), else through minor-version compatibility (the CUDA
    version closest to the driver's, then the newest release)."""
    fits = []
    for build in OLDER_BUILDS:
        how = _runs(build.cuda, have, driver_version)
        if how and _kernels(build.archs, caps) and _python_ok(py, build.python_min,
                                                               build.python_max):
            fits.append((build, how))
    if not fits:
        return None
    full = [b for b, how in fits if how == "full"]
    if full:
        best, compat = full[0], False
    else:
        best = min((b for b, _ in fits), key=lambda b: (_cuda(b.cuda), -_order(b)))
        compat = True
    return Install(best.tag, best.cuda, best.torch, best.torchvision, best.torchaudio, compat)


def _order(build: OlderBuild) -> int:
    """Newer releases come first in OLDER_BUILDS: a higher number is a newer release."""
    return len(OLDER_BUILDS) - OLDER_BUILDS.index(build)


def install_command(install: Install | None, packages: str = "torch torchvision",
                    pip: str = "python -m pip") -> str | None:
    """Compatibility shim for older callers: the command for ``install``; None when no build
    runs here (print no command then). New code: ``checks._util.install_steps``."""
    return install.command(pip, packages) if install is not None else None
