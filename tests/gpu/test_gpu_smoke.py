"""`ddp-doctor smoke` on real GPUs, through the real CLI: NCCL and AMP on one GPU with its
figures, `--mode dp` and `--sync-bn` as the README and --help describe them. CPU
counterparts: tests/smoke/test_smoke_cli.py, test_smoke_run.py, test_smoke_options.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.gpu.conftest import GPUS
from tests.support import gpu_validation as gv

pytestmark = [pytest.mark.spawns, pytest.mark.slow]


def smoke(*args: str, env: dict[str, str] | None = None) -> tuple[Any, dict[str, Any]]:
    """`ddp-doctor smoke ARGS --json -`: the process and its JSON report."""
    proc = gv.run_doctor("smoke", *args, "--json", "-", env=env, timeout=600)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def why(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["code"], f["title"]) for f in report["findings"]]


def test_one_gpu_trains_with_nccl_and_amp_and_reports_its_figures(record_property):
    proc, report = smoke("--device", "cuda", "--nproc", "1", "--steps", "20")
    data = report["smoke"]
    assert proc.returncode == 0 and data["ok"] is True, why(report)
    assert (data["device"], data["backend"], data["launcher"]) == ("cuda", "nccl", "torchrun")
    assert data["ranks"] == 1 and data["steps_done"] == 20
    assert data["proved"]["gpu_training"] is True
    assert data["proved"]["mixed_precision"] is True and data["proved"]["cpu_fallback"] is False
    assert data["all_reduce_ok"] is True and data["params_in_sync"] is True
    figures = gv.load_summary_module().smoke_figures(report)
    print(f"\nsmoke on 1 GPU: {json.dumps(figures)}")
    record_property("smoke_figures", json.dumps(figures))
    assert figures["images_per_s"] > 0 and figures["median_step_s"] > 0
    assert figures["peak_gpu_mem_bytes"] > 0  # torch.cuda.max_memory_allocated of the rank
    # One rank: the all-reduce moves no data between GPUs, so its bus bandwidth is 0 by
    # nccl-tests' definition (2(n-1)/n), while the algorithm bandwidth is measured.
    assert figures["allreduce_algbw_gbps"] > 0 and figures["allreduce_busbw_gbps"] == 0
    assert data["measurements"]["allreduce_note"].startswith("1 rank: nothing crosses a link")


@pytest.mark.gpus(2)
def test_every_gpu_trains_and_the_bus_bandwidth_is_measured():
    proc, report = smoke("--device", "cuda", "--steps", "12")
    data = report["smoke"]
    assert proc.returncode == 0 and data["ok"] is True, why(report)
    assert data["ranks"] == GPUS
    figures = gv.load_summary_module().smoke_figures(report)
    print(f"\nsmoke on {GPUS} GPUs: {json.dumps(figures)}")
    assert figures["allreduce_busbw_gbps"] > 0 and figures["images_per_s"] > 0
    peaks = [r["peak_gpu_mem_bytes"] for r in data["measurements"]["per_rank"]]
    assert len(peaks) == GPUS and all(p > 0 for p in peaks)


@pytest.mark.gpus_exactly(1)
def test_scaling_on_one_gpu_runs_once_and_says_why_it_measured_no_scaling():
    """First H200 run: --scaling ran the 1-rank job twice and printed 'speedup 1.36× on 1
    ranks, efficiency 136%' (noise between two equal runs)."""
    proc, report = smoke("--device", "cuda", "--scaling", "--steps", "12")
    data = report["smoke"]
    assert proc.returncode == 0 and data["ok"] is True, why(report)
    assert data["ranks"] == 1 and data["scaling"]["efficiency"] is None
    assert data["scaling"]["not_measured"] == ("only 1 rank can run on cuda here; scaling "
                                               "needs 2 or more")
    assert proc.stderr.count("launched rank 0") == 1  # one run, not a 1-rank pair


def test_mode_dp_runs_data_parallel_in_one_process_without_a_launcher():
    """README: "`dp` runs `nn.DataParallel` in one process for comparison"."""
    proc, report = smoke("--device", "cuda", "--mode", "dp", "--steps", "12")
    data = report["smoke"]
    assert proc.returncode == 0 and data["ok"] is True, why(report)
    assert (data["mode"], data["backend"], data["launcher"]) == ("dp", None, "none")
    assert data["ranks"] == 1 and len(data["per_rank"]) == 1
    assert "torch.distributed.run" not in data["command"]
    # One replica: nothing to compare between ranks, so no verdict on parameter sync.
    assert data["params_in_sync"] is None
    assert data["measurements"]["images_per_s_total"] > 0


def test_sync_bn_trains_with_syncbatchnorm_under_ddp():
    proc, report = smoke("--device", "cuda", "--nproc", "1", "--sync-bn", "--steps", "12")
    data = report["smoke"]
    assert proc.returncode == 0 and data["ok"] is True, why(report)
    assert "--sync-bn" in data["command"] and data["backend"] == "nccl"


def test_sync_bn_with_mode_dp_is_refused_as_documented():
    """--help: "Convert BatchNorm to SyncBatchNorm (CUDA and --mode ddp only)"."""
    proc = gv.run_doctor("smoke", "--device", "cuda", "--mode", "dp", "--sync-bn",
                         timeout=300)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("ddp-doctor: error: --sync-bn needs --mode ddp")


# -- the multi-GPU paths read as a cluster runs them (issue 28) ---------------------------

def _events(run_dir: str, local: int) -> list[dict[str, Any]]:
    from pathlib import Path

    path = Path(run_dir) / f"local{local}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.gpus(2)
def test_sync_bn_syncs_across_two_processes_and_says_slow_ranks_are_not_judged():
    """One process never syncs SyncBatchNorm; two do (an all-gather in every forward)."""
    proc, report = smoke("--device", "cuda", "--nproc", "2", "--sync-bn", "--steps", "12")
    data = report["smoke"]
    assert proc.returncode == 0 and data["ok"] is True, why(report)
    assert data["ranks"] == 2 and data["params_in_sync"] is True
    assert data["compute_split_note"].startswith("slow ranks not judged")


def test_the_spawn_launcher_trains_on_the_gpu():
    proc, report = smoke("--device", "cuda", "--nproc", "1", "--launcher", "spawn",
                         "--steps", "12")
    data = report["smoke"]
    assert proc.returncode == 0 and data["ok"] is True, why(report)
    assert data["launcher"] == "spawn" and "--spawn 1" in data["command"]


def test_peak_memory_is_the_training_peak_not_the_bandwidth_buffer(tmp_path):
    """Before, the 64 MiB all-reduce buffer was the peak every run reported."""
    from ddp_doctor.smoke.launch import SmokeOptions
    from ddp_doctor.smoke.run import run_smoke

    result = run_smoke(SmokeOptions(device="cuda", nproc=1, steps=12, run_dir=str(tmp_path)))
    assert result.ok, [(f.code.id, f.title) for f in result.findings]
    ends = {e["phase"]: e for e in _events(str(tmp_path), 0) if e.get("kind") == "end"}
    buffer_peak = ends["all_reduce_bandwidth"]["peak_mem_bytes"]
    train_peak = ends["train"]["peak_mem_bytes"]
    assert buffer_peak >= 64 << 20
    assert 0 < train_peak < buffer_peak, (train_peak, buffer_peak)


@pytest.mark.gpus(2)
def test_a_narrowed_cuda_visible_devices_trains_on_the_gpus_it_names(tmp_path, monkeypatch):
    """CUDA_VISIBLE_DEVICES=1: one rank, on physical GPU 1 (its PCI address says so)."""
    import subprocess

    from ddp_doctor.smoke.launch import SmokeOptions
    from ddp_doctor.smoke.run import run_smoke

    listed = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id",
                             "--format=csv,noheader"], capture_output=True, text=True,
                            check=True, timeout=60).stdout
    physical = {int(i): b.strip().upper() for i, b in
                (line.split(",") for line in listed.strip().splitlines())}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    result = run_smoke(SmokeOptions(device="cuda", steps=12, run_dir=str(tmp_path)))
    assert result.ok and result.data["ranks"] == 1, [f.title for f in result.findings]
    startup = next(e for e in _events(str(tmp_path), 0) if e.get("phase") == "startup")
    assert startup["pci_bus_id"][-7:] == physical[1][-7:]


@pytest.mark.gpus(2)
def test_ultralytics_trains_every_gpu_and_every_rank_marks_itself():
    """Before: ranks_started was 0 on every multi-GPU run (callbacks never reached the
    ranks of Ultralytics' generated DDP script)."""
    pytest.importorskip("ultralytics")
    proc, report = smoke("--trainer", "ultralytics", "--device", "cuda", "--timeout", "600")
    data = report["smoke"]
    assert proc.returncode == 0 and data["ok"] is True, why(report)
    assert data["ultralytics"]["ranks_started"] == data["ranks"] == GPUS


# -- two ranks sharing one GPU over gloo (issue 27: the multi-rank CUDA paths) -----------

def _shared(*args: str, env: dict[str, str] | None = None) -> tuple[Any, dict[str, Any]]:
    return smoke("--device", "cuda", "--nproc", "2", "--backend", "gloo", "--steps", "12",
                 *args, env=env)


@pytest.mark.gpus_exactly(1)
def test_two_ranks_share_the_gpu_over_gloo_with_amp_and_say_nccl_was_not_proven():
    proc, report = _shared()
    data = report["smoke"]
    assert proc.returncode == 0 and data["ok"] is True, why(report)
    assert (data["ranks"], data["backend"], data["gpus_shared"]) == (2, "gloo", 1)
    assert data["proved"]["gpu_training"] is True and data["proved"]["mixed_precision"]
    assert data["proved"]["nccl_across_gpus"] is False
    assert data["params_in_sync"] is True and data["all_reduce_ok"] is True
    per_rank = data["measurements"]["per_rank"]
    assert all(r["peak_gpu_mem_bytes"] > 0 and r["h2d_gbps"] > 0 for r in per_rank)
    assert report["checks"][-1]["summary"].startswith("2 ranks on 1 shared GPU (gloo)")
    print(f"\nshared GPU, gloo: {json.dumps(data['measurements'])}")


@pytest.mark.gpus_exactly(1)
def test_sync_bn_over_gloo_on_one_gpu_trains_or_says_why():
    proc, report = _shared("--sync-bn")
    data = report["smoke"]
    assert proc.returncode == 0 and data["ok"] is True, why(report)
    assert data["compute_split_note"].startswith("slow ranks not judged")


@pytest.mark.gpus_exactly(1)
def test_the_slow_rank_split_names_the_slowed_rank_on_a_shared_gpu():
    import os

    _, report = _shared("--steps", "16", env={**os.environ,
                                                 "DDP_DOCTOR_SMOKE_FAULT": "slow:1:150"})
    slow = [f for f in report["findings"] if f["code"] == "SMK028"]
    assert [f["affects"][0] for f in slow] == ["rank:1"], why(report)


@pytest.mark.gpus_exactly(1)
def test_a_planted_hang_on_a_shared_gpu_is_stopped_and_names_the_rank():
    import os

    proc, report = _shared("--stall-timeout", "15", "--timeout", "90",
                           env={**os.environ, "DDP_DOCTOR_SMOKE_FAULT": "hang:1:3"})
    assert proc.returncode == 1 and report["smoke"]["stopped_by"] == "stall", why(report)
    assert any("rank:1" in f["affects"] for f in report["findings"]), why(report)


def test_host_copies_are_measured_and_judged_against_the_gpus_floor():
    proc, report = smoke("--device", "cuda", "--nproc", "1", "--steps", "12")
    data = report["smoke"]
    assert proc.returncode == 0, why(report)
    [copies] = data["host_copy"]
    assert copies["h2d_gbps"] > 1 and copies["d2h_gbps"] > 1
    print(f"\nhost copies on {copies['gpu_name']}: {json.dumps(copies)}")
