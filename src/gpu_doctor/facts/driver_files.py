"""Driver facts read straight from the kernel, without loading any NVIDIA library.

``/proc/driver/nvidia/version`` is the loaded kernel module's own version (compared
with NVML's to spot a "Driver/library version mismatch"), ``/proc/modules`` says
whether nvidia or nouveau is loaded, and ``/dev/nvidia*`` are the device nodes a
container must be given. Reading files cannot hang on a wedged GPU, so this probe
runs in-process.
"""

from __future__ import annotations

import re
from typing import Any

from gpu_doctor.facts.env import Env

_VERSION_RE = re.compile(r"Kernel Module(?: for [\w/]+)?\s+(\d+\.\d+(?:\.\d+)?)")


def parse_module_version(text: str) -> str | None:
    """'NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ...' -> '550.54.15'."""
    match = _VERSION_RE.search(text)
    return match.group(1) if match else None


NVIDIA_PCI_VENDOR = "0x10de"
# PCI class 0x0300xx is a VGA controller, 0x0302xx a 3D controller (datacenter GPUs).
_GPU_CLASSES = ("0x0300", "0x0302")


def nvidia_pci_gpus(env: Env) -> list[dict[str, str]]:
    """NVIDIA display/3D controllers on the PCI bus, found whether or not a driver is bound."""
    base = "/sys/bus/pci/devices"
    gpus = []
    for address in env.listdir(base):
        vendor = (env.read_text(f"{base}/{address}/vendor") or "").strip()
        pci_class = (env.read_text(f"{base}/{address}/class") or "").strip()
        if vendor == NVIDIA_PCI_VENDOR and pci_class.startswith(_GPU_CLASSES):
            device = (env.read_text(f"{base}/{address}/device") or "").strip()
            driver_link = env.readlink(f"{base}/{address}/driver")
            gpus.append({"address": address, "device_id": device,
                         "driver": driver_link.rsplit("/", 1)[-1] if driver_link else None})
    return gpus


def probe_driver_files(env: Env) -> dict[str, Any]:
    version_text = env.read_text("/proc/driver/nvidia/version")
    modules = {line.split()[0] for line in (env.read_text("/proc/modules") or "").splitlines()
               if line.strip()}
    path_dirs = env.environ().get("PATH", "").split(":")
    nvidia_smi = next((f"{d}/nvidia-smi" for d in path_dirs
                       if d and env.exists(f"{d}/nvidia-smi")), None)
    return {
        "proc_version": version_text.strip() if version_text else None,
        "module_version": parse_module_version(version_text) if version_text else None,
        "modules_loaded": sorted(m for m in modules if m.startswith(("nvidia", "nouveau"))),
        "nouveau_loaded": "nouveau" in modules,
        "device_nodes": [f"/dev/{n}" for n in env.listdir("/dev") if n.startswith("nvidia")],
        "nvidia_smi": nvidia_smi,
        "pci_gpus": nvidia_pci_gpus(env),
        # False when sysfs shows no PCI devices at all (WSL2, some sandboxes): then an
        # empty pci_gpus proves nothing.
        "pci_scan_ok": bool(env.listdir("/sys/bus/pci/devices")),
    }
