"""Which NVIDIA driver a CUDA build needs, and what happens with an older one.

A driver reports the newest CUDA it supports (NVML ``cuda_driver_version``, nvidia-smi's
"CUDA Version"); ``torch.version.cuda`` is the toolkit torch was built with. Three cases:

- the driver supports that CUDA version or newer: everything works (drivers are
  backward compatible with older toolkits);
- same CUDA major, older minor, and the driver is at least the major's minor-version
  compatibility (MVC) minimum (CUDA 11 and later): the build runs with a limited feature
  set. What MVC does not cover: PTX produced by the newer toolchain cannot be JIT-compiled
  by the older driver ("the provided PTX was compiled with an unsupported toolchain",
  cudaErrorUnsupportedPtxVersion 222), and APIs that need the newer driver fail with
  cudaErrorCallRequiresNewerDriver (36);
- an older CUDA major (or below the MVC minimum, or CUDA 10 and older, which have no MVC):
  CUDA fails to initialise, "CUDA driver version is insufficient for CUDA runtime version"
  (error 35); torch says "The NVIDIA driver on your system is too old".

Sources:
- Toolkit driver table ("CUDA Toolkit and Corresponding Driver Versions") and the MVC
  minimums ("CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version
  Compatibility"): https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html, older
  rows in https://docs.nvidia.com/cuda/archive/12.5.1/cuda-toolkit-release-notes/index.html
- MVC ranges (11.x >= 450, 12.x >= 525, 13.x >= 580) and the 11.x footnote (450.80.02 Linux /
  452.39 Windows): https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html
- What MVC does not cover (PTX JIT, newer-driver APIs):
  https://docs.nvidia.com/deploy/cuda-compatibility/ and the error enum in
  https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html
- Driver branches and their lifetime:
  https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

RELEASE_NOTES = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"
MVC_DOC = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"

DriverVersion = tuple[int, ...]


@dataclass(frozen=True)
class ToolkitRow:
    """One row of the release notes' toolkit/driver table."""

    release: str  # "12.8 Update 1"
    cuda: str  # "12.8"
    linux: str
    windows: str | None  # None: the notes print N/A (13.x no longer bundles a Windows driver)


# "CUDA Toolkit and Corresponding Driver Versions" (release notes, Table 3): the driver that
# ships with each toolkit, needed for its full feature set. Within a minor version, the GA
# row is the lowest; updates need the later driver shown. There is no 12.7 toolkit.
TOOLKIT_DRIVERS: tuple[ToolkitRow, ...] = (
    ToolkitRow("13.2 Update 2", "13.2", "595.71.05", None),
    ToolkitRow("13.2 Update 1", "13.2", "595.58.03", None),
    ToolkitRow("13.2 GA", "13.2", "595.45.04", None),
    ToolkitRow("13.1 Update 1", "13.1", "590.48.01", None),
    ToolkitRow("13.1 GA", "13.1", "590.44.01", None),
    ToolkitRow("13.0 Update 2", "13.0", "580.95.05", None),
    ToolkitRow("13.0 Update 1", "13.0", "580.82.07", None),
    ToolkitRow("13.0 GA", "13.0", "580.65.06", None),
    ToolkitRow("12.9 Update 1", "12.9", "575.57.08", "576.57"),
    ToolkitRow("12.9 GA", "12.9", "575.51.03", "576.02"),
    ToolkitRow("12.8 Update 1", "12.8", "570.124.06", "572.61"),
    ToolkitRow("12.8 GA", "12.8", "570.26", "570.65"),
    ToolkitRow("12.6 Update 3", "12.6", "560.35.05", "561.17"),
    ToolkitRow("12.6 Update 2", "12.6", "560.35.03", "560.94"),
    ToolkitRow("12.6 Update 1", "12.6", "560.35.03", "560.94"),
    ToolkitRow("12.6 GA", "12.6", "560.28.03", "560.76"),
    ToolkitRow("12.5 Update 1", "12.5", "555.42.06", "555.85"),
    ToolkitRow("12.5 GA", "12.5", "555.42.02", "555.85"),
    ToolkitRow("12.4 Update 1", "12.4", "550.54.15", "551.78"),
    ToolkitRow("12.4 GA", "12.4", "550.54.14", "551.61"),
    ToolkitRow("12.3 Update 1", "12.3", "545.23.08", "546.12"),
    ToolkitRow("12.3 GA", "12.3", "545.23.06", "545.84"),
    ToolkitRow("12.2 Update 2", "12.2", "535.104.05", "537.13"),
    ToolkitRow("12.2 Update 1", "12.2", "535.86.09", "536.67"),
    ToolkitRow("12.2 GA", "12.2", "535.54.03", "536.25"),
    ToolkitRow("12.1 Update 1", "12.1", "530.30.02", "531.14"),
    ToolkitRow("12.1 GA", "12.1", "530.30.02", "531.14"),
    ToolkitRow("12.0 Update 1", "12.0", "525.85.12", "528.33"),
    ToolkitRow("12.0 GA", "12.0", "525.60.13", "527.41"),
    ToolkitRow("11.8 GA", "11.8", "520.61.05", "520.06"),
    ToolkitRow("11.7 Update 1", "11.7", "515.48.07", "516.31"),
    ToolkitRow("11.7 GA", "11.7", "515.43.04", "516.01"),
    ToolkitRow("11.6 Update 2", "11.6", "510.47.03", "511.65"),
    ToolkitRow("11.6 GA", "11.6", "510.39.01", "511.23"),
    ToolkitRow("11.5 Update 1", "11.5", "495.29.05", "496.13"),
    ToolkitRow("11.5 GA", "11.5", "495.29.05", "496.04"),
    ToolkitRow("11.4 Update 3", "11.4", "470.82.01", "472.50"),
    ToolkitRow("11.4 Update 1", "11.4", "470.57.02", "471.41"),
    ToolkitRow("11.4 GA", "11.4", "470.42.01", "471.11"),
    ToolkitRow("11.3 GA", "11.3", "465.19.01", "465.89"),
    ToolkitRow("11.2.2", "11.2", "460.32.03", "461.33"),
    ToolkitRow("11.2.1", "11.2", "460.32.03", "461.09"),
    ToolkitRow("11.2.0", "11.2", "460.27.03", "460.82"),
    ToolkitRow("11.1.1", "11.1", "455.32", "456.81"),
    ToolkitRow("11.1 GA", "11.1", "455.23", "456.38"),
    ToolkitRow("11.0.3", "11.0", "450.51.06", "451.82"),
    ToolkitRow("11.0.2 GA", "11.0", "450.51.05", "451.48"),
    ToolkitRow("10.2.89", "10.2", "440.33", "441.22"),
    ToolkitRow("10.1.105", "10.1", "418.39", "418.96"),
    ToolkitRow("10.0.130", "10.0", "410.48", "411.31"),
)

# Later 13.x releases: the newest notes name only the driver branch (13.3 -> R610,
# 13.4 -> R615), not a minimum build, so the branch number stands in as the floor.
BRANCH_ONLY: dict[str, str] = {"13.3": "610", "13.4": "615"}

# "Minimum Required Driver Version for CUDA Minor Version Compatibility" (release notes,
# Table 2; MVC page, Table 1 and its CUDA 11.0 footnote). For 13.x the notes give the R580
# branch: on Linux its first release (580.65.06, the 13.0 GA driver); on Windows no build
# is listed, so any R580 driver counts. Windows 12.x: the sources disagree (527.41, the 12.0
# GA driver, in some copies of Table 2; 528.33 in later ones), so the later, safer value.
MVC_MINIMUM: dict[int, dict[str, str]] = {
    13: {"linux": "580.65.06", "windows": "580"},
    12: {"linux": "525.60.13", "windows": "528.33"},
    11: {"linux": "450.80.02", "windows": "452.39"},
}


def parse_driver(text: str | None) -> DriverVersion | None:
    """'535.129.03' -> (535, 129, 3); Windows '566.36' -> (566, 36); junk -> None."""
    if not text:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)*)\s*", str(text))
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def parse_cuda(text: str | None) -> tuple[int, int] | None:
    """'12.8' / '12.8.1' / '12' -> (12, 8) / (12, 8) / (12, 0); junk or None -> None."""
    if not text:
        return None
    match = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?(?:\.\d+)?\s*", str(text))
    if not match:
        return None
    return int(match.group(1)), int(match.group(2) or 0)


def _cuda_text(cuda: tuple[int, int]) -> str:
    return f"{cuda[0]}.{cuda[1]}"


def _platform(os: str) -> str:
    if os not in ("linux", "windows"):
        raise ValueError(f"os must be 'linux' or 'windows', not {os!r}")
    return os


def toolkit_min_driver(cuda: str, os: str = "linux") -> str | None:
    """The driver of the toolkit's GA release (full feature set); None when not in the table."""
    wanted = parse_cuda(cuda)
    if wanted is None:
        return None
    key = _cuda_text(wanted)
    column = _platform(os)
    rows = [r for r in TOOLKIT_DRIVERS if r.cuda == key]
    if not rows:
        return BRANCH_ONLY.get(key)
    values = [r.linux if column == "linux" else r.windows for r in rows]
    known = [v for v in values if v]
    if not known:  # 13.x on Windows: no bundled driver; the branch is the same as Linux's
        return str(parse_driver(rows[-1].linux)[0])  # type: ignore[index]
    return min(known, key=lambda v: parse_driver(v) or ())


def min_driver(cuda: str, os: str = "linux", allow_minor_compat: bool = True) -> str | None:
    """The oldest driver that runs code built with CUDA ``cuda`` on ``os``.

    With ``allow_minor_compat`` (the default), CUDA 11 and newer need only their major's
    MVC minimum; CUDA 10 and older always need their toolkit's own driver.
    """
    wanted = parse_cuda(cuda)
    if wanted is None:
        return None
    if allow_minor_compat and wanted[0] in MVC_MINIMUM:
        return MVC_MINIMUM[wanted[0]][_platform(os)]
    return toolkit_min_driver(cuda, os)


def driver_branch_for(cuda: str) -> str | None:
    """The driver branch to install for the full feature set of CUDA ``cuda``: 'R580' for 13.0."""
    linux = toolkit_min_driver(cuda, "linux")
    version = parse_driver(linux)
    return f"R{version[0]}" if version else None


def max_cuda_for_driver(driver: str | None, os: str = "linux") -> str | None:
    """The newest CUDA toolkit whose own driver is not newer than ``driver`` (from the table).

    A stand-in for the driver's own report (NVML) when that is missing, e.g. WSL2's
    "CUDA Version: ERR!".
    """
    have = parse_driver(driver)
    if have is None:
        return None
    column = _platform(os)
    best: tuple[int, int] | None = None
    for row in TOOLKIT_DRIVERS:
        value = row.linux if column == "linux" else row.windows
        if value is None:
            # 13.x on Windows: the notes list no build, only the branch (R580 for 13.0,
            # R590 for 13.1, R595 for 13.2); the branch number is the floor.
            value = str(parse_driver(row.linux)[0])  # type: ignore[index]
        needed = parse_driver(value)
        cuda = parse_cuda(row.cuda)
        if needed is not None and cuda is not None and have >= needed:
            best = cuda if best is None else max(best, cuda)
    return _cuda_text(best) if best else None


class Verdict(str, Enum):
    """How a CUDA build fares on a driver."""

    SUPPORTED = "supported"  # the driver supports this CUDA version or newer
    MINOR_COMPAT = "minor_compat"  # runs through MVC: PTX JIT and newer-driver APIs fail
    TOO_OLD = "too_old"  # CUDA cannot initialise: error 35
    UNKNOWN = "unknown"  # not enough to tell

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Compatibility:
    verdict: Verdict
    build_cuda: str | None
    driver_cuda: str | None  # what the driver supports (reported, or derived from the table)
    driver_cuda_derived: bool  # True when driver_cuda came from the table, not the driver
    needed_driver: str | None  # the minimum that would run the build (MVC minimum where it applies)
    full_driver: str | None  # the toolkit's own driver (full feature set)
    branch: str | None  # the branch to install for the full feature set


def compatibility(build_cuda: str | None, driver_version: str | None,
                  driver_cuda: str | None, os: str = "linux") -> Compatibility:
    """Judge torch's CUDA build against the installed driver.

    ``driver_cuda`` is NVML's cuda_driver_version; when it is missing it is derived from
    ``driver_version`` with the toolkit table. ``os`` is the platform of the driver
    ("windows" for WSL2, whose driver is the Windows one).
    """
    build = parse_cuda(build_cuda)
    derived = False
    supported = parse_cuda(driver_cuda)
    if supported is None and driver_version:
        supported = parse_cuda(max_cuda_for_driver(driver_version, os))
        derived = supported is not None
    known = build_cuda if build else None  # parsed, so a version string
    needed = min_driver(known, os) if known else None
    full = toolkit_min_driver(known, os) if known else None
    branch = driver_branch_for(known) if known else None

    def result(verdict: Verdict) -> Compatibility:
        return Compatibility(verdict, _cuda_text(build) if build else None,
                             _cuda_text(supported) if supported else None, derived,
                             needed, full, branch)

    if build is None or supported is None:
        return result(Verdict.UNKNOWN)
    if supported >= build:
        return result(Verdict.SUPPORTED)
    have = parse_driver(driver_version)
    floor = parse_driver(needed)
    if derived and have is not None and floor is not None and have >= floor:
        # A CUDA version read from the table is a lower bound (the table has no row for
        # every driver); a driver at or above the build's minimum is not "too old".
        return result(Verdict.MINOR_COMPAT)
    if supported[0] < build[0] or build[0] not in MVC_MINIMUM:
        return result(Verdict.TOO_OLD)
    if have is None or floor is None:
        return result(Verdict.UNKNOWN)
    return result(Verdict.MINOR_COMPAT if have >= floor else Verdict.TOO_OLD)
