"""``diagnose`` on pasted health and multi-node output (issue 23, point 4): NCCL's transport
lines host by host, nccl-tests' results, and nvidia-smi -q's temperature limit.

The fixtures are real pastes (tests/fixtures/pasted/SOURCES.md, tests/fixtures/captures/).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.diagnose import diagnose
from ddp_doctor.model import Severity
from ddp_doctor.textfacts import facts_from_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PASTED = FIXTURES / "pasted"
CAPTURES = FIXTURES / "captures"


def _codes(path: Path) -> list[str]:
    return [f.code.id for f in diagnose(str(path)).report.results[0].findings]


def test_sockets_next_to_a_listed_hca_is_a_slow_transport(tmp_path: Path) -> None:
    # NVIDIA/nccl#451's lines with NCCL's failure to open the HCA told as INFO: sockets
    # chosen beside a listed mlx5_bond_0, and no error that explains them.
    text = (PASTED / "nccl-451-ib-unable-socket.txt").read_text(encoding="utf-8")
    path = tmp_path / "nccl.log"
    path.write_text("\n".join(line.replace(" WARN ", " INFO ") for line in text.splitlines()
                              if "ibv_open_device" not in line) + "\n", encoding="utf-8")
    findings = diagnose(str(path)).report.results[0].findings
    found = next(f for f in findings if f.code.id == "DIAG020")
    assert found.code.category.value == "performance_degraded"
    assert any("mlx5_bond_0" in e.value for e in found.evidence)


def test_the_ib_failure_explains_the_socket_fallback_it_leaves() -> None:
    # NVIDIA/nccl#451: NCCL could not open mlx5_bond_0 in the container (NCCL WARN NET/IB,
    # LOG044) and so chose sockets: one cause, the fallback quoted as its consequence.
    findings = diagnose(str(PASTED / "nccl-451-ib-unable-socket.txt")).report.results[0].findings
    assert [f.code.id for f in findings if f.code.id in ("LOG044", "DIAG020")] == ["LOG044"]
    assert any(e.label == "consequence, DIAG020" for e in findings[0].evidence)


def test_sockets_without_any_hca_are_not_judged_slow() -> None:
    # NVIDIA/nccl#1637: a workstation with no InfiniBand device; sockets are all there is.
    assert "DIAG020" not in _codes(PASTED / "nccl-debug-nccl-1637-2x5090.txt")


def test_gpu_direct_rdma_disabled_leads_with_the_missing_module() -> None:
    # NVIDIA/nccl#1537: "Using network IB", then GDR disabled for both HCAs.
    result = diagnose(str(PASTED / "nccl-1537-gdr-disabled.txt")).report.results[0]
    lead = result.findings[0]
    assert lead.code.id == "DIAG021" and lead.effective_severity is Severity.WARNING
    assert "hostname1" in lead.title
    assert any(e.value == "mlx5_0, mlx5_1" for e in lead.evidence)


def test_an_nccl_tests_table_is_read_row_by_row() -> None:
    # NVIDIA/nccl-tests#287: one size, in-place #wrong "N/A", "Out of bounds values : 0 OK".
    (run,) = diagnose(str(PASTED / "nccl-tests-287-alltoall-5090.txt")).scan.nodes.nccl_runs
    assert run["ranks"] == [{"host": "GENOA-01", "model": "NVIDIA GeForce RTX 5090"}]
    assert run["rows"] == [{"bytes": 33554432, "type": "float", "busbw_oop": 0.0,
                            "wrong_oop": 0.0, "busbw_ip": 0.0, "wrong_ip": None}]
    assert run["out_of_bounds"] == 0 and run["failed"] is False
    codes = _codes(PASTED / "nccl-tests-287-alltoall-5090.txt")
    assert not {"DIAG022", "DIAG023", "DIAG024"} & set(codes)


def test_an_nccl_tests_run_that_failed_validation_is_wrong_data() -> None:
    # NVIDIA/nccl-tests#7: the 2018 format, "Out of bounds values : 248 FAILED".
    result = diagnose(str(PASTED / "nccl-tests-7-out-of-bounds.txt")).report.results[0]
    lead = result.findings[0]
    assert lead.code.id == "DIAG022" and lead.effective_severity is Severity.ERROR
    assert any(e.value == "248 FAILED" for e in lead.evidence)


@pytest.mark.parametrize("name", ["nvidia-smi-q-bsyonline-v100.txt",
                                  "nvidia-smi-q-h200-live.txt"])
def test_the_max_operating_temperature_is_read_and_a_cool_gpu_passes(name: str) -> None:
    parsed = facts_from_text((CAPTURES / name).read_text())
    assert parsed is not None
    gpus = parsed.facts.get("nvml")["gpus"]
    # The V100 (R470) prints absolute limits, the H200 (R580) T.Limit margins.
    assert all(g.get("temperature_margin") for g in gpus), gpus
    assert all(g["temperature_margin"] > 0 for g in gpus)
    assert "HWF013" not in _codes(CAPTURES / name)


# -- NCCL's sockets on a virtual interface ------------------------------------------------------

LIBAI = "".join(f"m5-autorl-test01:47324:48509 [0] NCCL INFO {msg}\n" for msg in (
    "Bootstrap : Using bond0:172.27.231.79<0>",
    "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
    "NET/Socket : Using [0]bond0:172.27.231.79<0> "
    "[1]veth8739016:fe80::5804:edff:fe5b:6570%veth8739016<0>",
    "Using network Socket"))
# Oneflow-Inc/libai#415 (the studied half of split L): fixed by NCCL_SOCKET_IFNAME=bond0


def test_a_veth_beside_the_real_nic_is_an_interface_the_peers_cannot_reach(
        tmp_path: Path) -> None:
    # a second host's lines make it a multi-node job, where sockets carry the data
    path = tmp_path / "nccl.log"
    path.write_text(LIBAI + "m5-autorl-test02:1:2 [0] NCCL INFO Bootstrap: Using "
                    "bond0:172.27.231.80<0>\n", encoding="utf-8")
    lead = diagnose(str(path)).report.results[0].findings[0]
    assert (lead.code.id, lead.code.category.value) == ("DIAG026", "nccl_network")
    assert lead.effective_severity is Severity.WARNING
    assert "veth8739016" in lead.title
    assert any("NCCL_SOCKET_IFNAME=bond0" in (s.command or "") for s in lead.remediation)


def test_from_one_hosts_lines_it_is_context_that_leaves_the_stated_slowness_leading(
        tmp_path: Path) -> None:
    path = tmp_path / "nccl.log"
    path.write_text(LIBAI + "The training is very slow, GPU utilization is low\n",
                    encoding="utf-8")
    findings = diagnose(str(path)).report.results[0].findings
    virtual = next(f for f in findings if f.code.id == "DIAG026")
    assert virtual.effective_severity is Severity.INFO
    assert findings[0].code.id == "DIAG150"


def test_nccl_2_27s_bootstrap_line_on_a_veth_is_read(tmp_path: Path) -> None:
    path = tmp_path / "nccl.log"
    path.write_text("h1:1:1 [0] NCCL INFO Bootstrap: Using veth12ab:fe80::1%veth12ab<0>\n"
                    "h2:1:1 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>\n",
                    encoding="utf-8")
    assert _codes(path)[0] == "DIAG026"


@pytest.mark.parametrize("lines", [
    "h:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>",
    "h:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
    # a host whose only interface is docker0 runs alone; NCCL names it last on purpose
    "h:1:2 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>",
])
def test_real_interfaces_or_a_lone_host_are_not_judged(tmp_path: Path, lines: str) -> None:
    path = tmp_path / "nccl.log"
    path.write_text(lines + "\n", encoding="utf-8")
    assert "DIAG026" not in _codes(path)


def test_an_error_in_the_log_leads_before_the_interface_warning(tmp_path: Path) -> None:
    path = tmp_path / "nccl.log"
    path.write_text(LIBAI + "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
                    encoding="utf-8")
    codes = _codes(path)
    assert codes[0] == "LOG005" and "DIAG026" in codes[1:]
