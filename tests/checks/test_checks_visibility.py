"""visibility.* (VIS001-VIS007) on recorded machines and variants of them, through the runner."""

from __future__ import annotations

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.model import Severity, Status
from tests.support.checks import GIB, MIB, commands, evidence, only_finding, run, variant

BASELINES = ["healthy_8x_h100_nvlink", "healthy_8x_v100_pcie", "workstation_2x_rtx3090_pcie",
             "wsl2_rtx4070"]
VIS_CHECKS = ["visibility.devices", "visibility.mig", "visibility.busy", "visibility.models"]
H100 = "healthy_8x_h100_nvlink"
V100 = "healthy_8x_v100_pcie"


def codes(facts) -> set[str]:
    return {f.code.id for cid, r in run(facts).items() if cid.startswith("visibility.")
            for f in r.findings}


@pytest.mark.parametrize("name", BASELINES)
def test_healthy_baselines_trigger_no_visibility_code_but_the_busy_v100s(name):
    """The V100 capture (bsyonline) really has python jobs on GPUs 2, 5, 6: see below."""
    results = run(variant(name))
    found = {f.code.id for c in VIS_CHECKS for f in results[c].findings}
    assert found == ({"VIS006"} if name == V100 else set())


def test_baseline_summaries():
    results = run(variant(H100))
    assert results["visibility.devices"].summary == "8 of 8 GPUs visible"
    assert results["visibility.models"].summary == "8x NVIDIA H100 80GB HBM3"
    assert results["visibility.busy"].summary == "8 GPUs idle"


def test_index_on_a_box_with_fewer_gpus_hides_everything():
    """pytorch/examples#115: CUDA_VISIBLE_DEVICES=2 on a one-GPU machine, 'no CUDA-capable
    device is detected'. Here: 2 on the 2x RTX 3090 workstation names no GPU."""
    facts = variant("workstation_2x_rtx3090_pcie", {"env_vars.CUDA_VISIBLE_DEVICES": "2"})
    result = run(facts)["visibility.devices"]
    finding = only_finding(result)
    assert result.status is Status.FAIL
    assert finding.code.id == "VIS001" and finding.category is Category.GPU_NOT_VISIBLE
    assert finding.title == ("CUDA_VISIBLE_DEVICES='2' hides all 2 GPUs from CUDA (it starts "
                             "with '2', which names no GPU here)")
    assert "unset CUDA_VISIBLE_DEVICES" in commands(finding)
    table = evidence(finding)["GPU table"]
    assert "0  -  ?  00000000:05:00.0  NVIDIA GeForce RTX 3090" in table


@pytest.mark.parametrize(("value", "why"), [("", "is empty"), ("-1", "is -1")])
def test_empty_and_minus_one_hide_every_gpu(value, why):
    """pytorch/pytorch#40618: CUDA_VISIBLE_DEVICES='' gives is_available() False, 0 devices."""
    facts = variant(H100, {"env_vars.CUDA_VISIBLE_DEVICES": value})
    finding = only_finding(run(facts)["visibility.devices"])
    assert finding.code.id == "VIS001"
    assert finding.title.endswith(f"hides all 8 GPUs from CUDA (it {why})")


def test_list_stops_at_the_first_invalid_entry():
    """CUDA docs: '0,2,-1,1' gives devices 0 and 2 only; on the 8x H100 node '0,1,8,3'."""
    facts = variant(H100, {"env_vars.CUDA_VISIBLE_DEVICES": "0,1,8,3"})
    result = run(facts)["visibility.devices"]
    finding = only_finding(result)
    assert finding.code.id == "VIS002" and result.status is Status.WARN
    assert finding.title == ("CUDA_VISIBLE_DEVICES='0,1,8,3' stops at '8' (this machine has "
                             "GPUs 0-7): CUDA sees only GPUs 0,1")
    assert result.summary == "2 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=0,1,8,3)"
    # the first step corrects the list; unsetting is the alternative, second
    assert finding.remediation[0].text == "List only GPUs that exist here, by index (0-7) or UUID."
    assert finding.remediation[1].text.startswith("Or let the job see every GPU")


def test_mig_uuid_with_mig_off_names_no_device():
    """With MIG disabled on every GPU a MIG- UUID is invalid: CUDA sees no device at all."""
    mig = "MIG-1234abcd-0000-1111-2222-333344445555"
    facts = variant(H100, {"env_vars.CUDA_VISIBLE_DEVICES": mig})
    finding = only_finding(run(facts)["visibility.devices"])
    assert finding.code.id == "VIS001"
    assert finding.title == (f"CUDA_VISIBLE_DEVICES='{mig}' hides all 8 GPUs from CUDA (it "
                             f"starts with '{mig}', which is a MIG instance UUID, but no GPU "
                             f"here has MIG enabled)")
    after = variant(H100, {"env_vars.CUDA_VISIBLE_DEVICES": f"0,{mig}"})
    cut = only_finding(run(after)["visibility.devices"])
    assert cut.code.id == "VIS002"
    assert cut.title == (f"CUDA_VISIBLE_DEVICES='0,{mig}' stops at '{mig}' (this machine has "
                         f"GPUs 0-7; none in MIG mode): CUDA sees only GPU 0")
    on = variant(H100, {"env_vars.CUDA_VISIBLE_DEVICES": mig,
                        "nvml.gpus.0.mig_mode": {"current": 1, "pending": 1}})
    assert run(on)["visibility.devices"].findings == ()


def test_uuids_select_gpus_and_an_unknown_uuid_stops_the_list():
    gpus = [f"GPU-{i:08x}-aaaa-bbbb-cccc-000000000000" for i in range(8)]
    changes = {f"nvml.gpus.{i}.uuid": u for i, u in enumerate(gpus)}
    ok = variant(H100, {**changes, "env_vars.CUDA_VISIBLE_DEVICES": f"{gpus[3]},{gpus[1][:12]}"})
    assert codes(ok) == set()
    assert run(ok)["visibility.devices"].summary.startswith("2 of 8 GPUs visible")
    bad = variant(H100, {**changes, "env_vars.CUDA_VISIBLE_DEVICES": f"{gpus[3]},GPU-deadbeef"})
    assert only_finding(run(bad)["visibility.devices"]).title.endswith("CUDA sees only GPU 3")


def test_torch_seeing_fewer_devices_than_nvml():
    """A container given 1 of 8 device nodes: NVML lists 8, torch.cuda.device_count() is 1."""
    facts = variant(H100, {"torch.cuda.device_count": 1})
    finding = only_finding(run(facts)["visibility.devices"])
    assert finding.code.id == "VIS003"
    assert finding.title == "PyTorch sees 1 CUDA device but the driver lists 8 usable GPUs"
    assert commands(finding)[0] == ("nvidia-smi -L; /usr/bin/python3 -c \"import torch; "
                                    "print(torch.cuda.device_count())\"")


def test_mig_enabled_gpu():
    """k8s-device-plugin#253: A100-PCIE-40GB with MIG mode Enabled."""
    facts = variant(H100, {"nvml.gpus.0.mig_mode": {"current": 1, "pending": 1}})
    result = run(facts)["visibility.mig"]
    finding = only_finding(result)
    assert finding.code.id == "VIS005" and result.status is Status.FAIL
    assert finding.title.startswith("MIG is enabled on GPU 0 (NVIDIA H100 80GB HBM3)")
    assert "sudo nvidia-smi -i 0 -mig 0" in commands(finding)
    assert finding.affects == ("gpu:0",)


def test_busy_gpus_on_the_real_v100_server():
    """bsyonline's 8x V100: python pids 88420 (27064 MiB on GPU 2), 230331 (32319 MiB on GPU 5,
    99% full) and 618979 (GPU 6). pytorch/pytorch#2379: device_count counts busy GPUs too."""
    result = run(variant(V100))["visibility.busy"]
    finding = only_finding(result)
    assert finding.code.id == "VIS006" and finding.category is Category.GPU_OUT_OF_MEMORY
    assert result.status is Status.WARN
    assert finding.title == ("GPUs 2, 5, 6 already in use by other processes (3 of 8 this job "
                             "would use)")
    assert evidence(finding)["GPU 5 (Tesla V100-PCIE-32GB)"] == (
        "31.6 GiB of 31.7 GiB used; pid 230331 python")  # the size once, not twice
    # nvidia-smi's numbers mean the same GPUs to CUDA only in PCI bus order
    assert "export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1,3,4,7" in \
        commands(finding)


def test_busy_names_the_process_and_user_when_known_and_respects_visible_devices():
    proc = [{"pid": 4242, "used_memory": 20 * GIB, "name": "python3", "username": "alice"}]
    facts = variant(H100, {"nvml.gpus.6.processes": proc, "nvml.gpus.6.memory_used": 20 * GIB})
    finding = only_finding(run(facts)["visibility.busy"])
    assert evidence(finding)["GPU 6 (NVIDIA H100 80GB HBM3)"] == (
        "20.0 GiB of 79.6 GiB used; pid 4242 python3 user alice")
    two = variant(H100, {"nvml.gpus.6.processes": [*proc, {**proc[0], "pid": 4343,
                                                           "used_memory": 2 * GIB}],
                         "nvml.gpus.6.memory_used": 22 * GIB})
    assert evidence(only_finding(run(two)["visibility.busy"]))[
        "GPU 6 (NVIDIA H100 80GB HBM3)"] == ("22.0 GiB of 79.6 GiB used; pid 4242 python3 user "
                                            "alice 20.0 GiB; pid 4343 python3 user alice 2.0 GiB")
    elsewhere = variant(H100, {"nvml.gpus.6.processes": proc,
                               "env_vars.CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert run(elsewhere)["visibility.busy"].findings == ()


def test_memory_held_by_an_invisible_process_counts_small_use_does_not():
    hidden = variant("workstation_2x_rtx3090_pcie", {"nvml.gpus.1.memory_used": 12 * GIB})
    assert "no process visible" in evidence(only_finding(run(hidden)["visibility.busy"]))[
        "GPU 1 (NVIDIA GeForce RTX 3090)"]
    display = variant("workstation_2x_rtx3090_pcie", {"nvml.gpus.1.memory_used": 600 * MIB})
    assert run(display)["visibility.busy"].findings == ()


def test_mixed_models_and_device_order():
    """aikitoria/open-gpu-kernel-modules#5: an RTX 5090 and an RTX 4090 in one box."""
    facts = variant("workstation_2x_rtx3090_pcie", {
        "nvml.gpus.1.name": "NVIDIA GeForce RTX 4090",
        "torch.cuda.devices.0.pci_bus_id": 0x84, "torch.cuda.devices.1.pci_bus_id": 0x05})
    result = run(facts)["visibility.models"]
    found = {f.code.id: f for f in result.findings}
    assert set(found) == {"VIS007", "VIS004"}
    # nothing is hidden, so not gpu_not_visible: a mix of models runs at the slowest pace
    assert found["VIS007"].category is Category.PERFORMANCE_DEGRADED
    assert found["VIS007"].title.startswith(
        "This job would mix GPU models: 1x NVIDIA GeForce RTX 3090 (GPU 0), "
        "1x NVIDIA GeForce RTX 4090 (GPU 1)")
    assert found["VIS004"].severity is None and found["VIS004"].code.severity is Severity.WARNING
    # the probe's bus numbers show cuda:0 is nvidia-smi GPU 1 here
    assert "1  cuda:0  ?  00000000:84:00.0  NVIDIA GeForce RTX 4090" in evidence(
        found["VIS004"])["GPU table"]
    assert "export CUDA_DEVICE_ORDER=PCI_BUS_ID" in commands(found["VIS004"])
    ordered = variant("workstation_2x_rtx3090_pcie", {
        "nvml.gpus.1.name": "NVIDIA GeForce RTX 4090", "env_vars.CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert {f.code.id for f in run(ordered)["visibility.models"].findings} == {"VIS007"}
