"""CUD*, DNN*, TOR003-005 and PKG* on recorded machines and variants of them.

Each scenario is a variant of a whole-machine fixture with the value a real thread
showed; the healthy baselines must not trigger any of these codes.
"""

from __future__ import annotations

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.facts.seam import CommandResult
from ddp_doctor.facts.torch_probe import interpret_probe
from ddp_doctor.facts.view import FactsView
from ddp_doctor.model import Severity, Status
from tests.conftest import load_fixture_facts
from tests.facts.test_probe_torch import (
    AFTER_IMPORT,
    ARGV,
    BEFORE_IMPORT,
    CUDA_BEFORE_INIT,
    PY,
    out,
    put,
    stage,
)
from tests.support.checks import commands, evidence, only_finding, run, variant

HEALTHY = ("healthy_8x_v100_pcie", "workstation_2x_rtx3090_pcie", "wsl2_rtx4070")
MY_CODES = {f"CUD00{i}" for i in range(1, 9)} | {"DNN001", "DNN002", "DNN003"} | {
    "TOR003", "TOR004", "TOR005"} | {f"PKG00{i}" for i in range(1, 8)}
UNKNOWN = ("RuntimeError: CUDA unknown error - this may be due to an incorrectly set up "
           "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. "
           "Setting the available devices to be zero.")


def _codes(facts) -> set[str]:
    return {f.code.id for r in run(facts).values() for f in r.findings}


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_baselines_trigger_none_of_these_codes(name):
    results = run(load_fixture_facts(name))
    assert _codes(load_fixture_facts(name)) & MY_CODES == set()
    for check_id in ("cuda.init", "cuda.functional", "cuda.compute_mode", "cudnn.version",
                     "cudnn.conv", "torch.arch_support", "torch.arch_native"):
        assert results[check_id].status is Status.PASS, (check_id, results[check_id].summary)


def test_healthy_v100_summaries_say_what_was_tested():
    results = run(load_fixture_facts("healthy_8x_v100_pcie"))
    assert results["cuda.functional"].summary == "matmul ok on 8 GPUs, slowest 0.91s"
    assert results["cudnn.conv"].summary == "Conv2d forward+backward ok on 8 GPUs"
    assert results["cudnn.version"].summary == "cuDNN 8.5.0 (built against 8.5.0)"
    assert results["torch.arch_support"].summary == "kernels for sm_70 in torch 2.0.1+cu117"


# ---------------------------------------------------------------- CUDA init


def _init_failed(error: str, **extra):
    return variant("healthy_8x_v100_pcie", {
        "torch.cuda.available": False, "torch.cuda.init_error": error,
        "torch.cuda.device_count": 0, "torch.cuda.devices": [], "torch.cuda.functional": [],
        "torch.cuda.cudnn_test": [], "torch.cuda.p2p": None, **extra})


def _probe_stopped_in(stage_lines: list[str], stage_name: str):
    """The V100 machine whose torch probe was killed at its deadline after STAGE_LINES
    (the probe's own output, as tests/facts records it), last in STAGE_NAME."""
    facts = load_fixture_facts("healthy_8x_v100_pcie")
    # Stopped before CUDA's stages: the stream ends after torch.distributed's result.
    after = AFTER_IMPORT if stage_name.startswith("cuda.") else AFTER_IMPORT[:7]
    result = CommandResult(ARGV, -15, out(*BEFORE_IMPORT, *after, *stage_lines), "",
                           timed_out=True, duration_s=1.0)
    _, torch = interpret_probe(result, PY)
    assert torch.value["probe"]["last_stage"] == stage_name
    facts.add(torch)
    return facts


@pytest.mark.parametrize(("lines", "stage_name", "title"), [
    ([], "cuda.init", "CUDA initialisation did not finish: the torch probe was stopped in "
                      "cuda.init"),
    ([stage("cuda.device_count")], "cuda.device_count",
     "CUDA initialisation did not finish: the torch probe was stopped in cuda.device_count"),
    ([stage("cuda.device_properties:3")], "cuda.device_properties:3",
     "CUDA initialisation did not finish: the torch probe was stopped in "
     "cuda.device_properties:3"),
    ([stage("import torchvision")], "import torchvision",
     "CUDA was never initialised: the torch probe was stopped earlier, in import "
     "torchvision"),
])
def test_a_probe_stopped_before_cuda_init_finished_is_cud001_not_a_missing_gpu(
        lines, stage_name, title):
    """A hung cuInit, or a --probe-timeout shorter than torch's and CUDA's start: the
    probe's device count is its starting 0, not CUDA's answer, so no 'torch sees fewer
    GPUs' (VIS003)."""
    results = run(_probe_stopped_in(lines, stage_name))
    finding = only_finding(results["cuda.init"])
    assert finding.code.id == "CUD001" and finding.category is Category.CUDA_INIT_FAILURE
    assert finding.title == title
    assert evidence(finding)["torch probe"] == f"{PY}: no answer within 1s, killed"
    assert "--probe-timeout" in commands(finding)[1]
    assert results["visibility.devices"].findings == ()
    assert results["cuda.functional"].status is Status.SKIP


def test_a_deadline_inside_import_torch_asks_for_time_not_a_reinstall():
    """Seen on the H200 with --probe-timeout 1 (import torch takes 3-4 s there): the report
    said "import torch fails: ProbeFailure" and told the user to rebuild the venv."""
    facts = load_fixture_facts("healthy_8x_v100_pcie")
    result = CommandResult(ARGV, -15, out(*BEFORE_IMPORT), "", timed_out=True, duration_s=1.0)
    _, torch = interpret_probe(result, PY)
    assert torch.value["probe"]["last_stage"] == "import torch"
    facts.add(torch)
    finding = only_finding(run(facts)["torch.import"])
    assert finding.code.id == "TOR001"
    assert finding.title == "import torch did not finish before the probe's deadline (1.0 s)"
    python = FactsView.of(facts).target_python()  # the interpreter training runs with
    assert commands(finding) == [f'time {python} -c "import torch"',
                                 "ddp-doctor check --probe-timeout 300",
                                 f'timeout -s INT 120 {python} -c "import torch"']
    assert not any("-m venv" in c or "pip install" in c for c in commands(finding))


def test_a_probe_that_finished_cuda_init_is_judged_on_its_answer():
    """Stopped later (in a GPU's test): CUDA's start is not what hung."""
    facts = _probe_stopped_in([stage("cuda.device_count"),
                               put("cuda", CUDA_BEFORE_INIT | {"device_count": 2}),
                               stage("cuda.functional:0")], "cuda.functional:0")
    assert run(facts)["cuda.init"].status is Status.PASS


def test_unknown_error_after_suspend_reloads_nvidia_uvm():
    """pytorch/pytorch#88639: 'CUDA unknown error' after suspend, nvidia-smi still works."""
    finding = only_finding(run(_init_failed(UNKNOWN))["cuda.init"])
    assert finding.code.id == "CUD001"
    assert finding.category is Category.CUDA_INIT_FAILURE
    assert finding.title == "CUDA init fails with error 999 (unknown error)"
    assert evidence(finding)["torch.cuda.init()"] == UNKNOWN
    assert commands(finding)[0] == "sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm"


def test_no_cuda_capable_device_points_at_cuda_visible_devices():
    """pytorch/pytorch#49081 comments: CUDA_VISIBLE_DEVICES set to a GPU that is not there."""
    facts = _init_failed("RuntimeError: No CUDA GPUs are available / cudaGetDeviceCount "
                         "returned 100: no CUDA-capable device is detected",
                         **{"env_vars.CUDA_VISIBLE_DEVICES": "8"})
    finding = only_finding(run(facts)["cuda.init"])
    assert finding.code.id == "CUD002"
    assert finding.category is Category.GPU_NOT_VISIBLE
    assert finding.title == "CUDA detects no device although NVML lists 8 GPUs"
    assert evidence(finding)["CUDA_VISIBLE_DEVICES"] == "'8'"
    assert commands(finding)[0] == "unset CUDA_VISIBLE_DEVICES"


def test_busy_devices_in_exclusive_process_mode_reset_the_mode():
    """knowledge §6.4: Exclusive_Process with another process holding GPU 2."""
    facts = _init_failed("RuntimeError: CUDA error: all CUDA-capable devices are busy or "
                         "unavailable", **{"nvml.gpus.2.compute_mode": "Exclusive_Process"})
    finding = only_finding(run(facts)["cuda.init"])
    assert finding.code.id == "CUD003"
    assert finding.affects == ("gpu:2",)
    assert evidence(finding)["GPU 2 compute mode"] == "Exclusive_Process"
    assert commands(finding)[0] == "sudo nvidia-smi -i 2 -c DEFAULT"


def test_error_35_is_the_driver_too_old():
    """The V100 box with a torch built for a CUDA its R470 driver cannot run."""
    facts = _init_failed("RuntimeError: The NVIDIA driver on your system is too old / CUDA "
                         "driver version is insufficient for CUDA runtime version")
    finding = only_finding(run(facts)["cuda.init"])
    assert finding.code.id == "CUD004"
    assert finding.category is Category.DRIVER_TOO_OLD
    assert finding.title == ("CUDA init fails: driver 470.129.06 is too old for torch's CUDA "
                             "runtime")


def test_error_803_is_a_driver_mismatch():
    facts = _init_failed("RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 803: "
                         "system has unsupported display driver / cuda driver combination")
    finding = only_finding(run(facts)["cuda.init"])
    assert finding.code.id == "CUD005"
    assert finding.category is Category.DRIVER_LIBRARY_MISMATCH


def test_no_driver_blocks_cuda_init_instead_of_a_second_red_line():
    results = run(load_fixture_facts("no_driver"))
    assert results["cuda.init"].status is Status.SKIP
    assert results["cuda.init"].summary == "blocked by DRV001 (driver.present)"


# ---------------------------------------------------------------- functional test


def test_illegal_memory_access_on_one_gpu_names_it():
    """ssbuild/moss_finetuning#9: illegal memory access at synchronize on one card."""
    error = "RuntimeError: CUDA error: an illegal memory access was encountered"
    facts = variant("healthy_8x_v100_pcie", {
        "torch.cuda.functional.3": {"index": 3, "ok": False, "timed_out": False,
                                    "error": error, "duration_s": 0.2}})
    result = run(facts)["cuda.functional"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "CUD006"
    assert finding.title == f"GPU 3 (Tesla V100-PCIE-32GB) fails a small matmul: {error}"
    assert finding.affects == ("gpu:3",)
    assert commands(finding)[2] == "sudo nvidia-smi -i 3 -r"
    # The cuDNN test is not blamed on top of a GPU that cannot multiply.
    assert run(facts)["cudnn.conv"].status is Status.SKIP


def test_hung_gpu_is_named_and_left_out():
    """A wedged GPU: the probe's per-GPU deadline expired on GPU 5 of the V100 box."""
    facts = variant("healthy_8x_v100_pcie", {
        "torch.cuda.functional.5": {"index": 5, "ok": False, "timed_out": True,
                                    "error": "no answer within 15s", "duration_s": 15.0}})
    finding = only_finding(run(facts)["cuda.functional"])
    assert finding.code.id == "CUD007"
    assert finding.title == "GPU 5 (Tesla V100-PCIE-32GB) did not finish a small matmul: it hangs"
    assert commands(finding)[-1] == "export CUDA_VISIBLE_DEVICES=0,1,2,3,4,6,7"


def test_laptop_kernel_failure_is_reported_as_the_arch_not_as_a_broken_gpu():
    results = run(load_fixture_facts("laptop_gpu_newer_than_wheel"))
    assert results["torch.arch_support"].status is Status.FAIL
    assert results["cuda.functional"].status is Status.SKIP
    assert results["cuda.functional"].summary == "blocked by TOR003 (torch.arch_support)"


# ---------------------------------------------------------------- compute mode


@pytest.mark.parametrize(("mode", "severity"), [("Exclusive_Process", Severity.WARNING),
                                                ("Prohibited", Severity.ERROR)])
def test_compute_mode_not_default(mode, severity):
    """knowledge §6.4 (NVML nvmlComputeMode_t): GPU 1 of the 3090 workstation."""
    facts = variant("workstation_2x_rtx3090_pcie", {"nvml.gpus.1.compute_mode": mode})
    finding = only_finding(run(facts)["cuda.compute_mode"])
    assert finding.code.id == "CUD008"
    assert finding.effective_severity is severity
    assert finding.title == f"GPU 1 (NVIDIA GeForce RTX 3090) is in {mode} compute mode"
    assert commands(finding)[0] == "sudo nvidia-smi -i 1 -c DEFAULT"


# ---------------------------------------------------------------- cuDNN


def test_cudnn_unavailable_in_a_cuda_build():
    """pytorch/pytorch#122924: the cuDNN wheel's libraries did not load."""
    facts = variant("wsl2_rtx4070", {"torch.libraries.cudnn_available": False,
                                     "torch.libraries.cudnn_version": None})
    finding = only_finding(run(facts)["cudnn.version"])
    assert finding.code.id == "DNN001"
    assert finding.category is Category.CUDNN_FAILURE
    assert finding.title == "cuDNN is not available to torch 2.5.1+cu124 (a CUDA 12.4 build)"


def test_system_cudnn_8_shadows_the_wheels_cudnn_9():
    """knowledge §7.2: torch built against 9.1.0 loading a system cuDNN 8.9.7 first."""
    facts = variant("wsl2_rtx4070", {"torch.libraries.cudnn_version": 8907,
                                     "env_vars.LD_LIBRARY_PATH": "/usr/local/cuda/lib64"})
    finding = only_finding(run(facts)["cudnn.version"])
    assert finding.code.id == "DNN002"
    assert finding.title == ("torch 2.5.1+cu124 was built against cuDNN 9.1.0 but loads "
                             "cuDNN 8.9.7")
    assert evidence(finding)["LD_LIBRARY_PATH"] == "/usr/local/cuda/lib64"
    assert "unset LD_LIBRARY_PATH" in commands(finding)
    # Reinstall the same torch from its own index, never PyPI's newest.
    assert ("/home/jesse/miniconda3/envs/cuda/bin/python -m pip install --force-reinstall "
            "torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124") in commands(finding)


def test_conv_not_initialized_on_one_gpu():
    """pytorch/pytorch#81620: CUDNN_STATUS_NOT_INITIALIZED on an almost-full GPU."""
    error = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED"
    facts = variant("workstation_2x_rtx3090_pcie", {
        "torch.cuda.cudnn_test.1": {"index": 1, "ok": False, "timed_out": False,
                                    "error": error, "duration_s": 0.3}})
    finding = only_finding(run(facts)["cudnn.conv"])
    assert finding.code.id == "DNN003"
    assert finding.title == (f"A cuDNN convolution fails on GPU 1 (NVIDIA GeForce RTX 3090): "
                             f"{error}")
    assert finding.affects == ("gpu:1",)


# ---------------------------------------------------------------- torch build


def test_laptop_rtx5090_has_no_kernels_in_the_cu121_wheel():
    """pytorch/pytorch#150733, mineru-tianshu#62: sm_120 with an arch list ending at sm_90."""
    finding = only_finding(run(load_fixture_facts("laptop_gpu_newer_than_wheel"))[
        "torch.arch_support"])
    assert finding.code.id == "TOR003"
    assert finding.category is Category.TORCH_ARCH_UNSUPPORTED
    assert finding.title == ("torch 2.5.1+cu121 has no kernels for NVIDIA GeForce RTX 5090 "
                             "Laptop GPU (sm_120): its arch list covers sm_50…sm_90 (no sm_120)")
    # Driver 590 (CUDA 13.1): cu130, which R590 supports fully (not cu132 through MVC).
    assert commands(finding)[1] == (
        "/home/robot/berkeley-humanoid-lite/.venv/bin/python -m pip install --upgrade torch "
        "torchvision torchaudio --index-url https://download.pytorch.org/whl/cu130")


def test_v100_on_a_cu130_wheel_names_the_range_it_lacks():
    """A too-old GPU is not 'past the end' of the arch list."""
    facts = variant("healthy_8x_v100_pcie", {
        "torch.build.version": "2.9.0+cu130", "torch.build.cuda": "13.0",
        "torch.build.arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120",
                                  "compute_120"],
        "nvml.cuda_driver_version": "13.0", "nvml.driver_version": "580.82.07"})
    finding = only_finding(run(facts)["torch.arch_support"])
    assert finding.title == ("torch 2.9.0+cu130 has no kernels for Tesla V100-PCIE-32GB (sm_70): "
                             "its arch list covers sm_75…sm_120 (+ PTX compute_120) (no sm_70)")


def test_h100_with_a_cu117_wheel_has_no_sm90():
    """knowledge §2.3: torch 2.0 cu117 wheels stop at sm_86; an H100 (sm_90) gets nothing."""
    facts = variant("healthy_8x_v100_pcie", {"torch.cuda.devices.0.capability": "9.0",
                                             "torch.cuda.devices.0.name": "NVIDIA H100 PCIe"})
    finding = only_finding(run(facts)["torch.arch_support"])
    assert finding.affects == ("gpu:0",)
    assert "NVIDIA H100 PCIe (sm_90)" in finding.title


def test_ptx_only_gpu_is_a_warning():
    """knowledge §2.2 rule B2: the cu130 wheel ships compute_120 PTX; a GPU newer than
    sm_120 (capability 13.0 here) has no cubin and runs only through JIT compilation."""
    facts = variant("workstation_2x_rtx3090_pcie", {"torch.cuda.devices.0.capability": "13.0"})
    result = run(facts)["torch.arch_native"]
    finding = only_finding(result)
    assert finding.code.id == "TOR004"
    assert finding.effective_severity is Severity.WARNING
    assert run(facts)["torch.arch_support"].status is Status.PASS


def test_rocm_build_on_an_nvidia_box():
    """A +rocm wheel pulled by the wrong index URL on the RTX 5090 box of
    torch_cpu_wheel_on_gpu_box (club-3090#617)."""
    facts = variant("torch_cpu_wheel_on_gpu_box", {"torch.build.version": "2.6.0+rocm6.2.4",
                                                   "torch.build.hip": "6.2.41134"})
    finding = only_finding(run(facts)["torch.rocm_on_nvidia"])
    assert finding.code.id == "TOR005"
    assert finding.category is Category.TORCH_CPU_ONLY
    assert finding.title == ("torch 2.6.0+rocm6.2.4 is a ROCm 6.2.41134 (AMD) build on a machine "
                             "with NVIDIA GPUs")


# ---------------------------------------------------------------- packages


def _pkg(version: str, where: str = "/opt/venvs/train/lib/python3.8/site-packages"):
    return [{"version": version, "location": where}]


def test_torchvision_from_another_release():
    """pytorch/vision#8985: torch upgraded alone, torchvision left at the old pair."""
    facts = variant("healthy_8x_v100_pcie", {"python.packages.torchvision":
                                             _pkg("0.14.1+cu117")})
    finding = only_finding(run(facts)["packages.torch_companions"])
    assert finding.code.id == "PKG001"
    assert finding.title == ("torchvision 0.14.1+cu117 does not belong to torch 2.0.1+cu117 "
                             "(it pairs with torchvision 0.15.x)")
    assert commands(finding) == [
        "/opt/venvs/train/bin/python -m pip install --force-reinstall torch==2.0.1 "
        "torchvision==0.15.* --index-url https://download.pytorch.org/whl/cu117"]


def test_torchaudio_from_another_release():
    facts = variant("wsl2_rtx4070", {"python.packages.torchaudio": _pkg("2.4.1+cu124")})
    finding = only_finding(run(facts)["packages.torch_companions"])
    assert finding.code.id == "PKG002"


def test_torchaudio_211_runs_on_newer_torch_but_not_older():
    facts = variant("workstation_2x_rtx3090_pcie", {"python.packages.torchaudio":
                                                    _pkg("2.11.0+cu130")})
    assert run(facts)["packages.torch_companions"].findings == ()


def test_cuda_torch_with_cpu_torchvision():
    """knowledge §3.2: torch +cu124 with torchvision +cpu from PyPI's default index."""
    facts = variant("wsl2_rtx4070", {"python.packages.torchvision": _pkg("0.20.1+cpu")})
    finding = only_finding(run(facts)["packages.torch_companions"])
    assert finding.code.id == "PKG003"
    assert finding.title == ("torch 2.5.1+cu124 is a cu124 build but torchvision 0.20.1+cpu is "
                             "a cpu build")
    assert commands(finding) == ["/home/jesse/miniconda3/envs/cuda/bin/python -m pip install "
                                 "--force-reinstall --no-deps torchvision==0.20.1 "
                                 "--index-url https://download.pytorch.org/whl/cu124"]


def test_torchvision_nms_does_not_exist():
    """pytorch/vision#8985: 'operator torchvision::nms does not exist' at import."""
    error = "RuntimeError: operator torchvision::nms does not exist"
    facts = variant("wsl2_rtx4070", {"torch.torchvision.import_error": error})
    finding = only_finding(run(facts)["packages.torchvision_ops"])
    assert finding.code.id == "PKG004"
    assert finding.category is Category.PACKAGE_CONFLICT
    assert evidence(finding)["import torchvision"] == error
    assert commands(finding)[0] == ("/home/jesse/miniconda3/envs/cuda/bin/python -m pip install "
                                   "--force-reinstall torch==2.5.1 "
                                    "torchvision==0.20.* --index-url "
                                    "https://download.pytorch.org/whl/cu124")


def test_two_torch_installs_user_site_and_venv():
    """A ~/.local torch shadowing the venv's (nouveau_loaded's user-site install pattern)."""
    facts = variant("healthy_8x_v100_pcie", {"python.torch_locations": [
        "/home/ml/.local/lib/python3.8/site-packages/torch",
        "/opt/venvs/train/lib/python3.8/site-packages/torch"]})
    finding = only_finding(run(facts)["packages.single_torch"])
    assert finding.code.id == "PKG005"
    assert finding.title == "2 torch installations are visible to /opt/venvs/train/bin/python"


def test_numpy2_with_torch_2_0():
    """pytorch/pytorch#107302 / neuromorphs/tonic#317: NumPy 2 under a NumPy-1 torch."""
    warning = "Failed to initialize NumPy: _ARRAY_API not found"
    facts = variant("healthy_8x_v100_pcie", {
        "python.packages.numpy": _pkg("2.0.1"),
        "torch.numpy": {"version": "2.0.1", "import_error": None,
                        "bridge_error": "RuntimeError: Numpy is not available",
                        "warnings": [warning]}})
    finding = only_finding(run(facts)["packages.numpy_abi"])
    assert finding.code.id == "PKG006"
    assert finding.title == ("NumPy 2.0.1 is installed but torch 2.0.1+cu117 was built for "
                             "NumPy 1.x")
    assert evidence(finding)["warning at import torch"] == warning
    assert commands(finding)[0] == '/opt/venvs/train/bin/python -m pip install "numpy<2"'


def test_python_outside_the_torch_release_range():
    """RELEASE.md: torch 2.0 supports Python 3.8-3.11; a 3.12 interpreter is outside."""
    facts = variant("healthy_8x_v100_pcie", {"python.version": "3.12.3"})
    finding = only_finding(run(facts)["packages.python_version"])
    assert finding.code.id == "PKG007"
    assert finding.title == "Python 3.12.3 is outside torch 2.0's supported range (3.8-3.11)"
