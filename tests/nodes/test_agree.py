"""``nodes.agree``: which differences between nodes are errors, warnings, info or nothing."""

from __future__ import annotations

import copy

import pytest

from ddp_doctor.model import Severity
from ddp_doctor.nodes import NodeSummary, compare_nodes
from ddp_doctor.nodes.agree import pip_command

NODE: NodeSummary = {
    "host": "n0", "python": "3.11.7", "torch": "2.5.1+cu124", "torch_cuda": "12.4",
    "nccl": "2.21.5", "driver": "550.54.15", "cuda_driver": "12.4", "gpu_count": 8,
    "gpu_models": ["NVIDIA H100 80GB HBM3"] * 8, "env": {"NCCL_IB_HCA": "mlx5"},
    "interfaces": ["eth0", "ib0", "lo"], "ib_active": ["mlx5_0:1"],
    "packages": {"torchvision": "0.20.1+cu124", "numpy": "1.26.4"},
    "kernel": "5.15.0-126-generic", "shm_bytes": 64 << 30,
}


def nodes(n: int = 2) -> list[NodeSummary]:
    return [dict(copy.deepcopy(NODE), host=f"n{i}") for i in range(n)]  # type: ignore[misc]


def judged(summaries: list[NodeSummary]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """code -> (severity, the nodes it names)."""
    names = [s.get("host", f"#{i}") for i, s in enumerate(summaries)]
    found = compare_nodes(names, summaries).findings
    return {f.code.id: (f.effective_severity.value, f.affects) for f in found}


def test_identical_nodes_agree() -> None:
    comparison = compare_nodes(["n0", "n1"], nodes())
    assert comparison.rows == () and comparison.findings == ()


@pytest.mark.parametrize("field, value, code, severity", [
    ("nccl", "2.18.3", "NOD001", "error"),
    ("torch", "2.4.0+cu124", "NOD002", "error"),
    ("gpu_count", 4, "NOD004", "error"),
    ("driver", "535.183.01", "NOD006", "warning"),
    ("gpu_models", ["NVIDIA A100-SXM4-80GB"] * 8, "NOD007", "warning"),
    ("python", "3.10.12", "NOD008", "warning"),
    ("shm_bytes", 64 << 20, "NOD010", "warning"),
    ("ib_active", [], "NOD013", "warning"),
    ("kernel", "6.8.0-45-generic", "NOD011", "info"),
])
def test_each_field_that_matters_is_judged_at_its_severity(field, value, code, severity):
    pair = nodes()
    pair[1][field] = value  # type: ignore[literal-required]
    assert judged(pair) == {code: (severity, ("n1",))}


@pytest.mark.parametrize("field, value", [
    ("nccl", "2.21.6"),  # a patch release: same major.minor
    ("driver", "550.127.05"),  # same branch
    ("python", "3.11.9"),  # same minor
    ("cuda_driver", "12.6"),  # what the driver supports is not compared
    ("host", "other"),
])
def test_differences_that_do_not_matter_are_silent(field, value):
    pair = nodes()
    pair[1][field] = value  # type: ignore[literal-required]
    assert judged(pair) == {}


def test_a_cuda_major_change_is_its_own_error_beside_the_torch_build():
    pair = nodes()
    pair[1].update(torch="2.5.1+cu118", torch_cuda="11.8")
    assert judged(pair) == {"NOD002": ("error", ("n1",)), "NOD003": ("error", ("n1",))}
    pair[1].update(torch="2.5.1+cpu", torch_cuda=None)
    row = next(r for r in compare_nodes(["n0", "n1"], pair).rows if r.code.id == "NOD003")
    assert row.values == ("CUDA 12.4", "CPU build")


def test_a_variable_set_on_one_node_only_is_a_warning_naming_the_variable():
    pair = nodes()
    pair[1]["env"]["NCCL_P2P_DISABLE"] = "1"
    comparison = compare_nodes(["n0", "n1"], pair)
    (finding,) = comparison.findings
    assert finding.code.id == "NOD005" and "NCCL_P2P_DISABLE" in finding.title
    assert [(e.label, e.value, e.source) for e in finding.evidence] == [
        ("NCCL_P2P_DISABLE on n0", "(unset)", ""), ("NCCL_P2P_DISABLE on n1", "1", "differs")]
    assert finding.remediation[-1].command == "unset NCCL_P2P_DISABLE"


def test_a_missing_value_is_unknown_never_a_difference():
    pair = nodes()
    del pair[1]["nccl"]
    del pair[1]["packages"]
    assert judged(pair) == {}


def test_with_many_nodes_the_majority_is_the_baseline_and_the_odd_one_is_named():
    five = nodes(5)
    five[3]["nccl"] = "2.18.3"
    comparison = compare_nodes([s["host"] for s in five], five)
    (row,) = comparison.rows
    assert row.baseline == "2.21.5" and row.odd == (3,)
    (finding,) = comparison.findings
    assert finding.affects == ("n3",)
    assert finding.title.endswith("n3 differs from the others")


def test_two_nodes_tie_goes_to_the_baseline_the_first_input():
    pair = nodes()
    pair[0]["nccl"] = "2.18.3"
    (row,) = compare_nodes(["good", "bad"], pair).rows
    assert row.baseline == "2.18.3" and row.odd == (1,)


def test_with_32_nodes_the_evidence_names_the_odd_nodes_and_the_others_at_once():
    many = nodes(32)
    many[7]["gpu_count"] = 4
    (finding,) = compare_nodes([s["host"] for s in many], many).findings
    assert [(e.label, e.value) for e in finding.evidence] == [
        ("GPUs per node on n7", "4"), ("GPUs per node on 31 other nodes", "8")]


def test_socket_ifname_naming_an_interface_one_node_lacks_is_an_error():
    pair = nodes()
    for node in pair:
        node["env"]["NCCL_SOCKET_IFNAME"] = "ens5"
    pair[0]["interfaces"] = ["ens5", "lo"]
    pair[1]["interfaces"] = ["eth0", "lo"]
    assert judged(pair) == {"NOD012": ("error", ("n1",))}
    pair[1]["interfaces"] = ["ens5f0", "lo"]  # NCCL matches by prefix
    assert judged(pair) == {}
    for node in pair:
        node["env"]["NCCL_SOCKET_IFNAME"] = "=ens5"  # '=' asks for the exact name
    assert judged(pair) == {"NOD012": ("error", ("n1",))}
    for node in pair:
        node["env"]["NCCL_SOCKET_IFNAME"] = "^docker,lo"  # an exclusion list: nothing to match
    assert judged(pair) == {}


def test_findings_come_errors_first():
    pair = nodes()
    pair[1].update(kernel="6.8.0", python="3.12.1", nccl="2.18.1")
    severities = [r.code.severity for r in compare_nodes(["a", "b"], pair).rows]
    assert severities == [Severity.ERROR, Severity.WARNING, Severity.INFO]


def test_the_install_command_follows_the_wheels_local_tag():
    assert pip_command("2.5.1+cu124") == \
        "pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124"
    assert pip_command("2.13.0+cpu").endswith("/whl/cpu")
    assert pip_command("2.5.1") == "pip install torch==2.5.1"


def test_nccl_differing_under_one_torch_points_at_the_nccl_wheel_not_torch():
    pair = nodes()
    pair[1]["nccl"] = "2.18.3"
    (finding,) = compare_nodes(["a", "b"], pair).findings
    assert finding.remediation[-1].command == "pip install nvidia-nccl-cu12==2.21.5"
    pair[1]["torch"] = "2.4.0+cu124"
    found = {f.code.id: f for f in compare_nodes(["a", "b"], pair).findings}
    assert found["NOD001"].remediation[-1].command == \
        "pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124"


def test_per_node_paths_are_not_a_settings_difference():
    """The smoke job sets each node's Flight Recorder dump path under its own run directory
    (and NCCL's debug file likewise): paths that differ on every node by nature, which made
    every two-node smoke run report NOD005."""
    from ddp_doctor.nodes.summary import relevant_env

    def node(run_dir: str) -> dict[str, str]:
        trace = f"{run_dir}/nccl_trace_rank_"
        return relevant_env({"TORCH_FR_DUMP_TEMP_FILE": trace,
                             "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": trace,
                             "NCCL_DEBUG_FILE": f"{run_dir}/nccl.%h.%p.log",
                             "NCCL_IB_HCA": "mlx5_0"})

    node0, node1 = node("/tmp/ddp-doctor-smoke-a"), node("/tmp/ddp-doctor-smoke-b")
    assert node0 == node1 == {"NCCL_IB_HCA": "mlx5_0"}
