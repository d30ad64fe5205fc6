"""launch.plan (PLN001, PLN002) and the launch command, through the runner."""

from __future__ import annotations

from gpu_doctor.categories import Category
from gpu_doctor.model import Severity, Status
from tests.check_helpers import commands, evidence, only_finding, run, variant

PLAN = {"gpus": None, "batch": None, "workers": None, "script": "train.py"}


def plan(**kw):
    return {"plan": {**PLAN, **kw}}


def test_nothing_planned_says_so_and_passes():
    result = run(variant("healthy_8x_v100_pcie"))["launch.plan"]
    assert result.status is Status.PASS
    assert result.summary.startswith("nothing planned: add --gpus N --batch B")


def test_eight_v100s_batch_64_gets_the_torchrun_command():
    result = run(variant("healthy_8x_v100_pcie", plan(gpus=8, batch=64)))["launch.plan"]
    assert result.status is Status.PASS
    assert result.findings == ()
    assert result.summary == ("8 GPUs, 8 images per GPU, one DDP process each "
                              "(not nn.DataParallel); launch with:")
    assert result.command == ("python -m torch.distributed.run --nproc_per_node 8 train.py "
                              "--batch 64 --device 0,1,2,3,4,5,6,7")


def test_device_list_names_the_gpus_cuda_visible_devices_selects():
    facts = variant("healthy_8x_v100_pcie", {**plan(gpus=2, batch=32),
                                             "env_vars.CUDA_VISIBLE_DEVICES": "2,3",
                                             "torch.cuda.device_count": 2})
    result = run(facts)["launch.plan"]
    assert result.command.endswith("--nproc_per_node 2 train.py --batch 32 --device 2,3")


def test_one_gpu_needs_no_torchrun():
    result = run(variant("wsl2_rtx4070", plan(gpus=1, batch=16)))["launch.plan"]
    assert result.summary == "1 GPU, no DDP needed; launch with:"
    assert result.command == "python train.py --batch 16 --device 0"


def test_port_taken_adds_standalone():
    facts = variant("workstation_2x_rtx3090_pcie", {**plan(batch=32),
                                                    "host.rendezvous_port.in_use": True})
    assert run(facts)["launch.plan"].command == (
        "python -m torch.distributed.run --standalone --nproc_per_node 2 train.py --batch 32 "
        "--device 0,1")


def test_batch_30_on_4_gpus():
    """Ultralytics select_device: 'batch=30' must be a multiple of GPU count 4."""
    result = run(variant("healthy_8x_v100_pcie", plan(gpus=4, batch=30)))["launch.plan"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "PLN002"
    assert finding.category is Category.DDP_USAGE_ERROR
    assert finding.title == "--batch 30 on 4 GPUs: 30 is not a multiple of 4; use 28 or 32"
    assert evidence(finding) == {"batch": "30", "GPUs": "4", "per GPU": "7.50"}
    assert commands(finding) == [
        "python -m torch.distributed.run --nproc_per_node 4 train.py --batch 28 --device 0,1,2,3"]


def test_batch_smaller_than_the_gpu_count():
    finding = only_finding(run(variant("healthy_8x_v100_pcie", plan(gpus=8, batch=4)))[
        "launch.plan"])
    assert finding.title.endswith("use 8 or 16")


def test_four_gpus_planned_on_the_two_gpu_workstation():
    """noonghunna/club-3090#138: a 2x RTX 3090 workstation; a 4-GPU launch cannot fit."""
    result = run(variant("workstation_2x_rtx3090_pcie", plan(gpus=4, batch=32)))["launch.plan"]
    finding = only_finding(result)
    assert finding.code.id == "PLN001"
    assert finding.category is Category.GPU_NOT_VISIBLE
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "--gpus 4 but only 2 GPU(s) are usable here"
    assert evidence(finding) == {"GPUs planned": "4", "GPUs usable": "2",
                                 "GPUs on the machine": "2"}
    assert commands(finding) == [
        "python -m torch.distributed.run --nproc_per_node 2 train.py --device 0,1",
        "docker run --gpus all ..."]


def test_cuda_visible_devices_hides_gpus_of_the_v100_server():
    facts = variant("healthy_8x_v100_pcie", {**plan(gpus=4),
                                             "env_vars.CUDA_VISIBLE_DEVICES": "0,1",
                                             "torch.cuda.device_count": 2})
    finding = only_finding(run(facts)["launch.plan"])
    assert finding.title == "--gpus 4 but only 2 GPU(s) are usable here"
    assert evidence(finding)["CUDA_VISIBLE_DEVICES"] == "'0,1'"
    assert "export CUDA_VISIBLE_DEVICES=0,1,2,3" in commands(finding)


def test_no_gpu_at_all():
    finding = only_finding(run(variant("sandbox_cpu_container", plan(batch=8)))["launch.plan"])
    assert finding.code.id == "PLN001"
    assert finding.title == "No GPU is usable here for the planned job"
