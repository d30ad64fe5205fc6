"""The NCCL transport the smoke job used, its bandwidth against the links, and slow ranks.

The parser runs on real NCCL INFO captures (tests/fixtures/nccl/, sources in SOURCES.md);
the judgements on recorded numbers with the topologies of tests/fixtures/facts/; the
compute/sync split and the slow-rank verdict on a real 2-rank CPU (gloo) job with one rank
slowed by the worker's test hook.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema
import pytest

from ddp_doctor.facts.view import FactsView
from ddp_doctor.knowledge import bandwidth as B
from ddp_doctor.report.smoke import smoke_rows
from ddp_doctor.smoke.launch import SmokeOptions, child_env, nccl_debug_env
from ddp_doctor.smoke.monitor import RankState
from ddp_doctor.smoke.nccl_log import parse_nccl_info, transport_kind
from ddp_doctor.smoke.run import run_smoke
from ddp_doctor.smoke.verdict.performance import (
    bandwidth_findings,
    compute_split,
    expected_path,
    nccl_bus_key,
    performance,
    slow_rank_findings,
    transport_findings,
)
from tests.conftest import FIXTURES, load_fixture_facts

NCCL = FIXTURES / "nccl"
REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text(encoding="utf-8"))


def parsed(name: str):
    with open(NCCL / f"nccl-debug-{name}.txt", encoding="utf-8") as handle:
        return parse_nccl_info(handle)


def kinds(result) -> dict[tuple[int, int], dict[str, int]]:
    return {k: p.transports for k, p in sorted(result.pairs.items())}


# ---------------------------------------------------------------- the parser, real captures

def test_ib_across_nodes_and_cumem_within_a_node():
    result = parsed("nccl-1189-h20-ib")
    assert kinds(result) == {(0, 2): {"NET/IB": 1}, (1, 0): {"P2P/CUMEM": 4},
                             (1, 3): {"NET/IB": 4}, (3, 1): {"NET/IB": 4},
                             (3, 2): {"P2P/CUMEM": 1}}
    assert result.pairs[(1, 3)].cross_node and not result.pairs[(1, 0)].cross_node
    assert result.hosts == {"H20-GPU-05", "H20-GPU-06"}
    assert result.lines == 14


def test_socket_across_nodes_and_ipc_within():
    result = parsed("nccl-952-socket")
    assert kinds(result)[(15, 6)] == {"NET/Socket": 2}
    assert kinds(result)[(8, 15)] == {"P2P/IPC": 7}


def test_the_old_format_with_bus_ids_in_brackets():
    result = parsed("nccl-743-k8s-old")
    assert kinds(result) == {(0, 1): {"P2P/IPC": 4}, (1, 0): {"P2P/IPC": 2},
                             (2, 1): {"P2P/IPC": 3}, (2, 3): {"P2P/IPC": 1},
                             (3, 2): {"P2P/IPC": 2}}


def test_every_hop_through_host_memory_on_gpus_without_p2p():
    result = parsed("nccl-tests-307-shm-4090")
    assert set(result.pairs) == {(i, (i + 1) % 8) for i in range(8)}
    assert {k for p in result.pairs.values() for k in p.transports} == {"SHM"}


def test_direct_pointer_and_no_nvls_channels():
    result = parsed("nccl-892-h800-no-nvls")
    assert kinds(result) == {(4, 2): {"P2P/direct pointer": 1},
                             (7, 4): {"P2P/direct pointer": 1}}
    assert result.nvls is False
    assert result.collnet is False  # "NCCL_ALGO set by environment to ...Collnet..." is a wish


def test_nvls_offered_and_a_collnet_plugin_loaded():
    assert parsed("nccl-1453-nvls-h100").nvls is True
    sharp = parsed("nccl-1584-h100-ib-sharp")
    assert (sharp.nvls, sharp.collnet, sharp.network) == (True, True, "IBext_v8")


def test_the_comm_line_ties_a_rank_to_its_gpu():
    result = parsed("nccl-1267-gcp-socket")
    assert result.network == "Socket"
    assert result.gpus == {0: {"cuda_dev": 0, "nvml_dev": 0, "bus_id": "30",
                               "host": "instance-8g-96c-3"}}
    assert nccl_bus_key("18000") == (0, 0x18, 0) and nccl_bus_key("30") == (0, 0, 3)


@pytest.mark.parametrize(("via", "kind"), [
    ("P2P/IPC/read", "P2P/IPC"), ("P2P/CUMEM", "P2P/CUMEM"),
    ("P2P/direct pointer", "P2P/direct pointer"), ("SHM/direct/direct", "SHM"),
    ("NET/IB/3/GDRDMA", "NET/IB"), ("NET/Socket/0", "NET/Socket")])
def test_transport_kinds(via, kind):
    assert transport_kind(via) == kind


# ---------------------------------------------------------------- transport vs topology

def view(name: str) -> FactsView:
    return FactsView.of(load_fixture_facts(name))


IDENTITY = {i: i for i in range(8)}


def test_shm_between_nvlink_joined_gpus_is_named():
    found = transport_findings(parsed("nccl-tests-307-shm-4090"),
                               view("healthy_8x_h100_nvlink"), IDENTITY)
    assert [f.code.id for f in found] == ["SMK026"]
    assert "SHM" in found[0].title and "NV18" in found[0].evidence[0].value
    assert found[0].code.category.value == "performance_degraded"


def test_the_same_shm_on_pcie_gpus_is_what_they_offer():
    for name in ("healthy_8x_v100_pcie", "workstation_2x_rtx3090_pcie"):
        assert transport_findings(parsed("nccl-tests-307-shm-4090"), view(name),
                                  IDENTITY) == []


def test_p2p_between_nvlink_joined_gpus_is_healthy():
    assert transport_findings(parsed("nccl-743-k8s-old"), view("healthy_8x_h100_nvlink"),
                              IDENTITY) == []


def test_sockets_across_nodes_with_active_ib_ports_are_named():
    found = transport_findings(parsed("nccl-952-socket"), view("healthy_8x_h100_nvlink"), {})
    assert [f.code.id for f in found] == ["SMK026"]
    assert "rank 15 -> rank 6 via NET/Socket" in found[0].evidence[0].value
    assert "mlx5_0/1" in found[0].evidence[1].value


def test_sockets_without_any_ib_port_are_all_there_is():
    assert transport_findings(parsed("nccl-952-socket"),
                              view("workstation_2x_rtx3090_pcie"), {}) == []


def test_ib_across_nodes_is_healthy():
    assert transport_findings(parsed("nccl-1189-h20-ib"), view("healthy_8x_h100_nvlink"),
                              {}) == []


# ---------------------------------------------------------------- bandwidth vs the path

def with_pcie(name: str, gen: int, width: int) -> FactsView:
    """The fixture with each GPU's PCIe link filled in (these fixtures predate the field)."""
    facts = load_fixture_facts(name)
    for gpu in facts.get("nvml")["gpus"]:
        gpu["pcie"] = {"gen_current": 1, "gen_max": gen, "width_current": width,
                       "width_max": width}
    return FactsView.of(facts)


def measured(busbw: float, size: int = 64 << 20) -> dict:
    return {"allreduce_busbw_gbps": busbw, "allreduce_bytes": size}


def test_the_h100_nvlink_path():
    path = expected_path(view("healthy_8x_h100_nvlink"), list(range(8)), 1)
    assert path is not None and path.gbps == 18 * 25.0 and "NVLink x18" in path.link
    assert bandwidth_findings(measured(300.0), path) == []
    low = bandwidth_findings(measured(40.0), path)
    assert [f.code.id for f in low] == ["SMK027"]
    assert "40.0 GB/s is 9% of the 450 GB/s" in low[0].title


def test_the_v100_pcie_path_at_gen3_x16():
    path = expected_path(with_pcie("healthy_8x_v100_pcie", 3, 16), list(range(8)), 1)
    assert path is not None and path.gbps == pytest.approx(0.985 * 16)
    assert path.link == "PCIe gen3 x16"
    assert bandwidth_findings(measured(9.5), path) == []
    assert [f.code.id for f in bandwidth_findings(measured(2.0), path)] == ["SMK027"]


def test_a_link_trained_down_sets_the_lower_rate():
    facts = with_pcie("workstation_2x_rtx3090_pcie", 4, 16)
    facts.nvml()["gpus"][1]["pcie"]["width_max"] = 4
    path = expected_path(facts, [0, 1], 1)
    assert path is not None and path.link == "PCIe gen4 x4"


def test_no_judgement_without_the_link_or_on_a_small_buffer():
    assert expected_path(view("healthy_8x_v100_pcie"), list(range(8)), 1) is None
    path = expected_path(with_pcie("workstation_2x_rtx3090_pcie", 4, 16), [0, 1], 1)
    assert bandwidth_findings(measured(0.5, size=4 << 20), path) == []
    assert bandwidth_findings(measured(0.5), None) == []


def test_across_nodes_each_rank_drives_its_own_rail():
    """8 ranks on a node with 8 NDR ports: 8 x 50 GB/s. Before, one port's 50 GB/s was the
    expectation, so a node that had lost 7 of its 8 rails still passed."""
    path = expected_path(view("healthy_8x_h100_nvlink"), list(range(8)), 2)
    assert path is not None and path.gbps == 8 * 50.0 and path.link.endswith("x 8 rails")
    assert expected_path(view("healthy_8x_h100_nvlink"), [0, 1], 2).gbps == 2 * 50.0
    facts = view("healthy_8x_h100_nvlink")
    for port in facts.interconnect()["infiniband"][1:]:  # 7 of 8 ports down
        port.update(active=False, state="1: DOWN")
    lost = expected_path(facts, list(range(8)), 2)
    assert lost is not None and lost.gbps == 8 * 50.0  # what the node should carry
    one_rail = bandwidth_findings(measured(45.0), lost)
    assert [f.code.id for f in one_rail] == ["SMK027"]
    assert "45.0 GB/s is 11% of the 400 GB/s the InfiniBand 400 Gb/sec (4X NDR) x 8 rails" \
        in one_rail[0].title
    ethernet = expected_path(view("workstation_2x_rtx3090_pcie"), [0, 1], 2)
    assert ethernet is not None and ethernet.gbps == 0.125
    assert B.rate_gbps("100 Gb/sec (4X EDR)") == 12.5 and B.rate_gbps("n/a") is None


# ---------------------------------------------------------------- slow ranks

def split(*ms: float, steps: int = 11) -> dict:
    return {r: {"steps": steps, "compute_s": v / 1000, "sync_s": 0.001}
            for r, v in enumerate(ms)}


def test_a_rank_above_one_and_a_half_times_the_others_is_named_with_its_gpu_state():
    facts = load_fixture_facts("healthy_8x_h100_nvlink")
    facts.get("nvml")["gpus"][3].update(clock_event_reasons=0x40 | 0x4, temperature=91,
                                        temperature_slowdown=87)
    found = slow_rank_findings(split(100, 101, 99, 180), FactsView.of(facts), IDENTITY)
    assert [(f.code.id, f.affects) for f in found] == [("SMK028", ("rank:3", "gpu:3"))]
    values = {e.label: e.value for e in found[0].evidence}
    assert values["GPU 3 clock-event reasons"] == "SW Power Cap, HW Thermal Slowdown"
    assert values["GPU 3 temperature"] == "91 C (slows down at 87 C)"
    assert found[0].code.category.value == "performance_degraded"


def test_ranks_within_the_ratio_or_too_few_steps_are_not_named():
    assert slow_rank_findings(split(100, 101, 99, 140)) == []
    assert slow_rank_findings(split(100, 200, steps=3)) == []
    assert slow_rank_findings(split(4, 9)) == []  # 5 ms apart: scheduler noise
    assert slow_rank_findings(split(100)) == []


def _ranks_with_compute(tmp_path, *ms: float) -> list[RankState]:
    states = []
    for rank, compute in enumerate(ms):
        path = tmp_path / f"local{rank}.jsonl"
        path.write_text("".join(json.dumps(
            {"rank": rank, "kind": "step", "phase": "train", "t_start": i, "t_end": i + 1,
             "wall_start": i, "wall_end": i + 1, "step": i + 1, "loss": 1.0, "images": 2,
             "compute_s": compute / 1000, "sync_s": 0.001}) + "\n" for i in range(12)))
        state = RankState(rank, str(path))
        state.read_new(time.monotonic())
        states.append(state)
    return states


def test_with_sync_bn_no_rank_is_judged_slow_and_the_data_says_why(tmp_path):
    """SyncBatchNorm's collectives run in the forward pass, which the split counts as
    compute: a slow rank's peers wait there and look as slow, so "no slow rank" would be a
    claim the split cannot make."""
    ranks = _ranks_with_compute(tmp_path, 100, 101, 180)
    data, found = performance(ranks, {}, tmp_path, [], {}, False, None, 1)
    assert [f.code.id for f in found] == ["SMK028"] and data["compute_split_note"] is None
    data, found = performance(ranks, {}, tmp_path, [], {}, False, None, 1, sync_bn=True)
    assert found == [] and data["compute_split_note"].startswith("slow ranks not judged")
    row = dict(smoke_rows({"ok": True, "skipped": None, **data}))["Compute / sync per step"]
    assert row.endswith("(slow ranks not judged: SyncBatchNorm waits count as compute)")


def test_the_split_is_the_median_over_the_steps_after_the_first(tmp_path):
    path = tmp_path / "rank0.jsonl"
    lines = [{"rank": 0, "kind": "step", "phase": "train", "t_start": i, "t_end": i + 1,
              "wall_start": i, "wall_end": i + 1, "step": i + 1, "loss": 1.0, "images": 2,
              "compute_s": c, "sync_s": s}
             for i, (c, s) in enumerate([(9.0, 9.0), (0.1, 0.3), (0.2, 0.2), (0.3, 0.1)])]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    state = RankState(0, str(path))
    assert state.read_new(time.monotonic()) == 4
    assert compute_split([state]) == {0: {"steps": 3, "compute_s": 0.2, "sync_s": 0.2}}


# ---------------------------------------------------------------- NCCL's output: where it goes

def test_nccl_info_goes_to_per_rank_files_unless_the_user_set_nccl_debug(monkeypatch,
                                                                          tmp_path):
    ours = nccl_debug_env({}, tmp_path)
    assert ours == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV",
                    "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.log")}
    assert nccl_debug_env({"NCCL_DEBUG": "WARN"}, tmp_path) == {}
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS"):
        monkeypatch.delenv(name, raising=False)
    assert "NCCL_DEBUG" not in child_env(tmp_path, 2, None)  # gloo: nothing to log
    assert child_env(tmp_path, 2, tmp_path)["NCCL_DEBUG_FILE"] == ours["NCCL_DEBUG_FILE"]
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    theirs = child_env(tmp_path, 2, tmp_path)
    assert theirs["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG_FILE" not in theirs


def test_the_transports_are_read_from_the_run_directory_and_reported(tmp_path):
    (tmp_path / "nccl.host1.111.log").write_text(
        (NCCL / "nccl-debug-nccl-tests-307-shm-4090.txt").read_text(encoding="utf-8"))
    data, found = performance([], {}, tmp_path, [], {}, True,
                              view("healthy_8x_h100_nvlink"), 1)
    assert data["nccl"]["files"] == ["nccl.host1.111.log"]
    assert data["nccl"]["debug"].startswith("ddp-doctor")
    assert data["nccl"]["pairs"][0] == {"from": 0, "to": 1, "transports": {"SHM": 1},
                                        "cross_node": False}
    # No rank told its GPU here and NCCL's lines carry no nvmlDev: no pair to judge.
    assert found == []
    user, _ = performance([], {}, tmp_path, [], {"NCCL_DEBUG": "INFO"}, True, None, 1)
    assert user["nccl"]["debug"] == "the user's NCCL_DEBUG=INFO"
    rows = dict(smoke_rows({"ok": True, "skipped": None, "nccl": data["nccl"],
                            "compute_split": {"0": {"steps": 3, "compute_s": 0.1,
                                                    "sync_s": 0.02}}}))
    assert rows["NCCL transport (rank→rank)"].startswith("SHM: 0→1, 1→2, 2→3")
    assert rows["Compute / sync per step"] == "rank 0: 100.0 / 20.0 ms"
    smoke = {"ok": True, "skipped": None, "nccl": data["nccl"],
             "compute_split": {"0": {"steps": 3, "compute_s": 0.1, "sync_s": 0.02}}}
    smoke_schema = {**SCHEMA["$defs"]["smoke"], "$defs": SCHEMA["$defs"]}
    jsonschema.Draft202012Validator(smoke_schema).validate(smoke)


# ---------------------------------------------------------------- a real slowed rank
# (Its healthy counterpart reads the healthy run of tests/smoke/test_smoke_run.py.)

# Deadlines a loaded machine cannot reach (CI runs two pytest-xdist workers on two cores); the
# timing asserts compare each rank's medians with the other's, so a machine that slows both
# ranks alike leaves them true.
RUN = dict(device="cpu", nproc=2, steps=12, imgsz=64, timeout=240, stall_timeout=60)


@pytest.mark.slow
@pytest.mark.spawns
def test_a_rank_slowed_by_a_sleep_is_named_and_its_peer_waits(monkeypatch, tmp_path):
    monkeypatch.setenv("DDP_DOCTOR_SMOKE_FAULT", "slow:1:300")
    result = run_smoke(SmokeOptions(**RUN, run_dir=str(tmp_path / "run")))
    assert result.data["stopped_by"] is None  # before: "took under 90 s", a time
    assert [f.code.id for f in result.findings] == ["SMK028"], result.findings
    assert result.findings[0].affects == ("rank:1",)
    timing = result.data["compute_split"]
    # The 300 ms sleep is rank 1's own compute, and rank 0 spends it waiting in backward;
    # the slow rank waits for nobody, a fraction of what its peer waits.
    slower_by = timing["1"]["compute_s"] - timing["0"]["compute_s"]
    assert 0.2 < slower_by < 0.3 + timing["0"]["compute_s"], timing
    assert timing["0"]["sync_s"] > 0.2 and timing["1"]["sync_s"] < timing["0"]["sync_s"] / 2
    assert result.data["nccl"] is None  # gloo: no NCCL output to read
