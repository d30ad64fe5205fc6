"""A smoke run that wanted GPUs and trained on the CPU is never called ready.

--device auto falls back to the CPU (gloo) when torch sees no usable GPU, as before, but the
run reports SMK017 (GPU training not proven, and why), the verdict says "passed on CPU only",
--strict fails it, and the JSON report states what the run proved. --device cpu asked for the
CPU: no warning.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from rich.console import Console

from ddp_doctor.checklist import load_catalogue
from ddp_doctor.model import Report
from ddp_doctor.report.console import render_console
from ddp_doctor.runner import build_report
from ddp_doctor.smoke.device import cpu_fallback_reason
from ddp_doctor.smoke.launch import SmokeOptions
from ddp_doctor.smoke.plan import plan_smoke, with_check_causes
from ddp_doctor.smoke.result import proved
from ddp_doctor.smoke.run import run_smoke
from tests.conftest import load_fixture_facts
from tests.support.cli import invoke

CUDA_BUILD = {"torch": "2.5.1+cu124", "cuda_build": "12.4", "cuda": False, "gpus": 0}


def test_a_cpu_only_wheel_is_named():
    reason = cpu_fallback_reason({"torch": "2.13.0+cpu", "cuda_build": None}, {})
    assert reason == "torch 2.13.0+cpu is a CPU-only build: it carries no CUDA runtime"


@pytest.mark.parametrize("value", ["", "-1"])
def test_cuda_visible_devices_hiding_every_gpu_is_named(value):
    reason = cpu_fallback_reason(CUDA_BUILD, {"CUDA_VISIBLE_DEVICES": value})
    assert reason == f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU from the job"


def test_a_missing_driver_is_named(monkeypatch):
    monkeypatch.setattr("ddp_doctor.smoke.device.os.path.exists", lambda path: False)
    reason = cpu_fallback_reason(CUDA_BUILD, {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert reason.startswith("no NVIDIA driver is loaded (/proc/driver/nvidia/version, ")
    assert reason.endswith("so torch 2.5.1+cu124 (CUDA 12.4) finds no GPU")


def test_a_driver_that_torch_cannot_use_is_named(monkeypatch):
    monkeypatch.setattr("ddp_doctor.smoke.device.os.path.exists",
                        lambda path: path == "/dev/nvidiactl")
    reason = cpu_fallback_reason(CUDA_BUILD, {})
    assert reason == ("torch 2.5.1+cu124 (CUDA 12.4) sees no usable CUDA device: "
                      "torch.cuda.is_available() is False although a driver is loaded")


def _data(device: str, ok: bool = True) -> dict:
    return {"ok": ok, "skipped": None, "device": device,
            "backend": "nccl" if device == "cuda" else "gloo", "launcher": "torchrun",
            "ranks": 2}


@pytest.mark.parametrize(("asked", "ran", "amp", "expected"), [
    ("auto", "cpu", True, {"gpu_training": False, "cpu_fallback": True,
                           "mixed_precision": False}),
    ("cpu", "cpu", True, {"gpu_training": False, "cpu_fallback": False,
                          "mixed_precision": False}),
    ("auto", "cuda", True, {"gpu_training": True, "cpu_fallback": False,
                            "mixed_precision": True}),
    ("cuda", "cuda", False, {"gpu_training": True, "cpu_fallback": False,
                             "mixed_precision": False}),
])
def test_what_a_run_proved(asked, ran, amp, expected):
    got = proved(_data(ran), SmokeOptions(device=asked, amp=amp))
    assert {k: got[k] for k in expected} == expected
    assert (got["device"], got["world_size"], got["launcher"]) == (ran, 2, "torchrun")
    assert got["backend"] == ("nccl" if ran == "cuda" else "gloo")


def _fallback_report(cpu_fallback: bool) -> Report:
    report = build_report(load_catalogue(), load_fixture_facts("healthy_8x_v100_pcie"))
    data = {**_data("cpu"), "proved": proved(_data("cpu"),
                                             SmokeOptions(device="auto" if cpu_fallback
                                                          else "cpu"))}
    return replace(report, smoke=data)


def test_the_verdict_names_what_was_proven():
    fallback = _fallback_report(cpu_fallback=True)
    assert (fallback.exit_code(), fallback.verdict()) == (0, "passed on CPU only")
    assert (fallback.exit_code(strict=True), fallback.verdict(strict=True)) == \
        (1, "problems found")
    asked = _fallback_report(cpu_fallback=False)
    assert (asked.exit_code(), asked.verdict()) == (0, "ready")
    out = io.StringIO()
    render_console(fallback, Console(file=out, width=80, color_system=None))
    assert "Passed on CPU only; GPU training not proven (exit code 0)" in out.getvalue()
    assert "Ready for training" not in out.getvalue()


def test_doctor_without_usable_gpus_asks_for_auto_so_the_fallback_is_reported():
    facts = load_fixture_facts("sandbox_cpu_container")
    report = build_report(load_catalogue(), facts)
    planned = plan_smoke(report, facts.get("torch"), {}, SmokeOptions())
    assert not isinstance(planned, str) and planned.device == "auto"


def test_doctor_names_the_check_findings_that_explain_the_fallback():
    facts = load_fixture_facts("sandbox_cpu_container")
    report = build_report(load_catalogue(), facts)
    result = run_smoke_stub()
    [finding] = with_check_causes(result, report)
    assert finding.evidence[-1].label == "the checks found"
    assert "DRV001" in finding.evidence[-1].value


def run_smoke_stub():
    from ddp_doctor.model import Evidence, Finding
    from ddp_doctor.smoke.codes import GPU_NOT_PROVEN

    return [Finding(GPU_NOT_PROVEN, "GPU training not proven",
                    (Evidence("why no GPU", "CPU-only build"),))]


# Real runs: 12 steps (enough for the loss to be judged) under a deadline a loaded machine
# cannot reach (the product's 180 s default ran out at a load of 11 on two cores).
REAL = ("--steps", "12", "--imgsz", "64", "--timeout", "600")


@pytest.mark.slow
@pytest.mark.spawns
def test_auto_on_this_cpu_machine_trains_but_is_not_ready(monkeypatch):
    from ddp_doctor.smoke import device

    asked = []
    ask = device._ask_torch
    monkeypatch.setattr(device, "_ask_torch", lambda options: asked.append(1) or ask(options))
    result = run_smoke(SmokeOptions(device="auto", steps=12, imgsz=64, timeout=600))
    assert len(asked) == 1  # the device choice and SMK017's reason share one torch probe
    codes = [f.code.id for f in result.findings]
    assert result.ok, codes
    assert codes[0] == "SMK017"
    evidence = {e.label: e.value for e in result.findings[0].evidence}
    assert evidence["ran on"] == "the CPU with gloo, 2 ranks"
    assert "CPU-only build" in evidence["why no GPU"]  # this sandbox's torch is +cpu
    assert result.data["proved"] == {
        "gpu_training": False, "device": "cpu", "backend": "gloo", "launcher": "torchrun",
        "world_size": 2, "mixed_precision": False, "cpu_fallback": True,
        "nccl_across_gpus": False, "gpus_shared": None}
    assert result.check_result().status.value == "warn"


@pytest.mark.slow
@pytest.mark.spawns
def test_an_explicit_cpu_run_has_no_warning_and_is_ready(tmp_path):
    """One DataParallel run, two reports: the JSON's verdict and the Markdown's table."""
    report_path = tmp_path / "smoke.json"
    result = invoke("smoke", "--device", "cpu", "--mode", "dp", *REAL, "--json",
                    str(report_path), "--markdown", "-")
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["verdict"] == "ready"
    assert "SMK017" not in [f["code"] for f in report["findings"]]
    assert report["smoke"]["proved"]["cpu_fallback"] is False
    assert "## Smoke training" in result.stdout
    assert ("| Ranks | 1 (1 on this node), cpu, one process (DataParallel needs more than one "
            "GPU) |") in result.stdout
    assert "Parameters across ranks" not in result.stdout  # one replica: nothing to compare
