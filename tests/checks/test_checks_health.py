"""gpu.xid, gpu.pcie_link, gpu.throttle (HWF006-HWF012) and nccl.p2p_data (NCC011, NCC012).

The machine is the recorded 8x V100 PCIe server (tests/fixtures/facts); each test changes
what it is about, through the real probe code where there is one:
- its kernel log: ``probe_kernel_log`` on a FakeEnv holding a kernel-log fixture
  (tests/fixtures/kernel_log, real driver messages);
- NVML's link, clock-event reasons and temperature: ``collect_nvml`` on the FakeNVML of the
  server's own ``nvidia-smi -q`` capture (GPU 1, Gen3 x16, idle at 29 C), with one value
  changed where a test needs a narrowed link or a slowdown;
- the torch probe's under-load readings and P2P data test: recorded results in the probe's
  shapes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.facts.kernel_log import probe_kernel_log
from ddp_doctor.facts.nvml import collect_nvml
from ddp_doctor.facts.seam import CommandResult
from ddp_doctor.facts.snapshot import FactRecord, Facts
from ddp_doctor.logrules import code_of_line
from ddp_doctor.model import Severity, Status
from ddp_doctor.textfacts import facts_from_text
from tests.support.checks import commands, evidence, only_finding, run, variant
from tests.support.fakes import FakeEnv
from tests.support.smi_captures import capture, nvml_from_smi_q

LOGS = Path(__file__).parents[1] / "fixtures" / "kernel_log"
JOURNAL = ("journalctl", "-k", "-b", "--no-pager", "-o", "short-iso")
V100 = "healthy_8x_v100_pcie"
V100_Q = "nvidia-smi-q-bsyonline-v100.txt"
# The PCI addresses of the kernel-log fixture's Xid lines, given to GPUs 0-3.
XID_BUSES = ["00000000:01:00.0", "00000000:10:1C.0", "00000000:00:16.0", "00000000:2A:00.0"]


def kernel_log_fact(name: str | None, **env: Any) -> dict[str, Any]:
    commands_ = [] if name is None else [(JOURNAL, CommandResult(
        JOURNAL, 0, (LOGS / name).read_text(encoding="utf-8"), ""))]
    return dict(probe_kernel_log(FakeEnv(commands=[*commands_, *env.pop("extra", [])], **env),
                                 log_code_of=code_of_line))


def with_kernel_log(facts: Facts, value: dict[str, Any]) -> Facts:
    facts = copy.deepcopy(facts)
    facts.records["kernel_log"] = FactRecord("kernel_log", ok=True, value=value)
    return facts


def xid_machine(log: str = "kernel-log-journal-xid.txt") -> Facts:
    facts = variant(V100, {f"nvml.gpus.{i}.pci_bus_id": bus for i, bus in enumerate(XID_BUSES)})
    return with_kernel_log(facts, kernel_log_fact(log))


def idle_v100() -> dict[str, Any]:
    """GPU 1 of the server as NVML answered it, from its `nvidia-smi -q` capture."""
    gpu: dict[str, Any] = collect_nvml(nvml_from_smi_q(V100_Q))["gpus"][0]
    return gpu


def v100_with(**changes: Any) -> Facts:
    """The server with every GPU's link, clocks and temperature those of the capture, then
    ``changes`` ("3.pcie.width_current": 8, ...) applied."""
    gpu = idle_v100()
    sets: dict[str, Any] = {}
    for i in range(8):
        for key in ("pcie", "clock_event_reasons", "temperature", "temperature_slowdown"):
            sets[f"nvml.gpus.{i}.{key}"] = gpu[key]
        sets[f"nvml.gpus.{i}.uuid"] = f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd"
    for path, value in changes.items():
        sets[f"nvml.gpus.{path}"] = value
    return variant(V100, sets)


def loaded(facts: Facts, readings: list[dict[str, Any]]) -> Facts:
    facts = copy.deepcopy(facts)
    facts.records["torch"].value["cuda"]["under_load"] = readings
    return facts


def reading(index: int, gen: int | None = 3, width: int = 16, reasons: int | None = 0,
            temperature: int = 64) -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
            "pcie": {"gen_current": gen, "gen_max": 3, "width_current": width, "width_max": 16,
                     "replay_counter": 0},
            "clock_event_reasons": reasons, "temperature": temperature, "error": None}


# ---------------------------------------------------------------- gpu.xid


def test_xid_events_are_reported_per_gpu_with_the_catalogues_meaning_and_action():
    result = run(xid_machine())["gpu.xid"]
    assert result.status is Status.FAIL
    got = [(f.code.id, f.effective_severity, f.affects, f.title) for f in result.findings]
    assert got == [
        ("HWF006", Severity.ERROR, ("gpu:0",),
         "GPU 0 (Tesla V100-PCIE-32GB) at PCI 0000:01:00 logged Xid 94 (Contained ECC error) "
         "x1, Xid 95 (Uncontained ECC error) x1 this boot"),
        ("HWF007", Severity.WARNING, ("gpu:0",),
         "GPU 0 (Tesla V100-PCIE-32GB) at PCI 0000:01:00 logged Xid 43 (GPU stopped "
         "processing) x1 this boot"),
        # A row remap waiting for a reset: the GPU still works, so a warning.
        ("HWF006", Severity.WARNING, ("gpu:1",),
         "GPU 1 (Tesla V100-PCIE-32GB) at PCI 0000:10:1c logged Xid 63 (ECC page retirement "
         "or row-remapping recorded) x1 this boot"),
        ("HWF006", Severity.ERROR, ("gpu:2",),
         "GPU 2 (Tesla V100-PCIE-32GB) at PCI 0000:00:16 logged Xid 119 (GSP firmware "
         "timeout) x1 this boot"),
        ("HWF006", Severity.ERROR, ("gpu:3",),
         "GPU 3 (Tesla V100-PCIE-32GB) at PCI 0000:2a:00 logged Xid 79 (GPU has fallen off "
         "the bus) x2 this boot"),
    ]
    remap = result.findings[2]
    assert evidence(remap)["GPU"] == "index 1, UUID GPU-06e3d8e6-3f54-374a-8142-9752ca1f2316"
    fallen = result.findings[-1]
    assert fallen.category is Category.HARDWARE_FAULT
    assert evidence(fallen) == {
        "Xid 79: GPU has fallen off the bus: the driver can no longer reach it over PCIe":
            "2 events this boot, first at 2025-03-14T17:02:44+0000, last at "
            "2025-03-14T17:02:44+0000; last: pid='<unknown>', name=<unknown>, GPU has fallen "
            "off the bus",
        "GPU": "index 3, UUID unknown",  # the table-only GPUs of the recording have none
        "what `ddp-doctor diagnose` makes of these lines": "LOG017",
    }
    assert fallen.remediation[0].text.startswith("Xid 79: Drain the node and reboot")
    assert fallen.remediation[0].url == "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
    assert "nvidia-smi -q -i 3 -d ECC,ROW_REMAPPER,PAGE_RETIREMENT" in commands(fallen)


def test_an_xid_of_a_gpu_nvml_no_longer_lists_is_still_reported():
    """The recorded server's own bus ids: none is 0000:2a:00, the GPU that fell off."""
    facts = with_kernel_log(load_v100(), kernel_log_fact("kernel-log-dmesg-sxid.txt"))
    titles = [f.title for f in run(facts)["gpu.xid"].findings if f.code.id == "HWF006"]
    assert titles == ["the GPU at PCI 0000:2a:00 (not listed by NVML now) logged Xid 79 (GPU "
                      "has fallen off the bus) x1 this boot"]


def test_a_real_h100_servers_gsp_timeouts_name_the_gpu_and_the_reset():
    """A real ``dmesg -T`` of an 8-GPU server: five Xid 119 on the GPU at 0000:9b:00."""
    facts = variant("healthy_8x_h100_nvlink", {"nvml.gpus.4.pci_bus_id": "00000000:9B:00.0"})
    result = run(with_kernel_log(facts, kernel_log_fact("real-dmesg-T-xid119-gsp-timeout.txt")))
    found = result["gpu.xid"].findings
    assert [(f.code.id, f.effective_severity, f.affects) for f in found] == [
        ("HWF006", Severity.ERROR, ("gpu:4",))]
    assert "logged Xid 119 (GSP firmware timeout) x5 this boot" in found[0].title
    assert "first at Sun Feb 23 16:24:18 2025, last at Sun Feb 23 16:30:13 2025" in \
        next(iter(evidence(found[0]).values()))


def test_a_gpu_lost_without_an_xid_line_is_a_hardware_fault():
    facts = with_kernel_log(load_v100(),
                            kernel_log_fact("real-dmesg-fallen-off-bus-without-xid.txt"))
    found = run(facts)["gpu.xid"].findings
    assert [(f.code.id, f.category, f.effective_severity) for f in found] == [
        ("HWF006", Category.HARDWARE_FAULT, Severity.ERROR)]
    assert "0000:b3:00" in found[0].title and "Xid 79 (GPU has fallen off the bus)" in \
        found[0].title


def test_a_channel_torn_down_by_an_nvlink_error_is_blamed_on_the_link():
    """A real GB200-class log: Xid 45 (a program-level cleanup) on four GPUs, each "caused by
    previous Xid 145/149" (NVLink5): hardware findings that carry the NVLink action."""
    facts = with_kernel_log(load_v100(),
                            kernel_log_fact("real-journal-xid45-caused-by-nvlink5.txt"))
    found = run(facts)["gpu.xid"].findings
    assert [(f.code.id, f.effective_severity) for f in found] == [
        ("HWF006", Severity.ERROR)] * 4
    by_bus = {f.title.split("PCI ")[1].split(" ")[0]: f for f in found}
    assert sorted(by_bus) == ["0000:97:00", "0000:ba:00", "0000:dc:00", "0000:ed:00"]
    assert "Xid 45 (Preemptive cleanup, after Xid 149) x2" in by_bus["0000:dc:00"].title
    assert "Xid 45 (Preemptive cleanup, after Xid 145) x2" in by_bus["0000:ed:00"].title
    steps = [step.text for step in by_bus["0000:ed:00"].remediation]
    assert steps[0].startswith("Xid 45: Read the Xid logged just before it")
    assert steps[1].startswith("Xid 145: Read the link counters (nvidia-smi nvlink -e)")


def test_an_nvlink5_xid_that_says_nonfatal_is_a_warning_and_fatal_an_error():
    facts = with_kernel_log(load_v100(),
                            kernel_log_fact("real-xid144-149-nvlink5-fatality.txt"))
    found = {f.title.split("PCI ")[1].split(" ")[0]: f for f in run(facts)["gpu.xid"].findings}
    assert found["0000:01:00"].effective_severity is Severity.WARNING  # 144 ... Nonfatal
    assert found["0000:00:00"].effective_severity is Severity.ERROR  # 149 ... Fatal x2
    assert "Xid 149 (NVLink error (fifth-generation NVLink)) x2" in found["0000:00:00"].title


def test_a_real_three_line_sxid_is_one_nvswitch_event():
    facts = with_kernel_log(load_v100(),
                            kernel_log_fact("real-dmesg-sxid-20034-three-lines.txt"))
    (sxid,) = [f for f in run(facts)["gpu.xid"].findings if f.code.id == "HWF008"]
    assert sxid.title == "The NVSwitch at PCI 0000:a9:00.0 logged SXid 20034 x1 this boot"
    assert evidence(sxid)["SXid 20034"].endswith("last: Fatal, Link 30 LTSSM Fault Up")


def test_nvswitch_sxid_events_are_their_own_finding():
    facts = with_kernel_log(load_v100(), kernel_log_fact("kernel-log-dmesg-sxid.txt"))
    sxid = [f for f in run(facts)["gpu.xid"].findings if f.code.id == "HWF008"]
    assert len(sxid) == 1
    assert sxid[0].title == "The NVSwitch at PCI 0000:05:00.0 logged SXid 22010 x1 this boot"
    assert evidence(sxid[0]) == {"SXid 22010": "1 event, at Fri Mar 14 10:31:07 2025; last: "
                                                "Fatal, Link 04 MINION Watchdog timer ran out "
                                                "(First)"}
    assert sxid[0].category is Category.HARDWARE_FAULT


def test_a_healthy_kernel_log_passes_and_says_where_it_was_read():
    result = run(xid_machine("kernel-log-journal-healthy.txt"))["gpu.xid"]
    assert result.status is Status.PASS and result.findings == ()
    assert result.summary == ("read with journalctl -k -b --no-pager -o short-iso: no Xid or "
                              "SXid errors this boot")


def test_an_unreadable_log_is_an_info_finding_with_the_host_command_never_a_silent_pass():
    value = kernel_log_fact(None, files={"/proc/sys/kernel/dmesg_restrict": "1"}, extra=[
        (JOURNAL, CommandResult(JOURNAL, 0, "-- No entries --\n", "")),
        (("dmesg",), CommandResult(("dmesg",), 1, "", "dmesg: read kernel buffer failed: "
                                   "Operation not permitted\n"))])
    result = run(with_kernel_log(load_v100(), value))["gpu.xid"]
    finding = only_finding(result)
    assert finding.code.id == "HWF009"
    assert finding.effective_severity is Severity.INFO
    assert finding.title == ("The kernel log could not be read (kernel.dmesg_restrict=1 lets "
                             "only root read the kernel log): GPU Xid errors were not checked")
    assert commands(finding) == ["sudo journalctl -k -b --no-pager | grep -E 'S?Xid'",
                                 "sudo dmesg -T | grep -E 'S?Xid'"]
    assert len(finding.evidence) == 3  # each command tried, with its reason


def test_in_a_container_the_unreadable_log_says_so():
    value = {"readable": False, "source": None, "attempts": ["journalctl: not found"],
             "dmesg_restrict": None, "events": [], "events_dropped": 0}
    facts = variant("container_64mb_shm")
    facts.records["kernel_log"] = FactRecord("kernel_log", ok=True, value=value)
    finding = only_finding(run(facts)["gpu.xid"])
    assert "this runs in a container" in finding.title
    assert "On the host" in finding.remediation[0].text


def test_without_the_fact_the_check_is_skipped_not_passed():
    result = run(load_v100())["gpu.xid"]
    assert result.status is Status.SKIP


# ---------------------------------------------------------------- gpu.pcie_link


def test_the_captured_server_at_idle_passes_and_says_the_generation_was_not_judged():
    result = run(v100_with())["gpu.pcie_link"]
    assert result.status is Status.PASS and result.findings == ()
    assert result.summary == ("8 GPUs, links up to Gen3 x16; width judged at idle, generation "
                              "not judged (it drops at idle, and the interpreter probe did not "
                              "read NVML under load)")


def test_a_narrowed_link_is_a_warning_naming_the_gpu():
    result = run(v100_with(**{"5.pcie.width_current": 8}))["gpu.pcie_link"]
    finding = only_finding(result)
    assert (finding.code.id, finding.category) == ("HWF010", Category.PERFORMANCE_DEGRADED)
    assert finding.effective_severity is Severity.WARNING
    assert finding.title == "GPU 5 (Tesla V100-PCIE-32GB): PCIe link x8, where x16 is possible"
    assert evidence(finding)["link width (current / max)"] == "x8 / x16"
    assert finding.affects == ("gpu:5",)


@pytest.mark.parametrize("model", ["NVIDIA GeForce RTX 3050", "NVIDIA GeForce RTX 4060 Ti",
                                   "NVIDIA GeForce RTX 5060"])
def test_a_card_built_with_eight_lanes_at_x8_is_not_narrowed(model):
    """NVML's maximum width is the chip's: a real RTX 3050 under load reports x8 of x16 at
    PCIe Gen4, which is how the board is wired (knowledge/links.py board_lanes)."""
    result = run(v100_with(**{"5.name": model, "5.pcie.width_current": 8}))["gpu.pcie_link"]
    assert not result.findings


def test_an_eight_lane_card_below_x8_and_other_gpus_at_x8_are_still_narrowed():
    x4 = only_finding(run(v100_with(**{"5.name": "NVIDIA GeForce RTX 4060",
                                       "5.pcie.width_current": 4}))["gpu.pcie_link"])
    assert x4.title == "GPU 5 (NVIDIA GeForce RTX 4060): PCIe link x4, where x8 is possible"
    laptop = only_finding(run(v100_with(**{"5.name": "NVIDIA GeForce RTX 4060 Laptop GPU",
                                           "5.pcie.width_current": 8}))["gpu.pcie_link"])
    assert laptop.code.id == "HWF010"  # laptop designs vary: not assumed to be x8


def test_an_idle_link_at_gen1_is_normal():
    """Idle GPUs drop to Gen1 to save power: the NVML probe's generation is never judged."""
    facts = v100_with(**{f"{i}.pcie.gen_current": 1 for i in range(8)})
    assert run(facts)["gpu.pcie_link"].findings == ()


def test_a_link_below_its_generation_under_load_is_a_warning():
    facts = loaded(v100_with(**{"2.pcie.gen_current": 1}),
                   [reading(i, gen=1 if i == 2 else 3) for i in range(8)])
    result = run(facts)["gpu.pcie_link"]
    finding = only_finding(result)
    assert finding.code.id == "HWF011"
    assert finding.title == "GPU 2 (Tesla V100-PCIE-32GB): PCIe Gen1 while busy, where Gen3 is "\
                            "possible"
    assert "generation judged under load on 8" in result.summary


def test_at_full_generation_under_load_there_is_no_finding():
    facts = loaded(v100_with(), [reading(i) for i in range(8)])
    result = run(facts)["gpu.pcie_link"]
    assert result.findings == () and "generation judged under load on 8" in result.summary


def test_without_pynvml_in_the_target_interpreter_the_summary_says_why():
    why = "pynvml is not importable in this interpreter (ModuleNotFoundError: No module named"\
          " 'pynvml')"
    facts = loaded(v100_with(), [{"index": i, "uuid": None, "pcie": None,
                                  "clock_event_reasons": None, "temperature": None,
                                  "error": why} for i in range(8)])
    assert why in run(facts)["gpu.pcie_link"].summary


# ---------------------------------------------------------------- gpu.throttle


def test_hw_thermal_slowdown_under_load_names_the_gpu():
    facts = loaded(v100_with(), [reading(i, reasons=0x40 | 0x4 if i == 6 else 0x4,
                                         temperature=91 if i == 6 else 70) for i in range(8)])
    finding = only_finding(run(facts)["gpu.throttle"])
    assert (finding.code.id, finding.category) == ("HWF012", Category.PERFORMANCE_DEGRADED)
    assert finding.title == "GPU 6 (Tesla V100-PCIE-32GB) is slowed down: HW Thermal Slowdown"
    assert evidence(finding) == {
        "HW Thermal Slowdown (during GPU work)": "Active: the GPU (or its memory) got too hot "
                                                 "and the hardware cut its clocks",
        "temperature": "91 C (slowdown at 87 C)"}


@pytest.mark.parametrize(("mask", "names"), [
    (0x8, "HW Slowdown"), (0x80 | 0x8, "HW Power Brake Slowdown, HW Slowdown"),
    (0x20, "SW Thermal Slowdown")])
def test_each_slowing_reason_is_a_finding(mask, names):
    finding = only_finding(run(v100_with(**{"0.clock_event_reasons": mask}))["gpu.throttle"])
    assert finding.title == f"GPU 0 (Tesla V100-PCIE-32GB) is slowed down: {names}"


@pytest.mark.parametrize("mask", [0x1, 0x2, 0x4, 0x10, 0x100, 0x1 | 0x4])
def test_idle_application_clocks_and_power_cap_are_not_findings(mask):
    result = run(v100_with(**{"0.clock_event_reasons": mask}))["gpu.throttle"]
    assert result.status is Status.PASS and result.findings == ()
    assert result.summary.startswith("8 GPUs: no heat or power slowdown (temperatures 29 C")


# ---------------------------------------------------------------- nvidia-smi -q pasted


def _narrow_and_throttled_q() -> str:
    """The server's real `nvidia-smi -q -i 1`, with the link at x8 and HW Slowdown Active."""
    text = capture(V100_Q)
    text = text.replace("                Current                   : 16x",
                        "                Current                   : 8x", 1)
    text = text.replace("        HW Slowdown                       : Not Active",
                        "        HW Slowdown                       : Active", 1)
    assert text != capture(V100_Q)
    return text


def _text_codes(text: str) -> list[str]:
    result = facts_from_text(text)
    assert result is not None
    return [f.code.id for r in run(result.facts).values() for f in r.findings]


def test_pasted_nvidia_smi_q_with_a_narrow_link_and_a_slowdown_gives_the_same_findings():
    codes = _text_codes(_narrow_and_throttled_q())
    assert "HWF010" in codes and "HWF012" in codes


def test_the_real_pasted_nvidia_smi_q_has_neither():
    codes = _text_codes(capture(V100_Q))
    assert "HWF010" not in codes and "HWF012" not in codes


def test_a_real_power_braked_v100s_pasted_reasons_are_hwf012_with_the_bmc_step():
    """A real C4130 whose iDRAC asserted the power brake (SM at 382 MHz), quoted as threads
    quote it: the reasons and clocks alone, flush left, no report around them."""
    result = facts_from_text(capture("nvidia-smi-q-l4rz-c4130-v100-power-brake.txt"))
    assert result is not None
    (gpu,) = result.facts.records["nvml"].value["gpus"]
    assert gpu["index"] == 0 and "name" not in gpu and "pci_bus_id" not in gpu
    found = [f for r in run(result.facts).values() for f in r.findings]
    (slow,) = [f for f in found if f.code.id == "HWF012"]
    assert slow.title == ("GPU 0 (unknown model) is slowed down: HW Power Brake Slowdown, "
                          "HW Slowdown")
    assert any("BMC" in step.text for step in slow.remediation)
    assert "HWF010" not in [f.code.id for f in found]  # the excerpt shows no link


def test_the_same_heading_inside_a_whole_report_does_not_split_it():
    """Only a flush-left heading starts an excerpt: a whole report keeps its GPUs' reasons."""
    text = capture(V100_Q)
    assert "    Clocks Throttle Reasons" in text or "    Clocks Event Reasons" in text
    result = facts_from_text(text)
    assert result is not None
    assert result.facts.meta["sections"] == [s for s in result.facts.meta["sections"]
                                             if "excerpt" not in s]
    assert all(g.get("name") for g in result.facts.records["nvml"].value["gpus"])


def _section(text: str, heading: str) -> list[str]:
    """One section of a whole nvidia-smi -q report, cut out as it is printed there: its
    heading and the lines indented under it, with the report's indentation kept."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == heading)
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next((i for i in range(start + 1, len(lines))
                if len(lines[i]) - len(lines[i].lstrip()) <= indent), len(lines))
    return lines[start:end]


def test_sections_of_a_real_report_pasted_alone_are_read_with_their_indentation():
    """The live H200's "Clocks Event Reasons" and "Temperature" sections, copied out of its
    report with the report's indentation and nothing around them: read as one GPU."""
    report = capture("nvidia-smi-q-h200-live.txt")
    reasons, temperature = (_section(report, "Clocks Event Reasons"),
                            _section(report, "Temperature"))
    assert reasons[0].startswith("    Clocks") and temperature[1].startswith("        GPU")
    text = "\n".join(["The GPU looks slow, here is nvidia-smi -q:", *reasons, *temperature])
    result = facts_from_text(text)
    assert result is not None and len(result.sections) == 2
    (gpu,) = result.facts.records["nvml"].value["gpus"]
    whole = facts_from_text(report)
    assert whole is not None
    (full,) = whole.facts.records["nvml"].value["gpus"]
    for key in ("clock_event_reasons", "temperature", "temperature_margin"):
        assert gpu[key] == full[key] is not None, key
    assert "name" not in gpu and "pci_bus_id" not in gpu


def test_an_indented_power_braked_excerpt_is_still_hwf012():
    text = "\n".join("    " + line
                     for line in capture("nvidia-smi-q-l4rz-c4130-v100-power-brake.txt")
                     .splitlines())
    assert "HWF012" in _text_codes(text)


def test_a_hot_temperature_section_alone_is_hwf013():
    text = ("    Temperature\n"
            "        GPU Current Temp                  : 92 C\n"
            "        GPU Shutdown Temp                 : 96 C\n"
            "        GPU Slowdown Temp                 : 93 C\n"
            "        GPU Max Operating Temp            : 87 C\n")
    assert "HWF013" in _text_codes(text)


@pytest.mark.parametrize("text", [
    "GPU Current Temp : 92 C, which seems high to me",  # one field: prose, not the report
    "    Temperature\n        GPU Current Temp : 92 C\n        Fan Speed : 100 %\n",
])
def test_a_lone_temperature_line_is_not_a_report(text):
    assert facts_from_text(text) is None


def test_a_whole_reports_own_sections_are_not_read_again_as_excerpts():
    result = facts_from_text(capture("nvidia-smi-q-h200-live.txt"))
    assert result is not None
    assert [s.kind for s in result.sections] == ["nvidia_smi_q"]


# ---------------------------------------------------------------- nccl.p2p_data


def copy_result(pairs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"bytes": 64 * 1024**2, "repeats": 5, "pairs": pairs, "not_run": [],
            "stopped": None, **extra}


def pair(src: int, dst: int, gbps: float | None = 11.8, **extra: Any) -> dict[str, Any]:
    return {"src": src, "dst": dst, "peer_access": True, "ok": True, "timed_out": False,
            "corrupt": False, "error": None, "seconds": 0.03, "gbps": gbps, **extra}


def with_copy(facts: Facts, copy_value: dict[str, Any]) -> Facts:
    facts = copy.deepcopy(facts)
    facts.records["torch"].value["cuda"]["p2p_copy"] = copy_value
    return facts


ALL_PAIRS = [(i, j) for i in range(8) for j in range(8) if i != j]


def test_healthy_pcie_copies_pass():
    """Gen3 x16 carries about 15.8 GB/s; 11.8 GB/s is a healthy V100 PCIe copy."""
    facts = with_copy(v100_with(), copy_result([pair(i, j) for i, j in ALL_PAIRS]))
    result = run(facts)["nccl.p2p_data"]
    assert result.status is Status.PASS and result.findings == ()
    assert result.summary == "56 pairs copied 64.0 MiB x5, 11.8-11.8 GB/s"


def test_a_hung_pair_is_named_with_the_p2p_advice():
    pairs = [pair(0, 1), pair(0, 2), pair(2, 5, gbps=None, ok=False, timed_out=True,
                                           error="copy hung after 15 s")]
    facts = with_copy(v100_with(), copy_result(pairs, stopped="GPU 2 -> GPU 5 hung",
                                               not_run=[[2, 6], [2, 7]]))
    finding = only_finding(run(facts)["nccl.p2p_data"])
    assert (finding.code.id, finding.category) == ("NCC011", Category.NCCL_P2P)
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "GPU 2 -> GPU 5: copy hung after 15 s"
    assert evidence(finding)["not run"] == "2 pairs after: GPU 2 -> GPU 5 hung"
    steps = commands(finding)
    assert steps[0].startswith("NCCL_P2P_DISABLE=1 ")
    assert "export NCCL_P2P_DISABLE=1" in steps
    assert "sudo lspci -vvv | grep -i acsctl" in steps
    assert any("iommu=pt" in (s or "") for s in steps)
    assert finding.affects == ("gpu:2", "gpu:5")


def test_corrupted_data_is_named():
    pairs = [pair(1, 0, ok=False, corrupt=True,
                  error="1 of 16777216 words differ after the first copy")]
    finding = only_finding(run(with_copy(v100_with(), copy_result(pairs)))["nccl.p2p_data"])
    assert finding.code.id == "NCC011"
    assert finding.title == ("GPU 1 -> GPU 0: data corrupted (1 of 16777216 words differ "
                             "after the first copy)")


def test_a_pair_far_below_its_pcie_link_is_slow():
    """2.1 GB/s over Gen3 x16 is what P2P redirected through the CPU looks like."""
    pairs = [pair(i, j, gbps=2.1 if (i, j) == (0, 4) else 11.8) for i, j in ALL_PAIRS]
    finding = only_finding(run(with_copy(v100_with(), copy_result(pairs)))["nccl.p2p_data"])
    assert (finding.code.id, finding.category) == ("NCC012", Category.PERFORMANCE_DEGRADED)
    assert finding.title == "GPU 0 -> GPU 4: 2.1 GB/s over PCIe Gen3 x16 (expected about 16 "\
                            "GB/s)"


def test_a_pair_on_nvlink_is_judged_against_nvlink():
    """On the H100 NVSwitch board (NV18) 40 GB/s is far below 450 GB/s; 380 is not."""
    facts = load_h100()
    pairs = [pair(i, j, gbps=40.0 if (i, j) == (3, 7) else 380.0) for i, j in ALL_PAIRS]
    finding = only_finding(run(with_copy(facts, copy_result(pairs)))["nccl.p2p_data"])
    assert finding.title == "GPU 3 -> GPU 7: 40.0 GB/s over NV18 (expected about 450 GB/s)"


def test_without_a_recorded_test_the_check_says_so():
    result = run(load_v100())["nccl.p2p_data"]
    assert result.findings == () and result.summary.startswith("no P2P data test recorded")


def test_with_one_gpu_there_is_nothing_to_copy_between():
    result = run(variant("wsl2_rtx4070"))["nccl.p2p_data"]
    assert result.summary == "fewer than 2 CUDA devices: no GPU pairs to copy between"


def load_v100() -> Facts:
    return variant(V100)


def load_h100() -> Facts:
    return variant("healthy_8x_h100_nvlink")
