"""Host-to-GPU copy rates judged against the GPU model's published floor or its PCIe link
(smoke/verdict/copies.py), on recorded rank events: the measurement itself needs a GPU
(tests/gpu/test_gpu_smoke.py)."""

from __future__ import annotations

import json
from pathlib import Path

from ddp_doctor.facts.view import FactsView
from ddp_doctor.report.smoke import smoke_rows
from ddp_doctor.smoke.monitor import RankState
from ddp_doctor.smoke.verdict.copies import copy_rates
from tests.conftest import load_fixture_facts


def _rank(tmp_path: Path, rank: int, name: str | None, h2d: float, d2h: float) -> RankState:
    path = tmp_path / f"local{rank}.jsonl"
    events = [{"rank": rank, "kind": "info", "phase": "startup", "gpu_name": name,
               "pci_bus_id": None},
              {"rank": rank, "kind": "end", "phase": "host_copy", "h2d_gbps": h2d,
               "d2h_gbps": d2h, "bytes": 64 << 20}]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    state = RankState(rank, str(path))
    state.read_new(1.0)
    return state


def test_an_h100_below_its_published_floor_is_named_with_the_floor_and_its_source(tmp_path):
    ranks = [_rank(tmp_path, 0, "NVIDIA H100 80GB HBM3", 54.8, 55.1),
             _rank(tmp_path, 1, "NVIDIA H100 80GB HBM3", 13.2, 53.0)]
    rows, found = copy_rates(ranks, None, {0: 0, 1: 1})
    assert [r["h2d_gbps"] for r in rows] == [54.8, 13.2]
    assert rows[0]["h2d_expected"]["gbps"] == 52.0
    [finding] = found
    assert finding.code.id == "SMK030" and finding.affects == ("rank:1", "gpu:1")
    assert finding.title == ("Rank 1 (GPU 1, NVIDIA H100 80GB HBM3): host-to-device copies "
                             "at 13.2 GB/s, below the 52 GB/s expected")
    expected = {e.label: e for e in finding.evidence}["expected host-to-device"]
    assert "Azure ND H100 v5" in expected.value
    assert expected.source.endswith("conf/nd96isr_h100_v5.conf")
    assert finding.code.category.value == "performance_degraded"


def test_without_a_floor_the_pcie_link_sets_the_expectation(tmp_path):
    facts = FactsView.of(load_fixture_facts("workstation_2x_rtx3090_pcie"))
    for gpu in facts.nvml()["gpus"]:
        gpu["pcie"] = {"gen_current": 1, "gen_max": 4, "width_current": 16, "width_max": 16}
    facts.nvml()["gpus"][1]["pcie"]["width_max"] = 4  # a card in an x4 slot
    ranks = [_rank(tmp_path, 0, "NVIDIA GeForce RTX 3090", 24.6, 25.9),
             _rank(tmp_path, 1, "NVIDIA GeForce RTX 3090", 6.1, 6.3)]
    rows, found = copy_rates(ranks, facts, {0: 0, 1: 1})
    assert rows[0]["h2d_expected"]["gbps"] == round(31.504 * 0.6, 2)
    assert rows[1]["h2d_expected"]["basis"].startswith("60% of PCIe gen4 x4")
    assert found == []  # 6.1 GB/s is what an x4 gen4 link carries: the link is the news
    ranks[1] = _rank(tmp_path, 1, "NVIDIA GeForce RTX 3090", 2.0, 2.1)
    [slow] = copy_rates(ranks, facts, {0: 0, 1: 1})[1]
    assert slow.affects == ("rank:1", "gpu:1")
    assert len(slow.evidence) == 4  # both directions below, each with its expectation


def test_nothing_is_judged_without_a_floor_or_a_link(tmp_path):
    rows, found = copy_rates([_rank(tmp_path, 0, "NVIDIA GeForce RTX 3090", 1.0, 1.0)],
                             None, {})
    assert found == [] and rows[0]["h2d_expected"] is None and rows[0]["h2d_gbps"] == 1.0
    shown = dict(smoke_rows({"ok": True, "skipped": None, "host_copy": rows}))
    assert shown["Host → GPU / GPU → host"] == "rank 0: 1.0 / 1.0 GB/s"
    assert copy_rates([], None, {}) == ([], [])
