"""textfacts: facts from pasted collect_env / YOLO / nvidia-smi output, judged by the real checks.

Every input is a real capture in tests/fixtures/text (sources in SOURCES.md); findings come
from the built-in catalogue through the real runner.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.model import Severity
from ddp_doctor.textfacts import SECTION_MARKERS, TextFacts, facts_from_text
from ddp_doctor.textfacts.build import FACT_NAMES, NOT_IN_TEXT
from tests.support.checks import MIB, run

TEXT = Path(__file__).parents[1] / "fixtures" / "text"
CAPTURES = sorted(p.name for p in TEXT.glob("*.txt"))


def capture(name: str) -> str:
    return (TEXT / name).read_text(encoding="utf-8")


def parse(name: str) -> TextFacts:
    result = facts_from_text(capture(name))
    assert result is not None, name
    return result


def findings(name: str) -> dict[str, list]:
    """Code id -> findings of that code, for the capture NAME."""
    out: dict[str, list] = {}
    for result in run(parse(name).facts).values():
        assert result.status.value != "error", (result.check_id, result.error)
        for finding in result.findings:
            out.setdefault(finding.code.id, []).append(finding)
    return out


# ---------------------------------------------------------------- sections and markers


def test_markers_are_lowercase_and_start_no_capture_in_a_long_logs_noise() -> None:
    """The scan finds the markers in its one pass with the gates; what bounds them is that a
    marker line starts a capture of the lines after it (at most eight per log), so none may
    be in the lines a long training log is made of (progress bars, metrics, NCCL INFO)."""
    from itertools import islice

    from ddp_doctor.diagnose.synthetic import noise_lines

    assert SECTION_MARKERS and all(m == m.lower() and m.strip() for m in SECTION_MARKERS)
    noise = [line.lower() for line in islice(noise_lines(), 4000)]
    assert [(m, line) for m in SECTION_MARKERS for line in noise if m in line][:1] == []


@pytest.mark.parametrize("name", CAPTURES)
def test_every_capture_is_read_and_starts_at_a_marker_line(name: str) -> None:
    text = capture(name)
    result = parse(name)
    assert result.facts.meta["source"] == "text"
    assert result.sections
    lines = text.splitlines()
    for section in result.sections:
        start = lines[section.first_line - 1].lower()
        assert any(marker in start for marker in SECTION_MARKERS), (name, start)
        assert section.summary.startswith(("collect_env:", "nvidia-smi", "yolo checks:",
                                           "YOLO banner:"))


@pytest.mark.parametrize("name", CAPTURES)
def test_truncated_pastes_never_raise(name: str) -> None:
    lines = capture(name).splitlines()
    for cut in range(1, len(lines), max(1, len(lines) // 7)):
        result = facts_from_text("\n".join(lines[:cut]))
        assert result is None or result.sections


@pytest.mark.parametrize("text", ["", "hello\nworld", "PyTorch version", "\x00\xff garbage",
                                  "| NVIDIA-SMI 535.104.05   Driver Version:",
                                  "Driver Version : 535\nGPU 0000:01:00.0\n   x"])
def test_odd_input_gives_none_or_sections(text: str) -> None:
    result = facts_from_text(text)
    assert result is None or all(s.first_line >= 1 for s in result.sections)


def test_no_section_gives_none() -> None:
    assert facts_from_text("Traceback (most recent call last):\nRuntimeError: boom\n") is None


def test_sections_inside_a_ticket_are_found_where_they_start() -> None:
    ticket = ("I get this when training:\nTraceback (most recent call last):\n"
              '  File "train.py", line 3, in <module>\nRuntimeError: CUDA error\n\n'
              + capture("collect_env-pytorch-28321.txt") + "\nand nvidia-smi says:\n\n"
              + capture("nvidia-smi-bsyonline-8xv100.txt") + "\nthanks!\n")
    result = facts_from_text(ticket)
    assert result is not None
    assert [s.kind for s in result.sections] == ["collect_env", "nvidia_smi"]
    lines = ticket.splitlines()
    assert lines[result.sections[0].first_line - 1] == "PyTorch version: 1.3.0"
    assert "NVIDIA-SMI 470.129.06" in lines[result.sections[1].first_line - 1]
    nvml = result.facts["nvml"]
    # nvidia-smi's view wins for the driver; GPUs come from the table
    assert nvml["driver_version"] == "470.129.06"
    assert len(nvml["gpus"]) == 8
    assert result.facts["torch"]["build"]["version"] == "1.3.0"


def test_facts_the_text_does_not_show_are_unavailable() -> None:
    facts = parse("collect_env-feral-18.txt").facts
    for name in ("host", "env_vars", "interconnect", "plan", "wsl", "driver"):
        assert not facts.available(name)
        assert facts.records[name].error == NOT_IN_TEXT
    assert set(FACT_NAMES) <= set(facts.records)
    assert "shm" not in str(facts.to_dict())
    gpu = facts["nvml"]["gpus"][0]
    assert gpu == {"index": 0, "name": "NVIDIA H100 80GB HBM3"}  # nothing else was shown


# ---------------------------------------------------------------- collect_env


def test_driver_410_with_cuda_10_1_build_is_too_old() -> None:
    found = findings("collect_env-pytorch-28321.txt")
    [finding] = found["DRV002"]
    assert "410.104" in finding.title and "CUDA 10.1" in finding.title
    assert "torch 1.3.0" in finding.title


def test_hand_edited_report_with_full_width_colons() -> None:
    result = parse("collect_env-pytorch-37320.txt")
    facts = result.facts
    assert facts["torch"]["build"] == {"version": "1.5.0", "cuda": "10.2", "debug": False}
    assert [g["name"] for g in facts["nvml"]["gpus"]] == ["Tesla P100-PCIE-16GB"] * 4
    assert facts["os"]["distro"]["pretty"] == "Ubuntu 18.04.3 LTS"
    [finding] = findings("collect_env-pytorch-37320.txt")["DRV002"]
    assert "410.104" in finding.title and "CUDA 10.2" in finding.title


def test_a_version_field_filled_with_pip_pins_gives_torchs_version() -> None:
    # an issue template's field, as mkocabas/VIBE#83 filled it
    text = ("Pytorch version: torch==1.4.0, torchvision==0.5.0, torchgeometry==0.1.2\n"
            "Is CUDA available: Yes\n")
    result = facts_from_text(text)
    assert result is not None
    assert result.facts["torch"]["build"]["version"] == "1.4.0"


def test_cpu_build_on_a_gpu_laptop_is_an_error() -> None:
    facts = parse("collect_env-pytorch-122924.txt").facts
    assert facts["torch"]["build"]["cuda"] is None  # "Could not collect"
    assert facts["os"]["system"] == "Windows"
    [finding] = findings("collect_env-pytorch-122924.txt")["TOR002"]
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "torch 2.2.2 is a CPU-only build"


def test_cpu_build_without_gpu_facts_does_not_claim_there_is_no_gpu() -> None:
    facts = parse("collect_env-pytorch-121067.txt").facts  # macOS, "No CUDA" everywhere
    assert not facts.available("nvml")
    [finding] = findings("collect_env-pytorch-121067.txt")["TOR002"]
    assert finding.effective_severity is Severity.WARNING
    assert "no NVIDIA GPU" not in finding.title


def test_wsl2_report_is_recognised_and_rocm_torchvision_conflicts() -> None:
    result = parse("collect_env-wsl-8102.txt")
    os_fact = result.facts["os"]
    assert os_fact["wsl"]["is_wsl"] is True and os_fact["wsl"]["version"] == 2
    assert os_fact["kernel"] == "5.10.16.3-microsoft-standard-WSL2"
    assert "on WSL2" in result.sections[0].summary
    found = findings("collect_env-wsl-8102.txt")
    [conflict] = found["PKG003"]
    assert "cu113" in conflict.title and "rocm4.2" in conflict.title
    assert "DRV002" not in found  # Windows driver 511.79 runs CUDA 11.3


def test_pip_and_conda_lines_of_one_install_are_one_entry() -> None:
    packages = parse("collect_env-pytorch-48714.txt").facts["python"]["packages"]
    assert packages["torch"] == [{"version": "1.6.0", "location": "pip list"}]
    assert packages["cudatoolkit"][0]["version"] == "10.1.243"
    # pip torch 1.2.0 and conda pytorch 1.3.0: two different installs
    two = parse("collect_env-pytorch-28321.txt").facts["python"]["packages"]["torch"]
    assert [e["version"] for e in two] == ["1.2.0", "1.3.0"]


def test_healthy_h100_report_gives_no_problem() -> None:
    found = findings("collect_env-feral-18.txt")
    assert found == {}
    results = run(parse("collect_env-feral-18.txt").facts)
    assert results["driver.cuda_compat"].summary.startswith("driver 580.126.09 supports CUDA")
    assert results["host.shm"].status.value == "skip"


# ---------------------------------------------------------------- YOLO


def test_yolo_checks_on_linux_reads_build_devices_and_packages() -> None:
    facts = parse("yolo-checks-yolov8-ros-a2000.txt").facts
    torch = facts["torch"]
    assert torch["build"] == {"version": "2.1.0+cu118", "cuda": "11.8", "hip": None}
    assert torch["cuda"]["devices"] == [{"index": 0, "name": "NVIDIA RTX A2000 12GB",
                                         "total_memory": 12017 * MIB}]
    assert facts["python"]["version"] == "3.10.13"
    assert facts["python"]["packages"]["torchvision"][0]["version"] == "0.16.0+cu118"
    assert facts["python"]["packages"]["ultralytics"][0]["version"] == "8.0.200"
    assert facts["os"]["kernel"] == "6.5.0-1004-oem"
    assert findings("yolo-checks-yolov8-ros-a2000.txt") == {}


def test_yolo_checks_without_cuda_says_cuda_is_unavailable() -> None:
    torch = parse("yolo-checks-ultralytics-16230-cpu.txt").facts["torch"]
    assert torch["build"]["cuda"] == "12.1"  # from the +cu121 wheel tag
    assert torch["cuda"] == {"available": False}


def test_multi_gpu_banners_list_every_device() -> None:
    for name, count, gpu in (("yolov5-banner-yolov5-10045.txt", 2, "NVIDIA A100 80GB PCIe"),
                             ("yolov5-banner-ultralytics-3605.txt", 2, "Tesla T4")):
        result = parse(name)
        assert result.sections[0].kind == "yolov5_banner"
        devices = result.facts["torch"]["cuda"]["devices"]
        assert [d["name"] for d in devices] == [gpu] * count


def test_cpu_wheel_banner_with_device_error_is_cpu_only() -> None:
    facts = parse("yolov5-banner-comic-translate-224.txt").facts
    assert facts["torch"]["cuda"] == {"available": False, "device_count": 0}
    assert "TOR002" in findings("yolov5-banner-comic-translate-224.txt")


# ---------------------------------------------------------------- nvidia-smi


def test_table_reads_gpus_memory_and_processes() -> None:
    nvml = parse("nvidia-smi-bsyonline-8xv100.txt").facts["nvml"]
    assert nvml["driver_version"] == "470.129.06" and nvml["cuda_driver_version"] == "11.4"
    assert [g["index"] for g in nvml["gpus"]] == list(range(8))
    gpu5 = nvml["gpus"][5]
    assert gpu5["memory_used"] == 32323 * MIB and gpu5["memory_total"] == 32510 * MIB
    assert gpu5["pci_bus_id"] == "00000000:3F:00.0"
    assert gpu5["ecc"] == {"enabled": True, "volatile_uncorrected": 0}
    assert gpu5["processes"] == [{"pid": 230331, "used_memory": 32319 * MIB,
                                  "name": "python", "username": None}]
    assert nvml["gpus"][0]["processes"] == []


def test_busy_gpus_in_a_table_give_the_visibility_warning() -> None:
    [finding] = findings("nvidia-smi-bsyonline-8xv100.txt")["VIS006"]
    assert finding.affects == ("gpu:2", "gpu:5", "gpu:6")
    assert finding.effective_severity is Severity.WARNING


def test_old_and_new_table_layouts() -> None:
    old = parse("nvidia-smi-tensorflow-8877.txt").facts["nvml"]
    assert old["driver_version"] == "346.46" and "cuda_driver_version" not in old
    assert old["gpus"][0]["pci_bus_id"] == "0000:00:03.0"
    assert old["gpus"][0]["processes"] == []  # "No running processes found"
    graphics = parse("nvidia-smi-pytorch-6551.txt").facts["nvml"]["gpus"][0]
    assert "processes" not in graphics  # only Xorg/compiz rows, list cut short: unknown
    mixed = parse("nvidia-smi-open-gpu-kernel-modules-p2p-5.txt").facts["nvml"]
    assert [g["name"] for g in mixed["gpus"]] == ["NVIDIA GeForce RTX 5090",
                                                   "NVIDIA GeForce RTX 4090"]
    assert mixed["gpus"][1]["ecc"] == {"enabled": False}
    wsl = parse("wsl-nvidia-smi-wsl-11589.txt").facts["nvml"]
    assert wsl["driver_version"] == "546.80" and "cuda_driver_version" not in wsl  # ERR!


def test_mig_table_gives_the_mig_warning() -> None:
    gpu = parse("nvidia-smi-k8sdp-253-mig.txt").facts["nvml"]["gpus"][0]
    assert gpu["mig_mode"]["current"] == 1
    assert "VIS005" in findings("nvidia-smi-k8sdp-253-mig.txt")


def test_library_mismatch_error() -> None:
    facts = parse("nvidia-smi-mismatch-tinygrad-47.txt").facts
    assert facts["nvml"]["initialized"] is False
    [finding] = findings("nvidia-smi-mismatch-tinygrad-47.txt")["DRV004"]
    assert "570.124" in finding.title


def test_no_driver_error() -> None:
    found = findings("nvidia-smi-no-driver-shine-cluster-50.txt")
    [finding] = found["DRV001"]
    assert finding.title == "No NVIDIA driver answers"  # not "no GPU": the bus was not seen
    assert set(found) == {"DRV001"}


def test_lost_gpu() -> None:
    [finding] = findings("nvidia-smi-syno-22-unknown-error.txt")["HWF005"]
    assert "Unknown Error" in finding.title


# ---------------------------------------------------------------- nvidia-smi -q


def test_pending_row_remap_is_a_hardware_fault() -> None:
    gpu = parse("nvidia-smi-q-mlengineering-rowremap.txt").facts["nvml"]["gpus"][0]
    assert gpu["remapped_rows"] == {"correctable": 1, "uncorrectable": 0, "pending": True,
                                    "failure": False}
    # the excerpt cut the ECC Mode lines but kept the counts
    assert gpu["ecc"] == {"enabled": None, "volatile_uncorrected": 0, "aggregate_uncorrected": 0}
    [finding] = findings("nvidia-smi-q-mlengineering-rowremap.txt")["HWF003"]
    assert "NVIDIA A100-SXM4-80GB" in finding.title


def test_v100_report_reads_ecc_and_retired_pages() -> None:
    result = parse("nvidia-smi-q-bsyonline-v100.txt")
    gpu = result.facts["nvml"]["gpus"][0]
    assert gpu["index"] == 1  # "-q -i 1": the Minor Number, not the position
    assert gpu["ecc"] == {"enabled": True, "volatile_uncorrected": 0, "aggregate_uncorrected": 0}
    assert gpu["retired_pages_pending"] is False
    assert "remapped_rows" not in gpu  # "Remapped Rows : N/A" on Volta
    assert gpu["memory_total"] == 32510 * MIB and gpu["processes"] == []
    assert "1 GPU shown of 8 attached" in result.sections[0].summary
    assert findings("nvidia-smi-q-bsyonline-v100.txt") == {}


def test_uncorrectable_ecc_in_q_output_is_a_hardware_fault() -> None:
    lines = capture("nvidia-smi-q-bsyonline-v100.txt").splitlines()
    # two double-bit errors in device memory since the last reset: the Volatile block's
    # "Double Bit" Device Memory and Total lines (the first "Double Bit" block)
    block = next(i for i, line in enumerate(lines) if line.strip() == "Double Bit")
    for i in (block + 1, block + 8):
        assert lines[i].strip().startswith(("Device Memory", "Total")), lines[i]
        lines[i] = lines[i].replace(": 0", ": 2")
    result = facts_from_text("\n".join(lines))
    assert result is not None
    ecc = result.facts["nvml"]["gpus"][0]["ecc"]
    assert ecc["volatile_uncorrected"] == 2 and ecc["aggregate_uncorrected"] == 0
    hardware = run(result.facts)["gpu.health"]
    assert [f.code.id for f in hardware.findings] == ["HWF001"]
    assert hardware.findings[0].effective_severity is Severity.ERROR
