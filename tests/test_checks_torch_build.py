"""torch.import (TOR001) and torch.cuda_build (TOR002) on recorded machines and variants."""

from __future__ import annotations

import json

import pytest

from gpu_doctor.categories import Category
from gpu_doctor.facts.env import CommandResult
from gpu_doctor.facts.torch_probe import MARK, interpret_probe
from gpu_doctor.model import Severity, Status
from tests.check_helpers import commands, evidence, only_finding, run, variant
from tests.conftest import load_fixture_facts

INSTALL_GUIDE = "https://pytorch.org/get-started/locally/"
WHL = "https://download.pytorch.org/whl"

IMPORTABLE = {  # fixture -> (torch.__version__, torch.version.cuda)
    "healthy_8x_v100_pcie": ("2.0.1+cu117", "11.7"),
    "workstation_2x_rtx3090_pcie": ("2.11.0+cu130", "13.0"),
    "wsl2_rtx4070": ("2.5.1+cu124", "12.4"),
    "container_64mb_shm": ("1.8.1+cu111", "11.1"),
    "laptop_gpu_newer_than_wheel": ("2.5.1+cu121", "12.1"),
    "no_driver": ("1.11.0+cu113", "11.3"),
    "nouveau_loaded": ("1.13.1+cu117", "11.7"),
}


# ---------------------------------------------------------------- healthy baselines


@pytest.mark.parametrize("name", sorted(IMPORTABLE))
def test_importable_cuda_builds_pass_both_checks(name):
    version, cuda = IMPORTABLE[name]
    facts = load_fixture_facts(name)
    results = run(facts)
    imported, build = results["torch.import"], results["torch.cuda_build"]
    assert imported.status is Status.PASS and imported.findings == ()
    assert imported.summary == f"torch {version} from {facts['torch']['build']['file']}"
    assert build.status is Status.PASS and build.findings == ()
    assert build.summary == f"built for CUDA {cuda}"


def test_rocm_build_is_not_called_cpu_only():
    facts = variant("torch_cpu_wheel_on_gpu_box", {
        "torch.build.version": "2.6.0+rocm6.2.4", "torch.build.cuda": None,
        "torch.build.hip": "6.2.41134-65d174c3e"})
    result = run(facts)["torch.cuda_build"]
    assert result.status is Status.PASS
    assert result.summary == "built for ROCm 6.2.41134-65d174c3e"


# ---------------------------------------------------------------- TOR001


def test_torch_not_installed_on_the_v100_server():
    facts = load_fixture_facts("torch_missing")
    results = run(facts)
    result = results["torch.import"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "TOR001"
    assert finding.category is Category.TORCH_MISSING
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "PyTorch is not installed in this interpreter"
    assert evidence(finding) == {
        "interpreter": "/usr/bin/python3 (Python 3.8.10)",
        "import torch": "ModuleNotFoundError: No module named 'torch'",
    }
    install, which_python = finding.remediation
    # Driver 470 supports CUDA 11.4: no current CUDA build of torch runs on it.
    assert install.command == f"pip install --upgrade torch torchvision  # see {INSTALL_GUIDE}"
    assert "this driver is too old for every current CUDA build of torch" in install.text
    assert "upgrade the driver first" in install.text
    assert install.url == INSTALL_GUIDE
    assert "--python /path/to/python" in which_python.text


def test_torch_not_installed_wheel_follows_the_driver_cuda_version():
    """Same V100 server with an R535 driver (CUDA 12.2): cu126, the newest build that
    still has Volta (sm_70) kernels."""
    facts = variant("torch_missing", {"nvml.cuda_driver_version": "12.2",
                                      "nvml.driver_version": "535.129.03"})
    finding = only_finding(run(facts)["torch.import"])
    install = finding.remediation[0]
    assert install.command == f"pip install --upgrade torch torchvision --index-url {WHL}/cu126"
    assert ("the CUDA 12.6 build runs on this driver (it supports CUDA 12.2) and has kernels "
            "for these GPUs") in install.text


def test_torch_not_installed_without_a_driver_suggests_the_newest_build_and_says_why():
    facts = variant("no_driver", {
        "torch.import_error": {"type": "ModuleNotFoundError",
                               "message": "No module named 'torch'"},
        "torch.importable": False, "torch.build": None})
    finding = only_finding(run(facts)["torch.import"])
    install = finding.remediation[0]
    assert install.command == f"pip install --upgrade torch torchvision --index-url {WHL}/cu132"
    assert "no driver answered, so this is the newest build (CUDA 13.2" in install.text
    assert "driver 580.65.06 or newer" in install.text


def test_broken_import_libcudnn_on_almalinux():
    """pytorch#165812: torch in venv/lib64, the nvidia-* wheels in venv/lib."""
    facts = load_fixture_facts("torch_import_broken")
    result = run(facts)["torch.import"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "TOR001"
    assert finding.category is Category.TORCH_MISSING
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "import torch fails: ImportError"
    assert evidence(finding) == {
        "interpreter": "/home/brain/venv/bin/python (Python 3.11.11)",
        "import torch": ("ImportError: libcudnn.so.9: cannot open shared object file: "
                         "No such file or directory"),
    }
    # Driver 580 (CUDA 13.0) and an H100 (9.0): the CUDA 13.2 build.
    assert commands(finding) == [
        "python -m venv ~/venvs/train && . ~/venvs/train/bin/activate",
        f"pip install --upgrade torch torchvision --index-url {WHL}/cu132",
        "echo $LD_LIBRARY_PATH",
    ]


def test_broken_import_shows_the_probe_stderr_as_evidence():
    tail = "free(): invalid pointer"
    facts = variant("torch_import_broken", {"torch.probe.stderr_tail": tail})
    finding = only_finding(run(facts)["torch.import"])
    assert evidence(finding)["stderr"] == tail


def test_missing_dependency_of_torch_is_not_called_torch_not_installed():
    """QwenAudio/SenseVoice#166: torch in ~/.local, `import torch` raises
    ModuleNotFoundError: No module named 'typing_extensions'."""
    facts = variant("torch_missing", {
        "torch.import_error": {"type": "ModuleNotFoundError",
                               "message": "No module named 'typing_extensions'"},
        "python.packages.torch": [{"version": "2.5.1",
                                   "location": "/home/pc/.local/lib/python3.10/site-packages"}]})
    finding = only_finding(run(facts)["torch.import"])
    assert finding.title != "PyTorch is not installed in this interpreter"
    assert finding.title == "import torch fails: ModuleNotFoundError"


@pytest.mark.parametrize("name", ["torch_missing", "torch_import_broken"])
def test_cuda_build_check_is_blocked_by_the_import_failure(name):
    result = run(load_fixture_facts(name))["torch.cuda_build"]
    assert result.status is Status.SKIP
    assert result.skip_reason == "blocked by TOR001 (torch.import)"
    assert result.summary == "blocked by TOR001 (torch.import)"
    assert result.findings == ()


# ---------------------------------------------------------------- TOR002


def test_cpu_wheel_on_an_rtx_5090_box():
    facts = load_fixture_facts("torch_cpu_wheel_on_gpu_box")
    results = run(facts)
    assert results["torch.import"].status is Status.PASS
    result = results["torch.cuda_build"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "TOR002"
    assert finding.category is Category.TORCH_CPU_ONLY
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "torch 2.6.0+cpu is a CPU-only build"
    assert evidence(finding) == {
        "torch.__version__": "2.6.0+cpu",
        "torch.version.cuda": "None",
        "interpreter": "/home/paul/comic-translate/.venv/bin/python (Python 3.11.9)",
    }
    uninstall, install, confirm = finding.remediation
    assert uninstall.command == "pip uninstall -y torch torchvision torchaudio"
    # Driver 595 (CUDA 13.2), an RTX 5090 (12.0): the CUDA 13.2 build.
    assert install.command == (
        f"pip install --upgrade torch torchvision torchaudio --index-url {WHL}/cu132")
    assert "the CUDA 13.2 build runs on this driver (it supports CUDA 13.2)" in install.text
    assert install.url == INSTALL_GUIDE
    assert "torch.cuda.device_count()" in confirm.command


@pytest.mark.parametrize(("name", "driver_cuda", "tag"), [
    ("torch_cpu_wheel_on_gpu_box", "13.2", "cu132"),  # RTX 5090 (12.0), R595
    ("torch_cpu_wheel_on_gpu_box", "13.0", "cu132"),  # RTX 5090, R580: same major
    ("healthy_8x_v100_pcie", "12.2", "cu126"),  # V100 (7.0), R535
    ("healthy_8x_v100_pcie", "13.0", "cu126"),  # V100, R580: cu13x has no sm_70
])
def test_cpu_wheel_replacement_is_chosen_from_the_driver_cuda_version(name, driver_cuda, tag):
    facts = variant(name, {"nvml.cuda_driver_version": driver_cuda,
                           "torch.build.version": "2.6.0+cpu", "torch.build.cuda": None})
    finding = only_finding(run(facts)["torch.cuda_build"])
    assert finding.title == "torch 2.6.0+cpu is a CPU-only build"
    assert finding.remediation[1].command == (
        f"pip install --upgrade torch torchvision torchaudio --index-url {WHL}/{tag}")
    assert f"(it supports CUDA {driver_cuda})" in finding.remediation[1].text


def test_no_wheel_without_kernels_for_the_gpu_is_recommended():
    """RTX 5090 (sm_120) on an R570 driver (CUDA 12.8): cu13x builds need R580 and cu126
    stops at sm_90, so no current build runs here; the driver must be upgraded first."""
    facts = variant("torch_cpu_wheel_on_gpu_box", {"nvml.cuda_driver_version": "12.8",
                                                   "nvml.driver_version": "570.133.07"})
    install = only_finding(run(facts)["torch.cuda_build"]).remediation[1]
    assert "cu126" not in install.command
    assert "upgrade the driver first" in install.text


def test_cpu_wheel_without_any_gpu_is_only_a_warning():
    """This repository's sandbox: torch 2.13.0+cpu and no NVIDIA GPU at all."""
    result = run(load_fixture_facts("sandbox_cpu_container"))["torch.cuda_build"]
    assert result.status is Status.WARN
    finding = only_finding(result)
    assert finding.code.id == "TOR002"
    assert finding.effective_severity is Severity.WARNING
    assert finding.title == ("torch 2.13.0+cpu is a CPU-only build (this machine has no NVIDIA "
                             "GPU either)")
    assert evidence(finding)["torch.version.cuda"] == "None"


def test_cpu_wheel_with_a_gpu_seen_only_on_the_pci_bus_is_an_error():
    """The GCP A100 without a loaded driver, with a CPU build: the GPU is still there."""
    facts = variant("no_driver", {"torch.build.version": "1.11.0+cpu",
                                  "torch.build.cuda": None})
    finding = only_finding(run(facts)["torch.cuda_build"])
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "torch 1.11.0+cpu is a CPU-only build"


def _probe_killed_after_import(python: str) -> list:
    """The interpreter probe as a wedged driver leaves it: `import torch` worked, then
    torch.cuda.get_arch_list() (which calls is_available()) hung in "torch build"."""
    lines = [
        {"stage": "python"},
        {"key": "python", "value": {"executable": python, "version": "3.8.10",
                                    "implementation": "cpython", "prefix": "/opt/venvs/train",
                                    "base_prefix": "/usr", "platform": "linux",
                                    "cwd": "/data/train", "in_venv": True}},
        {"stage": "packages"}, {"key": "packages", "value": {}},
        {"key": "torch_locations", "value": []},
        {"stage": "import torch"}, {"key": "import_error", "value": None},
        {"stage": "torch build"},
    ]
    stdout = "".join(MARK + json.dumps(line) + "\n" for line in lines)
    result = CommandResult((python, "-c", "<probe>"), -15, stdout, "", timed_out=True,
                           duration_s=90.0)
    return interpret_probe(result, python)


def test_unreported_build_is_not_called_cpu_only():
    python_rec, torch_rec = _probe_killed_after_import("/opt/venvs/train/bin/python")
    assert torch_rec.value["importable"] is True and torch_rec.value["build"] is None
    facts = variant("healthy_8x_v100_pcie", {"python": python_rec.value,
                                             "torch": torch_rec.value})
    result = run(facts)["torch.cuda_build"]
    assert not any(f.code.id == "TOR002" for f in result.findings)
