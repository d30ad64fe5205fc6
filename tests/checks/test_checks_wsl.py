"""wsl.setup and wsl.limits (WSL001-WSL006) on the recorded WSL2 laptop and variants of it."""

from __future__ import annotations

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.model import Severity, Status
from tests.support.checks import GIB, commands, evidence, only_finding, run, variant

PLAN = {"gpus": None, "batch": None, "workers": None, "script": "train.py"}
WSL_CHECKS = ("wsl.setup", "wsl.limits")


@pytest.mark.parametrize("name", ["healthy_8x_v100_pcie", "workstation_2x_rtx3090_pcie",
                                  "container_64mb_shm", "sandbox_cpu_container"])
def test_native_linux_machines_are_not_wsl(name):
    results = run(variant(name))
    for check_id in WSL_CHECKS:
        assert results[check_id].status is Status.PASS
        assert results[check_id].findings == ()
        assert results[check_id].summary == "not running under WSL"


def test_the_healthy_wsl2_laptop_passes():
    results = run(variant("wsl2_rtx4070"))
    assert results["wsl.setup"].status is Status.PASS
    assert results["wsl.setup"].summary == (
        "WSL 2, libcuda from /usr/lib/wsl/lib/libcuda.so.1 (ldconfig cache)")
    assert results["wsl.limits"].status is Status.PASS
    assert results["wsl.limits"].summary == "15.5 GiB in the VM (about 8.0 GiB needed), 1 GPU"


def test_wsl1_has_no_gpu_and_blocks_the_rest():
    """nullpo-head/wsl-distrod#69: Ubuntu 22.04 under WSL1, kernel 4.4.0-19041-Microsoft."""
    facts = variant("wsl2_rtx4070", {"wsl.version": 1, "wsl.evidence": "4.4.0-19041-Microsoft"})
    results = run(facts)
    finding = only_finding(results["wsl.setup"])
    assert finding.code.id == "WSL001"
    assert finding.category is Category.WSL_SETUP
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "The distro Ubuntu-20.04 runs under WSL 1, which cannot use the GPU"
    assert evidence(finding) == {"kernel": "4.4.0-19041-Microsoft"}
    assert commands(finding) == ["wsl --set-version Ubuntu-20.04 2",
                                 "wsl --set-default-version 2", "uname -r"]
    assert results["wsl.limits"].status is Status.SKIP
    assert results["wsl.limits"].skip_reason == "blocked by WSL001 (wsl.setup)"


def test_empty_wsl_lib_dir_means_the_windows_driver_does_not_reach_wsl():
    """microsoft/WSL#8102: WSL2 laptop where torch says 'Is CUDA available: False' although
    Windows has the GPU; here the Windows driver's libraries are not mounted."""
    facts = variant("wsl2_rtx4070", {
        "wsl.lib_dir_files": ["libd3d12.so", "libd3d12core.so", "libdxcore.so"],
        "wsl.libcuda_in_lib_dir": False, "wsl.nvml_in_lib_dir": False,
        "wsl.nvidia_smi_in_lib_dir": False,
        "wsl.ldconfig": {"ok": True, "error": None, "libcuda": [], "libnvidia_ml": []},
        "wsl.libcuda_resolved": {"path": None, "via": None}})
    finding = only_finding(run(facts)["wsl.setup"])
    assert finding.code.id == "WSL002"
    assert finding.title == ("libcuda.so is missing from /usr/lib/wsl/lib: the Windows driver "
                             "does not reach WSL")
    assert evidence(finding) == {"/usr/lib/wsl/lib": "libd3d12.so, libd3d12core.so, libdxcore.so"}
    assert commands(finding) == [None, "wsl --update; wsl --shutdown",
                                 "ls -la /usr/lib/wsl/lib/libcuda.so*"]


def test_loader_that_does_not_look_in_the_wsl_lib_dir():
    """microsoft/WSL#8587: 'libcuda.so: cannot open shared object file' until
    LD_LIBRARY_PATH=/usr/lib/wsl/lib was set."""
    facts = variant("wsl2_rtx4070", {
        "wsl.ldconfig": {"ok": True, "error": None, "libcuda": [], "libnvidia_ml": []},
        "wsl.libcuda_resolved": {"path": None, "via": None}})
    finding = only_finding(run(facts)["wsl.setup"])
    assert finding.code.id == "WSL003"
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == ("libcuda.so.1 is in /usr/lib/wsl/lib but the dynamic loader does "
                             "not find it")
    assert evidence(finding)["LD_LIBRARY_PATH"] == "unset"
    assert evidence(finding)["ldconfig cache for libcuda"] == "no entry"
    assert commands(finding) == [
        "echo /usr/lib/wsl/lib | sudo tee /etc/ld.so.conf.d/ld.wsl.conf && sudo ldconfig",
        "echo 'export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH' >> ~/.bashrc "
        "&& source ~/.bashrc",
        # the interpreter being diagnosed (--python), not whatever `python` is on PATH
        "/home/jesse/miniconda3/envs/cuda/bin/python -c \"import torch; "
        "print(torch.cuda.is_available())\""]


def test_linux_driver_installed_inside_wsl():
    """microsoft/WSL#11589: inside WSL2 nvidia-smi reports 545.46 against the Windows
    driver 546.80 and 'CUDA Version: ERR!': a Linux driver's tools shadow WSL's."""
    facts = variant("wsl2_rtx4070", {
        "wsl.linux_driver.packages": ["nvidia-utils-545 545.29.06-0ubuntu0~gpu22.04.1",
                                      "libnvidia-compute-545:amd64 545.29.06-0ubuntu0~gpu22.04.1"],
        "wsl.linux_driver.files": ["/usr/lib/x86_64-linux-gnu/libcuda.so.545.29.06"],
        "wsl.libcuda_resolved": {"path": "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                 "via": "ldconfig cache"}})
    finding = only_finding(run(facts)["wsl.setup"])
    assert finding.code.id == "WSL004"
    assert finding.title == ("A Linux NVIDIA driver is installed inside WSL (Ubuntu-20.04); it "
                             "shadows the Windows driver")
    assert evidence(finding)["libcuda.so.1 loads from"] == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    assert commands(finding) == [
        "sudo apt-get remove --purge -y 'nvidia-driver-*' 'nvidia-dkms-*' 'nvidia-utils-*' "
        "'libnvidia-compute-*' 'cuda-drivers*' && sudo apt-get autoremove -y",
        "sudo rm -f /usr/lib/x86_64-linux-gnu/libcuda.so.545.29.06 && sudo ldconfig",
        "sudo apt-get install -y cuda-toolkit-12-6",  # driver 566.36 supports CUDA 12.7
        "wsl --shutdown",
        "which nvidia-smi; nvidia-smi"]


def test_vm_memory_capped_by_wslconfig():
    """A .wslconfig with [wsl2] memory=4GB (gist kelverarruda/443ea00d...) on the 4070 laptop
    training with 8 DataLoader workers."""
    facts = variant("wsl2_rtx4070", {
        "host.memory_total": 4 * GIB,
        "wsl.wslconfig": [{"path": "/mnt/c/Users/jesse/.wslconfig", "memory": "4GB",
                           "memory_bytes": 4 * GIB, "processors": None, "swap": None,
                           "swap_bytes": None, "error": None}],
        "plan": {**PLAN, "workers": 8}})
    results = run(facts)
    finding = only_finding(results["wsl.limits"])
    assert finding.code.id == "WSL005"
    assert finding.effective_severity is Severity.WARNING
    assert finding.title == ("The WSL VM has 4.0 GiB of memory; 1 GPU process(es) with 8 "
                             "DataLoader workers each need about 8.0 GiB")
    assert evidence(finding)[".wslconfig memory="] == "4GB"
    # memory= is already there: change that line rather than append a second [wsl2]
    assert commands(finding)[:2] == [
        "sed -i 's/^[[:space:]]*memory[[:space:]]*=.*/memory=10GB/' "
        "/mnt/c/Users/jesse/.wslconfig", "wsl.exe --shutdown"]
    # host.memory leaves the VM to the WSL check instead of a second finding
    assert results["host.memory"].findings == ()


def test_two_gpus_under_wsl2_are_best_effort():
    """microsoft/WSL#12467: vLLM on two GPUs under WSL2, NCCL 2.20.5 fails creating a
    shared-memory segment."""
    facts = variant("wsl2_rtx4070", {"plan": {**PLAN, "gpus": 2, "workers": 4},
                                     "torch.libraries.nccl_version": "2.20.5"})
    finding = only_finding(run(facts)["wsl.limits"])
    assert finding.code.id == "WSL006"
    assert finding.effective_severity is Severity.WARNING
    assert finding.title == "2 GPUs under WSL2: NCCL runs without peer-to-peer, best-effort"
    assert commands(finding)[:2] == [
        "export NCCL_P2P_DISABLE=1",
        "NCCL_DEBUG=INFO /home/jesse/miniconda3/envs/cuda/bin/python -m "
        "torch.distributed.run --nproc_per_node 2 train.py"]


def test_nccl_older_than_2_10_does_not_work_on_wsl2():
    """NVIDIA/nccl#511: 'WSL2 is not supported by NCCL 2.7.6. You may want to try NCCL 2.10.'"""
    facts = variant("wsl2_rtx4070", {"plan": {**PLAN, "gpus": 2, "workers": 4},
                                     "torch.libraries.nccl_version": "2.7.8"})
    finding = only_finding(run(facts)["wsl.limits"])
    assert finding.effective_severity is Severity.ERROR
    assert finding.title.endswith("and NCCL 2.7.8 is too old for WSL2")
    # torch with its pairs, for this driver (566.36: CUDA 12.7), into the diagnosed env
    assert commands(finding)[0] == (
        "/home/jesse/miniconda3/envs/cuda/bin/python -m pip install --upgrade torch "
        "torchvision torchaudio --index-url https://download.pytorch.org/whl/cu126")


def test_nccl_version_recorded_as_an_int_is_decoded():
    """Old torch returned NCCL_VERSION_CODE (2708 = 2.7.8); older snapshots kept it raw, and
    read as (2708,) it compared as newer than 2.10."""
    facts = variant("wsl2_rtx4070", {"plan": {**PLAN, "gpus": 2, "workers": 4},
                                     "torch.libraries.nccl_version": "2708"})
    finding = only_finding(run(facts)["wsl.limits"])
    assert finding.effective_severity is Severity.ERROR
    assert finding.title.endswith("and NCCL 2.7.8 is too old for WSL2")
    assert evidence(finding)["NCCL in torch"] == "2.7.8"


def test_wslconfig_processors_below_the_plan():
    """.wslconfig [wsl2] processors=4 with 2 GPU processes and 4 DataLoader
    workers each (10 needed)."""
    config = {"path": "/mnt/c/Users/jesse/.wslconfig", "memory": None, "memory_bytes": None,
              "processors": 4, "swap": None, "swap_bytes": None, "error": None}
    facts = variant("wsl2_rtx4070", {"wsl.wslconfig": [config], "host.cpu_affinity": 4,
                                     "host.cpu_logical": 4, "host.memory_total": 64 * GIB,
                                     "plan": {**PLAN, "gpus": 2, "workers": 4},
                                     "torch.libraries.nccl_version": "2.21.5"})
    results = run(facts)
    findings = {f.code.id: f for f in results["wsl.limits"].findings}
    assert set(findings) == {"WSL007", "WSL006"}
    finding = findings["WSL007"]
    assert finding.category is Category.WSL_SETUP
    assert finding.effective_severity is Severity.WARNING
    assert finding.title == (".wslconfig limits the WSL VM to 4 processors; 2 GPU process(es) "
                             "with 4 DataLoader workers each need 10")
    assert evidence(finding)[".wslconfig processors="] == "4"
    assert commands(finding) == [
        "sed -i 's/^[[:space:]]*processors[[:space:]]*=.*/processors=10/' "
        "/mnt/c/Users/jesse/.wslconfig", "wsl.exe --shutdown", None]
    assert "--workers 1" in finding.remediation[2].text
    # host.cpu leaves a VM capped by .wslconfig to the WSL check instead of a second finding
    assert results["host.cpu"].findings == ()
    assert "judged by the WSL check" in results["host.cpu"].summary


def test_wslconfig_processors_enough_or_unset_is_quiet():
    config = {"path": "/mnt/c/Users/jesse/.wslconfig", "memory": None, "memory_bytes": None,
              "processors": 12, "swap": None, "swap_bytes": None, "error": None}
    plan = {"plan": {**PLAN, "gpus": 1, "workers": 8}}
    assert run(variant("wsl2_rtx4070", {"wsl.wslconfig": [config], **plan}))[
        "wsl.limits"].findings == ()
    # without --workers only the 2-per-GPU floor applies (the default follows the cores)
    few = {**config, "processors": 2}
    assert run(variant("wsl2_rtx4070", {"wsl.wslconfig": [few], "plan": PLAN}))[
        "wsl.limits"].findings == ()
    one = {**config, "processors": 1}
    finding = only_finding(run(variant("wsl2_rtx4070", {"wsl.wslconfig": [one],
                                                         "plan": PLAN}))["wsl.limits"])
    assert finding.title == (".wslconfig limits the WSL VM to 1 processor; 1 GPU process(es) "
                             "need at least 2 (2 each)")
