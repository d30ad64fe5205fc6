"""gpu.throttle's HWF013: a GPU at its maximum operating temperature ("GPU Max Operating
Temp" in nvidia-smi -q, NVML_TEMPERATURE_THRESHOLD_GPU_MAX), read as a margin below it."""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.model import Severity
from tests.support.checks import evidence, only_finding, run, variant

V100 = "healthy_8x_v100_pcie"


def test_a_gpu_with_no_margin_left_is_at_its_max_operating_temperature() -> None:
    facts = variant(V100, {"nvml.gpus.3.temperature": 83,
                           "nvml.gpus.3.temperature_max_operating": 83,
                           "nvml.gpus.3.temperature_margin": 0})
    finding = only_finding(run(facts)["gpu.throttle"])
    assert (finding.code.id, finding.category) == ("HWF013", Category.PERFORMANCE_DEGRADED)
    assert finding.effective_severity is Severity.WARNING
    assert finding.affects == ("gpu:3",)
    assert evidence(finding)["temperature (current / max operating)"] == "83 C / 83 C"


def test_a_t_limit_margin_alone_is_judged_too() -> None:
    # R580 drivers print only T.Limit figures: the margin, no absolute limit.
    facts = variant(V100, {"nvml.gpus.5.temperature_margin": -2})
    finding = only_finding(run(facts)["gpu.throttle"])
    assert finding.code.id == "HWF013"
    assert "-2 C left below the limit" in finding.title


def test_a_gpu_below_its_limit_is_not_reported() -> None:
    facts = variant(V100, {"nvml.gpus.3.temperature": 82,
                           "nvml.gpus.3.temperature_max_operating": 83,
                           "nvml.gpus.3.temperature_margin": 1})
    assert not [f for f in run(facts)["gpu.throttle"].findings if f.code.id == "HWF013"]


def test_heat_and_the_thermal_slowdown_it_causes_on_one_gpu_are_one_finding() -> None:
    # Issue 23: HWF012 and HWF013 on the same GPU are one cause, the heat; the slowdown
    # reason is quoted as its consequence.
    facts = variant(V100, {"nvml.gpus.3.temperature": 83,
                           "nvml.gpus.3.temperature_max_operating": 83,
                           "nvml.gpus.3.temperature_margin": 0,
                           "nvml.gpus.3.clock_event_reasons": 0x40})
    finding = only_finding(run(facts)["gpu.throttle"])
    assert finding.code.id == "HWF013" and finding.affects == ("gpu:3",)
    assert any(label.startswith("consequence, HWF012: HW Thermal Slowdown")
               for label in evidence(finding))


def test_a_power_brake_on_a_hot_gpu_stays_a_cause_of_its_own() -> None:
    facts = variant(V100, {"nvml.gpus.3.temperature_margin": 0,
                           "nvml.gpus.3.clock_event_reasons": 0x80 | 0x8})
    codes = sorted(f.code.id for f in run(facts)["gpu.throttle"].findings)
    assert codes == ["HWF012", "HWF013"]


def test_heat_on_one_gpu_does_not_absorb_another_gpus_slowdown() -> None:
    facts = variant(V100, {"nvml.gpus.3.temperature_margin": 0,
                           "nvml.gpus.5.clock_event_reasons": 0x40})
    found = {(f.code.id, f.affects) for f in run(facts)["gpu.throttle"].findings}
    assert found == {("HWF013", ("gpu:3",)), ("HWF012", ("gpu:5",))}
