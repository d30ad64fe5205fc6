"""gpu.health (HWF001-HWF005) on recorded machines and variants of them, through the runner."""

from __future__ import annotations

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.facts.nvml import collect_nvml
from ddp_doctor.model import Severity, Status
from tests.conftest import load_fixture_facts
from tests.support.checks import commands, evidence, only_finding, run, variant
from tests.support.smi_captures import nvml_from_smi_q

XID_GREP = "sudo dmesg -T | grep -i xid"


@pytest.mark.parametrize("name", ["healthy_8x_v100_pcie", "workstation_2x_rtx3090_pcie",
                                  "wsl2_rtx4070"])
def test_healthy_machines_pass(name):
    result = run(load_fixture_facts(name))["gpu.health"]
    assert result.status is Status.PASS
    assert result.findings == ()
    assert "no uncorrectable ECC errors" in result.summary


def test_a100_with_a_pending_row_remap_from_the_ml_engineering_capture():
    """stas00/ml-engineering debug.md: A100-SXM4-80GB after an Xid 63, 'Pending: Yes'.
    The capture's NVML answers replace GPU 3 of the V100 server."""
    gpu = collect_nvml(nvml_from_smi_q("nvidia-smi-q-mlengineering-rowremap.txt"))["gpus"][0]
    facts = variant("healthy_8x_v100_pcie", {"nvml.gpus.3": {**gpu, "index": 3}})
    result = run(facts)["gpu.health"]
    assert result.status is Status.WARN
    finding = only_finding(result)
    assert finding.code.id == "HWF003"
    assert finding.category is Category.HARDWARE_FAULT
    assert finding.effective_severity is Severity.WARNING
    assert finding.title == ("GPU 3 (NVIDIA A100-SXM4-80GB) has memory rows waiting for a reset "
                             "to be remapped")
    assert evidence(finding) == {"remapped rows (correctable / uncorrectable error)": "1 / 0",
                                 "remap pending / failure occurred": "Yes / No"}
    assert finding.affects == ("gpu:3",)
    assert commands(finding) == [
        XID_GREP,
        "nvidia-smi --query-compute-apps=pid,process_name --format=csv -i 3",
        "sudo nvidia-smi -r -i 3",
    ]


def test_row_remapping_failure_is_an_rma_candidate():
    """Xid 64: 'Remapping Failure Occurred: Yes' on the same A100."""
    gpu = collect_nvml(nvml_from_smi_q("nvidia-smi-q-mlengineering-rowremap.txt"))["gpus"][0]
    gpu["remapped_rows"]["failure"] = True
    facts = variant("healthy_8x_v100_pcie", {"nvml.gpus.3": {**gpu, "index": 3}})
    finding = only_finding(run(facts)["gpu.health"])
    assert finding.code.id == "HWF004"
    assert finding.effective_severity is Severity.ERROR
    assert "RMA candidate" in finding.title
    assert "sudo nvidia-bug-report.sh" in commands(finding)


def test_volatile_uncorrectable_ecc_errors_are_an_error():
    """GPU 5 of the V100 server with 2 double-bit errors since the last reset (Xid 48)."""
    facts = variant("healthy_8x_v100_pcie", {
        "nvml.gpus.5.ecc": {"enabled": True, "volatile_uncorrected": 2,
                            "aggregate_uncorrected": 2}})
    result = run(facts)["gpu.health"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "HWF001"
    assert finding.title == ("GPU 5 (Tesla V100-PCIE-32GB) has 2 uncorrectable ECC errors "
                             "since the last reset")
    assert evidence(finding) == {"uncorrectable ECC errors since the last reset": "2",
                                 "uncorrectable ECC errors, lifetime": "2"}
    assert commands(finding)[:3] == [XID_GREP,
                                     "nvidia-smi --query-compute-apps=pid,process_name "
                                     "--format=csv -i 5",
                                     "sudo nvidia-smi -r -i 5"]
    assert finding.affects == ("gpu:5",)


def test_lifetime_only_uncorrectable_errors_warn():
    facts = variant("healthy_8x_v100_pcie", {
        "nvml.gpus.1.ecc": {"enabled": True, "volatile_uncorrected": 0,
                            "aggregate_uncorrected": 1}})
    finding = only_finding(run(facts)["gpu.health"])
    assert finding.code.id == "HWF001"
    assert finding.effective_severity is Severity.WARNING
    assert "recorded 1 uncorrectable ECC error in its lifetime" in finding.title


def test_v100_pages_pending_retirement():
    """The bsyonline V100 ('Retired Pages / Pending Page Blacklist') with Yes instead of No."""
    facts = variant("healthy_8x_v100_pcie", {"nvml.gpus.1.retired_pages_pending": True})
    finding = only_finding(run(facts)["gpu.health"])
    assert finding.code.id == "HWF002"
    assert finding.effective_severity is Severity.WARNING
    assert evidence(finding) == {"Pending Page Blacklist": "Yes"}
    assert "sudo nvidia-smi -r -i 1" in commands(finding)


@pytest.mark.parametrize(("error", "error_type"), [
    ("GPU is lost", "NVMLError_GpuIsLost"),  # Xid 79
    ("Unknown Error", "NVMLError_Unknown"),  # pdbear/syno_nvidia_gpu_driver#22
])
def test_gpu_without_a_handle_is_reported_lost(error, error_type):
    facts = variant("healthy_8x_v100_pcie", {
        "nvml.gpus.3": {"index": 3, "error": error, "error_type": error_type}})
    result = run(facts)["gpu.health"]
    finding = only_finding(result)
    assert finding.code.id == "HWF005"
    assert finding.title == f"GPU 3 does not answer the driver: {error}"
    assert evidence(finding) == {"NVML": f"{error_type}: {error}"}
    assert commands(finding) == [XID_GREP, "sudo reboot", "sudo nvidia-bug-report.sh"]
    # The other seven GPUs still pass through the driver check.
    assert run(facts)["driver.present"].status is Status.PASS


def test_several_faults_on_several_gpus_are_all_reported():
    facts = variant("healthy_8x_v100_pcie", {
        "nvml.gpus.0.retired_pages_pending": True,
        "nvml.gpus.6.ecc": {"enabled": True, "volatile_uncorrected": 1,
                            "aggregate_uncorrected": None}})
    findings = run(facts)["gpu.health"].findings
    assert [(f.code.id, f.affects) for f in findings] == [("HWF002", ("gpu:0",)),
                                                          ("HWF001", ("gpu:6",))]
    assert evidence(findings[1])["uncorrectable ECC errors, lifetime"] == "unknown"
