"""Driver files probe: /proc/driver/nvidia/version, /proc/modules, /dev, sysfs PCI."""

from __future__ import annotations

import pytest

from ddp_doctor.facts.driver_files import (
    DKMS_TIMEOUT_S,
    nvidia_pci_gpus,
    parse_module_version,
    probe_driver_files,
)
from ddp_doctor.facts.seam import CommandResult
from tests.support.fakes import FakeEnv, FakePsutil, ok

# /proc/driver/nvidia/version as real drivers write it (two lines, double spaces kept).
PROPRIETARY_550 = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n"
)
OPEN_570 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 23:43:26 UTC 2025\n"
    "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04) \n"
)


@pytest.mark.parametrize(("text", "version"), [
    (PROPRIETARY_550, "550.54.15"),
    (OPEN_570, "570.86.15"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  515.76  Mon Sep 12 19:21:56 UTC 2022\n"
     "GCC version:  gcc version 7.5.0 (Ubuntu 7.5.0-3ubuntu1~18.04)\n", "515.76"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  410.104  Tue Feb  5 22:58:30 PST 2019\n",
     "410.104"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  "
     "(VirtualGPU)\n", "560.35.03"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.65.06  Release Build  "
     "(dvs-builder@U22-I3-AE18-23-3)  Wed Jul 16 21:05:12 UTC 2025\n", "580.65.06"),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  535.129.03  Thu Oct 19 18:42:10 UTC 2023\n",
     "535.129.03"),
    # dmesg's load line uses the same words with single spaces.
    ("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64 610.43.02", "610.43.02"),
])
def test_parse_module_version(text, version):
    assert parse_module_version(text) == version


@pytest.mark.parametrize("text", ["", "GCC version:  gcc version 12.3.0\n",
                                  "NVRM version: NVIDIA UNIX x86_64 Kernel Module\n"])
def test_parse_module_version_without_a_version(text):
    assert parse_module_version(text) is None


PCI = "/sys/bus/pci/devices"


def _pci(address: str, vendor: str, pci_class: str, device: str,
         driver: str | None) -> tuple[dict[str, str], dict[str, str]]:
    files = {f"{PCI}/{address}/vendor": f"{vendor}\n", f"{PCI}/{address}/class": f"{pci_class}\n",
             f"{PCI}/{address}/device": f"{device}\n"}
    links = {f"{PCI}/{address}/driver": f"../../../../bus/pci/drivers/{driver}"} if driver else {}
    return files, links


def _machine(devices, **kwargs) -> FakeEnv:
    files: dict[str, str] = dict(kwargs.pop("files", {}))
    links: dict[str, str] = {}
    for device in devices:
        f, li = _pci(*device)
        files.update(f)
        links.update(li)
    return FakeEnv(files=files, links=links, **kwargs)


# A V100 server (device ids from the bsyonline capture's "Device Id: 0x1DB610DE"): two
# GPUs bound to nvidia, one that lost its driver, the BMC's ASPEED VGA, an Intel bridge.
V100_SERVER_PCI = [
    ("0000:1b:00.0", "0x10de", "0x030200", "0x1db6", "nvidia"),
    ("0000:1c:00.0", "0x10de", "0x030200", "0x1db6", "nvidia"),
    ("0000:1d:00.0", "0x10de", "0x030200", "0x1db6", None),
    ("0000:03:00.0", "0x1a03", "0x030000", "0x2000", "ast"),
    ("0000:00:00.0", "0x8086", "0x060000", "0x2020", None),
]
PROC_MODULES_NVIDIA = """\
nvidia_uvm 1437696 0 - Live 0x0000000000000000 (POE)
nvidia_drm 77824 2 - Live 0x0000000000000000 (POE)
nvidia_modeset 1302528 3 nvidia_drm, Live 0x0000000000000000 (POE)
nvidia 56745984 114 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)
drm_kms_helper 311296 1 nvidia_drm, Live 0x0000000000000000
ast 61440 0 - Live 0x0000000000000000
"""


def test_probe_driver_files_on_a_server_with_the_driver_loaded():
    env = _machine(
        V100_SERVER_PCI,
        files={"/proc/driver/nvidia/version": PROPRIETARY_550, "/proc/modules": PROC_MODULES_NVIDIA,
               "/dev/nvidia0": "", "/dev/nvidia1": "", "/dev/nvidiactl": "", "/dev/nvidia-uvm": "",
               "/dev/nvidia-uvm-tools": "", "/dev/nvidia-modeset": "", "/dev/null": "",
               "/usr/bin/nvidia-smi": ""},
        dirs={"/dev/nvidia-caps", "/dev/shm"},
        env={"PATH": "/usr/local/sbin:/usr/local/bin::/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    facts = probe_driver_files(env)
    assert facts == {
        "proc_version": PROPRIETARY_550.strip(),
        "module_version": "550.54.15",
        "modules_loaded": ["nvidia", "nvidia_drm", "nvidia_modeset", "nvidia_uvm"],
        "nouveau_loaded": False,
        "device_nodes": ["/dev/nvidia-caps", "/dev/nvidia-modeset", "/dev/nvidia-uvm",
                         "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1",
                         "/dev/nvidiactl"],
        "nvidia_smi": "/usr/bin/nvidia-smi",
        "pci_gpus": [
            {"address": "0000:1b:00.0", "device_id": "0x1db6", "driver": "nvidia"},
            {"address": "0000:1c:00.0", "device_id": "0x1db6", "driver": "nvidia"},
            {"address": "0000:1d:00.0", "device_id": "0x1db6", "driver": None},
        ],
        "pci_scan_ok": True,
        # FakeEnv's kernel; this machine keeps no /lib/modules tree, dkms, or NVSwitch.
        "kernel_release": "6.8.0-45-generic",
        "kernel_modules": {"modules_dir": False, "nvidia_module_files": []},
        "dkms_status": None,
        "userspace_versions": [],
        "nvswitch_count": 0,
        "fabric_manager_running": False,
    }
    assert env.calls == []


def test_desktop_with_nouveau_holding_the_gpu():
    """RTX 3060 (10de:2504) bound to nouveau, its HDMI audio function (class 0x0403) beside."""
    env = _machine(
        [("0000:01:00.0", "0x10de", "0x030000", "0x2504", "nouveau"),
         ("0000:01:00.1", "0x10de", "0x040300", "0x228e", "snd_hda_intel")],
        files={"/proc/modules": "nouveau 2433024 3 - Live 0x0000000000000000\n"
                                "mxm_wmi 16384 1 nouveau, Live 0x0000000000000000\n"
                                "drm_ttm_helper 16384 1 nouveau, Live 0x0000000000000000\n",
               "/dev/dri/card0": ""},
        env={"PATH": "/usr/bin:/bin"},
    )
    facts = probe_driver_files(env)
    assert facts["nouveau_loaded"] is True
    assert facts["modules_loaded"] == ["nouveau"]
    assert facts["proc_version"] is None
    assert facts["module_version"] is None
    assert facts["device_nodes"] == []
    assert facts["nvidia_smi"] is None
    assert facts["pci_gpus"] == [{"address": "0000:01:00.0", "device_id": "0x2504",
                                  "driver": "nouveau"}]


def test_nvswitch_and_audio_functions_are_not_gpus():
    env = _machine([
        ("0000:05:00.0", "0x10de", "0x068000", "0x22a3", "nvidia"),  # NVSwitch (bridge)
        ("0000:18:00.0", "0x10de", "0x030200", "0x2330", "nvidia"),  # H100 SXM
        ("0000:01:00.1", "0x10de", "0x040300", "0x22bd", None),      # HDMI audio
    ])
    assert nvidia_pci_gpus(env) == [{"address": "0000:18:00.0", "device_id": "0x2330",
                                     "driver": "nvidia"}]


def test_wsl2_has_no_pci_devices_and_nvidia_smi_in_wsl_lib():
    env = FakeEnv(files={"/usr/lib/wsl/lib/nvidia-smi": "", "/dev/dxg": "",
                         "/proc/modules": ""},
                  env={"PATH": "/usr/local/bin:/usr/bin:/usr/lib/wsl/lib"})
    facts = probe_driver_files(env)
    assert facts["nvidia_smi"] == "/usr/lib/wsl/lib/nvidia-smi"
    assert facts["pci_gpus"] == []
    assert facts["pci_scan_ok"] is False  # an empty PCI list proves nothing here
    assert facts["modules_loaded"] == []
    assert facts["device_nodes"] == []


# ---------------------------------------------------------------- DKMS, libraries, fabric

# `dkms status` after an Ubuntu kernel update without headers for the new kernel: the
# module exists only for the old kernel (GoogleCloudPlatform/compute-gpu-installation#18).
DKMS_OLD_KERNEL_ONLY = "nvidia/535.129.03, 5.15.0-88-generic, x86_64: installed\n"


def test_module_missing_for_the_running_kernel_after_an_update():
    env = FakeEnv(
        files={"/lib/modules/5.15.0-88-generic/updates/dkms/nvidia.ko": "",
               "/lib/modules/5.15.0-91-generic/kernel/drivers/net/e1000.ko": "",
               "/usr/sbin/dkms": "", "/proc/modules": ""},
        env={"PATH": "/usr/local/bin:/usr/sbin:/usr/bin"},
        plat={"system": "Linux", "release": "5.15.0-91-generic", "version": "#101-Ubuntu SMP",
              "machine": "x86_64", "node": "gpu-node", "python": "3.10.12"},
        commands=[(("/usr/sbin/dkms", "status"), ok(DKMS_OLD_KERNEL_ONLY))],
    )
    facts = probe_driver_files(env)
    assert facts["kernel_release"] == "5.15.0-91-generic"
    assert facts["kernel_modules"] == {"modules_dir": True, "nvidia_module_files": []}
    assert facts["dkms_status"] == DKMS_OLD_KERNEL_ONLY.strip()
    assert env.calls == [("/usr/sbin/dkms", "status")]


@pytest.mark.parametrize("path", [
    "updates/dkms/nvidia.ko.zst",  # Ubuntu 24.04 DKMS compresses with zstd
    "updates/dkms/nvidia.ko",
    "kernel/drivers/video/nvidia.ko",  # Ubuntu's signed linux-modules-nvidia packages
    "extra/nvidia.ko.xz",  # RHEL kmod / akmods
])
def test_module_built_for_the_running_kernel_is_found(path):
    release = "6.8.0-45-generic"
    env = FakeEnv(files={f"/lib/modules/{release}/{path}": ""})
    facts = probe_driver_files(env)
    assert facts["kernel_modules"] == {"modules_dir": True,
                                       "nvidia_module_files": [f"/lib/modules/{release}/{path}"]}
    assert facts["dkms_status"] is None  # no dkms binary: nothing run
    assert env.calls == []


def test_dkms_that_hangs_or_fails_is_none_with_a_short_deadline():
    timeouts = []

    def hung(argv):
        return CommandResult(tuple(argv), None, "", "", timed_out=True,
                             duration_s=DKMS_TIMEOUT_S)

    class Env(FakeEnv):
        def run(self, argv, timeout, env=None, input_text=None):
            timeouts.append(timeout)
            return super().run(argv, timeout, env=env, input_text=input_text)

    env = Env(files={"/usr/sbin/dkms": ""}, commands=[(("/usr/sbin/dkms",), hung)])
    assert probe_driver_files(env)["dkms_status"] is None
    assert timeouts == [DKMS_TIMEOUT_S] and DKMS_TIMEOUT_S <= 10


def test_userspace_library_versions_after_an_upgrade_without_reboot():
    """NVIDIA/ubuntu-packaging-nvidia-driver#3: 535 libraries on disk, 470 module loaded."""
    lib = "/usr/lib/x86_64-linux-gnu"
    env = FakeEnv(files={
        "/proc/driver/nvidia/version": PROPRIETARY_550.replace("550.54.15", "470.199.02"),
        f"{lib}/libnvidia-ml.so.535.129.03": "", f"{lib}/libnvidia-ml.so.1": "",
        f"{lib}/libcuda.so.535.129.03": "", f"{lib}/libcuda.so.1": "", f"{lib}/libcuda.so": "",
        "/usr/lib/i386-linux-gnu/libcuda.so.470.199.02": "",  # not searched: 32-bit
    })
    facts = probe_driver_files(env)
    assert facts["module_version"] == "470.199.02"
    assert facts["userspace_versions"] == ["535.129.03"]


def test_wsl_libcuda_1_1_is_not_a_driver_version():
    env = FakeEnv(files={"/usr/lib/wsl/lib/libcuda.so.1.1": "",
                         "/usr/lib/x86_64-linux-gnu/libcuda.so.1.1": ""})
    assert probe_driver_files(env)["userspace_versions"] == []


def test_nvswitches_counted_and_fabric_manager_found_by_process_name():
    env = _machine([
        ("0000:05:00.0", "0x10de", "0x068000", "0x22a3", "nvidia"),  # NVSwitch
        ("0000:06:00.0", "0x10de", "0x068000", "0x22a3", "nvidia"),
        ("0000:18:00.0", "0x10de", "0x030200", "0x2330", "nvidia"),  # H100 SXM
        ("0000:00:00.0", "0x8086", "0x068000", "0x2020", None),  # an Intel bridge
    ], fake_psutil=FakePsutil(processes={1: ("systemd", "root"),
                                         2211: ("nv-fabricmanager", "root")}))
    facts = probe_driver_files(env)
    assert facts["nvswitch_count"] == 2
    assert facts["fabric_manager_running"] is True


def test_fabric_manager_not_running_and_unreadable_process_table():
    env = FakeEnv(fake_psutil=FakePsutil(processes={1: ("systemd", "root")}))
    assert probe_driver_files(env)["fabric_manager_running"] is False

    class Broken(FakePsutil):
        def process_iter(self, attrs=None):
            raise PermissionError("hidepid=2")

    env = FakeEnv(fake_psutil=Broken())
    assert probe_driver_files(env)["fabric_manager_running"] is None
