"""``diagnose`` comparing the hosts of a multi-node log (diagnose/node_lines.py).

The real two-host capture shows one network on both hosts: nothing to report. The
differing cases are built from NCCL's own line formats (as the real logs quoted in each
test print them), one host changed, since a difference is what must be found.
"""

from __future__ import annotations

from ddp_doctor.diagnose.node_lines import NodeLines
from tests.conftest import FIXTURES


def judged(text: str) -> dict[str, tuple[str, ...]]:
    lines = NodeLines()
    for line in text.splitlines():
        lines.feed(line)
    comparison = lines.judge()
    return {} if comparison is None else {f.code.id: f.affects for f in comparison.findings}


def test_the_real_two_host_ib_log_shows_one_network_and_no_difference():
    lines = NodeLines()
    for line in (FIXTURES / "logs" / "nccl-1189-two-hosts-ib.log").read_text().splitlines():
        lines.feed(line)
    assert set(lines.hosts) == {"H20-GPU-05", "H20-GPU-06"}
    assert lines.hosts["H20-GPU-06"]["nccl_network"] == "IB"
    assert lines.judge() is None  # only one host said anything comparable


# NCCL 2.19+ prints "NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)" when it finds
# libnccl-net.so and "NET/Plugin: Could not find: libnccl-net.so. Using internal network
# plugin." when it does not (both as quoted in NVIDIA/nccl issues 1584 and 1267).
PLUGIN_ON_TWO_OF_THREE = """\
node-a:1201:1201 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node-a:1201:1290 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)
node-a:1201:1290 [0] NCCL INFO Using network IBext_v8
node-b:3344:3344 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node-b:3344:3410 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)
node-b:3344:3410 [0] NCCL INFO Using network IBext_v8
node-c:2210:2210 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node-c:2210:2277 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal \
network plugin.
node-c:2210:2277 [0] NCCL INFO Using network Socket
"""


def test_a_net_plugin_found_on_some_nodes_only_names_the_odd_node():
    assert judged(PLUGIN_ON_TWO_OF_THREE) == {"NOD015": ("node-c",)}


def test_another_nccl_version_on_one_node_is_nod001():
    text = PLUGIN_ON_TWO_OF_THREE.replace("node-c:2210:2210 [0] NCCL INFO NCCL version 2.21.5",
                                          "node-c:2210:2210 [0] NCCL INFO NCCL version 2.18.3")
    assert judged(text)["NOD001"] == ("node-c",)


def test_socket_ifname_set_on_one_node_only_is_nod005_with_launcher_prefixes():
    # "[0] host:pid:tid [0] NCCL INFO NCCL_X set by environment to Y." as torchrun --tee
    # prefixes it (NVIDIA/nccl issue 1453's capture).
    text = ("[0] gpu1:100:100 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n"
            "[0] gpu1:100:100 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
            "[1] gpu2:200:200 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n")
    assert judged(text) == {"NOD005": ("gpu2",)}


def test_mixed_gpu_generations_in_the_nccl_tests_table_is_nod007():
    # nccl-tests' device table: "#  Rank  0 Group  0 Pid  1234 on HOST device  0 [0x..] MODEL"
    text = "\n".join(
        [f"#  Rank {r:2d} Group  0 Pid {1000 + r:5d} on     hostA device {r}  [0x{r:02x}] "
         f"NVIDIA A100-SXM4-80GB" for r in range(2)]
        + [f"#  Rank {r:2d} Group  0 Pid {2000 + r:5d} on     hostB device {r - 2}  "
           f"[0x{r:02x}] NVIDIA H100 80GB HBM3" for r in range(2, 4)])
    assert judged(text) == {"NOD007": ("hostB",)}


def test_a_single_host_log_is_not_compared():
    text = "\n".join(line for line in PLUGIN_ON_TWO_OF_THREE.splitlines()
                     if line.startswith("node-a"))
    assert judged(text) == {}


def test_diagnose_names_the_odd_node_as_node_mismatch_with_the_hosts_table(tmp_path):
    from ddp_doctor.diagnose import diagnose

    # The plugin difference, then what NCCL says when the socket node cannot reach the IB
    # ones (NVIDIA/nccl issue 1267's wording of a failed connection).
    log = tmp_path / "job.log"
    log.write_text(PLUGIN_ON_TWO_OF_THREE
                   + "node-c:2210:2277 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: "
                     "Connect to 10.0.0.1<43211> failed : Connection refused\n"
                   + "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system "
                     "error, NCCL version 2.21.5\n", encoding="utf-8")
    report = diagnose(str(log)).report
    lead = report.results[0].findings[0]
    assert (lead.code.id, lead.category.value, lead.affects) == \
        ("NOD015", "node_mismatch", ("node-c",))
    assert report.nodes is not None
    assert report.nodes["nodes"] == ["node-a", "node-b", "node-c"]
    (row, *_) = report.nodes["rows"]
    assert row["differs"] == ["node-c"] and row["values"][2] == "internal"


def test_a_single_host_log_has_no_nodes_table(tmp_path):
    from ddp_doctor.diagnose import diagnose

    log = tmp_path / "one.log"
    log.write_text(FIXTURES.joinpath("logs", "benign.log").read_text(encoding="utf-8"))
    assert diagnose(str(log)).report.nodes is None


def _fed(name: str) -> NodeLines:
    lines = NodeLines()
    for line in (FIXTURES / "logs" / name).read_text().splitlines():
        lines.feed(line)
    return lines


def test_the_real_hang_with_a_plugin_on_part_of_the_cluster_is_nod015():
    """NVIDIA/nccl#1634: the maintainer's two quoted lines, NCCL 2.2x's "Plugin Path :" form."""
    lines = _fed("nccl-1634-plugin-on-some-nodes.log")
    assert lines.hosts["HGX-H100-11"]["net_plugin"] == "internal"
    assert lines.hosts["HGX-H100-04"]["net_plugin"] == \
        "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so"
    comparison = lines.judge()
    assert comparison is not None
    assert [f.code.id for f in comparison.findings] == ["NOD015"]


def test_the_real_two_hosts_without_a_plugin_agree():
    """nccl-tests#244: the older "No plugin found (...)" then "Using internal network plugin."."""
    lines = _fed("nccl-tests-244-two-hosts-no-plugin.log")
    assert {h: n.get("net_plugin") for h, n in lines.hosts.items()} == {
        "ranokau": "internal", "lascar": "internal"}
    comparison = lines.judge()
    assert comparison is not None and comparison.findings == ()


def test_nccl_2_27_stops_the_plugin_line_after_the_file_name():
    # NVIDIA/nccl#1936's capture: "NET/Plugin: Could not find: libnccl-net.so. " and no more.
    text = PLUGIN_ON_TWO_OF_THREE.replace(
        "node-c:2210:2277 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using "
        "internal network plugin.", "node-c:2210:2277 [0] NCCL INFO NET/Plugin: Could not "
        "find: libnccl-net.so. ")
    assert "Using internal network plugin" not in text
    assert judged(text) == {"NOD015": ("node-c",)}


def test_diagnose_of_the_real_plugin_hang_is_node_mismatch():
    from ddp_doctor.diagnose import diagnose

    report = diagnose(str(FIXTURES / "logs" / "nccl-1634-plugin-on-some-nodes.log")).report
    lead = report.results[0].findings[0]
    assert (lead.code.id, lead.category.value) == ("NOD015", "node_mismatch")
    assert report.nodes is not None and report.nodes["nodes"] == ["HGX-H100-11", "HGX-H100-04"]


def test_a_peer_address_of_no_socket_family_is_nccl_differing_between_ranks():
    """NVIDIA/nccl#1267 (family 0: another NCCL on one node) and aws/aws-ofi-nccl#715
    (family 33022); family 1 (AF_UNIX) is NCCL's own bug (NVIDIA/nccl#2057), a network case."""
    from ddp_doctor.logrules import match_text

    def lead(line: str) -> tuple[str, str]:
        found = match_text(line)[0].rule.code
        return found.id, found.category.value

    assert lead("NCCL WARN ncclSocketInit: connecting to address with family 0 is neither "
                "AF_INET(2) nor AF_INET6(10)") == ("LOG077", "node_mismatch")
    assert lead("algo-1:17774:17862 [1] misc/socket.cc:717 NCCL WARN ncclSocketInit: "
                "connecting to address with family 33022 is neither AF_INET(2) nor "
                "AF_INET6(10)") == ("LOG077", "node_mismatch")
    assert lead("misc/socket.cc:537 NCCL WARN ncclSocketInit: connecting to address  with "
                "family 1 is neither AF_INET(2) nor AF_INET6(10)") == ("LOG043", "nccl_network")
