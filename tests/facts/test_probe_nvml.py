"""NVML probe: ``collect_nvml`` against real machines' answers, ``probe_nvml`` around it."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence

import pytest

from ddp_doctor.facts.nvml import (
    NVML_TIMEOUT_S,
    collect_nvml,
    decode_cuda_driver_version,
    probe_nvml,
)
from ddp_doctor.facts.seam import CommandResult, RealEnv
from tests.support.fakes import FakeEnv, ok
from tests.support.smi_captures import (
    MIB,
    NVMLError_LibraryNotFound,
    NVMLError_LibRmVersionMismatch,
    NVMLError_Unknown,
    capture,
    nvml_from_smi_q,
    nvml_from_smi_table,
    parse_smi_q,
)

NVML_ARGV = (sys.executable, "-m", "ddp_doctor.facts.nvml")

V100_Q = "nvidia-smi-q-bsyonline-v100.txt"
WSL2_4070_Q = "nvidia-smi-q-multilanguagelearning-wsl2-4070.txt"
A100_ROWREMAP_Q = "nvidia-smi-q-mlengineering-rowremap.txt"
H800_FRAGMENT_Q = "nvidia-smi-q-dcgm-120-h800-fabric.txt"

V100_GPU = {
    "index": 0,
    "name": "Tesla V100-PCIE-32GB",
    "uuid": "GPU-06e3d8e6-3f54-374a-8142-9752ca1f2316",
    "pci_bus_id": "00000000:1C:00.0",
    "memory_total": 32510 * MIB,
    "memory_used": 0,
    "compute_capability": "7.0",
    "mig_mode": None,  # "MIG Mode: Current N/A": Volta has no MIG
    "compute_mode": "Default",
    "persistence_mode": True,
    # ECC on; the 3 aggregate errors on this card are single-bit (corrected) ones.
    "ecc": {"enabled": True, "volatile_uncorrected": 0, "aggregate_uncorrected": 0},
    "retired_pages_pending": False,  # "Pending Page Blacklist: No"
    "remapped_rows": None,  # "Remapped Rows: N/A": row remapping is Ampere and newer
    "fabric": None,  # no "Fabric" section: a PCIe V100 joins no NVSwitch fabric
    "processes": [],
    # "GPU Link Info": Gen3 x16 of Gen3 x16, "Replays Since Reset: 0"
    "pcie": {"gen_current": 3, "gen_max": 3, "width_current": 16, "width_max": 16,
             "replay_counter": 0},
    "clock_event_reasons": 0x1,  # "Clocks Throttle Reasons / Idle: Active", nothing else
    "temperature": 29,  # "GPU Current Temp: 29 C"
    "temperature_slowdown": 87,  # "GPU Slowdown Temp: 87 C"
}


# ---------------------------------------------------------------- decode


@pytest.mark.parametrize(("encoded", "text"), [
    (12040, "12.4"),
    (11040, "11.4"),  # bsyonline V100 server, driver 470
    (12070, "12.7"),  # WSL2 RTX 4070, driver 566.36
    (13020, "13.2"),  # club-3090 RTX 5090, driver 595
    (10010, "10.1"),
    (0, None),
    (None, None),
])
def test_decode_cuda_driver_version(encoded, text):
    assert decode_cuda_driver_version(encoded) == text


# ---------------------------------------------------------------- collect_nvml on captures


def test_v100_server_one_gpu_from_smi_q():
    nvml = nvml_from_smi_q(V100_Q)
    facts = collect_nvml(nvml)
    assert facts == {
        "initialized": True,
        "error": None,
        "driver_version": "470.129.06",
        "cuda_driver_version": "11.4",
        "nvml_version": None,  # `nvidia-smi -q` does not print it: the fake says Not Supported
        "gpus": [V100_GPU],
        # one GPU: no pair to describe (nvml_topology; tested in test_probe_nvml_topology)
        "topology": {"link": [[None]], "pcie": [[None]], "nvlinks": [[None]],
                     "numa_affinity": [None], "error": None},
    }
    assert nvml.queries[0] == "nvmlInit"
    assert nvml.shutdown_calls == 1


def test_old_bindings_returning_bytes_are_decoded():
    facts = collect_nvml(nvml_from_smi_q(V100_Q, as_bytes=True))
    assert facts["driver_version"] == "470.129.06"
    gpu = facts["gpus"][0]
    assert gpu["name"] == "Tesla V100-PCIE-32GB"
    assert gpu["uuid"] == "GPU-06e3d8e6-3f54-374a-8142-9752ca1f2316"
    assert gpu["pci_bus_id"] == "00000000:1C:00.0"
    json.dumps(facts)  # no bytes left anywhere


def test_wsl2_laptop_4070_without_ecc():
    facts = collect_nvml(nvml_from_smi_q(WSL2_4070_Q))
    assert facts["driver_version"] == "566.36"  # the Windows driver, seen from WSL2
    assert facts["cuda_driver_version"] == "12.7"
    (gpu,) = facts["gpus"]
    assert gpu == {
        "index": 0,
        "name": "NVIDIA GeForce RTX 4070 Laptop GPU",
        "uuid": "GPU-1b724e78-eef5-4163-d43c-e4da15d41176",
        "pci_bus_id": "00000000:01:00.0",
        "memory_total": 8188 * MIB,
        "memory_used": 0,
        "compute_capability": "8.9",
        "mig_mode": None,
        "compute_mode": "Default",
        "persistence_mode": True,
        "ecc": None,  # "ECC Mode: N/A" on a GeForce card
        "retired_pages_pending": None,  # "Pending Page Blacklist: N/A"
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False,
                          "failure": False},
        "fabric": None,
        "processes": [],
        # A laptop GPU on Gen4 x8 (its full width), idle; the slowdown temperature is N/A.
        "pcie": {"gen_current": 4, "gen_max": 4, "width_current": 8, "width_max": 8,
                 "replay_counter": 0},
        "clock_event_reasons": 0x1,
        "temperature": 42,
        "temperature_slowdown": None,
    }


def test_a100_with_a_pending_row_remap():
    """After an Xid 63 the row remap waits for a GPU reset: Pending Yes."""
    nvml = nvml_from_smi_q(A100_ROWREMAP_Q)
    facts = collect_nvml(nvml)
    assert facts["driver_version"] == "510.73.08"
    assert facts["cuda_driver_version"] == "11.6"
    (gpu,) = facts["gpus"]
    assert gpu["name"] == "NVIDIA A100-SXM4-80GB"
    assert gpu["pci_bus_id"] == "00000000:10:1C.0"
    assert gpu["compute_capability"] == "8.0"
    assert gpu["remapped_rows"] == {"correctable": 1, "uncorrectable": 0, "pending": True,
                                    "failure": False}
    assert gpu["retired_pages_pending"] is None  # Ampere retires no pages: N/A
    # The author elided these sections with "[...]": unknown, not zero.
    assert gpu["uuid"] is None
    assert gpu["memory_total"] is None
    assert gpu["memory_used"] is None
    assert gpu["ecc"] is None  # "ECC Mode" is in the elided part


def test_a100_uncorrected_ecc_counts_are_the_uncorrectable_ones():
    """DRAM Correctable is 177 on this GPU; only uncorrectable errors may be reported."""
    nvml = nvml_from_smi_q(A100_ROWREMAP_Q)
    # nvidia-smi prints ECC counts only while ECC is on, so the elided mode was Enabled.
    nvml.gpus[0].values[("ECC Mode", "Current")] = "Enabled"
    nvml.gpus[0].values[("ECC Mode", "Pending")] = "Enabled"
    gpu = collect_nvml(nvml)["gpus"][0]
    assert gpu["ecc"] == {"enabled": True, "volatile_uncorrected": 0, "aggregate_uncorrected": 0}
    # The fake does know the corrected count, so a wrong error type would show as 177.
    h = nvml.gpus[0]
    nvml.nvmlInit()
    assert nvml.nvmlDeviceGetTotalEccErrors(
        h, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC) == 177


def test_h800_fragment_everything_unknown_is_none_not_a_crash():
    """A capture holding only clocks and fabric state: every other query is unsupported."""
    facts = collect_nvml(nvml_from_smi_q(H800_FRAGMENT_Q))
    assert facts["initialized"] is True
    assert facts["driver_version"] is None
    assert facts["cuda_driver_version"] is None
    (gpu,) = facts["gpus"]
    assert gpu == {
        "index": 0, "name": None, "uuid": None, "pci_bus_id": None, "memory_total": None,
        "memory_used": None, "compute_capability": None, "mig_mode": None,
        "compute_mode": None, "persistence_mode": None, "ecc": None,
        "retired_pages_pending": None, "remapped_rows": None,
        # "Fabric / State: In Progress": the NVSwitch fabric never finished registering.
        "fabric": {"state": "in_progress"}, "processes": [],
        "pcie": None, "clock_event_reasons": None, "temperature": None,
        "temperature_slowdown": None,
    }


def test_eight_v100_server_from_its_table():
    nvml = nvml_from_smi_table(
        "nvidia-smi-bsyonline-8xv100.txt",
        full_name="Tesla V100-PCIE-32GB",
        details={1: parse_smi_q(capture(V100_Q)).gpus[0]},  # `nvidia-smi -q -i 1`
        nvml_version="11.470.129.06",  # NVML reports "<CUDA major>.<NVIDIA-SMI version>"
    )
    facts = collect_nvml(nvml)
    assert facts["driver_version"] == "470.129.06"
    assert facts["cuda_driver_version"] == "11.4"
    assert facts["nvml_version"] == "11.470.129.06"
    gpus = facts["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["name"] for g in gpus} == {"Tesla V100-PCIE-32GB"}
    assert [g["pci_bus_id"] for g in gpus] == [
        "00000000:1B:00.0", "00000000:1C:00.0", "00000000:1D:00.0", "00000000:1E:00.0",
        "00000000:3D:00.0", "00000000:3F:00.0", "00000000:40:00.0", "00000000:41:00.0",
    ]
    assert [g["memory_used"] // MIB for g in gpus] == [0, 0, 27068, 0, 0, 32323, 2165, 0]
    assert {g["memory_total"] for g in gpus} == {32510 * MIB}
    assert {g["compute_capability"] for g in gpus} == {"7.0"}
    assert all(g["persistence_mode"] is True for g in gpus)
    assert all(g["ecc"]["volatile_uncorrected"] == 0 for g in gpus)
    assert [g["processes"] for g in gpus] == [
        [], [], [{"pid": 88420, "used_memory": 27064 * MIB, "name": None, "username": None}],
        [], [], [{"pid": 230331, "used_memory": 32319 * MIB, "name": None, "username": None}],
        [{"pid": 618979, "used_memory": 2161 * MIB, "name": None, "username": None}], [],
    ]
    # GPU 1 is the one whose full `-q` output was captured.
    assert gpus[1] == V100_GPU | {"index": 1}
    assert gpus[0]["uuid"] is None


def test_mig_enabled_a100_on_a_kubernetes_node():
    facts = collect_nvml(nvml_from_smi_table("nvidia-smi-k8sdp-253-mig.txt"))
    assert facts["driver_version"] == "460.73.01"
    assert facts["cuda_driver_version"] == "11.2"
    (gpu,) = facts["gpus"]
    assert gpu["name"] == "A100-PCIE-40GB"
    assert gpu["pci_bus_id"] == "00000000:86:00.0"
    assert gpu["mig_mode"] == {"current": 1, "pending": 1}
    assert gpu["persistence_mode"] is False
    assert gpu["compute_capability"] == "8.0"
    assert (gpu["memory_used"], gpu["memory_total"]) == (13 * MIB, 40536 * MIB)
    # ECC column "On": enabled, but the count is hidden in MIG mode.
    assert gpu["ecc"] == {"enabled": True, "volatile_uncorrected": None,
                          "aggregate_uncorrected": None}


def test_wsl2_cuda_version_err_becomes_none_driver_kept():
    """nvidia-smi in WSL2 printing "CUDA Version: ERR!" (microsoft/WSL#11589)."""
    facts = collect_nvml(nvml_from_smi_table("wsl-nvidia-smi-wsl-11589.txt"))
    assert facts["initialized"] is True
    assert facts["driver_version"] == "546.80"
    assert facts["cuda_driver_version"] is None
    (gpu,) = facts["gpus"]
    assert gpu["pci_bus_id"] == "00000000:01:00.0"
    assert gpu["memory_used"] == 816 * MIB
    assert gpu["ecc"] is None  # "Volatile Uncorr. ECC: N/A"


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize(("error", "text", "error_type"), [
    (NVMLError_LibRmVersionMismatch(), "Driver/library version mismatch",
     "NVMLError_LibRmVersionMismatch"),
    (NVMLError_LibraryNotFound(), "NVML Shared Library Not Found", "NVMLError_LibraryNotFound"),
])
def test_init_failure_is_reported_not_raised(error, text, error_type):
    nvml = nvml_from_smi_q(V100_Q, init_error=error)
    assert collect_nvml(nvml) == {"initialized": False, "error": text, "error_type": error_type}
    assert nvml.queries == ["nvmlInit"]  # nothing else asked of a library that is not up
    assert nvml.shutdown_calls == 0


def test_one_gpu_without_a_handle_keeps_the_rest():
    # The Synology capture's error, on a multi-GPU server: GPU 3 cannot be reached.
    message = capture("nvidia-smi-syno-22-unknown-error.txt").strip().rsplit(": ", 1)[1]
    assert message == "Unknown Error"
    nvml = nvml_from_smi_table("nvidia-smi-bsyonline-8xv100.txt",
                               full_name="Tesla V100-PCIE-32GB")
    nvml.gpus[3].handle_error = NVMLError_Unknown(message)
    facts = collect_nvml(nvml)
    assert facts["initialized"] is True
    assert facts["driver_version"] == "470.129.06"
    assert len(facts["gpus"]) == 8
    assert facts["gpus"][2]["pci_bus_id"] == "00000000:1D:00.0"
    assert facts["gpus"][3]["index"] == 3
    assert "Unknown Error" in str(facts["gpus"][3].get("error"))
    assert nvml.shutdown_calls == 1


def test_fake_raises_not_supported_for_n_a_like_pynvml():
    """The premise of the None assertions above: N/A answers raise, as real NVML does."""
    nvml = nvml_from_smi_q(WSL2_4070_Q)
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(Exception, match="Not Supported"):
        nvml.nvmlDeviceGetEccMode(h)
    with pytest.raises(Exception, match="Not Supported"):
        nvml.nvmlDeviceGetMigMode(h)
    assert nvml.nvmlDeviceGetRemappedRows(h) == (0, 0, 0, 0)


# ---------------------------------------------------------------- probe_nvml (child process)


class RecordingEnv(FakeEnv):
    """FakeEnv that also remembers the deadline each command was given."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.timeouts: list[float] = []

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
            input_text: str | None = None) -> CommandResult:
        self.timeouts.append(timeout)
        return super().run(argv, timeout, env=env, input_text=input_text)


def test_probe_nvml_parses_the_childs_json():
    expected = collect_nvml(nvml_from_smi_q(WSL2_4070_Q))
    env = RecordingEnv(commands=[(NVML_ARGV, ok(json.dumps(expected) + "\n"))])
    record = probe_nvml(env)
    assert record.name == "nvml"
    assert record.ok is True
    assert record.error is None
    assert record.value == expected
    assert env.calls == [NVML_ARGV]
    assert env.timeouts == [NVML_TIMEOUT_S]


def test_probe_nvml_uses_the_last_line_after_noise():
    expected = collect_nvml(nvml_from_smi_q(V100_Q))
    stdout = "WARNING: something printed first\n" + json.dumps(expected) + "\n"
    record = probe_nvml(FakeEnv(commands=[(NVML_ARGV, ok(stdout))]), timeout=5)
    assert record.ok is True
    assert record.value["gpus"][0]["uuid"] == "GPU-06e3d8e6-3f54-374a-8142-9752ca1f2316"


def test_probe_nvml_timeout_names_the_deadline():
    hung = CommandResult(NVML_ARGV, None, "", "", timed_out=True, duration_s=20.0)
    env = RecordingEnv(commands=[(NVML_ARGV, hung)])
    record = probe_nvml(env, timeout=20.0)
    assert record.ok is False
    assert record.value is None
    assert record.error == f"NVML query failed: {sys.executable}: no answer within 20s, killed"
    assert record.duration_s == 20.0
    assert env.timeouts == [20.0]


@pytest.mark.parametrize("stdout", ["", "\n\n", "Segmentation fault (core dumped)\n",
                                    '{"initialized": true, "gpus": ['])
def test_probe_nvml_garbage_output_is_a_failed_fact(stdout):
    record = probe_nvml(FakeEnv(commands=[(NVML_ARGV, ok(stdout))]))
    assert record.ok is False
    assert record.error == "NVML query printed no result"


def test_probe_nvml_child_crash_and_error_exit():
    segv = CommandResult(NVML_ARGV, -11, "", "")
    record = probe_nvml(FakeEnv(commands=[(NVML_ARGV, segv)]))
    assert record.ok is False
    assert record.error == f"NVML query failed: {sys.executable}: killed by SIGSEGV (exit code -11)"

    traceback = ("Traceback (most recent call last):\n  ...\n"
                 "pynvml.NVMLError_Unknown: Unknown Error\n")
    failed = CommandResult(NVML_ARGV, 1, "", traceback)
    record = probe_nvml(FakeEnv(commands=[(NVML_ARGV, failed)]))
    assert record.ok is False
    assert record.error.endswith("exit code 1: pynvml.NVMLError_Unknown: Unknown Error")


# ---------------------------------------------------------------- the real child, here


def _nvml_library_loads() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.spawns
def test_real_nvml_child_prints_json():
    result = subprocess.run([sys.executable, "-m", "ddp_doctor.facts.nvml"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout.strip().splitlines()[-1])
    if _nvml_library_loads():
        assert isinstance(data["initialized"], bool)
        if data["initialized"]:
            assert isinstance(data["gpus"], list)
    else:  # this machine: no NVIDIA driver at all
        assert data == {"initialized": False, "error": "NVML Shared Library Not Found",
                        "error_type": "NVMLError_LibraryNotFound"}


@pytest.mark.spawns
def test_real_probe_nvml_is_an_ok_fact_saying_no_driver():
    record = probe_nvml(RealEnv())
    assert record.ok is True, record.error
    assert record.duration_s > 0
    if not _nvml_library_loads():
        assert record.value["initialized"] is False
        assert record.value["error_type"] == "NVMLError_LibraryNotFound"


# ---------------------------------------------------------------- process owners, fabric


def test_processes_are_named_through_psutil_where_visible():
    """The 8x V100 table names the three `python` jobs; psutil sees two of them here,
    the third runs in another container's PID namespace (NoSuchProcess)."""
    from tests.support.fakes import FakePsutil

    nvml = nvml_from_smi_table("nvidia-smi-bsyonline-8xv100.txt",
                               full_name="Tesla V100-PCIE-32GB")
    ps = FakePsutil(processes={88420: ("python", "alice"), 230331: ("python", None)})
    gpus = collect_nvml(nvml, ps)["gpus"]
    assert gpus[2]["processes"] == [{"pid": 88420, "used_memory": 27064 * MIB,
                                     "name": "python", "username": "alice"}]
    # AccessDenied on the user: the name is still known.
    assert gpus[5]["processes"] == [{"pid": 230331, "used_memory": 32319 * MIB,
                                     "name": "python", "username": None}]
    assert gpus[6]["processes"] == [{"pid": 618979, "used_memory": 2161 * MIB,
                                     "name": None, "username": None}]


@pytest.mark.parametrize(("state", "fact"), [
    ("In Progress", {"state": "in_progress"}),
    ("Not Started", {"state": "not_started"}),
    ("Completed", {"state": "completed"}),
    ("Not Supported", None),
    ("N/A", None),
])
def test_fabric_state_of_an_nvswitch_gpu(state, fact):
    """DCGM#120: the H800 capture's "Fabric / State" line, and the other states NVML has."""
    nvml = nvml_from_smi_q(H800_FRAGMENT_Q)
    nvml.gpus[0].values[("Fabric", "State")] = state
    assert collect_nvml(nvml)["gpus"][0]["fabric"] == fact


def test_fabric_query_missing_from_old_bindings_is_none():
    nvml = nvml_from_smi_q(H800_FRAGMENT_Q)
    nvml.c_nvmlGpuFabricInfo_t = None  # nvidia-ml-py before R530 had no fabric struct
    assert collect_nvml(nvml)["gpus"][0]["fabric"] is None


def test_lost_gpu_keeps_its_error_type():
    """Xid 79 "GPU has fallen off the bus": NVML answers GPU_IS_LOST for its handle."""
    from tests.support.smi_captures import NVMLError_GpuIsLost

    nvml = nvml_from_smi_table("nvidia-smi-bsyonline-8xv100.txt",
                               full_name="Tesla V100-PCIE-32GB")
    nvml.gpus[4].handle_error = NVMLError_GpuIsLost()
    gpu = collect_nvml(nvml)["gpus"][4]
    assert gpu == {"index": 4, "error": "GPU is lost", "error_type": "NVMLError_GpuIsLost"}
