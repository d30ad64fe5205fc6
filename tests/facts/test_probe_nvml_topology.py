"""collect_topology on real machines' `nvidia-smi topo -m` wiring, through the fake NVML."""

from __future__ import annotations

from ddp_doctor.facts.nvml import collect_nvml
from ddp_doctor.facts.nvml_topology import collect_topology, safe_topology
from tests.support.smi_captures import FakeGpu, nvml_from_smi_table
from tests.support.topo_captures import TopoNVML, parse_topo, topo_capture, with_topology

V100_TABLE = "nvidia-smi-bsyonline-8xv100.txt"


def _fake(topo_name: str) -> TopoNVML:
    topo = topo_capture(topo_name)
    gpus = [FakeGpu({("PCI", "Bus Id"): f"00000000:{0x10 + i:02X}:00.0"})
            for i in range(len(topo.gpus))]
    fake = TopoNVML({}, gpus, topo)
    fake.nvmlInit()
    return fake


def test_v100_pcie_server_switch_groups_and_no_nvlink():
    """bsyonline 8x V100 PCIe: PIX inside two 4-GPU switch groups, NODE across."""
    fake = with_topology(nvml_from_smi_table(V100_TABLE, full_name="Tesla V100-PCIE-32GB"),
                         topo_capture("topo-bsyonline-8xv100.txt"))
    topo = collect_nvml(fake)["topology"]
    assert topo["error"] is None
    assert topo["link"][0] == [None, "PIX", "PIX", "PIX", "NODE", "NODE", "NODE", "NODE"]
    assert topo["link"][5][4] == "PIX" and topo["link"][7][3] == "NODE"
    assert all(n == 0 for row in topo["nvlinks"] for n in row if n is not None)
    assert topo["numa_affinity"] == [0] * 8


def test_hgx_h100_nvswitch_every_pair_nv18_and_pcie_level_behind_it():
    """sglang#30401: NV18 full mesh through NVSwitch, GPUs 0-3 on NUMA 0, 4-7 on NUMA 1."""
    topo = collect_topology(_fake("topo-sglang-30401-8xh100-nics.txt"), 8)
    assert topo["link"][0][1:] == ["NV18"] * 7
    assert {topo["link"][i][j] for i in range(8) for j in range(8) if i != j} == {"NV18"}
    assert topo["pcie"][0][3] == "NODE" and topo["pcie"][0][4] == "SYS"
    assert topo["numa_affinity"] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_tab_separated_two_5090s_meet_at_the_host_bridge():
    """club-3090#1229: two RTX 5090, tab-separated matrix, PHB between them."""
    parsed = topo_capture("topo-club3090-1229-2x5090.txt")
    assert parsed.cells == [["X", "PHB"], ["PHB", "X"]]
    assert parsed.cpu_affinity == ["0-63", "0-63"]
    topo = collect_topology(_fake("topo-club3090-1229-2x5090.txt"), 2)
    assert topo["link"] == [[None, "PHB"], ["PHB", None]]
    assert topo["nvlinks"] == [[None, 0], [0, None]]


def test_direct_nvlink_pairs_are_counted_per_peer():
    """An NVLink bridge between two cards (no NVSwitch): links go straight to the peer."""
    topo = parse_topo("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
                      "GPU0\t X \tNV4\t0-31\t0\nGPU1\tNV4\t X \t0-31\t0\n")
    gpus = [FakeGpu({("PCI", "Bus Id"): b}) for b in ("00000000:01:00.0", "00000000:02:00.0")]
    fake = TopoNVML({}, gpus, topo)
    fake.nvmlInit()
    result = collect_topology(fake, 2)
    assert result["link"] == [[None, "NV4"], ["NV4", None]]
    assert result["pcie"][0][1] == "NODE"


def test_bindings_without_topology_queries_give_pcie_unknown_not_a_crash():
    fake = nvml_from_smi_table(V100_TABLE, full_name="Tesla V100-PCIE-32GB")
    topo = collect_nvml(fake)["topology"]
    assert topo["error"] is None
    assert topo["pcie"][0][1] is None and topo["nvlinks"][0][1] == 0


def test_a_failure_inside_the_probe_is_recorded_not_raised():
    class Exploding(TopoNVML):
        def nvmlDeviceGetHandleByIndex(self, index):
            raise RuntimeError("NVML went away")

    fake = _fake("topo-club3090-1229-2x5090.txt")
    result = safe_topology(fake, "2")  # a count that is not a number
    assert result["link"] is None and result["error"].startswith("TypeError")
    assert safe_topology(Exploding(fake.system, fake.gpus, fake.topo), 2)["link"] == [
        [None, None], [None, None]]
