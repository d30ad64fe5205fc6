"""The facts recorded live on a healthy H200 (bench/gpu_validate.sh, 2026-11-25) replayed
through every check, and compared with that machine's own nvidia-smi output.

The first run there found two false leads that these tests keep out: HST004 warned that
checkpoints "need about 280 GiB" on a box with 64 GiB free (now an info), and the
torchvision probe wrote its CUDA version as the int 13000 (now "13.0")."""

from __future__ import annotations

from pathlib import Path

from ddp_doctor.model import Severity, Status
from ddp_doctor.textfacts import nvidia_smi_q
from tests.support.checks import load_fixture_facts, run
from tests.support.gpu_validation import parse_smi_list

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
FIXTURE = "h200_single_gpu_vm"


def test_a_healthy_h200_passes_every_check_with_one_info_at_most():
    results = run(load_fixture_facts(FIXTURE))
    findings = [(f.code.id, f.effective_severity) for r in results.values() for f in r.findings]
    assert findings == [("HST004", Severity.INFO)]
    # An info does not spoil a pass: every check passes, the disk check with its note.
    assert {r.check_id: r.status for r in results.values() if r.status is not Status.PASS} == {}
    assert results["cuda.functional"].summary.startswith("matmul ok on 1 GPU")


def test_the_facts_agree_with_the_machines_nvidia_smi():
    facts = load_fixture_facts(FIXTURE)
    listed = parse_smi_list((CAPTURES / "nvidia-smi-L-h200-live.txt").read_text())
    lines = (CAPTURES / "nvidia-smi-q-h200-live.txt").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Driver Version"))
    parsed = nvidia_smi_q.parse(lines[start:])
    assert parsed is not None
    smi_gpu = parsed.facts["nvml"]["gpus"][0]
    [nvml_gpu] = facts["nvml"]["gpus"]
    [(index, name, uuid)] = listed
    assert (nvml_gpu["index"], nvml_gpu["name"], nvml_gpu["uuid"]) == (index, name, uuid)
    assert (smi_gpu["name"], smi_gpu["uuid"]) == (name, uuid)
    assert facts["nvml"]["driver_version"] == parsed.facts["nvml"]["driver_version"]
    # NVML's bytes and nvidia-smi's MiB: the same card within a MiB.
    assert abs(nvml_gpu["memory_total"] - smi_gpu["memory_total"]) <= 2**20
    [device] = facts["torch"]["cuda"]["devices"]
    assert f"GPU-{device['uuid']}" == uuid and device["capability"] == "9.0"
    assert facts["torch"]["torchvision"]["cuda"] == "13.0"
