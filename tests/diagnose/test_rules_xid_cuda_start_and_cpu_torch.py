"""Three messages users paste without the words the older rules waited for: a GPU's Xid
without the kernel's "NVRM:", torch's CUDA-initialisation warning cut down to where it was
raised, and a CPU-only torch named in a system report that prints no error.

Each is read on its real line and on the other shapes the printing program gives it, and
left alone on a near miss (an NVSwitch SXid, an application's own Xid, torch's opt-in sync
warning from the same file, a CUDA torch).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddp_doctor.model import Severity
from tests.support.rules import diagnosed, lead_reading, matched_codes

# -- a GPU's Xid, as a monitor, a write-up or a user pastes it ---------------------------------


@pytest.mark.parametrize("line", [
    # A Lambda engineer's notes on GSP timeouts, then the GPU lost
    "      Xid (PCI:0000:??:00): 119 - Timeout waiting for RPC from GSP!",
    "      Xid (PCI:0000:??:00): 79  - GPU has fallen off the bus",
    # the driver's own GSP_RPC_TIMEOUT_XID_MESSAGE_FMT, as two write-ups quote it
    "13:41:53  NVRM: Xid 119, Timeout after 9s of waiting for RPC response from GPU0 GSP!",
    "Xid 119: Timeout after 45s waiting for RPC response from GPU0 GSP",
    "GPU has fallen off the bus",
    "the node logged Xid 79 twice before the job hung",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
])
def test_a_hardware_xid_in_any_shape_is_a_hardware_fault(tmp_path: Path, line: str) -> None:
    assert lead_reading(tmp_path, line) == ("LOG017", "hardware_fault")


@pytest.mark.parametrize("line", [
    "SXid (PCI:0000:3b:00): 79, Non-fatal, Link 30",  # an NVSwitch's own numbering
    "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics Exception",  # the program's fault
    "Xid 31: MMU fault",  # the program's illegal address
    "maxidle 79 seconds",  # 'xid' inside a word
    "box 79: xid-79-legacy",  # a name, not an event
])
def test_an_xid_the_catalogue_does_not_blame_on_the_gpu_is_not_one(line: str) -> None:
    assert "LOG017" not in matched_codes(line)


# -- torch's CUDA-initialisation warning, cut down to where it was raised ----------------------

FRAGMENT = ("Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.) return "
            "torch._C._cuda_getDeviceCount() > 0")


def test_the_warnings_location_alone_is_cuda_failing_to_start(tmp_path: Path) -> None:
    assert lead_reading(tmp_path, FRAGMENT) == ("LOG014", "cuda_init_failure")


def test_the_sync_debug_warning_from_the_same_file_is_not(tmp_path: Path) -> None:
    line = ("UserWarning: called a synchronizing CUDA operation (Triggered internally at "
            "../c10/cuda/CUDAFunctions.cpp:148.)")
    assert "LOG014" not in matched_codes(line)


@pytest.mark.parametrize(("why", "code"), [
    ("The NVIDIA driver on your system is too old (found version 11040). Please update your "
     "GPU driver by downloading and installing a new version from the URL: "
     "http://www.nvidia.com/Download/index.aspx", "LOG011"),
    ("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
     "installed a driver from http://www.nvidia.com/Download/index.aspx", "LOG009"),
])
def test_where_the_warning_says_why_that_leads_and_the_location_is_its_evidence(
        tmp_path: Path, why: str, code: str) -> None:
    log = (f"UserWarning: CUDA initialization: {why} (Triggered internally at "
           f"../c10/cuda/CUDAFunctions.cpp:109.)\n  return torch._C._cuda_getDeviceCount() > 0\n")
    codes = [f.code.id for f in diagnosed(tmp_path, log)]
    assert codes[0] == code and "LOG014" not in codes


# -- a CPU-only torch named where nothing failed in words --------------------------------------

REPORT = """\
imaginairy_version:            13.2.0
python_version:                3.10.0
device:                        cpu
torch_version:                 1.13.1+cpu
platform:                      win32
"""


@pytest.mark.parametrize("text", [
    REPORT,
    "PyTorch version: 2.1.0+cpu\nIs CUDA available: False\n",
    "Successfully installed torch-2.1.0+cpu torchvision-0.16.0+cpu\n",
    "torch==2.3.1+cpu\n",
    "torch.__version__ = '2.0.1+cpu'\n",
])
def test_a_cpu_build_named_alone_is_the_finding(tmp_path: Path, text: str) -> None:
    found = diagnosed(tmp_path, text)[0]
    assert (found.code.id, found.code.category.value) == ("LOG112", "torch_cpu_only")
    assert found.effective_severity is Severity.WARNING


@pytest.mark.parametrize("text", [
    "torch 2.1.0+cu121\n", "torch_version: 2.1.0\n", "onnxruntime==1.16.0+cpu\n",
    "jaxlib 0.4.20+cpu\n",
])
def test_a_cuda_torch_or_another_packages_cpu_build_is_not(tmp_path: Path, text: str) -> None:
    assert "LOG112" not in [f.code.id for f in diagnosed(tmp_path, text)]


def test_a_cpu_job_that_failed_leads_with_its_own_error(tmp_path: Path) -> None:
    codes = [f.code.id for f in diagnosed(
        tmp_path, "PyTorch version: 2.1.0+cpu\nRuntimeError: Address already in use\n")]
    assert codes[0] == "LOG001" and "LOG112" in codes


def test_beside_not_compiled_with_cuda_the_version_is_that_findings_evidence(
        tmp_path: Path) -> None:
    found = diagnosed(tmp_path, "torch 2.1.0+cpu\nAssertionError: Torch not compiled with "
                                "CUDA enabled\n")
    assert [f.code.id for f in found if f.code.id.startswith("LOG")] == ["LOG023"]
    assert any("2.1.0+cpu" in e.value for e in found[0].evidence)


def test_in_a_bundle_the_packages_list_is_the_evidence_of_the_checks_finding(
        tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ddp_doctor.cli import app

    facts = Path(__file__).resolve().parents[1] / "fixtures" / "facts" / \
        "sandbox_cpu_container.json"
    bundle = tmp_path / "b.zip"
    runner = CliRunner()
    runner.invoke(app, ["check", "--facts", str(facts), "--bundle", str(bundle)])
    report = json.loads(runner.invoke(app, ["diagnose", str(bundle), "--json", "-"]).stdout)
    codes = [f["code"] for f in report["findings"]]
    assert "TOR002" in codes and "LOG112" not in codes
    tor002 = next(f for f in report["findings"] if f["code"] == "TOR002")
    assert any("LOG112" in e["value"] for e in tor002["evidence"])


def test_only_a_declared_pair_is_folded_not_a_shared_category(tmp_path: Path) -> None:
    """A log's performance warnings beside a pasted nvidia-smi -q with a clock brake
    (HWF012, performance too) are three causes, not one."""
    capture = (Path(__file__).resolve().parents[1] / "fixtures" / "captures"
               / "nvidia-smi-q-l4rz-c4130-v100-power-brake.txt").read_text(encoding="utf-8")
    log = (capture + "\nUserWarning: Grad strides do not match bucket view strides. This may "
           "indicate grad was not created according to the gradient layout contract\n")
    codes = [f.code.id for f in diagnosed(tmp_path, log)]
    assert "HWF012" in codes and "LOG092" in codes
