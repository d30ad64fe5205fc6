"""Driver checks: is an NVIDIA kernel driver loaded and answering?

Sources for the symptoms and fixes:
- NVIDIA driver installation guide (https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/)
- "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver" after a
  kernel update without a DKMS rebuild: negativo17/nvidia-driver#56,
  GoogleCloudPlatform/compute-gpu-installation#18
- nouveau holding the GPU ("NVRM: The NVIDIA probe routine was not called"):
  negativo17/nvidia-driver#171
- Containers need the NVIDIA Container Toolkit and ``--gpus``:
  https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
- WSL2 gets its driver from Windows: https://docs.nvidia.com/cuda/wsl-user-guide/index.html
- The module-not-built-for-this-kernel and driver/library mismatch cases: see
  ``_driver_kernel``.
"""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import DriverFact, NvmlFact
from ddp_doctor.facts.view import FactsView
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check

from ._driver_kernel import (
    LIBRARY_MISMATCH,
    kernel_evidence,
    mismatch_finding,
    mismatch_versions,
    module_not_built,
    rebuild_steps,
)

DRIVER_MISSING = declare(
    id="DRV001",
    category=Category.DRIVER_MISSING,
    summary="No usable NVIDIA driver",
    what=(
        "NVML, the driver's management library, could not talk to an NVIDIA kernel driver: "
        "the driver is not installed, its kernel module is not loaded, the open-source "
        "nouveau driver holds the GPU, or (in a container) the GPU was not passed in."
    ),
    why=(
        "Without a driver, CUDA finds no device: torch.cuda.is_available() is False and "
        "every GPU job fails with 'Found no NVIDIA driver on your system' or falls back "
        "to the CPU."
    ),
    fix=(
        "Install the NVIDIA driver for your GPU (or rebuild its kernel module for the "
        "running kernel), blacklist nouveau, reboot, and confirm with `nvidia-smi`. In a "
        "container, install the NVIDIA Container Toolkit on the host and start the "
        "container with `--gpus all`. On WSL2, install or update the driver on Windows."
    ),
    docs_url="https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/",
)


def _driver_evidence(nvml: NvmlFact, drv: DriverFact) -> list[Evidence]:
    pci = drv.get("pci_gpus") or []
    if not drv:  # no driver-file facts (a pasted nvidia-smi output): only what NVML said
        return [Evidence("NVML", nvml.get("error") or "not initialised", "nvmlInit()")]
    return [
        Evidence("NVML", nvml.get("error") or "not initialised", "nvmlInit()"),
        Evidence(
            "NVIDIA GPUs on the PCI bus",
            ", ".join(f"{g['address']} (driver: {g.get('driver') or 'none'})" for g in pci)
            or "none",
            "/sys/bus/pci/devices",
        ),
        Evidence("kernel module", drv.get("module_version") or "not loaded",
                 "/proc/driver/nvidia/version"),
        Evidence("loaded modules", ", ".join(drv.get("modules_loaded") or []) or "none",
                 "/proc/modules"),
        Evidence("device nodes", ", ".join(drv.get("device_nodes") or []) or "none", "/dev"),
    ]


# How each distribution family rebuilds its initramfs, so the nouveau blacklist takes effect
# at boot (NVIDIA driver installation guide, "Disabling Nouveau" per distribution).
_DRACUT_DISTROS = frozenset({"fedora", "rhel", "centos", "rocky", "almalinux", "ol",
                             "amzn", "opensuse-leap", "opensuse-tumbleweed", "sles"})
_MKINITCPIO_DISTROS = frozenset({"arch", "manjaro", "endeavouros"})


def _initramfs_command(facts: FactsView) -> str:
    """The initramfs rebuild for this distribution (Debian/Ubuntu style when unknown)."""
    distro_id = facts.distro_id()
    if distro_id in _DRACUT_DISTROS:
        return "sudo dracut --force"
    if distro_id in _MKINITCPIO_DISTROS:
        return "sudo mkinitcpio -P"
    return "sudo update-initramfs -u"


def _install_driver_step(facts: FactsView, server: bool = False) -> Step:
    """Ubuntu has a one-line installer; elsewhere NVIDIA's guide has a section per distro.

    On a server (datacenter GPU, cloud kernel) Ubuntu's installer takes ``--gpgpu``, which
    picks the server (compute) driver packages.
    """
    distro_id = facts.distro_id()
    guide = "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/"
    if distro_id in {"ubuntu", "pop", "linuxmint"}:
        if server:
            return Step("Install the recommended server (compute) driver.",
                        command="sudo ubuntu-drivers install --gpgpu", url=guide)
        return Step("Install the recommended driver.", command="sudo ubuntu-drivers install",
                    url=guide)
    name = facts.distro().get("name") or "your distribution"
    return Step(f"Install the driver from NVIDIA's repository for {name}, as the "
                "installation guide's section for it describes.", url=guide)


def _steps(facts: FactsView, server: bool = False) -> list[Step]:
    """Fix steps for the likeliest cause here: WSL, no GPU at all, a container, or the host."""
    drv = facts.driver()
    if facts.is_wsl():
        return [
            Step("WSL gets its GPU driver from Windows: install or update the NVIDIA driver "
                 "on Windows, not inside Linux.", url="https://www.nvidia.com/Download/index.aspx"),
            Step("Restart the WSL virtual machine so it picks up the driver.",
                 command="wsl --shutdown"),
            Step("Check that /usr/lib/wsl/lib holds libcuda.so and nvidia-smi works.",
                 command="ls /usr/lib/wsl/lib && /usr/lib/wsl/lib/nvidia-smi"),
        ]
    steps: list[Step] = []
    no_gpu_on_bus = drv.get("pci_scan_ok") and not drv.get("pci_gpus")
    if no_gpu_on_bus:
        steps.append(Step(
            "No NVIDIA GPU is on this machine's PCI bus: run on a machine or VM with an "
            "NVIDIA GPU attached (on a cloud VM, choose a GPU instance type).",
            command="lspci | grep -i nvidia",
        ))
    if facts.in_container():
        steps += [
            Step("If the host has GPUs: install the NVIDIA Container Toolkit on the host "
                 "and configure Docker for it.",
                 command="sudo nvidia-ctk runtime configure --runtime=docker && "
                         "sudo systemctl restart docker",
                 url="https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/"
                     "install-guide.html"),
            Step("Start the container with the GPUs passed in.",
                 command="docker run --gpus all --ipc=host ..."),
            Step("In Kubernetes, request GPUs from the NVIDIA device plugin: set "
                 "`resources.limits` to `nvidia.com/gpu: 1` (or more) in the pod spec.",
                 url="https://github.com/NVIDIA/k8s-device-plugin"),
        ]
        return steps
    if no_gpu_on_bus:
        return steps
    not_built = module_not_built(drv)
    if drv.get("nouveau_loaded"):
        steps.append(Step(
            "The open-source nouveau driver is loaded and holds the GPU: blacklist it and "
            "rebuild the initramfs.",
            command="printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | "
                    "sudo tee /etc/modprobe.d/blacklist-nouveau.conf && "
                    + _initramfs_command(facts),
        ))
    if not_built:
        install = _install_driver_step(facts, server)
        return steps + rebuild_steps(drv, facts.distro_id()) + [
            Step("If the rebuild fails (no DKMS package, a kernel too new for this driver), "
                 "reinstall the driver.", command=install.command, url=install.url),
        ]
    steps += [
        Step("See whether a driver module is built for the running kernel "
             "(a kernel update without a DKMS rebuild is the usual cause).",
             command="dkms status; uname -r"),
        _install_driver_step(facts, server),
        Step("Reboot, then confirm the driver answers.", command="sudo reboot  # then: nvidia-smi"),
    ]
    return steps


@check(
    id="driver.present",
    title="NVIDIA driver",
    area="driver",
    requires=("nvml",),
    codes=(DRIVER_MISSING, LIBRARY_MISMATCH),
)
def driver_present(facts: FactsView) -> Iterator[Finding | Summary]:
    # Only NVML is required: facts read from a pasted nvidia-smi output have no driver-file
    # or OS facts, and their keys are then unknown (absent), not "none found".
    nvml = facts.nvml()
    drv = facts.driver()
    mismatch, library = mismatch_versions(nvml, drv)
    if mismatch:
        yield mismatch_finding(nvml, drv, facts.distro_id(), library)
        return
    if nvml.get("initialized"):
        gpus = nvml.get("gpus") or []
        cuda = nvml.get("cuda_driver_version")
        yield Summary(
            f"driver {nvml.get('driver_version')}"
            + (f" (supports CUDA {cuda})" if cuda else "")
            + f", {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
        )
        return
    pci = drv.get("pci_gpus") or []
    if facts.is_wsl():
        # WSL2 has no PCI view of the GPU (it is shared through /dev/dxg): absence on the
        # bus says nothing there.
        title = "No NVIDIA driver answers inside WSL"
    elif pci and module_not_built(drv) and not facts.in_container():
        title = (f"The NVIDIA kernel module is not built for the running kernel "
                 f"{drv.get('kernel_release')}: no driver answers")
    elif pci:
        are = "GPUs are" if len(pci) > 1 else "GPU is"
        title = f"{len(pci)} NVIDIA {are} installed but no driver answers"
    elif "pci_gpus" not in drv:  # the PCI bus was not looked at: do not claim there is no GPU
        title = "No NVIDIA driver answers"
    else:
        title = "No NVIDIA GPU or driver found: GPU training cannot run on this machine"
    evidence = _driver_evidence(nvml, drv)
    if pci and module_not_built(drv):
        evidence += kernel_evidence(drv)
    yield Finding(
        code=DRIVER_MISSING,
        title=title,
        severity=Severity.ERROR,
        evidence=tuple(evidence),
        remediation=tuple(_steps(facts, facts.looks_like_server())),
        affects=tuple(f"pci:{g['address']}" for g in pci),
    )
