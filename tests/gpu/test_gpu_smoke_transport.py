"""The smoke job on real GPUs: NCCL's transport read from its own output, the compute/sync
split timed with CUDA events, and a slowed rank named. CPU counterparts:
tests/smoke/test_smoke_transport.py."""

from __future__ import annotations

import pytest

from ddp_doctor.smoke.launch import SmokeOptions
from ddp_doctor.smoke.run import run_smoke


def _run(tmp_path, monkeypatch, fault: str | None = None):
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS"):
        monkeypatch.delenv(name, raising=False)
    if fault:
        monkeypatch.setenv("DDP_DOCTOR_SMOKE_FAULT", fault)
    else:
        monkeypatch.delenv("DDP_DOCTOR_SMOKE_FAULT", raising=False)
    return run_smoke(SmokeOptions(device="cuda", nproc=2, steps=20, imgsz=128, timeout=170,
                                  run_dir=str(tmp_path / "run")))


@pytest.mark.gpus(2)
def test_the_transport_between_two_gpus_is_read_from_nccls_files(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch)
    assert result.ok, result.findings
    nccl = result.data["nccl"]
    assert nccl["debug"].startswith("ddp-doctor") and nccl["files"]
    assert {(p["from"], p["to"]) for p in nccl["pairs"]} == {(0, 1), (1, 0)}
    assert all(p["transports"] and not p["cross_node"] for p in nccl["pairs"])
    assert set(nccl["gpus"]) == {"0", "1"}
    # NCCL's INFO lines went to the files, not to the ranks' console output.
    for rank in (0, 1):
        stderr = (tmp_path / "run" / f"rank{rank}.stderr").read_text(errors="replace")
        assert "NCCL INFO" not in stderr
    split = result.data["compute_split"]
    assert set(split) == {"0", "1"} and all(v["compute_s"] > 0 for v in split.values())


@pytest.mark.gpus(2)
def test_a_slowed_rank_is_named_on_gpus(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch, "slow:1:200")
    assert [f.code.id for f in result.findings] == ["SMK028"]
    split = result.data["compute_split"]
    assert split["1"]["compute_s"] - split["0"]["compute_s"] == pytest.approx(0.2, abs=0.08)
    assert split["0"]["sync_s"] > 0.12
