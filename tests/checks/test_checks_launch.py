"""launch.plan (PLN001, PLN002) and the launch command, through the runner."""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.model import Severity, Status
from tests.support.checks import GIB, commands, evidence, only_finding, run, variant

PLAN = {"gpus": None, "batch": None, "workers": None, "script": "train.py"}
V100_PY = "/opt/venvs/train/bin/python"  # the interpreter the V100 fixture diagnosed
# The recorded V100 server has GPU 5 full (31.6 of 31.7 GiB held by another process); these
# free it, for the tests about something else.
GPU5_IDLE = {"nvml.gpus.5.memory_used": GIB // 4, "nvml.gpus.5.processes": []}


def plan(**kw):
    return {"plan": {**PLAN, **kw}}


def test_nothing_planned_says_so_and_passes():
    result = run(variant("healthy_8x_v100_pcie"))["launch.plan"]
    assert result.status is Status.PASS
    assert result.summary.startswith("nothing planned: add --gpus N --global-batch B")


def test_eight_v100s_batch_64_gets_the_torchrun_command():
    result = run(variant("healthy_8x_v100_pcie", {**plan(gpus=8, batch=64), **GPU5_IDLE}))[
        "launch.plan"]
    assert result.status is Status.PASS
    assert result.findings == ()
    assert result.summary == ("8 GPUs, 8 images per GPU, one DDP process each "
                              "(not nn.DataParallel); launch with:")
    # launched with the interpreter being diagnosed (--python)
    assert result.command == (f"{V100_PY} -m torch.distributed.run --nproc_per_node 8 "
                              "train.py --batch 64 --device 0,1,2,3,4,5,6,7")


def test_a_full_gpu_cannot_take_a_rank():
    """The recorded V100 server: GPU 5 has 31.6 of 31.7 GiB used by pid 230331, so an 8-GPU
    job's rank 5 would fail with CUDA out of memory."""
    result = run(variant("healthy_8x_v100_pcie", plan(gpus=8, batch=64)))["launch.plan"]
    full = only_finding(result)  # 64 splits over the 8 asked for: no PLN002 error
    assert result.status is Status.WARN
    assert full.code.id == "PLN001"
    assert full.effective_severity is Severity.WARNING
    assert full.title == ("--gpus 8 but GPU 5 is already full: only 7 of the 8 usable GPUs "
                          "have memory for a rank")
    assert evidence(full) == {"GPU 5 (Tesla V100-PCIE-32GB)": "31.6 GiB of 31.7 GiB used"}
    assert full.affects == ("gpu:5",)
    # the way out runs on the other seven, with a batch that splits over them
    assert commands(full)[0] == (f"{V100_PY} -m torch.distributed.run --nproc_per_node 7 "
                                 "train.py --batch 63 --device 0,1,2,3,4,6,7")
    # without --gpus the plan is every usable GPU, and the same GPU is in the way
    only = only_finding(run(variant("healthy_8x_v100_pcie", plan(batch=56)))["launch.plan"])
    assert only.title == ("8 GPUs but GPU 5 is already full: only 7 of the 8 usable GPUs have "
                          "memory for a rank")


def test_device_list_names_the_gpus_cuda_visible_devices_selects():
    facts = variant("healthy_8x_v100_pcie", {**plan(gpus=2, batch=32), **GPU5_IDLE,
                                             "env_vars.CUDA_VISIBLE_DEVICES": "2,3",
                                             "torch.cuda.device_count": 2})
    result = run(facts)["launch.plan"]
    assert result.command.endswith("--nproc_per_node 2 train.py --batch 32 --device 2,3")


def test_one_gpu_needs_no_torchrun():
    result = run(variant("wsl2_rtx4070", plan(gpus=1, batch=16)))["launch.plan"]
    assert result.summary == "1 GPU, no DDP needed; launch with:"
    assert result.command == ("/home/jesse/miniconda3/envs/cuda/bin/python train.py --batch 16 "
                              "--device 0")


def test_port_taken_adds_standalone():
    facts = variant("workstation_2x_rtx3090_pcie", {**plan(batch=32),
                                                    "host.rendezvous_port.in_use": True})
    assert run(facts)["launch.plan"].command == (
        "/home/user/venvs/train/bin/python -m torch.distributed.run --standalone "
        "--nproc_per_node 2 train.py --batch 32 --device 0,1")


def test_batch_30_on_4_gpus():
    """Ultralytics select_device: 'batch=30' must be a multiple of GPU count 4."""
    result = run(variant("healthy_8x_v100_pcie", {**plan(gpus=4, batch=30), **GPU5_IDLE}))[
        "launch.plan"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "PLN002"
    assert finding.category is Category.DDP_USAGE_ERROR
    assert finding.title == "--global-batch 30 on 4 GPUs: 30 is not a multiple of 4; use 28 or 32"
    assert evidence(finding) == {"batch": "30", "GPUs": "4", "per GPU": "7.50"}
    assert commands(finding) == [
        f"{V100_PY} -m torch.distributed.run --nproc_per_node 4 train.py --batch 28 "
        "--device 0,1,2,3"]


def test_batch_smaller_than_the_gpu_count():
    finding = only_finding(run(variant("healthy_8x_v100_pcie", {**plan(gpus=8, batch=4),
                                                                **GPU5_IDLE}))["launch.plan"])
    assert finding.title.endswith("use 8 or 16")


def test_four_gpus_planned_on_the_two_gpu_workstation():
    """noonghunna/club-3090#138: a 2x RTX 3090 workstation; a 4-GPU launch cannot fit."""
    result = run(variant("workstation_2x_rtx3090_pcie", plan(gpus=4, batch=32)))["launch.plan"]
    finding = only_finding(result)
    assert finding.code.id == "PLN001"
    assert finding.category is Category.GPU_NOT_VISIBLE
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "--gpus 4 but only 2 GPUs are usable here"
    assert evidence(finding) == {"GPUs planned": "4", "GPUs usable": "2",
                                 "GPUs on the machine": "2"}
    # the plan for the GPUs there are keeps the user's --batch (32 splits over 2)
    assert commands(finding) == [
        "/home/user/venvs/train/bin/python -m torch.distributed.run --nproc_per_node 2 "
        "train.py --batch 32 --device 0,1",
        "docker run --gpus all ..."]


def test_three_gpus_planned_on_two_judges_the_batch_on_the_two():
    """Review: PLN002 said '--nproc_per_node 3 ... --batch 63' right after PLN001 said only 2
    GPUs are usable; 64 splits over the 2 that are."""
    result = run(variant("workstation_2x_rtx3090_pcie", plan(gpus=3, batch=64)))["launch.plan"]
    finding = only_finding(result)
    assert finding.code.id == "PLN001"
    assert commands(finding)[0].endswith("--nproc_per_node 2 train.py --batch 64 --device 0,1")
    odd = run(variant("workstation_2x_rtx3090_pcie", plan(gpus=3, batch=63)))["launch.plan"]
    assert [f.code.id for f in odd.findings] == ["PLN001", "PLN002"]
    assert commands(odd.findings[0])[0].endswith("--nproc_per_node 2 train.py --batch 62 "
                                                 "--device 0,1")
    assert odd.findings[1].title == ("--global-batch 63 on the 2 GPUs it can use: 63 is not a "
                                     "multiple of 2; use 62 or 64")
    assert "--nproc_per_node 3" not in " ".join(c or "" for c in commands(odd.findings[1]))


def test_cuda_visible_devices_hides_gpus_of_the_v100_server():
    facts = variant("healthy_8x_v100_pcie", {**plan(gpus=4),
                                             "env_vars.CUDA_VISIBLE_DEVICES": "0,1",
                                             "torch.cuda.device_count": 2})
    finding = only_finding(run(facts)["launch.plan"])
    assert finding.title == "--gpus 4 but only 2 GPUs are usable here"
    assert evidence(finding)["CUDA_VISIBLE_DEVICES"] == "'0,1'"
    assert "export CUDA_VISIBLE_DEVICES=0,1,2,3" in commands(finding)


def test_no_gpu_at_all():
    finding = only_finding(run(variant("sandbox_cpu_container", plan(batch=8)))["launch.plan"])
    assert finding.code.id == "PLN001"
    assert finding.title == "No GPU is usable here for the planned job"
