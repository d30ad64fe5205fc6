"""Smoke options that cannot work are refused up front, in one line, with exit code 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ddp_doctor.checklist import load_catalogue
from ddp_doctor.cli import app
from ddp_doctor.runner import build_report
from ddp_doctor.smoke.launch import (
    MODEL_STRIDES,
    NodeLayout,
    OptionsError,
    SmokeOptions,
    check_options,
    node_layout,
    slurm_tasks_on_this_node,
)
from ddp_doctor.smoke.plan import plan_smoke
from tests.support.checks import variant

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_slurm_or_torchrun_env(monkeypatch):
    for name in ("SLURM_JOB_ID", "SLURM_NNODES", "SLURM_NODEID", "SLURM_STEP_ID",
                 "SLURM_PROCID", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)  # no scontrol


def _never_run(*args, **kwargs):
    raise AssertionError("the smoke job must not start")


@pytest.mark.parametrize(("args", "message"), [
    (("--batch-per-process", "1"), "--batch-per-process 1: must be 2 or more (BatchNorm in "
                                   "training needs more than one image per process)"),
    (("--imgsz", "100"), "--imgsz 100: must be a multiple of 32 (the model's largest stride) "
                         "and 64 or more; use 96 or 128"),
    (("--imgsz", "32"), "--imgsz 32: must be a multiple of 32 (the model's largest stride) "
                        "and 64 or more; use 64"),
    (("--device", "cpu", "--sync-bn"), "--sync-bn needs CUDA (SyncBatchNorm only works on GPU "
                                       "modules)"),
    (("--mode", "dp", "--sync-bn"), "--sync-bn needs --mode ddp"),
    (("--nnodes", "2", "--node-rank", "5", "--master-addr", "h0", "--master-port", "29500"),
     "--node-rank 5: must be less than --nnodes (2); node ranks run from 0 to 1"),
    (("--node-rank", "1"), "--node-rank 1: must be less than --nnodes (1)"),
    (("--nnodes", "2"), "--nnodes 2 needs --master-addr and --master-port"),
    (("--nnodes", "2", "--master-port", "29500"), "--nnodes 2 needs --master-addr (the address"),
    (("--timeout", "30", "--stall-timeout", "60"),
     "--stall-timeout 60 must be shorter than --timeout 30"),
    (("--stall-timeout", "1"), "--stall-timeout 1: must be 10 s or more"),
    (("--timeout", "5"), "--timeout 5: must be 20 s or more"),
    (("--steps", "0"), "--steps 0: must be 2 or more"),
    (("--nproc", "0"), "--nproc 0: must be 1 or more"),
    (("--workers", "-1"), "--workers -1: must be 0 or more"),
    (("--nnodes", "0"), "--nnodes 0: must be 1 or more"),
    (("--master-port", "99999"), "--master-port 99999: must be 1 to 65535"),
])
def test_impossible_options_are_one_line_usage_errors(args, message, monkeypatch):
    monkeypatch.setattr("ddp_doctor.smoke.run.run_smoke", _never_run)
    result = runner.invoke(app, ["smoke", *args])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"ddp-doctor: error: {message}")


def test_sync_bn_on_auto_without_gpus_is_a_usage_error(monkeypatch):
    monkeypatch.setattr("ddp_doctor.smoke.device.resolve_device", lambda options: ("cpu", 2))
    monkeypatch.setattr("ddp_doctor.smoke.run.run_smoke", _never_run)
    result = runner.invoke(app, ["smoke", "--sync-bn"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("ddp-doctor: error: --sync-bn needs CUDA")


def test_sync_bn_on_auto_with_gpus_runs_on_cuda(monkeypatch):
    seen = []
    monkeypatch.setattr("ddp_doctor.smoke.device.resolve_device", lambda options: ("cuda", 2))

    def fake_run(options, progress=None):
        seen.append(options)
        raise OptionsError("stop here")

    monkeypatch.setattr("ddp_doctor.smoke.run.run_smoke", fake_run)
    result = runner.invoke(app, ["smoke", "--sync-bn"])
    assert result.exit_code == 2 and "stop here" in result.stderr
    assert [(o.device, o.sync_bn) for o in seen] == [("cuda", True)]


def test_valid_options_pass_and_the_defaults_are_valid():
    check_options(SmokeOptions())
    check_options(SmokeOptions(batch=2, imgsz=64, timeout=20, stall_timeout=10))
    check_options(SmokeOptions(sync_bn=True, device="cuda"))
    with pytest.raises(OptionsError):
        check_options(SmokeOptions(sync_bn=True), device="cpu")


def test_help_documents_when_slurm_values_are_used():
    result = runner.invoke(app, ["smoke", "--help"], terminal_width=200)
    text = " ".join(result.stdout.split())
    assert "only inside an srun step (SLURM_STEP_ID or SLURM_PROCID set)" in text
    assert "salloc shell stays on this node" in text


@pytest.mark.parametrize(("timeout", "stall", "pg"), [
    (180, None, None), (30, None, None), (20, 10, None), (30, 29, None), (600, 500, None),
    (180, 45, 10), (180, 45, 1000), (60, 20, 20),
])
def test_process_group_timeout_sits_between_stall_and_wall(timeout, stall, pg):
    options = SmokeOptions(timeout=timeout, stall_timeout=stall, pg_timeout=pg)
    check_options(options)
    wall, stall_s, pg_s = options.deadlines()
    assert stall_s < pg_s < wall


SALLOC = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_NODEID": "0",
          "SLURM_JOB_NODELIST": "gpu[10-11]"}


def test_a_plain_run_in_an_salloc_shell_stays_on_this_node():
    layout = node_layout(SmokeOptions(), SALLOC)
    assert (layout.nnodes, layout.node_rank, layout.master_port) == (1, 0, None)


@pytest.mark.parametrize("step", [{"SLURM_STEP_ID": "0"}, {"SLURM_PROCID": "1"}])
def test_slurm_values_are_used_inside_an_srun_step(step):
    layout = node_layout(SmokeOptions(), {**SALLOC, **step, "SLURM_NODEID": "1"})
    assert (layout.nnodes, layout.node_rank, layout.master_addr, layout.master_port) == (
        2, 1, "gpu10", 20000 + 4242 % 20000)


def test_explicit_nnodes_fills_each_missing_value_from_slurm():
    layout = node_layout(SmokeOptions(nnodes=2, master_port=29501), SALLOC)
    assert (layout.nnodes, layout.node_rank, layout.master_addr, layout.master_port) == (
        2, 0, "gpu10", 29501)


def test_master_addr_and_port_from_the_environment_outside_slurm():
    layout = node_layout(SmokeOptions(nnodes=2, node_rank=1),
                         {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"})
    assert (layout.master_addr, layout.master_port) == ("10.0.0.1", 29400)
    with pytest.raises(OptionsError, match="needs --master-addr and --master-port"):
        node_layout(SmokeOptions(nnodes=2, node_rank=1), {})


@pytest.mark.parametrize(("environ", "tasks"), [
    ({"SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_NODEID": "1"}, 4),
    ({"SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_NODEID": "1"}, 1),
    ({"SLURM_NTASKS_PER_NODE": "8"}, 8),
    ({"SLURM_LOCALID": "3"}, 4),
    ({}, 1),
])
def test_the_copies_srun_started_on_this_node_are_counted(environ, tasks):
    assert slurm_tasks_on_this_node(environ) == tasks


def test_several_doctors_per_node_under_srun_are_refused():
    """srun --ntasks-per-node=8 ddp-doctor smoke: 8 doctors would each claim node rank 0."""
    environ = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_NNODES": "2",
               "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "gpu[01-02]",
               "SLURM_STEP_TASKS_PER_NODE": "8(x2)", "SLURM_LOCALID": "5"}
    with pytest.raises(OptionsError, match="srun started 8 copies of ddp-doctor on this node"):
        node_layout(SmokeOptions(), environ)
    environ["SLURM_STEP_TASKS_PER_NODE"] = "1(x2)"
    environ["SLURM_LOCALID"] = "0"
    layout = node_layout(SmokeOptions(), environ)
    assert (layout.nnodes, layout.node_rank, layout.master_addr) == (2, 0, "gpu01")


def test_torchruns_own_environment_lays_out_the_nodes_as_torchrun_would():
    """A pod or job script that configures torchrun through PET_* variables."""
    environ = {"PET_NNODES": "4", "PET_NODE_RANK": "2", "PET_MASTER_ADDR": "trainer-master-0",
               "PET_MASTER_PORT": "23456", "MASTER_ADDR": "elsewhere", "MASTER_PORT": "1"}
    layout = node_layout(SmokeOptions(), environ)
    assert layout == NodeLayout(4, 2, "trainer-master-0", 23456)
    assert node_layout(SmokeOptions(nnodes=1), environ).nnodes == 1  # the option wins
    assert node_layout(SmokeOptions(), {"PET_NNODES": "1:4"}).nnodes == 1  # elastic range


def test_model_strides_match_the_detector():
    model = pytest.importorskip("ddp_doctor.train_smoke.detector")
    assert tuple(model.STRIDES) == MODEL_STRIDES


def _plan(facts, plan=None, base=None):
    report = build_report(load_catalogue(entry_points=[]), facts)
    gpus = len((facts.get("nvml") or {}).get("gpus") or [])
    return report, plan_smoke(report, facts.get("torch"), plan or {}, base or SmokeOptions(),
                              nvml_gpus=gpus)


def test_doctor_skips_the_smoke_job_when_cuda_cannot_initialise_on_a_gpu_machine():
    facts = variant("healthy_8x_h100_nvlink", {
        "torch.cuda.available": False, "torch.cuda.device_count": 0,
        "torch.cuda.init_error": "CUDA error: system not yet initialized (802)"})
    report, decision = _plan(facts)
    blockers = [f.code.id for r in report.results if r.area in ("cuda", "driver")
                for f in r.findings if f.effective_severity.name == "ERROR"]
    assert blockers and isinstance(decision, str)
    assert decision.startswith(f"blocked by {blockers[0]}")
    assert "NVML lists 8 GPUs but torch cannot use them" in decision


def test_doctor_skips_the_smoke_job_for_a_cpu_wheel_on_a_gpu_box():
    _, decision = _plan(variant("torch_cpu_wheel_on_gpu_box"))
    assert decision == ("blocked by TOR002: NVML lists 1 GPU but torch cannot use them; "
                        "a CPU run would prove nothing about them")


def test_doctor_still_runs_on_the_cpu_where_there_are_no_gpus():
    # as --device auto: it trains on the CPU and reports that GPU training was not proven
    _, decision = _plan(variant("sandbox_cpu_container"))
    assert isinstance(decision, SmokeOptions) and decision.device == "auto"


def test_the_global_batch_is_shared_by_the_ranks_of_every_node():
    """--global-batch 256 on 2 nodes of 8 GPUs is 16 images per rank, not 32."""
    facts = variant("healthy_8x_h100_nvlink")
    _, one = _plan(facts, {"batch": 256})
    _, two = _plan(facts, {"batch": 256}, SmokeOptions(nnodes=2))
    assert isinstance(one, SmokeOptions) and isinstance(two, SmokeOptions)
    assert (one.batch, two.batch) == (32, 16)


def test_planned_per_rank_batch_is_at_least_two():
    _, decision = _plan(variant("healthy_8x_h100_nvlink"), {"gpus": 8, "batch": 8})
    assert isinstance(decision, SmokeOptions) and decision.batch == 2
    check_options(decision)
