"""nccl.* (NCC001-NCC010) on recorded machines and variants of them, through the runner."""

from __future__ import annotations

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.model import Severity, Status
from tests.support.checks import commands, evidence, only_finding, run, variant

BASELINES = ["healthy_8x_h100_nvlink", "healthy_8x_v100_pcie", "workstation_2x_rtx3090_pcie",
             "wsl2_rtx4070"]
NCCL_CHECKS = ["nccl.available", "nccl.env", "nccl.p2p", "nccl.network"]
H100 = "healthy_8x_h100_nvlink"
V100 = "healthy_8x_v100_pcie"


def p2p(n: int, value: bool | None) -> dict:
    """The P2P matrix as the interpreter probe writes it: None on the diagonal."""
    return {"matrix": [[None if a == b else value for b in range(n)] for a in range(n)],
            "error": None, "timed_out": False}


@pytest.mark.parametrize("name", BASELINES)
def test_healthy_baselines_trigger_no_nccl_code(name):
    results = run(variant(name))
    assert [f.code.id for c in NCCL_CHECKS for f in results[c].findings] == []
    assert all(results[c].status is Status.PASS for c in NCCL_CHECKS)


def test_baseline_summaries_describe_the_wiring():
    results = run(variant(H100))
    assert results["nccl.available"].summary == "NCCL 2.28.9"
    assert results["nccl.p2p"].summary == "28 pairs NV18"
    assert results["nccl.network"].summary == "8 of 8 ports active (400 Gb/sec (4X NDR))"
    assert run(variant(V100))["nccl.p2p"].summary == "16 pairs NODE, 12 pairs PIX"
    assert run(variant(H100, {"torch.cuda.p2p": p2p(8, True)}))["nccl.p2p"].findings == ()


def test_cuda_build_without_nccl():
    """"Distributed package doesn't have NCCL built in": Windows CUDA wheels have no NCCL
    (https://docs.pytorch.org/docs/stable/distributed.html#backends)."""
    facts = variant("workstation_2x_rtx3090_pcie",
                    {"torch.distributed.nccl_available": False, "os.system": "Windows"})
    result = run(facts)["nccl.available"]
    finding = only_finding(result)
    assert finding.code.id == "NCC001" and finding.category is Category.NCCL_UNAVAILABLE
    assert result.status is Status.FAIL
    assert finding.title == ("This PyTorch build has no NCCL (torch.distributed."
                             "is_nccl_available() is False on Windows): multi-GPU DDP cannot "
                             "use 'nccl'")
    assert "wsl --install -d Ubuntu" in commands(finding)
    assert commands(finding)[0].startswith(
        "/home/user/venvs/train/bin/python -c \"import torch.distributed as d; ")


def test_linux_cuda_build_without_nccl_gets_a_wheel_for_this_driver():
    """A source build without NCCL on the 2x RTX 3090 workstation (driver CUDA 13.0): the
    reinstall names the diagnosed interpreter, torch's pairs, and a variant this driver runs
    (was a hard-coded cu128 with a bare `pip`)."""
    facts = variant("workstation_2x_rtx3090_pcie", {"torch.distributed.nccl_available": False})
    finding = only_finding(run(facts)["nccl.available"])
    wheel = commands(finding)[1]
    assert wheel.startswith("/home/user/venvs/train/bin/python -m pip install --upgrade "
                            "torch torchvision torchaudio --index-url "
                            "https://download.pytorch.org/whl/cu")
    assert "cu128" not in wheel
    old_driver = variant("workstation_2x_rtx3090_pcie", {
        "torch.distributed.nccl_available": False, "nvml.cuda_driver_version": "11.4"})
    step = only_finding(run(old_driver)["nccl.available"]).remediation[1]
    # No current build runs on a CUDA 11.4 driver: an exact older release that does.
    assert step.command == ("/home/user/venvs/train/bin/python -m pip install torch==2.4.1 "
                            "torchvision==0.19.1 torchaudio==2.4.1 "
                            "--index-url https://download.pytorch.org/whl/cu118")


def test_nccl_version_from_old_torch_is_decoded():
    """The container fixture recorded torch 1.7's int NCCL_VERSION_CODE 2708 (NCCL 2.7.8)."""
    assert run(variant("container_64mb_shm"))["nccl.available"].summary == "NCCL 2.7.8"
    facts = variant(H100, {"torch.libraries.nccl_version": "21003"})  # 2.9+ encoding
    assert run(facts)["nccl.available"].summary == "NCCL 2.10.3"


def test_cpu_build_is_left_to_tor002():
    facts = variant("sandbox_cpu_container")
    assert run(facts)["nccl.available"].summary == ("not a CUDA build of torch: NCCL is not "
                                                    "expected")


def test_p2p_disabled_on_an_nvlink_machine_wastes_the_nvlinks():
    """nccl#1637's log runs with NCCL_P2P_DISABLE=1; on the NV18 H100 node that is a warning."""
    facts = variant(H100, {"env_vars.NCCL_P2P_DISABLE": "1"})
    finding = only_finding(run(facts)["nccl.env"])
    assert finding.code.id == "NCC002" and finding.effective_severity is Severity.WARNING
    assert finding.title == "NCCL_P2P_DISABLE=1 turns off GPU peer-to-peer: this machine's " \
                            "NVLinks go unused"
    assert evidence(finding)["GPU links"] == "28 pairs NV18"
    # measured with the diagnosed torch, not nccl-tests (which needs nvcc and NCCL headers)
    measure = finding.remediation[1]
    assert measure.command.startswith(
        "/usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 --no-python "
        "/usr/bin/python3 -c \"import os,time,torch,torch.distributed as d; ")
    assert "make CUDA_HOME=" in measure.text
    assert "nccl-tests" not in measure.command
    pcie = variant("workstation_2x_rtx3090_pcie", {"env_vars.NCCL_P2P_LEVEL": "LOC"})
    assert only_finding(run(pcie)["nccl.env"]).effective_severity is Severity.INFO


def test_shm_disabled():
    finding = only_finding(run(variant(V100, {"env_vars.NCCL_SHM_DISABLE": "1"}))["nccl.env"])
    assert finding.code.id == "NCC003" and finding.category is Category.NCCL_SHARED_MEMORY


def test_ib_disabled_while_ports_are_active():
    """nccl#952: 2x 8-GPU nodes whose traffic went 'via NET/Socket' instead of IB."""
    finding = only_finding(run(variant(H100, {"env_vars.NCCL_IB_DISABLE": "1"}))["nccl.env"])
    assert finding.code.id == "NCC004" and finding.category is Category.NCCL_NETWORK
    assert finding.title.startswith("NCCL_IB_DISABLE=1 while 8 InfiniBand/RoCE ports are active")
    no_ib = variant("workstation_2x_rtx3090_pcie", {"env_vars.NCCL_IB_DISABLE": "1"})
    assert run(no_ib)["nccl.env"].findings == ()


def test_socket_ifname_matching_no_interface():
    """nccl#1584 sets NCCL_SOCKET_IFNAME=eth0; on the V100 server there is no eth0."""
    facts = variant(V100, {"env_vars.NCCL_SOCKET_IFNAME": "eth0"})
    result = run(facts)["nccl.env"]
    finding = only_finding(result)
    assert finding.code.id == "NCC005" and result.status is Status.FAIL
    assert finding.title == ("NCCL_SOCKET_IFNAME=eth0 matches no interface that is up "
                             "(up: eno1, ib0, ib1, lo)")
    assert "export NCCL_SOCKET_IFNAME=eno1" in commands(finding)
    for ok in ("eno", "=eno1", "^docker,lo", "ib"):
        assert run(variant(V100, {"env_vars.NCCL_SOCKET_IFNAME": ok}))["nccl.env"].findings == ()


def test_debug_left_on():
    """nccl#1267's log: NCCL_DEBUG=INFO output from every rank."""
    finding = only_finding(run(variant(H100, {"env_vars.NCCL_DEBUG": "INFO"}))["nccl.env"])
    assert finding.code.id == "NCC006" and finding.effective_severity is Severity.INFO
    assert finding.category is Category.PERFORMANCE_DEGRADED  # slower, not broken
    assert run(variant(H100, {"env_vars.NCCL_DEBUG": "WARN"}))["nccl.env"].findings == ()


def test_nvlink_pair_without_p2p():
    """DCGM#120: HGX H800 whose NVSwitch fabric stayed 'In Progress' (fabric manager): the
    GPUs are on NVLink but peer access fails."""
    matrix = p2p(8, True)
    matrix["matrix"][0][1] = matrix["matrix"][1][0] = False
    result = run(variant(H100, {"torch.cuda.p2p": matrix}))["nccl.p2p"]
    finding = only_finding(result)
    assert finding.code.id == "NCC007" and result.status is Status.FAIL
    assert finding.title == ("1 GPU pair joined by NVLink report no peer access: "
                             "cuda:0-cuda:1 (NV18)")
    assert "systemctl status nvidia-fabricmanager" in commands(finding)


def test_consumer_pcie_without_p2p_is_normal():
    """club-3090#1229 topo -p2p: GNS on GeForce: no P2P, and that is fine."""
    facts = variant("workstation_2x_rtx3090_pcie", {"torch.cuda.p2p": p2p(2, False)})
    assert run(facts)["nccl.p2p"].findings == ()


def test_iommu_with_pcie_p2p_is_the_known_hang():
    """NVIDIA/nccl#199: PCIe P2P with the IOMMU on hangs the first all-reduce."""
    facts = variant(V100, {"torch.cuda.p2p": p2p(8, True),
                           "interconnect.iommu": {"cmdline_flags": ["intel_iommu=on"],
                                                  "groups": 120, "enabled": True,
                                                  "passthrough": False, "cmdline_read": True}})
    result = run(facts)["nccl.p2p"]
    finding = only_finding(result)
    assert finding.code.id == "NCC008" and finding.category is Category.NCCL_P2P
    assert finding.title == ("IOMMU is on (120 groups, no iommu=pt) and 28 GPU pairs use PCIe "
                             "P2P: NCCL's first collective may hang")
    assert "export NCCL_P2P_DISABLE=1" in commands(finding)
    assert commands(finding)[0].startswith(
        "NCCL_P2P_DISABLE=1 /opt/venvs/train/bin/python -m torch.distributed.run --standalone "
        "--nproc_per_node 8 --no-python ")
    assert ("sudo sed -i 's/^GRUB_CMDLINE_LINUX=\"/&iommu=pt /' /etc/default/grub && "
            "sudo update-grub && sudo reboot") in commands(finding)  # Ubuntu 20.04
    rhel = variant(V100, {"torch.cuda.p2p": p2p(8, True), "os.distro.id": "rocky",
                          "interconnect.iommu": {"cmdline_flags": ["intel_iommu=on"],
                                                 "groups": 120, "enabled": True,
                                                 "passthrough": False, "cmdline_read": True}})
    assert "sudo grubby --update-kernel=ALL --args=iommu=pt && sudo reboot" in commands(
        only_finding(run(rhel)["nccl.p2p"]))
    assert evidence(finding)["kernel command line"] == "intel_iommu=on"
    passthrough = variant(V100, {"torch.cuda.p2p": p2p(8, True),
                                 "interconnect.iommu.enabled": True,
                                 "interconnect.iommu.passthrough": True})
    assert run(passthrough)["nccl.p2p"].findings == ()
    already_off = variant(V100, {"torch.cuda.p2p": p2p(8, True),
                                 "interconnect.iommu.enabled": True,
                                 "env_vars.NCCL_P2P_DISABLE": "1"})
    assert run(already_off)["nccl.p2p"].findings == ()


def test_p2p_query_that_hung():
    hung = {"matrix": None, "error": "timed out after 20s", "timed_out": True}
    finding = only_finding(run(variant(H100, {"torch.cuda.p2p": hung}))["nccl.p2p"])
    assert finding.code.id == "NCC010"


def test_infiniband_ports_all_down():
    ports = [{"device": "mlx5_0", "port": 1, "state": "1: DOWN", "active": False,
              "rate": "10 Gb/sec (4X SDR)", "link_layer": "InfiniBand"}]
    finding = only_finding(run(variant(V100, {"interconnect.infiniband": ports}))[
        "nccl.network"])
    assert finding.code.id == "NCC009"
    assert finding.title == "The only InfiniBand/RoCE port is down: multi-node NCCL cannot use it"
