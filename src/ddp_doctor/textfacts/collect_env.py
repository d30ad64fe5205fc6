"""``python -m torch.utils.collect_env`` reports: the torch build, OS, Python, GPUs, driver.

PyTorch's issue template asks for this report, so it is in most torch tickets. Its layout
(pytorch/pytorch ``torch/utils/collect_env.py``, ``env_info_fmt``) is ``Key: value`` lines;
the format changed over the years and pastes damage it, so the parser reads known keys
wherever they are and tolerates:

- old keys and spellings ("PyTorch version 1.5.0" without a colon, "Os:", "Version of
  relevant libraries"), odd spacing, full-width colons ("GPU 0：Tesla P100");
- multi-line values ("GPU models and configuration:" followed by "GPU n: name" lines,
  "cuDNN version: Probably one of the following:" followed by paths);
- hard-wrapped lines (a continuation line that is no known key is ignored);
- truncated pastes (whatever was read so far counts).

Meanings, from ``get_pretty_env_info``: "Could not collect" is a value that was None;
"CUDA used to build PyTorch: None" or "Could not collect" means ``torch.version.cuda`` is
None (a CPU build); "No CUDA" replaces the GPU, driver and cuDNN fields when torch has no
CUDA and nvidia-smi gave nothing; "PyTorch version: N/A" means ``import torch`` failed.
The driver version and GPU list come from ``nvidia-smi``, so they are the driver's (NVML's)
view, not torch's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ddp_doctor.textfacts.parsed import (
    Parsed,
    distro_from_pretty,
    known,
    normalize_line,
    os_from_platform,
    version_in,
    yes_no,
)

_KEYS = {
    "pytorch version": "torch_version",
    "is debug build": "debug",
    "cuda used to build pytorch": "torch_cuda",
    "rocm used to build pytorch": "torch_rocm",
    "os": "os",
    "python version": "python_version",
    "python platform": "platform",
    "is cuda available": "cuda_available",
    "cuda runtime version": "cuda_runtime",
    "gpu models and configuration": "gpus",
    "nvidia driver version": "driver",
    "cudnn version": "cudnn",
    "versions of relevant libraries": "libraries",
    "version of relevant libraries": "libraries",
}
_KEY_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z ._]*?)\s*:\s*(.*?)\s*$")
_NO_COLON_VERSION = re.compile(r"^\s*pytorch version\s+(\S+)\s*$", re.IGNORECASE)
_GPU_LINE = re.compile(r"^\s*GPU\s*(\d+)\s*:\s*(.+?)\s*$")
_LIBRARY = re.compile(r"^\s*\[(pip3?|conda)\]\s+(.*?)\s*$")
_CONDA_AS_PIP = {"pytorch": "torch"}
MAX_LINES = 400  # the report with a full lscpu block is about 120 lines


def parse(lines: Sequence[str]) -> Parsed | None:
    """Read one report starting at LINES[0]; None when it holds no PyTorch version line."""
    values: dict[str, str] = {}
    gpus: list[tuple[int, str]] = []
    libraries: list[tuple[str, str]] = []
    current: str | None = None  # the key whose multi-line value is being read
    in_libraries = False
    for raw in lines[:MAX_LINES]:
        line = normalize_line(raw)
        library = _LIBRARY.match(line)
        if library:
            libraries.append((library.group(1), library.group(2)))
            continue
        if in_libraries and line.strip():
            break  # the end of the report: something else was pasted after it
        field, value = _key_value(line)
        if field == "torch_version" and "torch_version" in values:
            break  # a second report starts here
        if field is not None:
            values.setdefault(field, value)
            current = field
            in_libraries = field == "libraries"
            if field == "gpus":
                gpu = _GPU_LINE.match(value)
                if gpu:
                    gpus.append((int(gpu.group(1)), gpu.group(2)))
            continue
        gpu = _GPU_LINE.match(line)
        if current == "gpus" and gpu:
            gpus.append((int(gpu.group(1)), gpu.group(2)))
        elif not line.strip():
            current = None
    if "torch_version" not in values:
        return None
    return _facts(values, gpus, libraries)


def _key_value(line: str) -> tuple[str | None, str]:
    no_colon = _NO_COLON_VERSION.match(line)
    if no_colon:
        return "torch_version", no_colon.group(1)
    match = _KEY_LINE.match(line)
    if not match:
        return None, ""
    field = _KEYS.get(re.sub(r"\s+", " ", match.group(1).lower()))
    return field, match.group(2)


def _facts(values: dict[str, str], gpus: list[tuple[int, str]],
           libraries: list[tuple[str, str]]) -> Parsed:
    out = Parsed(kind="collect_env")
    torch = _torch(values)
    out.facts["torch"] = torch
    python = _python(values, libraries)
    if python:
        out.facts["python"] = python
    os_fact = _os(values)
    if os_fact:
        out.facts["os"] = os_fact
    driver = known(values.get("driver"))
    driver = driver if driver and version_in(driver) == driver else None
    if driver or gpus:
        nvml: dict[str, Any] = {"initialized": True, "error": None,
                                "gpus": [{"index": i, "name": n} for i, n in gpus]}
        if driver:
            nvml["driver_version"] = driver
        out.facts["nvml"] = nvml
    out.summary = _summary(torch, os_fact, driver, [n for _, n in gpus])
    return out


# An issue template's "PyTorch version:" field filled with pip pins ("torch==1.4.0,
# torchvision==0.5.0": mkocabas/VIBE#83) names torch's version after "torch==".
_TORCH_PIN = re.compile(r"\btorch==([^\s,;]+)", re.IGNORECASE)


def _torch(values: dict[str, str]) -> dict[str, Any]:
    raw = values.get("torch_version")
    pinned = _TORCH_PIN.search(raw or "")
    version = known(pinned.group(1) if pinned else raw)
    if version is None:
        return {"importable": False,
                "import_error": {"type": "ImportError",
                                 "message": "torch could not be imported (collect_env printed "
                                            "'PyTorch version: N/A')"}}
    build: dict[str, Any] = {"version": version}
    if "torch_cuda" in values:
        build["cuda"] = known(values["torch_cuda"])
    if "torch_rocm" in values:
        build["hip"] = known(values["torch_rocm"])
    if "debug" in values:
        build["debug"] = yes_no(values["debug"])
    torch: dict[str, Any] = {"importable": True, "import_error": None, "build": build}
    available = yes_no(values.get("cuda_available"))
    if available is not None:
        torch["cuda"] = {"available": available}
    return torch


def _python(values: dict[str, str], libraries: list[tuple[str, str]]) -> dict[str, Any]:
    python: dict[str, Any] = {}
    version = version_in(values.get("python_version"))
    if version:
        python["version"] = version
    packages = _packages(libraries)
    if packages:
        python["packages"] = packages
    return python


def _packages(libraries: list[tuple[str, str]]) -> dict[str, list[dict[str, Any]]]:
    """pip and conda lines as ``python.packages``; one entry per distinct version.

    In a conda environment pip lists the conda-installed packages too, so a pip and a
    conda line with the same version are one install; different versions are two.
    """
    packages: dict[str, list[dict[str, Any]]] = {}
    for tool, text in libraries:
        if tool.startswith("pip"):
            name, sep, version = text.partition("==")
            if not sep:
                continue
        else:
            parts = text.split()
            if len(parts) < 2:
                continue  # "[conda] Could not collect"
            name, version = _CONDA_AS_PIP.get(parts[0].lower(), parts[0]), parts[1]
        key = name.strip().lower().replace("_", "-")
        version = version.strip()
        entries = packages.setdefault(key, [])
        if any(e["version"].split("+")[0] == version.split("+")[0] for e in entries):
            continue
        entries.append({"version": version, "location": f"{tool.rstrip('3')} list"})
    return packages


def _os(values: dict[str, str]) -> dict[str, Any]:
    os_fact = os_from_platform(values.get("platform"))
    pretty = known(values.get("os"))
    if pretty:
        arch = re.search(r"\s*\((x86_64|aarch64|arm64|ppc64le|AMD64)\)\s*$", pretty)
        if arch:
            os_fact.setdefault("machine", arch.group(1))
            pretty = pretty[:arch.start()].strip()
        low = pretty.lower()
        if "system" not in os_fact:
            os_fact["system"] = ("Windows" if "windows" in low else
                                 "Darwin" if low.startswith(("macos", "mac os")) else "Linux")
        if os_fact["system"] == "Linux":
            os_fact["distro"] = distro_from_pretty(pretty)
        else:
            os_fact["distro"] = {"id": None, "name": None, "version": None, "pretty": pretty}
    return os_fact


def _summary(torch: dict[str, Any], os_fact: dict[str, Any], driver: str | None,
             gpus: list[str]) -> str:
    build = torch.get("build") or {}
    parts = [f"torch {build['version']}" if build else "torch not importable"]
    if build.get("cuda"):
        parts[0] += f" (CUDA {build['cuda']})"
    elif build and "cuda" in build and not build.get("hip"):
        parts[0] += " (CPU-only build)"
    if driver:
        parts.append(f"driver {driver}")
    if gpus:
        parts.append(", ".join(f"{gpus.count(n)}x {n}" for n in dict.fromkeys(gpus)))
    pretty = (os_fact.get("distro") or {}).get("pretty")
    wsl = os_fact.get("wsl") or {}
    if pretty:
        parts.append(pretty + (f" on WSL{wsl.get('version')}" if wsl.get("is_wsl") else ""))
    return "collect_env: " + ", ".join(parts)
