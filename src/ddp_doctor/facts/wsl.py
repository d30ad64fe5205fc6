"""WSL facts: where the GPU driver comes from inside WSL2, and the VM's limits.

Inside WSL2 there is no NVIDIA kernel module: the Windows driver is exposed through
``/dev/dxg`` and its user-space half (``libcuda.so*``, ``libnvidia-ml.so*``,
``nvidia-smi``) is mounted at ``/usr/lib/wsl/lib``. A Linux NVIDIA driver installed
inside the distro (``nvidia-driver-*``, ``cuda-drivers``) puts its own ``libcuda.so`` in
the loader's path and breaks CUDA. The VM's memory and processors are capped by the
Windows user's ``%UserProfile%\\.wslconfig``.

Sources:
- https://docs.nvidia.com/cuda/wsl-user-guide/index.html (driver in /usr/lib/wsl/lib,
  never install a Linux display driver, cuda-toolkit-12-x only)
- https://learn.microsoft.com/en-us/windows/wsl/wsl-config (.wslconfig [wsl2] memory,
  processors, swap; defaults 50 % of Windows RAM, all processors, 25 % swap)
- microsoft/WSL#5548, #5663, #11229 ("libcuda.so.1 is not a symbolic link"), #8587
  ("libcuda.so: cannot open shared object file")
"""

from __future__ import annotations

import configparser
import re
from typing import Any

from ddp_doctor.facts.os_info import detect_wsl
from ddp_doctor.facts.seam import Env

WSL_LIB = "/usr/lib/wsl/lib"
LINUX_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu")
WINDOWS_USERS = "/mnt/c/Users"
COMMAND_TIMEOUT_S = 5.0

# Packages that carry a Linux NVIDIA driver (kernel module or its libcuda) on Debian/Ubuntu.
_DRIVER_PACKAGE = re.compile(
    r"^(nvidia-driver-\d+.*|nvidia-dkms-\d+.*|nvidia-kernel-.*|libnvidia-compute-\d+.*|"
    r"cuda-drivers.*|nvidia-utils-\d+.*|nvidia-open.*)$"
)
_DRIVER_LIBS = ("libcuda.so", "libnvidia-ml.so")


def _ldconfig_entries(env: Env) -> dict[str, Any]:
    """What the loader cache maps libcuda / libnvidia-ml to (``ldconfig -p``)."""
    result = None
    for argv in (["ldconfig", "-p"], ["/sbin/ldconfig", "-p"]):
        result = env.run(argv, timeout=COMMAND_TIMEOUT_S)
        if not result.not_found:
            break
    assert result is not None
    if not result.ok:
        return {"ok": False, "error": result.describe_failure(), "libcuda": [], "libnvidia_ml": []}
    found: dict[str, list[str]] = {"libcuda": [], "libnvidia_ml": []}
    for line in result.stdout.splitlines():
        name, _, path = line.strip().partition(" => ")
        soname = name.split(" ", 1)[0]
        if soname in ("libcuda.so.1", "libcuda.so"):
            found["libcuda"].append(path.strip())
        elif soname in ("libnvidia-ml.so.1", "libnvidia-ml.so"):
            found["libnvidia_ml"].append(path.strip())
    return {"ok": True, "error": None, **{k: list(dict.fromkeys(v)) for k, v in found.items()}}


def _resolve_libcuda(env: Env, ld_path: list[str], cache: dict[str, Any]) -> dict[str, Any]:
    """Where dlopen("libcuda.so.1") would land: LD_LIBRARY_PATH first, then the cache."""
    for directory in ld_path:
        candidate = f"{directory.rstrip('/')}/libcuda.so.1"
        if env.exists(candidate):
            return {"path": candidate, "via": "LD_LIBRARY_PATH"}
    if cache.get("libcuda"):
        return {"path": cache["libcuda"][0], "via": "ldconfig cache"}
    return {"path": None, "via": None}


def _linux_driver_files(env: Env) -> list[str]:
    """libcuda / libnvidia-ml files in the distro's own lib dirs that are not WSL's."""
    found = []
    for directory in LINUX_LIB_DIRS:
        for name in env.listdir(directory):
            if not name.startswith(_DRIVER_LIBS):
                continue
            path = f"{directory}/{name}"
            target = env.readlink(path)
            if target is None or WSL_LIB not in target:
                found.append(path if target is None else f"{path} -> {target}")
    return found


def _driver_packages(env: Env) -> dict[str, Any]:
    """Installed Linux NVIDIA driver packages (dpkg only; other distros report None)."""
    if not env.exists("/var/lib/dpkg/status"):
        return {"checked": False, "packages": [], "error": None}
    result = env.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\n"],
                     timeout=COMMAND_TIMEOUT_S)
    if not result.ok:
        return {"checked": False, "packages": [], "error": result.describe_failure()}
    packages = []
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].startswith("i") and _DRIVER_PACKAGE.match(parts[1]):
            packages.append(f"{parts[1]} {parts[2]}")
    return {"checked": True, "packages": packages, "error": None}


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*$", re.IGNORECASE)


def parse_size(text: str | None) -> int | None:
    """'8GB' / '4096MB' / '0' as .wslconfig writes sizes, in bytes; None when unreadable."""
    match = _SIZE.match(text or "")
    if not match:
        return None
    scale = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}[match[2].upper()]
    return int(float(match[1]) * scale)


def parse_wslconfig(text: str) -> dict[str, Any]:
    """The [wsl2] memory/processors/swap of a .wslconfig (configparser, keys as written)."""
    parser = configparser.ConfigParser(strict=False, interpolation=None,
                                       inline_comment_prefixes=("#", ";"))
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        return {"error": f"cannot parse: {exc}".splitlines()[0]}
    section = parser["wsl2"] if parser.has_section("wsl2") else {}
    memory, processors, swap = (section.get(k) for k in ("memory", "processors", "swap"))
    return {
        "memory": memory,
        "memory_bytes": parse_size(memory),
        "processors": int(processors) if processors and processors.strip().isdigit() else None,
        "swap": swap,
        "swap_bytes": parse_size(swap),
        "error": None,
    }


def _wslconfigs(env: Env) -> list[dict[str, Any]]:
    """Every readable %UserProfile%\\.wslconfig under /mnt/c/Users."""
    found = []
    for user in env.listdir(WINDOWS_USERS):
        path = f"{WINDOWS_USERS}/{user}/.wslconfig"
        text = env.read_text(path)
        if text is not None:
            found.append({"path": path, **parse_wslconfig(text)})
    return found


def probe_wsl(env: Env) -> dict[str, Any]:
    """WSL facts; ``{"is_wsl": False}`` at once on any other machine."""
    plat = env.platform()
    environ = env.environ()
    detected = detect_wsl(plat.get("release", ""), env.read_text("/proc/version") or "", environ)
    if not detected["is_wsl"]:
        return {"is_wsl": False}
    lib_files = env.listdir(WSL_LIB)
    ld_path = [p for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    cache = _ldconfig_entries(env)
    modules = env.read_text("/proc/modules") or ""
    return {
        "is_wsl": True,
        "version": detected["version"],
        "evidence": detected["evidence"],
        "distro_name": environ.get("WSL_DISTRO_NAME"),
        "lib_dir": WSL_LIB,
        "lib_dir_files": lib_files,
        "libcuda_in_lib_dir": any(f.startswith("libcuda.so") for f in lib_files),
        "nvml_in_lib_dir": any(f.startswith("libnvidia-ml.so") for f in lib_files),
        "nvidia_smi_in_lib_dir": "nvidia-smi" in lib_files,
        "ld_library_path": ld_path,
        "ldconfig": cache,
        "libcuda_resolved": _resolve_libcuda(env, ld_path, cache),
        "linux_driver": {
            "files": _linux_driver_files(env),
            "kernel_module": any(line.split(" ", 1)[0] == "nvidia"
                                 for line in modules.splitlines()),
            "proc_driver_nvidia": env.exists("/proc/driver/nvidia"),
            **_driver_packages(env),
        },
        "wslconfig": _wslconfigs(env),
    }
