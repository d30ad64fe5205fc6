"""torch.import (TOR001) and torch.cuda_build (TOR002) on recorded machines and variants."""

from __future__ import annotations

import json

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.facts.seam import CommandResult
from ddp_doctor.facts.torch_probe import MARK, interpret_probe
from ddp_doctor.model import Severity, Status
from tests.conftest import load_fixture_facts
from tests.support.checks import commands, evidence, only_finding, run, variant

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
    install, upgrade, which_python = finding.remediation
    # Driver 470 supports CUDA 11.4 and this is Python 3.8: current torch
    # fits neither. The build that runs here (the healthy V100 fixture's), exact versions,
    # with this interpreter's pip; never an unpinned install that pulls a cu12x torch.
    assert install.command == ("/usr/bin/python3 -m pip install torch==2.0.1 torchvision==0.15.2 "
                               f"--index-url {WHL}/cu117")
    assert install.text == (
        "The current PyTorch release does not fit here: its builds with kernels for these GPUs "
        "need driver 525.60.13 or newer (this driver supports CUDA 11.4); it needs Python 3.10 "
        "to 3.15 (this is 3.8). Install torch 2.0.1 with torchvision 0.15.2 (CUDA 11.7, "
        "cu117): the newest release that runs on this driver through minor-version "
        "compatibility, has kernels for these GPUs and supports Python 3.8.")
    assert install.url == INSTALL_GUIDE
    assert upgrade.text.startswith("Or upgrade the driver to the R580 branch (580.65.06 or newer")
    assert upgrade.command == ("python3.10 -m venv ~/venvs/train && ~/venvs/train/bin/python -m "
                               f"pip install --upgrade torch torchvision --index-url {WHL}/cu126")
    assert "--python /path/to/python" in which_python.text


def test_torch_not_installed_wheel_follows_the_driver_cuda_version():
    """Same V100 server with an R535 driver (CUDA 12.2) and Python 3.11: cu126, the newest
    build that still has Volta (sm_70) kernels, through minor-version compatibility."""
    facts = variant("torch_missing", {"nvml.cuda_driver_version": "12.2",
                                      "nvml.driver_version": "535.129.03",
                                      "python.version": "3.11.9"})
    finding = only_finding(run(facts)["torch.import"])
    install = finding.remediation[0]
    assert install.command == ("/usr/bin/python3 -m pip install --upgrade torch torchvision "
                               f"--index-url {WHL}/cu126")
    assert install.text == ("Install the CUDA 12.6 build (cu126): it runs on this driver (CUDA "
                            "12.2) through minor-version compatibility and has kernels for "
                            "these GPUs.")


def test_torch_not_installed_python_38_on_r535_gets_the_newest_release_for_38():
    """Same server, R535 and Python 3.8: current torch needs 3.10; torch 2.4.1 cu121 is the
    newest release for 3.8 with sm_70, and the driver supports its CUDA 12.1 fully."""
    facts = variant("torch_missing", {"nvml.cuda_driver_version": "12.2",
                                      "nvml.driver_version": "535.129.03"})
    install, _ = only_finding(run(facts)["torch.import"]).remediation
    assert install.command == ("/usr/bin/python3 -m pip install torch==2.4.1 torchvision==0.19.1 "
                               f"--index-url {WHL}/cu121")
    assert "it needs Python 3.10 to 3.15 (this is 3.8)" in install.text


def test_torch_not_installed_without_a_driver_suggests_the_newest_build_and_says_why():
    facts = variant("no_driver", {
        "torch.import_error": {"type": "ModuleNotFoundError",
                               "message": "No module named 'torch'"},
        "torch.importable": False, "torch.build": None})
    finding = only_finding(run(facts)["torch.import"])
    install = finding.remediation[0]
    # The GCP A100 without a driver, Python 3.8: the newest release for 3.8 with sm_80.
    assert install.command.endswith(
        f"-m pip install torch==2.4.1 torchvision==0.19.1 --index-url {WHL}/cu121")


def test_torch_not_installed_on_a_machine_without_a_gpu_agrees_with_tor002():
    """One answer per machine (issue 24): with no NVIDIA GPU on the PCI bus, TOR001 does not
    ask for "the cu130 build for an R580 driver" while TOR002 calls a CPU build right."""
    missing = variant("sandbox_cpu_container", {
        "torch.import_error": {"type": "ModuleNotFoundError",
                               "message": "No module named 'torch'"},
        "torch.importable": False, "torch.build": None})
    install, elsewhere, which_python = only_finding(run(missing)["torch.import"]).remediation
    assert install.command.endswith(f"install torch torchvision --index-url {WHL}/cpu")
    assert "no NVIDIA GPU (see DRV001)" in install.text
    assert elsewhere.url == INSTALL_GUIDE and elsewhere.command is None
    assert "--python /path/to/python" in which_python.text
    for step in (install, elsewhere):
        assert "R580" not in step.text and "/cu1" not in (step.command or "")
    cpu_build = only_finding(run(load_fixture_facts("sandbox_cpu_container"))
                             ["torch.cuda_build"])
    assert "CPU-only torch is right for a machine without GPUs" in \
        cpu_build.remediation[0].text


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
    # Driver 580 (CUDA 13.0) and an H100 (9.0): the CUDA 13.0 build, fully supported by
    # R580: not cu132 through minor-version compatibility.
    assert commands(finding) == [
        "/home/brain/venv/bin/python -m venv ~/venvs/train && . ~/venvs/train/bin/activate",
        f"python -m pip install --upgrade torch torchvision --index-url {WHL}/cu130",
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
        "torch.version.cuda": "absent: this build has no CUDA",
        "interpreter": "/home/paul/comic-translate/.venv/bin/python (Python 3.11.9)",
    }
    uninstall, install, confirm = finding.remediation
    exe = "/home/paul/comic-translate/.venv/bin/python"
    assert uninstall.command == f"{exe} -m pip uninstall -y torch torchvision torchaudio"
    # Driver 595 (CUDA 13.2), an RTX 5090 (12.0): the CUDA 13.2 build, with --python's pip.
    assert install.command == (
        f"{exe} -m pip install --upgrade torch torchvision torchaudio --index-url {WHL}/cu132")
    assert "the CUDA 13.2 build (cu132): it runs on this driver (it supports CUDA 13.2)" in (
        install.text)
    assert install.url == INSTALL_GUIDE
    assert "torch.cuda.device_count()" in confirm.command


@pytest.mark.parametrize(("name", "driver_cuda", "tag", "how"), [
    ("torch_cpu_wheel_on_gpu_box", "13.2", "cu132", "(it supports CUDA 13.2)"),  # RTX 5090
    # R580 (13.0): cu130, fully supported, not cu132 through MVC
    ("torch_cpu_wheel_on_gpu_box", "13.0", "cu130", "(it supports CUDA 13.0)"),
    ("healthy_8x_v100_pcie", "12.2", "cu126", "(CUDA 12.2) through minor-version"),  # R535
    ("healthy_8x_v100_pcie", "13.0", "cu126", "(it supports CUDA 13.0)"),  # cu13x: no sm_70
])
def test_cpu_wheel_replacement_is_chosen_from_the_driver_cuda_version(name, driver_cuda, tag,
                                                                      how):
    driver = {"12.2": "535.129.03", "13.0": "580.82.07", "13.2": "595.45.04"}[driver_cuda]
    facts = variant(name, {"nvml.cuda_driver_version": driver_cuda, "python.version": "3.11.9",
                           "nvml.driver_version": driver,
                           "torch.build.version": "2.6.0+cpu", "torch.build.cuda": None})
    finding = only_finding(run(facts)["torch.cuda_build"])
    assert finding.title == "torch 2.6.0+cpu is a CPU-only build"
    assert finding.remediation[1].command.endswith(
        f"-m pip install --upgrade torch torchvision torchaudio --index-url {WHL}/{tag}")
    assert how in finding.remediation[1].text


def test_no_wheel_without_kernels_for_the_gpu_is_recommended():
    """RTX 5090 (sm_120) on an R570 driver (CUDA 12.8): cu13x builds need R580 and cu126
    stops at sm_90, so no current build runs here; the driver must be upgraded first."""
    facts = variant("torch_cpu_wheel_on_gpu_box", {"nvml.cuda_driver_version": "12.8",
                                                   "nvml.driver_version": "570.133.07"})
    _, install, upgrade, _ = only_finding(run(facts)["torch.cuda_build"]).remediation
    # Say which constraint fails, and both ways out with exact values.
    exe = "/home/paul/comic-translate/.venv/bin/python"
    assert install.command == (f"{exe} -m pip install torch==2.11.0 torchvision==0.26.0 "
                               f"torchaudio==2.11.0 --index-url {WHL}/cu128")
    assert install.text.startswith(
        "The current PyTorch release does not fit here: its builds with kernels for these GPUs "
        "need driver 580.65.06 or newer (this driver supports CUDA 12.8). Install torch 2.11.0 "
        "with torchvision 0.26.0 (CUDA 12.8, cu128)")
    assert upgrade.text == ("Or upgrade the driver to the R580 branch (580.65.06 or newer, "
                            "long-term support), then install the current cu130 build.")
    assert upgrade.command == (f"{exe} -m pip install --upgrade torch torchvision torchaudio "
                               f"--index-url {WHL}/cu130")


def test_cpu_wheel_without_any_gpu_is_only_a_warning():
    """This repository's sandbox: torch 2.13.0+cpu and no NVIDIA GPU at all."""
    result = run(load_fixture_facts("sandbox_cpu_container"))["torch.cuda_build"]
    assert result.status is Status.WARN
    finding = only_finding(result)
    assert finding.code.id == "TOR002"
    assert finding.effective_severity is Severity.WARNING
    assert finding.title == ("torch 2.13.0+cpu is a CPU-only build (this machine has no NVIDIA "
                             "GPU either)")
    assert evidence(finding)["torch.version.cuda"] == "absent: this build has no CUDA"
    # No GPU at all: the advice is the missing GPU or driver, never "uninstall torch".
    steps = [step.text for step in finding.remediation]
    assert steps[0].startswith("Nothing to reinstall yet: this machine shows no NVIDIA GPU")
    assert not any("uninstall" in (step.command or "") for step in finding.remediation)


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
