"""The NVML probe's link, clock-event and temperature queries, on the FakeNVML of real
``nvidia-smi -q`` captures (the V100 server, the WSL2 laptop), with one value changed where
a GPU must be on a narrowed link or slowed down; and reading a GPU's PCI address."""

from __future__ import annotations

import pytest

from ddp_doctor.facts.nvml import clock_event_reasons, collect_nvml, collect_pcie
from ddp_doctor.facts.snapshot import FactRecord, Facts
from ddp_doctor.facts.view import FactsView, pci_key
from tests.support.smi_captures import nvml_from_smi_q

V100_Q = "nvidia-smi-q-bsyonline-v100.txt"


def test_a_narrowed_link_and_an_active_slowdown_are_read_as_nvml_reports_them():
    nvml = nvml_from_smi_q(V100_Q)
    gpu = nvml.gpus[0].values
    gpu[("PCI", "GPU Link Info", "Link Width", "Current")] = "8x"
    gpu[("Clocks Throttle Reasons", "Idle")] = "Not Active"
    gpu[("Clocks Throttle Reasons", "HW Slowdown")] = "Active"
    gpu[("Clocks Throttle Reasons", "HW Thermal Slowdown")] = "Active"
    read = collect_nvml(nvml)["gpus"][0]
    assert read["pcie"] == {"gen_current": 3, "gen_max": 3, "width_current": 8,
                            "width_max": 16, "replay_counter": 0}
    assert read["clock_event_reasons"] == 0x8 | 0x40


def test_older_bindings_answer_through_the_throttle_reasons_query():
    """nvidia-ml-py before R535 names the query ...ClocksThrottleReasons."""
    nvml = nvml_from_smi_q(V100_Q)

    class Old:
        def __getattr__(self, name: str):
            if name == "nvmlDeviceGetCurrentClocksEventReasons":
                raise AttributeError(name)
            if name == "nvmlDeviceGetCurrentClocksThrottleReasons":
                return nvml.nvmlDeviceGetCurrentClocksEventReasons
            return getattr(nvml, name)

    nvml.nvmlInit()
    assert clock_event_reasons(Old(), nvml.gpus[0]) == 0x1


def test_a_gpu_without_link_queries_has_no_link_not_a_link_of_nones():
    """The H800 fragment holds no "GPU Link Info": every query is unsupported."""
    nvml = nvml_from_smi_q("nvidia-smi-q-dcgm-120-h800-fabric.txt")
    nvml.nvmlInit()
    assert collect_pcie(nvml, nvml.gpus[0]) is None
    assert clock_event_reasons(nvml, nvml.gpus[0]) is None


@pytest.mark.parametrize(("text", "key"), [
    ("00000000:3B:00.0", (0, 0x3B, 0)),  # NVML
    ("0000:3b:00", (0, 0x3B, 0)),  # the kernel log's Xid line
    ("0000:05:00.0", (0, 5, 0)),  # an SXid line
    ("0001:c4:1f.0", (1, 0xC4, 0x1F)),
    ("", None), (None, None), ("3b:00.0", None), ("zz:zz:zz", None),
])
def test_pci_addresses_in_every_spelling(text, key):
    assert pci_key(text) == key


def test_the_view_finds_gpus_by_bus_and_by_uuid():
    gpus = [{"index": 0, "pci_bus_id": "00000000:1B:00.0", "uuid": "GPU-aa"},
            {"index": 1, "pci_bus_id": "00000000:1C:00.0", "uuid": "GPU-bb"}]
    facts = Facts()
    facts.add(FactRecord("nvml", ok=True, value={"initialized": True, "gpus": gpus}))
    facts.add(FactRecord("kernel_log", ok=True, value={"readable": True, "events": [
        {"kind": "Xid", "xid": 79, "pci_bus_id": "0000:1c:00"},
        {"kind": "SXid", "xid": 22010, "pci_bus_id": "0000:1c:00.0"}]}))
    view = FactsView(facts)
    assert view.gpu_by_bus("0000:1b:00")["index"] == 0
    assert view.gpu_by_bus("0000:99:00") is None
    assert view.gpu_by_uuid("bb")["index"] == 1  # torch prints UUIDs without "GPU-"
    assert view.gpu_by_uuid("GPU-BB")["index"] == 1
    assert view.gpu_by_uuid(None) is None
    # An SXid's address is an NVSwitch's, never a GPU's, even if the numbers agree.
    assert [(e["xid"], g["index"] if g else None) for e, g in view.xid_events()] == [
        (79, 1), (22010, None)]
