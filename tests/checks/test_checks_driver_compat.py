"""driver.cuda_compat (DRV002, DRV003) and driver.fabric_manager (DRV005) on recorded
machines and variants of them, through the runner."""

from __future__ import annotations

import copy

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.model import Severity, Status
from tests.conftest import load_fixture_facts
from tests.support.checks import FIXTURES, commands, evidence, only_finding, run, variant

OWN_CODES = {"DRV002", "DRV003", "DRV004", "DRV005",
             "HWF001", "HWF002", "HWF003", "HWF004", "HWF005"}
HEALTHY = ("healthy_8x_v100_pcie", "workstation_2x_rtx3090_pcie", "wsl2_rtx4070")


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_machines_get_none_of_the_driver_area_codes(name):
    results = run(load_fixture_facts(name))
    codes = {f.code.id for r in results.values() for f in r.findings}
    assert codes & (OWN_CODES | {"DRV001"}) == set()
    for check_id in ("driver.present", "driver.cuda_compat", "driver.fabric_manager",
                     "gpu.health"):
        assert results[check_id].status is Status.PASS, check_id


@pytest.mark.parametrize("name", sorted(set(FIXTURES) - {"no_driver", "nouveau_loaded",
                                                         "sandbox_cpu_container"}))
def test_no_recorded_machine_has_a_driver_area_problem(name):
    results = run(load_fixture_facts(name))
    codes = {f.code.id for r in results.values() for f in r.findings}
    assert codes & OWN_CODES == set()


# ---------------------------------------------------------------- DRV002: too old


def _with_driver(name: str, version: str, cuda: str | None, changes=None):
    """Fixture NAME with another driver: NVML, the loaded module and the libraries agree."""
    return variant(name, {"nvml.driver_version": version, "nvml.cuda_driver_version": cuda,
                          "driver.module_version": version,
                          "driver.userspace_versions": [version], **(changes or {})})


def test_cu121_torch_on_an_r470_driver_fails_with_the_branch_to_install():
    """lllyasviel/Fooocus#1313: driver 470.86 (CUDA 11.4) under a cu121 torch: 'The NVIDIA
    driver on your system is too old (found version 11040)'. Here on the V100 server."""
    facts = variant("healthy_8x_v100_pcie", {"torch.build.cuda": "12.1",
                                             "torch.build.version": "2.1.0+cu121"})
    result = run(facts)["driver.cuda_compat"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "DRV002"
    assert finding.category is Category.DRIVER_TOO_OLD
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == ("Driver 470.129.06 supports CUDA 11.4, but torch 2.1.0+cu121 needs "
                             "CUDA 12.1 (driver 525.60.13 or newer): CUDA cannot initialise")
    assert evidence(finding) == {
        "driver": "470.129.06",
        "newest CUDA the driver supports": "11.4",
        "torch": "2.1.0+cu121 (built with CUDA 12.1)",
    }
    steps = finding.remediation
    # Not R530 (a short-lived feature branch, long end-of-life) but R580, the
    # long-term branch; on a datacenter GPU (V100), Ubuntu's -server package. The build's
    # own minimum and its full-feature driver stay in the text.
    assert steps[0].text == (
        "Install driver branch R580 (580.65.06 or newer, long-term support to August 2028). "
        "torch's CUDA 12.1 build needs driver 525.60.13 or newer; its full feature set needs "
        "530.30.02 (R530) or newer.")
    assert commands(finding) == [
        "sudo apt install nvidia-driver-580-server",
        "sudo reboot",
        # Or keep R470: torch 2.0.1 cu117 runs there (Python 3.8, sm_70), exact versions.
        "/opt/venvs/train/bin/python -m pip install torch==2.0.1 torchvision==0.15.2 "
        "torchaudio==2.0.2 --index-url https://download.pytorch.org/whl/cu117",
    ]
    assert steps[2].text.startswith("Or keep the driver. The current PyTorch release does not "
                                    "fit here")


def test_cuda13_torch_on_an_r575_driver_offers_the_cu126_wheel_instead():
    """The knowledge note's trigger: an unpinned install pulls a CUDA 13 torch onto an R575
    driver ('found version 12090'). Arch workstation: no apt command, the install guide."""
    facts = _with_driver("workstation_2x_rtx3090_pcie", "575.64.05", "12.9")
    finding = only_finding(run(facts)["driver.cuda_compat"])
    assert finding.code.id == "DRV002"
    assert "needs CUDA 13.0 (driver 580.65.06 or newer)" in finding.title
    assert "R580 (580.65.06 or newer" in finding.remediation[0].text
    exe = load_fixture_facts("workstation_2x_rtx3090_pcie")["python"]["executable"]
    assert commands(finding) == [
        None, "sudo reboot",
        f"{exe} -m pip install --upgrade torch torchvision torchaudio "
        "--index-url https://download.pytorch.org/whl/cu126",
    ]
    assert finding.remediation[0].url == (
        "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/")


def test_cuda_10_has_no_minor_version_compatibility():
    """pytorch/pytorch#28321 (collect_env): driver 410.104 (CUDA 10.0) under a CUDA 10.1
    torch 1.3.0: 'Is CUDA available: No'."""
    facts = _with_driver("healthy_8x_v100_pcie", "410.104", "10.0", {
        "torch.build.cuda": "10.1", "torch.build.version": "1.3.0"})
    finding = only_finding(run(facts)["driver.cuda_compat"])
    assert finding.code.id == "DRV002"
    assert finding.title.endswith("needs CUDA 10.1 (driver 418.39 or newer): CUDA cannot "
                                  "initialise")


def test_wsl2_old_windows_driver_is_updated_on_windows():
    """The WSL2 laptop with an older Windows driver (R516, CUDA 11.7) under torch cu124."""
    facts = variant("wsl2_rtx4070", {"nvml.driver_version": "516.94",
                                     "nvml.cuda_driver_version": "11.7"})
    finding = only_finding(run(facts)["driver.cuda_compat"])
    assert finding.code.id == "DRV002"
    assert "needs CUDA 12.4 (driver 528.33 or newer)" in finding.title  # Windows' floor
    assert "on Windows to 528.33 or newer" in finding.remediation[0].text
    assert commands(finding)[:2] == [None, "wsl --shutdown"]
    assert not any("apt" in (c or "") for c in commands(finding))


def test_container_driver_is_upgraded_on_the_host():
    facts = variant("container_64mb_shm", {"torch.build.cuda": "12.1",
                                           "torch.build.version": "2.1.0+cu121"})
    finding = only_finding(run(facts)["driver.cuda_compat"])
    assert finding.code.id == "DRV002"
    assert "belongs to the host" in finding.remediation[0].text
    assert finding.remediation[0].command is None


def test_wsl_cuda_version_err_is_derived_from_the_driver_number():
    """microsoft/WSL#11589: 'CUDA Version: ERR!' under Windows driver 546.80."""
    facts = variant("wsl2_rtx4070", {"nvml.driver_version": "546.80",
                                     "nvml.cuda_driver_version": None,
                                     "torch.build.cuda": "13.0",
                                     "torch.build.version": "2.9.0+cu130"})
    finding = only_finding(run(facts)["driver.cuda_compat"])
    assert finding.code.id == "DRV002"
    assert evidence(finding)["newest CUDA the driver supports"].startswith("12.3 (from the")


# ---------------------------------------------------------------- DRV003: MVC only


def test_minor_version_compat_with_cubins_for_every_gpu_passes():
    """The healthy V100 server itself: cu117 on R470 (11.4), sm_70 cubins in the wheel."""
    result = run(load_fixture_facts("healthy_8x_v100_pcie"))["driver.cuda_compat"]
    assert result.status is Status.PASS
    assert "minor-version compatibility" in result.summary
    assert "no PTX JIT" in result.summary


def test_gpu_that_needs_ptx_jit_under_minor_version_compat_is_an_error():
    """A cu128 torch built for sm_80..sm_90 plus compute_90 PTX, on a Blackwell laptop GPU
    (sm_120) with an R535 driver (CUDA 12.2): only PTX, which R535 cannot JIT from 12.8."""
    facts = _with_driver("laptop_gpu_newer_than_wheel", "535.183.01", "12.2", {
        "torch.build.cuda": "12.8", "torch.build.version": "2.7.0+cu128",
        "torch.build.arch_list": ["sm_80", "sm_86", "sm_90", "compute_90"]})
    finding = only_finding(run(facts)["driver.cuda_compat"])
    assert finding.code.id == "DRV003"
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == (
        "GPU 0 (NVIDIA GeForce RTX 5090 Laptop GPU, sm_120): torch has only PTX for it, which "
        "driver 535.183.01 (CUDA 12.2) cannot JIT-compile from CUDA 12.8")
    assert finding.affects == ("gpu:0",)
    assert evidence(finding)["torch architectures"] == "sm_80 sm_86 sm_90 compute_90"
    assert "its full feature set needs 570.26 (R570) or newer" in finding.remediation[0].text


def test_minor_version_compat_without_known_gpu_capabilities_warns():
    facts = _with_driver("healthy_8x_v100_pcie", "535.129.03", "12.2", {
        "torch.build.cuda": "12.8", "torch.build.version": "2.7.0+cu128"})
    for gpu in facts["nvml"]["gpus"]:
        gpu["compute_capability"] = None
    result = run(facts)["driver.cuda_compat"]
    assert result.status is Status.WARN
    finding = only_finding(result)
    assert finding.code.id == "DRV003"
    assert finding.effective_severity is Severity.WARNING
    assert finding.title.endswith("through minor-version compatibility only: PTX JIT and "
                                  "newer-driver APIs will fail")


def test_cpu_build_and_unimportable_torch_are_not_compared():
    result = run(load_fixture_facts("torch_cpu_wheel_on_gpu_box"))["driver.cuda_compat"]
    assert (result.status, result.summary) == (
        Status.PASS, "torch has no CUDA build to compare with the driver")
    result = run(load_fixture_facts("torch_missing"))["driver.cuda_compat"]
    assert result.status is Status.PASS
    assert result.summary.startswith("torch cannot be imported")


def test_blocked_when_no_driver_answers():
    result = run(load_fixture_facts("no_driver"))["driver.cuda_compat"]
    assert result.status is Status.SKIP
    assert "DRV001" in result.skip_reason


# ---------------------------------------------------------------- DRV005: fabric manager


def _h800(fabric_state: str | None, fm_running: bool | None, switches: int = 4):
    """NVIDIA/DCGM#120: 8x H800 HGX, driver 535.129.03 (CUDA 12.2), 'Fabric / State: In
    Progress' (the capture), CUDA never initialised. Built on the V100 server's facts, with
    its NVML GPUs turned into the H800s of the capture."""
    facts = variant("healthy_8x_v100_pcie", {
        "nvml.driver_version": "535.129.03", "nvml.cuda_driver_version": "12.2",
        "driver.module_version": "535.129.03", "driver.userspace_versions": ["535.129.03"],
        "driver.nvswitch_count": switches, "driver.fabric_manager_running": fm_running,
        "torch.cuda.init_error": "RuntimeError: Unexpected error from cudaGetDeviceCount(). "
                                 "Error 802: system not yet initialized",
    })
    for gpu in facts["nvml"]["gpus"]:
        gpu["name"] = "NVIDIA H800"
        gpu["compute_capability"] = "9.0"
        gpu["fabric"] = {"state": fabric_state} if fabric_state else None
    return facts


def test_h800_without_fabric_manager_from_the_dcgm_capture():
    result = run(_h800("in_progress", False))["driver.fabric_manager"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "DRV005"
    assert finding.category is Category.CUDA_INIT_FAILURE
    assert finding.title == ("NVSwitch system (4 NVSwitches) without a running Fabric Manager: "
                             "CUDA fails with error 802 'system not yet initialized'")
    ev = evidence(finding)
    assert ev["nv-fabricmanager process"] == "not running"
    assert ev["GPU fabric state"].startswith("GPU 0: in progress, GPU 1: in progress")
    assert "Error 802" in ev["torch CUDA init"]
    assert finding.affects == tuple(f"gpu:{i}" for i in range(8))
    # The version string differs per repository (NVIDIA's -1, Ubuntu's
    # -0ubuntu...): pick the listed one that starts with the driver's version.
    assert commands(finding) == [
        'sudo apt install "nvidia-fabricmanager-535=$(apt-cache madison '
        "nvidia-fabricmanager-535 | awk '{print $3}' | grep -m1 '^535.129.03-')\" && "
        "sudo apt-mark hold nvidia-fabricmanager-535",
        "sudo systemctl enable --now nvidia-fabricmanager && systemctl status nvidia-fabricmanager",
        "nvidia-smi -q | grep -A 2 Fabric",
    ]


def test_a100_hgx_without_fabric_state_is_caught_by_the_missing_daemon():
    """pytorch/pytorch#35710: DGX A100-class board, Error 802; Ampere reports no fabric
    state through NVML, so the NVSwitches on the bus and the missing process tell."""
    finding = only_finding(run(_h800(None, False, switches=6))["driver.fabric_manager"])
    assert finding.code.id == "DRV005"
    assert "6 NVSwitches" in finding.title
    assert finding.affects == ()


def test_fabric_manager_running_but_gpus_still_joining():
    """nccl#1488: the service was restarted under running GPUs; they stay 'in progress'."""
    finding = only_finding(run(_h800("in_progress", True))["driver.fabric_manager"])
    assert finding.title.startswith("8 GPUs have not joined the NVSwitch fabric (state: in "
                                    "progress)")
    assert evidence(finding)["nv-fabricmanager process"] == "running"


def test_fabric_complete_passes():
    result = run(_h800("completed", True))["driver.fabric_manager"]
    assert result.status is Status.PASS
    assert result.summary == "4 NVSwitch(es); fabric ready"


def test_in_a_container_the_daemon_is_not_judged_by_the_process_list():
    facts = _h800(None, False)
    facts = copy.deepcopy(facts)
    facts["os"]["container"] = {"in_container": True, "kind": "docker", "evidence": []}
    assert run(facts)["driver.fabric_manager"].status is Status.PASS
    facts["nvml"]["gpus"][0]["fabric"] = {"state": "not_started"}
    finding = only_finding(run(facts)["driver.fabric_manager"])
    assert finding.affects == ("gpu:0",)
    assert "on the host" in finding.remediation[0].text
    assert evidence(finding)["nv-fabricmanager process"] == "not visible from a container"


def test_fabric_manager_on_rhel_is_installed_with_dnf():
    """RHEL-family hosts have no apt; NVIDIA's RHEL repository names the
    package nvidia-fabric-manager-{driver version}."""
    facts = _h800("in_progress", False)
    facts.records["os"].value["distro"]["id"] = "rocky"
    finding = only_finding(run(facts)["driver.fabric_manager"])
    assert commands(finding)[0] == "sudo dnf install nvidia-fabric-manager-535.129.03"


def test_wsl2_r580_windows_driver_with_cuda_err_is_not_too_old():
    """WSL2, Windows driver 581.57, nvidia-smi 'CUDA Version: ERR!' (NVML
    gives no CUDA version), torch cu130: R580 runs CUDA 13.0, so no DRV002."""
    facts = variant("wsl2_rtx4070", {"nvml.driver_version": "581.57",
                                     "nvml.cuda_driver_version": None,
                                     "torch.build.version": "2.9.0+cu130",
                                     "torch.build.cuda": "13.0"})
    result = run(facts)["driver.cuda_compat"]
    assert result.status is Status.PASS
    assert result.findings == ()


def test_workstation_gpu_gets_the_desktop_driver_package():
    """An RTX 5090 laptop on Ubuntu under a cu128 torch with an R535 driver: R580, not the
    -server build (that is for datacenter GPUs)."""
    facts = _with_driver("laptop_gpu_newer_than_wheel", "535.183.01", "12.2", {
        "torch.build.cuda": "13.0", "torch.build.version": "2.9.0+cu130",
        "os.distro.id": "ubuntu"})
    finding = only_finding(run(facts)["driver.cuda_compat"])
    assert finding.code.id == "DRV002"
    assert commands(finding)[0] == "sudo apt install nvidia-driver-580"
