"""host.memory, host.cpu, host.disk, host.nofile, host.port (HST002-HST006), through the runner."""

from __future__ import annotations

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.model import Severity, Status
from tests.support.checks import (
    GIB,
    commands,
    evidence,
    only_finding,
    run,
    variant,
    without_fact,
)

PLAN = {"gpus": None, "batch": None, "workers": None, "script": "train.py"}
HEALTHY = ["healthy_8x_v100_pcie", "workstation_2x_rtx3090_pcie", "wsl2_rtx4070",
           "container_64mb_shm", "sandbox_cpu_container"]
CHECKS = ("host.memory", "host.cpu", "host.disk", "host.nofile", "host.port")


@pytest.mark.parametrize("name", HEALTHY)
def test_recorded_machines_have_room_cores_disk_and_a_free_port(name):
    results = run(variant(name))
    for check_id in CHECKS:
        assert results[check_id].status is Status.PASS, (check_id, results[check_id].summary)
        assert results[check_id].findings == ()


def test_summaries_on_the_v100_server():
    results = run(variant("healthy_8x_v100_pcie"))
    assert results["host.memory"].summary == (
        "376 GiB RAM for 8 GPU process(es); about 111 GiB needed")
    assert results["host.cpu"].summary == "72 CPU cores, 9 per GPU process"
    assert results["host.port"].summary == "port 29500 (torchrun default) is free"


def test_container_memory_limit_below_the_job():
    """OpenBMB/MiniCPM-V#770: ranks killed with exitcode -9 by the OOM killer; here a 2x 3090
    workstation job in a container capped at 16 GiB."""
    facts = variant("workstation_2x_rtx3090_pcie", {
        "host.cgroup_memory_limit": 16 * GIB, "plan": {**PLAN, "workers": 8}})
    finding = only_finding(run(facts)["host.memory"])
    assert finding.code.id == "HST002"
    assert finding.category is Category.HOST_OUT_OF_MEMORY
    assert finding.effective_severity is Severity.WARNING
    assert finding.title == ("16.0 GiB of host RAM for 2 GPU process(es) with 8 DataLoader "
                             "workers each; about 24.0 GiB needed")
    assert evidence(finding)["RAM for this job"] == "16.0 GiB"
    assert evidence(finding)["DataLoader workers per process"] == "8"
    assert "--workers 0" in finding.remediation[0].text
    assert commands(finding)[-1] == "sudo dmesg -T | grep -i -E 'out of memory|killed process'"


def test_assumed_workers_are_called_assumed():
    """Without --workers the count is the YOLO default, and the title says so."""
    facts = variant("workstation_2x_rtx3090_pcie", {"host.cgroup_memory_limit": 16 * GIB})
    finding = only_finding(run(facts)["host.memory"])
    assert finding.title == (
        "16.0 GiB of host RAM for 2 GPU process(es) with 8 DataLoader workers each (assumed: "
        "the YOLO default, min(CPU cores per GPU, 8); give --workers to size your job); about "
        "24.0 GiB needed")


def test_eight_gpus_on_eight_cores():
    """A Slurm step on the 8x V100 node given one CPU per GPU (sched_getaffinity = 8)."""
    facts = variant("healthy_8x_v100_pcie", {"host.cpu_affinity": 8})
    finding = only_finding(run(facts)["host.cpu"])
    assert finding.code.id == "HST003"
    # too few cores is no OOM kill: the job runs, slower than its GPUs could
    assert finding.category is Category.PERFORMANCE_DEGRADED
    assert finding.title == "8 CPU cores for 8 GPU processes: 1.0 per GPU, fewer than 2"
    assert commands(finding) == ["export OMP_NUM_THREADS=1",
                                 "docker run --cpus=16 ...   # Slurm: #SBATCH --cpus-per-task=16"]


@pytest.mark.parametrize(("cores", "workers", "advice"), [
    (8, None, "Load data in each GPU process itself, with no DataLoader workers "
              "(--workers 0), and give each process one OpenMP thread."),
    (16, 2, "Give each GPU process at most 1 DataLoader worker (--workers 1) and one OpenMP "
            "thread."),
    (24, 4, "Give each GPU process at most 2 DataLoader workers (--workers 2) and one OpenMP "
            "thread."),
])
def test_the_workers_advice_reads_right_for_none_one_and_several(cores, workers, advice):
    """8 GPU processes: 8 cores leave no worker (not "at most 0 workers"), 16 leave one."""
    facts = variant("healthy_8x_v100_pcie", {"host.cpu_affinity": cores,
                                             "plan": {**PLAN, "workers": workers}})
    finding = only_finding(run(facts)["host.cpu"])
    assert finding.remediation[0].text == advice


def test_one_core_for_one_gpu_process_is_said_in_the_singular():
    facts = variant("workstation_2x_rtx3090_pcie", {"host.cpu_affinity": 1,
                                                    "plan": {**PLAN, "gpus": 1}})
    finding = only_finding(run(facts)["host.cpu"])
    assert finding.title == "1 CPU core for 1 GPU process: 1.0 per GPU, fewer than 2"


def test_planned_workers_oversubscribe_the_cores():
    facts = variant("workstation_2x_rtx3090_pcie", {"host.cpu_affinity": 12,
                                                    "plan": {**PLAN, "workers": 8}})
    finding = only_finding(run(facts)["host.cpu"])
    assert finding.title == ("2 GPU processes with 8 DataLoader workers each need 18 processes "
                             "on 12 CPU cores")
    assert "--workers 5" in finding.remediation[0].text


def test_nearly_full_disk_for_checkpoints():
    facts = variant("workstation_2x_rtx3090_pcie", {"host.disk.free": 5 * GIB})
    finding = only_finding(run(facts)["host.disk"])
    assert finding.code.id == "HST004"
    assert finding.category is Category.UNKNOWN  # a full disk is not host RAM
    assert finding.title == ("Only 5.0 GiB free in /home/user/llm; a training run needs at "
                             "least 10.0 GiB for checkpoints, logs and caches")
    assert finding.effective_severity is Severity.WARNING
    assert commands(finding)[0] == "du -xh --max-depth=1 /home/user/llm | sort -h | tail -20"
    # pip of the diagnosed interpreter
    assert commands(finding)[1] == ("/home/user/venvs/train/bin/python -m pip cache purge; "
                                    "rm -rf ~/.cache/torch/hub/checkpoints")


@pytest.mark.parametrize(("free_gib", "severity"), [(20, Severity.INFO), (40, None)])
def test_room_for_a_small_model_but_not_the_largest_is_an_info_not_a_warning(free_gib,
                                                                            severity):
    """Two checkpoints of a model that fills a 24 GiB RTX 3090 (fp32 weights and Adam's
    moments, 0.75 × GPU memory each) take up to 36 GiB: with less free, an info only, as
    the model's real size is unknown (an H200 box with 64 GiB free was warned of 280)."""
    facts = variant("workstation_2x_rtx3090_pcie", {"host.disk.free": free_gib * GIB})
    result = run(facts)["host.disk"]
    if severity is None:
        assert not result.findings and result.status is Status.PASS
        return
    finding = only_finding(result)
    assert finding.effective_severity is severity
    assert finding.title == ("20.0 GiB free in /home/user/llm: enough for a small model, "
                             "short of the 36.0 GiB that two checkpoints of a model filling "
                             "the 24.0 GiB GPU could take")


def test_ulimit_1024_with_dataloader_workers():
    """pytorch/pytorch#973: 'received 0 items of ancdata' with the default ulimit -n 1024."""
    facts = variant("workstation_2x_rtx3090_pcie", {"plan": {**PLAN, "workers": 8}})
    finding = only_finding(run(facts)["host.nofile"])
    assert finding.code.id == "HST005"
    assert finding.category is Category.NCCL_SHARED_MEMORY
    assert finding.effective_severity is Severity.WARNING
    assert evidence(finding)["open-files limit (soft/hard)"] == "1024/1048576"
    assert commands(finding) == ["ulimit -n 65536", None]
    assert "set_sharing_strategy('file_system')" in finding.remediation[1].text


def test_low_hard_limit_needs_limits_conf():
    facts = variant("workstation_2x_rtx3090_pcie", {"plan": {**PLAN, "workers": 4},
                                                    "host.nofile_limit": {"soft": 1024,
                                                                          "hard": 4096}})
    finding = only_finding(run(facts)["host.nofile"])
    assert commands(finding)[:2] == [
        "ulimit -n 4096", "echo \"$USER - nofile 65536\" | sudo tee -a /etc/security/limits.conf"]


def test_high_limit_with_workers_passes():
    facts = variant("sandbox_cpu_container", {"plan": {**PLAN, "workers": 8}})
    assert run(facts)["host.nofile"].findings == ()


def test_second_training_on_port_29500():
    """om-ai-lab/VLM-R1#289: a second training while the first holds 29500 (EADDRINUSE)."""
    facts = variant("workstation_2x_rtx3090_pcie", {"host.rendezvous_port": {
        "port": 29500, "source": "torchrun default", "in_use": True, "pid": 4242,
        "process": "python3", "method": "psutil.net_connections", "error": None}})
    finding = only_finding(run(facts)["host.port"])
    assert finding.code.id == "HST006"
    assert finding.category is Category.RENDEZVOUS_PORT_IN_USE
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == ("Port 29500 (torchrun default) is already in use by python3 "
                             "(pid 4242)")
    assert commands(finding) == [
        "ss -ltnp 'sport = :29500'",
        "kill 4242   # still there after a minute: kill -9 4242",
        # the interpreter being diagnosed (--python), not whatever `python` is on PATH
        "/home/user/venvs/train/bin/python -m torch.distributed.run --master_port 29501 "
        "--nproc_per_node 2 train.py",
        "/home/user/venvs/train/bin/python -m torch.distributed.run --standalone "
        "--nproc_per_node 2 train.py"]


def test_master_port_from_the_environment_and_no_pid():
    """meta-pytorch/torchtune#1025: two runs on one machine, the port of another user's job."""
    facts = variant("workstation_2x_rtx3090_pcie", {"host.rendezvous_port": {
        "port": 29600, "source": "MASTER_PORT", "in_use": True, "pid": None,
        "process": None, "method": "psutil.net_connections", "error": None}})
    finding = only_finding(run(facts)["host.port"])
    assert finding.title == "Port 29600 (MASTER_PORT) is already in use"
    assert commands(finding)[1:3] == ["sudo fuser -k 29600/tcp", "export MASTER_PORT=29501"]


def test_unknown_port_state_is_said_not_guessed():
    facts = variant("workstation_2x_rtx3090_pcie", {
        "host.rendezvous_port.in_use": None, "host.rendezvous_port.error": "bind: EACCES"})
    result = run(facts)["host.port"]
    assert result.status is Status.PASS
    assert result.summary == "port 29500: could not tell (bind: EACCES)"


def test_pip_falls_back_to_python_on_path_when_the_interpreter_is_unknown():
    facts = without_fact(variant("workstation_2x_rtx3090_pcie", {"host.disk.free": 5 * GIB}),
                         "python", "probe failed")
    assert commands(only_finding(run(facts)["host.disk"]))[1].startswith(
        "python -m pip cache purge; ")
    spaced = variant("workstation_2x_rtx3090_pcie", {"host.disk.free": 5 * GIB,
                                                     "python.executable": "/opt/my env/python"})
    assert commands(only_finding(run(spaced)["host.disk"]))[1].startswith(
        "'/opt/my env/python' -m pip cache purge; ")  # quoted for the shell
