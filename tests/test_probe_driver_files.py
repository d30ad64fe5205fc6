"""Driver files probe: /proc/driver/nvidia/version, /proc/modules, /dev, sysfs PCI."""

from __future__ import annotations

import pytest

from gpu_doctor.facts.driver_files import nvidia_pci_gpus, parse_module_version, probe_driver_files
from tests.fakes import FakeEnv

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
