"""The health probes on real GPUs: NVML read under load, the P2P data test, the kernel log,
and the checks that judge them, end to end (skipped without GPUs: see conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ddp_doctor.facts import python_probe_script as script
from ddp_doctor.facts.kernel_log import probe_kernel_log
from ddp_doctor.facts.seam import RealEnv
from ddp_doctor.logrules import code_of_line


@pytest.fixture
def quiet(monkeypatch):
    monkeypatch.setattr(script, "emit", lambda obj: None)


@pytest.mark.gpus(2)
def test_p2p_copy_between_every_pair_arrives_intact_and_is_timed(quiet):
    import torch

    indices = list(range(torch.cuda.device_count()))
    result, stuck = script.p2p_copy_test(torch, indices)
    assert stuck is False and result["stopped"] is None, result
    assert len(result["pairs"]) == len(indices) * (len(indices) - 1)
    for pair in result["pairs"]:
        assert pair["ok"] and not pair["corrupt"], pair
        assert pair["gbps"] and pair["gbps"] > 0.1, pair


@pytest.mark.gpus(1)
def test_a_single_copy_on_one_gpu_verifies_the_pattern():
    """copy_pair with src == dst: the same verification on one device."""
    import torch

    seconds, problem = script.copy_pair(torch, 0, 0, nbytes=16 * 1024**2)
    assert problem is None and seconds > 0


@pytest.mark.gpus(1)
def test_nvml_under_load_reads_the_link_and_the_clock_reasons(quiet):
    import torch

    pytest.importorskip("pynvml")
    readings, stuck = script.readings_under_load(torch, list(range(torch.cuda.device_count())))
    assert stuck is False
    for reading in readings:
        assert reading["error"] is None, reading
        link = reading["pcie"]
        assert link["gen_max"] and link["width_max"], reading
        assert 1 <= link["gen_current"] <= link["gen_max"], reading
        assert reading["clock_event_reasons"] is not None
        # Busy, so not idle: the GpuIdle bit is clear.
        assert not reading["clock_event_reasons"] & 0x1, reading


@pytest.mark.gpus(1)
def test_the_kernel_log_is_read_or_says_why():
    fact = probe_kernel_log(RealEnv(), log_code_of=code_of_line)
    if fact["readable"]:
        assert fact["source"]
    else:
        assert len(fact["attempts"]) == 3


@pytest.mark.gpus(1)
def test_check_runs_the_new_checks_end_to_end(tmp_path):
    out = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "ddp_doctor", "check", "--json", str(out)],
                   check=False, timeout=600)
    report = json.loads(out.read_text(encoding="utf-8"))
    status = {c["id"]: c["status"] for c in report["checks"]}
    for check_id in ("gpu.xid", "gpu.pcie_link", "gpu.throttle", "nccl.p2p_data"):
        assert status[check_id] != "error", (check_id, report)
