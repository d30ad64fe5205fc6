"""The kernel half of the driver: a module not built for the running kernel, and a loaded
module that is not the installed libraries' version. Used by ``driver.present``.

Sources:
- "Failed to initialize NVML: Driver/library version mismatch" after the driver packages
  were upgraded (often by unattended-upgrades) while the old module stayed loaded; fixed by
  a reboot or by unloading and reloading the modules: oddmario/NVIDIA-Ubuntu-Driver-Guide#4,
  NVIDIA/ubuntu-packaging-nvidia-driver#3.
- A kernel update without a DKMS rebuild leaves no module for the new kernel ("NVIDIA-SMI
  has failed because it couldn't communicate with the NVIDIA driver", "modprobe: FATAL:
  Module nvidia not found"): negativo17/nvidia-driver#56,
  GoogleCloudPlatform/compute-gpu-installation#18, NVIDIA/nvidia-docker#365. DKMS rebuilds
  for a given kernel with `dkms autoinstall -k` (dkms(8)); the headers of that kernel must be
  installed (Debian/Ubuntu `linux-headers-<release>`, Fedora/RHEL `kernel-devel-<release>`);
  RPM Fusion/negativo17 packages use akmods instead (`akmods --force --kernels`).
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import DriverFact, NvmlFact
from ddp_doctor.model import Evidence, Finding, Severity, Step

LIBRARY_MISMATCH = declare(
    id="DRV004",
    category=Category.DRIVER_LIBRARY_MISMATCH,
    summary="Loaded kernel module and driver libraries are different versions",
    what=(
        "The NVIDIA kernel module in memory is not the version of the user-space driver "
        "libraries (libnvidia-ml, libcuda) on disk. This happens when the driver packages are "
        "upgraded, by hand or by unattended upgrades, and the machine is not rebooted."
    ),
    why=(
        "NVML refuses to work ('Failed to initialize NVML: Driver/library version mismatch'), "
        "nvidia-smi fails, and CUDA cannot initialise, so no job can use the GPUs."
    ),
    fix=(
        "Reboot, or stop everything using the GPUs and reload the nvidia kernel modules. Then "
        "hold the driver packages so that an automatic upgrade cannot do it again mid-run."
    ),
    docs_url="https://github.com/NVIDIA/ubuntu-packaging-nvidia-driver/issues/3",
)

_DEBIAN_LIKE = frozenset({"ubuntu", "debian", "pop", "linuxmint"})
_RPM_LIKE = frozenset({"fedora", "rhel", "centos", "rocky", "almalinux", "ol", "amzn"})


def mismatch_versions(nvml: NvmlFact, drv: DriverFact) -> tuple[bool, str | None]:
    """(is there a mismatch, the library version on disk that differs from the module)."""
    module = drv.get("module_version")
    libraries = [v for v in drv.get("userspace_versions") or [] if v != module]
    nvml_says = (nvml.get("error_type") == "NVMLError_LibRmVersionMismatch"
                 or "version mismatch" in (nvml.get("error") or "").lower())
    library = libraries[-1] if libraries else None
    if nvml.get("initialized") and module and nvml.get("driver_version") not in (None, module):
        return True, nvml.get("driver_version")
    if nvml_says:
        return True, library
    # The module answers but the files on disk are another version only: the next process
    # that loads libcuda or NVML will hit the mismatch.
    if module and library and module not in (drv.get("userspace_versions") or []):
        return True, library
    return False, None


def mismatch_finding(nvml: NvmlFact, drv: DriverFact, distro: str,
                     library: str | None) -> Finding:
    """DISTRO is the distribution's lower-case id (``FactsView.distro_id``)."""
    module = drv.get("module_version") or "unknown"
    if library and not drv.get("module_version"):
        title = (f"NVML reports a driver/library version mismatch: the driver libraries are "
                 f"{library} but the loaded kernel module is another version (upgraded "
                 "without a reboot)")
    elif library:
        title = (f"Kernel module {module} is loaded but the driver libraries are {library}: "
                 "driver/library version mismatch (upgraded without a reboot)")
    else:
        title = (f"NVML reports a driver/library version mismatch: the loaded kernel module "
                 f"({module}) is not the installed driver's version")
    evidence = (
        Evidence("NVML", nvml.get("error") or f"driver {nvml.get('driver_version')}",
                 "nvmlInit()"),
        Evidence("loaded kernel module", module, "/proc/driver/nvidia/version"),
        Evidence("driver libraries on disk",
                 ", ".join(drv.get("userspace_versions") or [])
                 or ("not found" if "userspace_versions" in drv else "unknown"),
                 "libnvidia-ml.so.* / libcuda.so.* in the system library directories"),
    )
    steps = [
        Step("Reboot so the kernel loads the module that matches the installed libraries.",
             command="sudo reboot"),
        Step("Or, without a reboot: list what holds the GPUs, stop it (nvidia-persistenced, "
             "a display manager, DCGM, training jobs)...", command="sudo lsof /dev/nvidia*"),
        Step("...then unload the old modules and load the new ones.",
             command="sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && "
                     "sudo modprobe nvidia && sudo modprobe nvidia_uvm && nvidia-smi"),
    ]
    if distro in _DEBIAN_LIKE:
        steps.append(Step(
            "Hold the driver packages so unattended-upgrades cannot replace the libraries "
            "under a loaded module again; upgrade them on purpose, followed by a reboot.",
            command="dpkg-query -W -f='${binary:Package}\\n' 'nvidia-*' 'libnvidia-*' | "
                    "xargs sudo apt-mark hold"))
    elif distro in _RPM_LIKE:
        steps.append(Step(
            "Lock the driver packages so automatic updates cannot replace the libraries under "
            "a loaded module again (the dnf versionlock plugin).",
            command="sudo dnf versionlock add 'nvidia-driver*' 'kmod-nvidia*'"))
    else:
        steps.append(Step("Keep the driver packages out of automatic updates, and reboot after "
                          "every driver upgrade."))
    return Finding(code=LIBRARY_MISMATCH, title=title, severity=Severity.ERROR,
                   evidence=evidence, remediation=tuple(steps))


def module_not_built(drv: DriverFact) -> bool:
    """True when /lib/modules/<running kernel> exists and holds no nvidia module."""
    modules = drv.get("kernel_modules") or {}
    return (bool(modules.get("modules_dir")) and not modules.get("nvidia_module_files")
            and not drv.get("module_version"))


def kernel_evidence(drv: DriverFact) -> list[Evidence]:
    release = drv.get("kernel_release") or "unknown"
    return [
        Evidence("running kernel", release, "uname -r"),
        Evidence("nvidia module for this kernel", "none", f"/lib/modules/{release}"),
        Evidence("dkms status", drv.get("dkms_status") or "dkms not installed", "dkms status"),
    ]


def rebuild_steps(drv: DriverFact, distro: str) -> list[Step]:
    """Build the module for the running kernel, with the tool this system uses (DISTRO: the
    distribution's lower-case id)."""
    load = Step("Load it and confirm the driver answers.",
                command="sudo modprobe nvidia && nvidia-smi")
    if distro in _RPM_LIKE and not drv.get("dkms_status"):
        return [Step("Build the module for the running kernel with akmods (RPM Fusion / "
                     "negativo17 packages) after installing its kernel headers.",
                     command="sudo dnf install kernel-devel-$(uname -r) && "
                             "sudo akmods --force --kernels $(uname -r)"), load]
    headers = ("sudo dnf install kernel-devel-$(uname -r)" if distro in _RPM_LIKE
               else "sudo apt install linux-headers-$(uname -r)")
    return [Step("Install the headers of the running kernel and let DKMS build the NVIDIA "
                 "module for it.",
                 command=f"{headers} && sudo dkms autoinstall -k $(uname -r)"), load]
