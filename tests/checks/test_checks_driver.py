"""driver.present (DRV001) on recorded machines and variants of them, through the runner."""

from __future__ import annotations

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.model import Severity, Status
from tests.conftest import load_fixture_facts
from tests.support.checks import (
    commands,
    evidence,
    evidence_sources,
    only_finding,
    run,
    variant,
    without_fact,
)

DRIVER_GUIDE = "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/"
HOST_STEPS = ["dkms status; uname -r", "sudo ubuntu-drivers install --gpgpu",
              "sudo reboot  # then: nvidia-smi"]
NOUVEAU_BLACKLIST = ("printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | "
                     "sudo tee /etc/modprobe.d/blacklist-nouveau.conf")


@pytest.mark.parametrize(("name", "summary"), [
    ("healthy_8x_v100_pcie", "driver 470.129.06 (supports CUDA 11.4), 8 GPUs"),
    ("workstation_2x_rtx3090_pcie", "driver 595.71.05 (supports CUDA 13.2), 2 GPUs"),
    ("wsl2_rtx4070", "driver 566.36 (supports CUDA 12.7), 1 GPU"),
    ("container_64mb_shm", "driver 465.19.01 (supports CUDA 11.3), 1 GPU"),
    ("laptop_gpu_newer_than_wheel", "driver 590.48.01 (supports CUDA 13.1), 1 GPU"),
    ("torch_missing", "driver 470.129.06 (supports CUDA 11.4), 8 GPUs"),
    ("torch_import_broken", "driver 580.126.09 (supports CUDA 13.0), 1 GPU"),
    ("torch_cpu_wheel_on_gpu_box", "driver 595.71.05 (supports CUDA 13.2), 1 GPU"),
])
def test_a_driver_that_answers_passes_with_its_version(name, summary):
    result = run(load_fixture_facts(name))["driver.present"]
    assert result.status is Status.PASS
    assert result.findings == ()
    assert result.summary == summary


def test_gpu_on_the_bus_without_a_loaded_module_gcp_a100():
    """compute-gpu-installation#10: A100 VM after a restart, the module is not loaded."""
    result = run(load_fixture_facts("no_driver"))["driver.present"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "DRV001"
    assert finding.category is Category.DRIVER_MISSING
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "1 NVIDIA GPU is installed but no driver answers"
    assert result.summary == finding.title
    assert evidence(finding) == {
        "NVML": "Driver Not Loaded",
        "NVIDIA GPUs on the PCI bus": "0000:00:04.0 (driver: none)",
        "kernel module": "not loaded",
        "loaded modules": "none",
        "device nodes": "none",
    }
    assert evidence_sources(finding)["NVML"] == "nvmlInit()"
    assert evidence_sources(finding)["NVIDIA GPUs on the PCI bus"] == "/sys/bus/pci/devices"
    assert finding.affects == ("pci:0000:00:04.0",)
    # A bare-metal/VM host without nouveau: DKMS check, install, reboot, nothing else.
    assert commands(finding) == HOST_STEPS
    assert finding.remediation[1].url == DRIVER_GUIDE
    assert finding.to_dict()["docs_url"] == DRIVER_GUIDE


def test_desktop_ubuntu_without_driver_gets_the_desktop_installer():
    """The same GCP host with a generic (non-cloud) kernel: not known to be a server."""
    facts = variant("no_driver", {"driver.kernel_release": "5.15.0-91-generic"})
    finding = only_finding(run(facts)["driver.present"])
    assert "sudo ubuntu-drivers install" in commands(finding)
    assert "sudo ubuntu-drivers install --gpgpu" not in commands(finding)


def test_nouveau_holding_the_gpu_is_blacklisted_first():
    """negativo17/nvidia-driver#73: GTX 970 bound to nouveau on Fedora 29."""
    result = run(load_fixture_facts("nouveau_loaded"))["driver.present"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "DRV001"
    assert finding.title == "1 NVIDIA GPU is installed but no driver answers"
    assert evidence(finding)["NVIDIA GPUs on the PCI bus"] == "0000:01:00.0 (driver: nouveau)"
    assert evidence(finding)["loaded modules"] == "nouveau"
    assert evidence(finding)["NVML"] == "Driver Not Loaded"
    assert finding.affects == ("pci:0000:01:00.0",)
    first = finding.remediation[0]
    assert "nouveau" in first.text
    assert first.command.startswith(NOUVEAU_BLACKLIST)
    # Fedora has no ubuntu-drivers: the install step points at NVIDIA's guide instead.
    assert commands(finding)[1:] == [HOST_STEPS[0], None, HOST_STEPS[2]]
    assert "Fedora" in finding.remediation[2].text
    assert finding.remediation[2].url == DRIVER_GUIDE


@pytest.mark.parametrize(("distro_id", "rebuild"), [
    ("fedora", "sudo dracut --force"), ("rocky", "sudo dracut --force"),
    ("arch", "sudo mkinitcpio -P"), ("ubuntu", "sudo update-initramfs -u"),
    ("debian", "sudo update-initramfs -u"), (None, "sudo update-initramfs -u"),
])
def test_nouveau_initramfs_rebuild_per_distribution(distro_id, rebuild):
    facts = variant("nouveau_loaded", {"os.distro.id": distro_id})
    command = only_finding(run(facts)["driver.present"]).remediation[0].command
    assert command == NOUVEAU_BLACKLIST + " && " + rebuild


def test_nouveau_step_rebuilds_the_initramfs_with_the_distros_tool():
    finding = only_finding(run(load_fixture_facts("nouveau_loaded"))["driver.present"])
    command = finding.remediation[0].command
    assert "sudo dracut --force" in command
    assert "update-initramfs" not in command


def test_two_gpus_without_a_driver_are_counted_and_listed():
    gpus = [{"address": "0000:05:00.0", "device_id": "0x2204", "driver": None},
            {"address": "0000:84:00.0", "device_id": "0x2204", "driver": None}]
    facts = variant("no_driver", {"driver.pci_gpus": gpus})
    finding = only_finding(run(facts)["driver.present"])
    assert finding.title == "2 NVIDIA GPUs are installed but no driver answers"
    assert evidence(finding)["NVIDIA GPUs on the PCI bus"] == (
        "0000:05:00.0 (driver: none), 0000:84:00.0 (driver: none)")
    assert finding.affects == ("pci:0000:05:00.0", "pci:0000:84:00.0")


def test_no_gpu_on_the_bus_of_a_vm_says_so_and_nothing_else():
    """The GCP VM of no_driver started without its A100 attached."""
    facts = variant("no_driver", {"driver.pci_gpus": []})
    finding = only_finding(run(facts)["driver.present"])
    assert finding.title == ("No NVIDIA GPU or driver found: GPU training cannot run on this "
                             "machine")
    assert evidence(finding)["NVIDIA GPUs on the PCI bus"] == "none"
    assert finding.affects == ()
    assert commands(finding) == ["lspci | grep -i nvidia"]
    assert "GPU instance type" in finding.remediation[0].text


def test_container_started_without_gpus_gets_the_container_toolkit_steps():
    """container_64mb_shm's container run without --gpus: sysfs shows the GTX 1070,
    but NVML's library and /dev/nvidia* were never injected."""
    facts = variant("container_64mb_shm", {
        "nvml": {"initialized": False, "error": "NVML Shared Library Not Found",
                 "error_type": "NVMLError_LibraryNotFound"},
        "driver.device_nodes": [],
        "driver.nvidia_smi": None,
    })
    finding = only_finding(run(facts)["driver.present"])
    assert finding.title == "1 NVIDIA GPU is installed but no driver answers"
    assert evidence(finding)["NVML"] == "NVML Shared Library Not Found"
    assert evidence(finding)["device nodes"] == "none"
    assert evidence(finding)["kernel module"] == "465.19.01"  # the host's, seen through /proc
    assert commands(finding) == [
        "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker",
        "docker run --gpus all --ipc=host ...",
        None,
    ]
    assert "Container Toolkit" in finding.remediation[0].text
    assert "nvidia.com/gpu" in finding.remediation[2].text
    assert finding.remediation[2].url == "https://github.com/NVIDIA/k8s-device-plugin"


def test_sandbox_container_without_any_gpu():
    """This repository's sandbox (a real snapshot): no GPU on the bus, inside Docker."""
    finding = only_finding(run(load_fixture_facts("sandbox_cpu_container"))["driver.present"])
    assert finding.title == ("No NVIDIA GPU or driver found: GPU training cannot run on this "
                             "machine")
    assert evidence(finding)["NVML"] == "NVML Shared Library Not Found"
    assert commands(finding)[0] == "lspci | grep -i nvidia"
    assert commands(finding)[1:] == [
        "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker",
        "docker run --gpus all --ipc=host ...",
        None,
    ]


def test_wsl2_without_an_answering_driver_points_at_windows_and_wsl_shutdown():
    """wsl2_rtx4070 with NVML not answering (e.g. the Windows driver was removed)."""
    facts = variant("wsl2_rtx4070", {
        "nvml": {"initialized": False, "error": "NVML Shared Library Not Found",
                 "error_type": "NVMLError_LibraryNotFound"}})
    result = run(facts)["driver.present"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "DRV001"
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "No NVIDIA driver answers inside WSL"
    assert evidence(finding)["NVML"] == "NVML Shared Library Not Found"
    assert commands(finding) == [None, "wsl --shutdown",
                                 "ls /usr/lib/wsl/lib && /usr/lib/wsl/lib/nvidia-smi"]
    assert "on Windows" in finding.remediation[0].text
    assert finding.remediation[0].url == "https://www.nvidia.com/Download/index.aspx"
    # Nothing that would install a Linux driver inside WSL.
    assert not any("ubuntu-drivers" in (c or "") for c in commands(finding))


def test_skipped_with_the_probe_error_when_nvml_could_not_be_gathered():
    facts = without_fact(load_fixture_facts("healthy_8x_v100_pcie"), "nvml",
                         "NVML query failed: python: no answer within 20s, killed")
    result = run(facts)["driver.present"]
    assert result.status is Status.SKIP
    assert result.findings == ()
    assert result.skip_reason == ("fact 'nvml' could not be gathered: NVML query failed: "
                                  "python: no answer within 20s, killed")


# ---------------------------------------------------------------- DKMS: not built for this kernel


def _kernel_updated(distro_id="ubuntu", dkms="nvidia/495.46, 5.13.0-1023-gcp, x86_64: installed"):
    """GoogleCloudPlatform/compute-gpu-installation#18 / negativo17/nvidia-driver#56: after a
    kernel update the module exists only for the previous kernel. The GCP A100 VM of no_driver,
    rebooted into 5.13.0-1024-gcp, whose /lib/modules has no nvidia module."""
    return variant("no_driver", {
        "driver.kernel_modules": {"modules_dir": True, "nvidia_module_files": []},
        "driver.dkms_status": dkms,
        "os.distro.id": distro_id,
    })


def test_module_not_built_for_the_running_kernel_says_so_and_rebuilds_first():
    finding = only_finding(run(_kernel_updated())["driver.present"])
    assert finding.code.id == "DRV001"
    assert finding.title == ("The NVIDIA kernel module is not built for the running kernel "
                             "5.13.0-1024-gcp: no driver answers")
    ev = evidence(finding)
    assert ev["running kernel"] == "5.13.0-1024-gcp"
    assert ev["nvidia module for this kernel"] == "none"
    assert evidence_sources(finding)["nvidia module for this kernel"] == (
        "/lib/modules/5.13.0-1024-gcp")
    assert ev["dkms status"] == "nvidia/495.46, 5.13.0-1023-gcp, x86_64: installed"
    assert commands(finding) == [
        "sudo apt install linux-headers-$(uname -r) && sudo dkms autoinstall -k $(uname -r)",
        "sudo modprobe nvidia && nvidia-smi",
        # A GCP kernel: a server, so Ubuntu's compute (server) driver.
        "sudo ubuntu-drivers install --gpgpu",
    ]


def test_module_not_built_on_fedora_with_akmods():
    finding = only_finding(run(_kernel_updated("fedora", dkms=None))["driver.present"])
    assert commands(finding)[0] == ("sudo dnf install kernel-devel-$(uname -r) && "
                                    "sudo akmods --force --kernels $(uname -r)")
    assert evidence(finding)["dkms status"] == "dkms not installed"


def test_module_present_for_the_kernel_keeps_the_generic_title():
    """no_driver as recorded: the .run installer's module is there, just not loaded."""
    finding = only_finding(run(load_fixture_facts("no_driver"))["driver.present"])
    assert finding.title == "1 NVIDIA GPU is installed but no driver answers"
    assert "running kernel" not in evidence(finding)


# ---------------------------------------------------------------- DRV004: library mismatch


def _upgraded_without_reboot(distro_id="ubuntu"):
    """NVIDIA/ubuntu-packaging-nvidia-driver#3, oddmario/NVIDIA-Ubuntu-Driver-Guide#4:
    unattended-upgrades moved the V100 server's libraries to 470.199.02 while the
    470.129.06 module stays loaded; NVML fails with the mismatch."""
    return variant("healthy_8x_v100_pcie", {
        "nvml": {"initialized": False, "error": "Driver/library version mismatch",
                 "error_type": "NVMLError_LibRmVersionMismatch"},
        "driver.userspace_versions": ["470.199.02"],
        "os.distro.id": distro_id,
    })


def test_driver_library_mismatch_after_an_upgrade_without_reboot():
    result = run(_upgraded_without_reboot())["driver.present"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "DRV004"
    assert finding.category is Category.DRIVER_LIBRARY_MISMATCH
    assert finding.title == ("Kernel module 470.129.06 is loaded but the driver libraries are "
                             "470.199.02: driver/library version mismatch (upgraded without a "
                             "reboot)")
    assert evidence(finding) == {
        "NVML": "Driver/library version mismatch",
        "loaded kernel module": "470.129.06",
        "driver libraries on disk": "470.199.02",
    }
    assert commands(finding) == [
        "sudo reboot",
        "sudo lsof /dev/nvidia*",
        "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia && "
        "sudo modprobe nvidia_uvm && nvidia-smi",
        "dpkg-query -W -f='${binary:Package}\\n' 'nvidia-*' 'libnvidia-*' | "
        "xargs sudo apt-mark hold",
    ]
    # The checks that need a working driver wait for this one.
    results = run(_upgraded_without_reboot())
    assert results["gpu.health"].status is Status.SKIP
    assert "DRV004" in results["gpu.health"].skip_reason


def test_mismatch_reported_by_nvml_without_library_files_found():
    facts = _upgraded_without_reboot("rocky")
    facts["driver"]["userspace_versions"] = []
    finding = only_finding(run(facts)["driver.present"])
    assert finding.code.id == "DRV004"
    assert finding.title.startswith("NVML reports a driver/library version mismatch: the loaded "
                                    "kernel module (470.129.06)")
    assert commands(finding)[-1] == "sudo dnf versionlock add 'nvidia-driver*' 'kmod-nvidia*'"


def test_libraries_newer_than_the_module_are_caught_before_nvml_breaks():
    """The same upgrade seen while the old NVML still answered (the running doctor loaded
    the library before the upgrade replaced it)."""
    facts = variant("healthy_8x_v100_pcie", {"driver.userspace_versions": ["470.199.02"]})
    finding = only_finding(run(facts)["driver.present"])
    assert finding.code.id == "DRV004"
    assert evidence(finding)["NVML"] == "driver 470.129.06"


def test_wsl_and_no_module_never_count_as_a_mismatch():
    assert run(load_fixture_facts("wsl2_rtx4070"))["driver.present"].status is Status.PASS
    facts = variant("no_driver", {"driver.userspace_versions": ["470.199.02"]})
    assert only_finding(run(facts)["driver.present"]).code.id == "DRV001"
