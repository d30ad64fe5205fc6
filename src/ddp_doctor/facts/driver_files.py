"""Driver facts read straight from the kernel, without loading any NVIDIA library.

``/proc/driver/nvidia/version`` is the loaded kernel module's own version (compared
with NVML's to spot a "Driver/library version mismatch"), ``/proc/modules`` says
whether nvidia or nouveau is loaded, and ``/dev/nvidia*`` are the device nodes a
container must be given. Reading files cannot hang on a wedged GPU, so this probe
runs in-process.

It also answers the questions behind two driver failures that NVML cannot explain:
whether a kernel module is built for the running kernel (a kernel update without a DKMS
rebuild leaves none: "modprobe: FATAL: Module nvidia not found", NVIDIA/nvidia-docker#365),
and, on NVSwitch boards, whether the Fabric Manager daemon runs (without it CUDA fails
with error 802 "system not yet initialized", pytorch/pytorch#35710). The versions of the
user-space libraries on disk (libnvidia-ml.so.X, libcuda.so.X) are compared with the
loaded module to explain "Driver/library version mismatch" after an upgrade without a
reboot (NVIDIA/ubuntu-packaging-nvidia-driver#3).
"""

from __future__ import annotations

import re

from ddp_doctor.facts.seam import Env
from ddp_doctor.facts.shapes import DriverFact, KernelModules, PciGpu

DKMS_TIMEOUT_S = 5.0

_VERSION_RE = re.compile(r"Kernel Module(?: for [\w/]+)?\s+(\d+\.\d+(?:\.\d+)?)")


def parse_module_version(text: str) -> str | None:
    """'NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ...' -> '550.54.15'."""
    match = _VERSION_RE.search(text)
    return match.group(1) if match else None


NVIDIA_PCI_VENDOR = "0x10de"
# PCI class 0x0300xx is a VGA controller, 0x0302xx a 3D controller (datacenter GPUs).
_GPU_CLASSES = ("0x0300", "0x0302")


def nvidia_pci_gpus(env: Env) -> list[PciGpu]:
    """NVIDIA display/3D controllers on the PCI bus, found whether or not a driver is bound."""
    base = "/sys/bus/pci/devices"
    gpus: list[PciGpu] = []
    for address in env.listdir(base):
        vendor = (env.read_text(f"{base}/{address}/vendor") or "").strip()
        pci_class = (env.read_text(f"{base}/{address}/class") or "").strip()
        if vendor == NVIDIA_PCI_VENDOR and pci_class.startswith(_GPU_CLASSES):
            device = (env.read_text(f"{base}/{address}/device") or "").strip()
            driver_link = env.readlink(f"{base}/{address}/driver")
            gpus.append({"address": address, "device_id": device,
                         "driver": driver_link.rsplit("/", 1)[-1] if driver_link else None})
    return gpus


# Where distributions and DKMS put the module, relative to /lib/modules/<release>/.
_MODULE_SUBDIRS = ("updates/dkms", "updates", "extra", "extramodules", "kernel/drivers/video",
                   "kernel/drivers/video/nvidia", "extra/nvidia", "misc", "video")
_MODULE_NAMES = ("nvidia.ko", "nvidia.ko.xz", "nvidia.ko.zst", "nvidia.ko.gz")


def kernel_module_files(env: Env, release: str) -> KernelModules:
    """The nvidia.ko files built for kernel ``release`` (none after an un-rebuilt update).

    ``modules_dir`` is False when /lib/modules/<release> does not exist at all (containers
    and WSL have none), so that an empty list proves nothing there.
    """
    base = f"/lib/modules/{release}"
    found = [f"{base}/{sub}/{name}" for sub in _MODULE_SUBDIRS for name in _MODULE_NAMES
             if env.exists(f"{base}/{sub}/{name}")]
    return {"modules_dir": bool(release) and env.exists(base), "nvidia_module_files": found}


def dkms_status(env: Env) -> str | None:
    """`dkms status` output, or None where dkms is not installed or does not answer."""
    path_dirs = env.environ().get("PATH", "").split(":")
    dkms = next((f"{d}/dkms" for d in [*path_dirs, "/usr/sbin", "/usr/bin", "/sbin"]
                 if d and env.exists(f"{d}/dkms")), None)
    if dkms is None:
        return None
    result = env.run([dkms, "status"], timeout=DKMS_TIMEOUT_S)
    return result.stdout.strip() if result.ok else None


# libnvidia-ml.so.550.54.15 / libcuda.so.550.54.15: the full driver version in the name.
_LIB_VERSION_RE = re.compile(r"^lib(?:nvidia-ml|cuda)\.so\.(\d{3}\.\d+(?:\.\d+)?)$")
_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
             "/usr/lib", "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib")


def userspace_versions(env: Env) -> list[str]:
    """Driver versions of the libnvidia-ml / libcuda files on disk, sorted, without repeats."""
    found = set()
    for directory in _LIB_DIRS:
        for name in env.listdir(directory):
            match = _LIB_VERSION_RE.match(name)
            if match:
                found.add(match.group(1))
    return sorted(found, key=lambda v: tuple(int(p) for p in v.split(".")))


# The Fabric Manager daemon's process name (nvidia-fabricmanager package, service
# nvidia-fabricmanager.service): https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/
FABRIC_MANAGER_PROCESS = "nv-fabricmanager"
# PCI class 0x0680xx, "other bridge": how NVSwitch chips show up on the bus.
_NVSWITCH_CLASS = "0x0680"


def nvswitch_count(env: Env) -> int:
    """NVIDIA bridge devices on the PCI bus: the NVSwitch chips of an HGX/DGX board."""
    base = "/sys/bus/pci/devices"
    count = 0
    for address in env.listdir(base):
        vendor = (env.read_text(f"{base}/{address}/vendor") or "").strip()
        pci_class = (env.read_text(f"{base}/{address}/class") or "").strip()
        if vendor == NVIDIA_PCI_VENDOR and pci_class.startswith(_NVSWITCH_CLASS):
            count += 1
    return count


def fabric_manager_running(env: Env) -> bool | None:
    """Whether an nv-fabricmanager process runs; None when processes cannot be listed."""
    try:
        for proc in env.psutil().process_iter(["name"]):
            if (proc.info.get("name") or "") == FABRIC_MANAGER_PROCESS:
                return True
    except Exception:  # psutil missing or the process table unreadable
        return None
    return False


def probe_driver_files(env: Env) -> DriverFact:
    version_text = env.read_text("/proc/driver/nvidia/version")
    release = env.platform().get("release", "")
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
        "kernel_release": release or None,
        "kernel_modules": kernel_module_files(env, release),
        "dkms_status": dkms_status(env),
        "userspace_versions": userspace_versions(env),
        "nvswitch_count": nvswitch_count(env),
        "fabric_manager_running": fabric_manager_running(env),
    }
