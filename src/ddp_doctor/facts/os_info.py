"""Operating-system facts: distribution, kernel, WSL and container detection.

WSL markers follow Microsoft's and NVIDIA's WSL documentation
(https://learn.microsoft.com/en-us/windows/wsl/compare-versions,
https://docs.nvidia.com/cuda/wsl-user-guide/index.html): a kernel release containing
"microsoft" means WSL; WSL2 kernels say "microsoft-standard" (newer: "-WSL2"), WSL1
reports a fake "4.4.0-NNNNN-Microsoft" release. Only WSL2 can reach a GPU.
"""

from __future__ import annotations

import re
from typing import Any

from ddp_doctor.facts.seam import Env

_WSL_LIB = "/usr/lib/wsl/lib"


def detect_wsl(kernel_release: str, proc_version: str, environ: dict[str, str]) -> dict[str, Any]:
    """Tell WSL1 from WSL2 from native Linux, saying which marker decided it."""
    text = f"{kernel_release} {proc_version}"
    if "microsoft" not in text.lower():
        return {"is_wsl": False, "version": None, "evidence": None}
    if re.search(r"microsoft-standard|WSL2", text, re.IGNORECASE):
        return {"is_wsl": True, "version": 2, "evidence": kernel_release or proc_version.strip()}
    # WSL1 kernels report e.g. "4.4.0-19041-Microsoft" (capital M, no "standard").
    if "WSL_INTEROP" in environ:
        return {"is_wsl": True, "version": 2, "evidence": "WSL_INTEROP is set"}
    return {"is_wsl": True, "version": 1, "evidence": kernel_release or proc_version.strip()}


def detect_container(env: Env, environ: dict[str, str]) -> dict[str, Any]:
    """Docker, Podman, Kubernetes or LXC, and what gave it away."""
    markers: list[str] = []
    kind = None
    if env.exists("/.dockerenv"):
        kind = "docker"
        markers.append("/.dockerenv exists")
    if env.exists("/run/.containerenv"):
        kind = "podman"
        markers.append("/run/.containerenv exists")
    cgroup = env.read_text("/proc/1/cgroup") or ""
    for word, name in (("kubepods", "kubernetes"), ("docker", "docker"), ("lxc", "lxc"),
                       ("containerd", "containerd")):
        if word in cgroup:
            kind = kind or name
            markers.append(f"/proc/1/cgroup mentions {word}")
            break
    if "KUBERNETES_SERVICE_HOST" in environ:
        kind = "kubernetes"
        markers.append("KUBERNETES_SERVICE_HOST is set")
    container_env = environ.get("container")
    if container_env:
        kind = kind or container_env
        markers.append(f"container={container_env}")
    return {"in_container": bool(markers), "kind": kind, "evidence": markers}


def detect_scheduler(environ: dict[str, str]) -> dict[str, Any]:
    """A Slurm allocation, whose GPU and CPU limits override what the node has."""
    if "SLURM_JOB_ID" not in environ:
        return {"slurm": False}
    keys = ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS", "SLURM_GPUS_ON_NODE",
            "SLURM_CPUS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS")
    return {"slurm": True, **{k.lower(): environ[k] for k in keys if k in environ}}


def probe_os(env: Env) -> dict[str, Any]:
    plat = env.platform()
    environ = env.environ()
    try:
        release = env.os_release()
    except Exception as exc:  # distro reads files; a broken /etc must not end the probe
        release = {"error": str(exc)}
    proc_version = env.read_text("/proc/version") or ""
    wsl = detect_wsl(plat.get("release", ""), proc_version, environ)
    if wsl["is_wsl"]:
        wsl["lib_dir"] = _WSL_LIB
        wsl["lib_dir_files"] = env.listdir(_WSL_LIB)
        wsl["distro_name"] = environ.get("WSL_DISTRO_NAME")
    return {
        "system": plat.get("system"),
        "kernel": plat.get("release"),
        "machine": plat.get("machine"),
        "hostname": plat.get("node"),
        "distro": release,
        "proc_version": proc_version.strip() or None,
        "wsl": wsl,
        "container": detect_container(env, environ),
        "scheduler": detect_scheduler(environ),
    }
