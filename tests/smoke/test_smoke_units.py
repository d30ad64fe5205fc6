"""The smoke supervisor's pure parts: log rules, launcher reports, bandwidth, Slurm values,
deadlines, event tailing, the doctor's decision to run the job, and the summary rows."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from ddp_doctor.train_smoke.collectives import allreduce_bus_factor, bus_bandwidth

from ddp_doctor.categories import Category
from ddp_doctor.logrules import match_text
from ddp_doctor.model import Report, Severity
from ddp_doctor.report.smoke import smoke_markdown, smoke_rows
from ddp_doctor.runner import build_report
from ddp_doctor.smoke.launch import (
    SmokeOptions,
    expand_first_host,
    launch_command,
    node_layout,
    port_in_use,
)
from ddp_doctor.smoke.monitor import Outcome, RankState, stall_deadline, supervise
from ddp_doctor.smoke.plan import plan_smoke
from ddp_doctor.smoke.result import summarize
from ddp_doctor.smoke.run import run_once
from ddp_doctor.smoke.verdict import RunContext, criteria_findings, failure_findings
from ddp_doctor.smoke.verdict.context import rerun_command
from ddp_doctor.smoke.verdict.criteria import LOSS_DROP_MIN, LOSS_MIN_STEPS
from ddp_doctor.smoke.verdict.failures import order_failed, rank_exit_codes, stall_findings
from tests.conftest import load_fixture_facts

# torchrun's failure report as knowledge.md §8.2 records it (pytorch/pytorch
# torch/distributed/elastic/multiprocessing/errors/__init__.py).
TORCHRUN_REPORT = """\
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 \
(pid: 812917) of binary: /venv/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Failures:
[1]:
  time      : 2024-05-01_10:00:01
  host      : node1
  rank      : 2 (local_rank: 2)
  exitcode  : -15 (pid: 812916)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 812916
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-01_10:00:00
  host      : node1
  rank      : 3 (local_rank: 3)
  exitcode  : -9 (pid: 812917)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 812917
"""


@pytest.mark.parametrize(("text", "code", "category"), [
    ("RuntimeError: The server socket has failed to listen on any local network address. "
     "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in "
     "use", "LOG001", Category.RENDEZVOUS_PORT_IN_USE),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
     "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
     "LOG002", Category.NCCL_SHARED_MEMORY),
    ("NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled cuda error, NCCL version 2.18.1",
     "LOG003", Category.CUDA_INIT_FAILURE),
    ("NCCL error in: ProcessGroupNCCL.cpp:1269, remote process exited or there was a network "
     "error", "LOG004", Category.NCCL_NETWORK),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "LOG005", Category.GPU_OUT_OF_MEMORY),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
     "allocate memory: you tried to allocate 1073741824 bytes", "LOG006",
     Category.HOST_OUT_OF_MEMORY),
    (TORCHRUN_REPORT, "LOG007", Category.HOST_OUT_OF_MEMORY),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal "
     "SIGKILL", "LOG007", Category.HOST_OUT_OF_MEMORY),
    ("ERROR: Unexpected bus error encountered in worker. This might be caused by "
     "insufficient shared memory (shm).\n  exitcode  : -7 (pid: 12)", "LOG008",
     Category.NCCL_SHARED_MEMORY),
])
def test_log_rules(text, code, category):
    matches = match_text(text)
    assert matches and matches[0].rule.code.id == code
    assert matches[0].rule.code.category is category


def test_healthy_output_matches_no_rule():
    assert match_text("step 30 loss 0.41\nNCCL INFO Bootstrap : Using eth0:10.0.0.2<0>") == []


def test_failed_ranks_from_torchrun_and_spawn_reports():
    assert rank_exit_codes(TORCHRUN_REPORT) == {3: -9, 2: -15}
    spawn = "ProcessExitedException: process 1 terminated with signal SIGKILL"
    assert rank_exit_codes(spawn, node_first_rank=4) == {5: -9}
    assert rank_exit_codes("process 0 terminated with exit code 1") == {0: 1}


def test_bus_bandwidth_is_nccl_tests_formula():
    assert allreduce_bus_factor(2) == 1.0
    assert allreduce_bus_factor(8) == pytest.approx(1.75)
    assert allreduce_bus_factor(1) == 0.0
    algbw, busbw = bus_bandwidth(1_000_000, 0.001, 4)
    assert algbw == pytest.approx(1e9) and busbw == pytest.approx(1.5e9)


def test_deadlines_are_ordered_stall_then_process_group_then_wall():
    for options in (SmokeOptions(), SmokeOptions(timeout=30), SmokeOptions(stall_timeout=5)):
        wall, stall, pg = options.deadlines()
        assert stall < pg < wall


@pytest.mark.parametrize(("nodelist", "first"), [
    ("gpu-a01", "gpu-a01"), ("gpu[03-06,9]", "gpu03"), ("n1,n2", "n1"), ("node[7]", "node7"),
])
def test_first_host_of_a_slurm_nodelist(nodelist, first, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)  # no scontrol here
    assert expand_first_host(nodelist) == first


def test_node_layout_from_slurm_and_options_win(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    env = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "4", "SLURM_NODEID": "2",
           "SLURM_STEP_NODELIST": "gpu[10-13]", "SLURM_STEP_ID": "0"}
    layout = node_layout(SmokeOptions(), env)
    assert (layout.nnodes, layout.node_rank, layout.master_addr) == (4, 2, "gpu10")
    assert layout.master_port == 20000 + 4242 % 20000
    explicit = node_layout(SmokeOptions(nnodes=2, node_rank=1, master_addr="10.0.0.1",
                                        master_port=29501), env)
    assert (explicit.nnodes, explicit.node_rank, explicit.master_addr,
            explicit.master_port) == (2, 1, "10.0.0.1", 29501)
    assert node_layout(SmokeOptions(), {}).nnodes == 1


def test_torchrun_command_is_what_users_type():
    options = SmokeOptions(python="/venv/bin/python")
    layout = node_layout(SmokeOptions(nnodes=2, node_rank=1, master_addr="h0", master_port=7),
                         {})
    cmd = launch_command(options, layout, 7, 4, ["--steps", "3"])
    assert cmd[:3] == ["/venv/bin/python", "-m", "torch.distributed.run"]
    text = " ".join(cmd)
    assert "--nnodes 2 --node_rank 1 --nproc_per_node 4 --master_addr h0 --master_port 7" in text
    assert text.endswith("-m ddp_doctor.train_smoke.worker --steps 3")


def test_port_in_use_sees_a_listening_socket():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert port_in_use(port)
    assert not port_in_use(port)


def _state(rank: int, lines: list[dict], tmp_path) -> RankState:
    path = tmp_path / f"rank{rank}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    state = RankState(rank, str(path))
    state.read_new(1.0)
    return state


def _step(rank: int, step: int, loss: float) -> dict:
    return {"rank": rank, "kind": "step", "phase": "train", "step": step, "loss": loss,
            "images": 8, "t_start": step, "t_end": step + 0.5}


def test_tailing_waits_for_whole_lines(tmp_path):
    path = tmp_path / "rank0.jsonl"
    path.write_text('{"kind": "begin", "phase": "train"}\n{"kind": "st')
    state = RankState(0, str(path))
    assert state.read_new(1.0) == 1 and state.open_phase == "train"
    with open(path, "a") as fh:
        fh.write('ep", "step": 1, "loss": 1.0}\n')
    assert state.read_new(2.0) == 1 and state.steps_done == 1 and state.last_seen == 2.0


def test_stall_names_the_rank_that_fell_behind(tmp_path):
    begin = [{"kind": "begin", "phase": "train"}]
    ahead = _state(0, begin + [_step(0, k, 1.0) for k in (1, 2, 3)], tmp_path)
    behind = _state(1, begin + [_step(1, k, 1.0) for k in (1, 2)], tmp_path)
    ctx = RunContext([ahead, behind], Outcome(None, "stall", [0, 1], 20.0, 0.0), 10, 2, "",
                     {1: "waiting\n"}, 8.0, 60.0)
    [finding] = stall_findings(ctx)
    assert finding.code.id == "SMK002" and finding.affects == ("rank:1",)
    assert finding.title.startswith("Rank 1 stopped making progress in train (after step 2")


def test_stall_in_rendezvous_is_a_rendezvous_failure(tmp_path):
    waiting = _state(0, [{"kind": "begin", "phase": "init_process_group"}], tmp_path)
    ctx = RunContext([waiting], Outcome(None, "stall", [0], 20.0, 0.0), 10, 2, "", {}, 8.0,
                     60.0)
    assert stall_findings(ctx)[0].code.category is Category.RENDEZVOUS_FAILURE


def test_deadline_in_rendezvous_names_the_real_address(tmp_path):
    """--nnodes 2 with the second node never started: the wall deadline passes while rank 0
    waits in init_process_group. That is a rendezvous failure (not 'every rank kept making
    progress'), and the check command carries the address and port actually used."""
    waiting = _state(0, [{"kind": "begin", "phase": "init_process_group"}], tmp_path)
    ctx = RunContext([waiting], Outcome(None, "deadline", [], 60.0, 0.0), 10, 2, "", {}, 8.0,
                     60.0, master=("10.0.0.5", 29511))
    [finding] = failure_findings(ctx)
    assert finding.code.id == "SMK011" and finding.affects == ("rank:0",)
    assert finding.title == ("The ranks never met: rank 0 still in init_process_group at the "
                             "60 s deadline")
    assert finding.remediation[0].command == "nc -zv 10.0.0.5 29511"
    stalled = RunContext([waiting], Outcome(None, "stall", [0], 20.0, 0.0), 10, 2, "", {}, 8.0,
                         60.0, master=("10.0.0.5", 29511))
    assert stall_findings(stalled)[0].remediation[0].command == "nc -zv 10.0.0.5 29511"


def _finished(rank: int, losses: list[float], tmp_path, mismatched=()) -> RankState:
    events = [{"kind": "end", "phase": "all_reduce_check", "ok": True, "value": 3.0,
               "expected": 3.0}]
    events += [_step(rank, k + 1, v) for k, v in enumerate(losses)]
    events += [{"kind": "end", "phase": "checksum", "mismatched_ranks": list(mismatched),
                "digest": "x"}, {"kind": "done", "phase": "done"}]
    return _state(rank, events, tmp_path)


def _criteria(states, steps):
    ctx = RunContext(states, Outcome(0, None), steps, 2, "", {}, 8.0, 60.0, backend="nccl")
    return [f.code.id for f in criteria_findings(ctx)]


def test_criteria_pass_on_a_falling_loss(tmp_path):
    losses = [1.0] * 5 + [0.5] * 5
    assert _criteria([_finished(0, losses, tmp_path), _finished(1, losses, tmp_path)], 10) == []


def test_criteria_flat_loss_nan_and_params_out_of_sync(tmp_path):
    just_under = [1.0] * 5 + [1.0 - LOSS_DROP_MIN / 2] * 5
    assert _criteria([_finished(0, just_under, tmp_path)], 10) == ["SMK006"]
    nan = [1.0, float("nan")] + [0.5] * 8
    assert _criteria([_finished(0, nan, tmp_path)], 10) == ["SMK005"]
    good = [1.0] * 5 + [0.5] * 5
    assert _criteria([_finished(0, good, tmp_path, mismatched=[1])], 10) == ["SMK007"]
    # On CPU/gloo no GPU transport is involved: not nccl_p2p, and no NCCL advice.
    ctx = RunContext([_finished(0, good, tmp_path, mismatched=[1])], Outcome(0, None), 10, 2,
                     "", {}, 8.0, 60.0, backend="gloo")
    [finding] = criteria_findings(ctx)
    assert finding.code.id == "SMK014" and finding.category is Category.UNKNOWN
    assert "NCCL" not in " ".join(s.command or "" for s in finding.remediation)
    assert _criteria([_finished(0, good[:6], tmp_path)], 10) == ["SMK004", "SMK016"]


def _report(fixture: str) -> Report:
    from ddp_doctor.checklist import load_catalogue

    return build_report(load_catalogue(entry_points=[]), load_fixture_facts(fixture))


def test_doctor_skips_the_smoke_job_without_torch():
    facts = load_fixture_facts("torch_missing")
    decision = plan_smoke(_report("torch_missing"), facts.get("torch"), {}, SmokeOptions())
    assert decision == "blocked by TOR001: torch cannot be imported"


def test_doctor_runs_the_cpu_job_here_and_refuses_gpus_it_does_not_have():
    facts = load_fixture_facts("sandbox_cpu_container")
    report = _report("sandbox_cpu_container")
    decision = plan_smoke(report, facts.get("torch"), {}, SmokeOptions())
    # "auto", so the run itself reports that it fell back to the CPU (SMK017)
    assert isinstance(decision, SmokeOptions) and decision.device == "auto"
    blocked = plan_smoke(report, facts.get("torch"), {"gpus": 2}, SmokeOptions())
    assert isinstance(blocked, str) and blocked.startswith("blocked by DRV001")
    assert "--gpus 2 asks for GPUs, 0 usable" in blocked


def test_doctor_sizes_the_job_from_the_launch_plan():
    facts = load_fixture_facts("healthy_8x_h100_nvlink")
    decision = plan_smoke(_report("healthy_8x_h100_nvlink"), facts.get("torch"),
                          {"gpus": 4, "batch": 64, "workers": 3}, SmokeOptions())
    assert isinstance(decision, SmokeOptions)
    assert (decision.device, decision.nproc, decision.batch, decision.workers) == (
        "cuda", 4, 16, 3)


def test_summary_rows_and_markdown():
    data = {"ok": True, "skipped": None, "device": "cuda", "backend": "nccl", "mode": "ddp",
            "launcher": "torchrun", "ranks": 2, "local_ranks": 2, "model": "n", "imgsz": 128,
            "batch": 8, "steps": 30, "steps_done": 30, "loss_first": 2.0, "loss_last": 1.0,
            "params_in_sync": True, "all_reduce_ok": True, "wall_s": 12.5,
            "measurements": {"rendezvous_s": 1.0, "first_step_s": 3.0, "median_step_s": 0.02,
                             "images_per_s_total": 800.0, "allreduce_busbw_gbps": 150.0,
                             "allreduce_bytes": 64 << 20,
                             "per_rank": [{"rank": 0, "images_per_s": 400.0,
                                           "peak_gpu_mem_bytes": 512 << 20},
                                          {"rank": 1, "images_per_s": 400.0,
                                           "peak_gpu_mem_bytes": 510 << 20}]},
            "scaling": {"ranks": 2, "speedup": 1.8, "efficiency": 0.9}}
    rows = dict(smoke_rows(data))
    assert rows["Parameters across ranks"] == "bit-identical"
    assert rows["Peak GPU memory"] == "rank 0: 512 MiB, rank 1: 510 MiB"
    assert rows["Scaling 1 → N ranks"] == "speedup 1.80× on 2 ranks, efficiency 90%"
    assert rows["All-reduce bus bandwidth"].startswith("150.00 GB/s (64 MiB buffer")
    assert "| Images/s | 800 total (400, 400 per rank) |" in smoke_markdown(data)
    assert smoke_rows({"ok": None, "skipped": "blocked by TOR001"}) == [
        ("Smoke training", "not run: blocked by TOR001")]


class _FakeProc:
    """A launcher that never exits (for supervise)."""

    pid = 0
    returncode = None

    def poll(self):
        return None

    def wait(self, timeout=None):
        time.sleep(timeout or 0)
        raise subprocess.TimeoutExpired("fake", timeout)


def test_a_launch_that_fails_to_start_leaves_no_run_directory(private_tmpdir):
    # Nothing ran, and the result names no directory: the user could never find it.
    result = run_once(SmokeOptions(device="cpu", nproc=2, python="/nonexistent/python3"))
    assert [f.code.id for f in result.findings] == ["SMK010"]
    assert result.data["run_dir"] is None
    assert list(private_tmpdir.iterdir()) == []


class _FakeTree:
    proc = _FakeProc()

    def remember(self):
        pass


def test_a_rank_without_events_gets_only_the_wall_deadline(tmp_path):
    silent = RankState(0, str(tmp_path / "none.jsonl"))
    start = time.monotonic()
    outcome = supervise(_FakeTree(), [silent], start, 1.0, 0.2)
    # Stall is 0.2 s, but a rank that never started is only stopped by the wall deadline.
    assert outcome.stopped_by == "deadline" and outcome.wall_s >= 1.0
    ctx = RunContext([silent], outcome, 10, 2, "slow NFS import\n", {}, 0.2, 1.0,
                     backend="gloo", options=SmokeOptions(device="cpu", nproc=2))
    [finding] = failure_findings(ctx)
    assert finding.code.id == "SMK013" and finding.category is Category.UNKNOWN
    assert finding.title.startswith("Rank 0 did not start within")
    evidence = {e.label: e.value for e in finding.evidence}
    assert "slow NFS import" in evidence["launcher stderr and stdout (last lines)"]
    commands = " ".join(s.command or "" for s in finding.remediation)
    assert "import torch" in commands and "NCCL" not in commands
    assert "--device cpu --nproc 2 --timeout 600" in commands


def test_stall_behind_a_rank_that_never_started_names_that_rank(tmp_path):
    waiting = _state(0, [{"kind": "begin", "phase": "init_process_group"}], tmp_path)
    silent = RankState(1, str(tmp_path / "none.jsonl"))
    ctx = RunContext([waiting, silent], Outcome(None, "stall", [0], 50.0, 0.0), 10, 2, "",
                     {}, 8.0, 60.0)
    [finding] = stall_findings(ctx)
    assert finding.code.id == "SMK013" and finding.affects == ("rank:1",)


def test_stall_deadline_scales_with_the_slowest_step(tmp_path):
    slow = {"kind": "step", "phase": "train", "step": 1, "loss": 1.0, "t_start": 0.0,
            "t_end": 20.0}
    state = _state(0, [{"kind": "begin", "phase": "train"}, slow], tmp_path)
    assert state.slowest_step_s == 20.0
    assert stall_deadline([state], 45.0) == 100.0  # 5 x 20 s
    assert stall_deadline([RankState(1, "x")], 45.0) == 45.0
    ctx = RunContext([state], Outcome(None, "stall", [0], 150.0, 0.0, 100.0), 10, 1, "",
                     {}, 45.0, 600.0)
    assert "no event for 100 s" in stall_findings(ctx)[0].title


def test_stall_remediation_by_backend_phase_and_with_the_users_options(tmp_path):
    train = _state(0, [{"kind": "begin", "phase": "train"}, _step(0, 1, 1.0)], tmp_path)
    options = SmokeOptions(device="cpu", nproc=2, steps=12)
    gloo = RunContext([train], Outcome(None, "stall", [0], 20.0, 0.0), 12, 2, "", {}, 8.0,
                      60.0, backend="gloo", options=options)
    finding = stall_findings(gloo)[0]
    commands = [s.command or "" for s in finding.remediation]
    assert not any("NCCL" in c for c in commands)
    assert any(c.endswith("ddp-doctor smoke --device cpu --nproc 2 --steps 12")
               for c in commands)
    nccl = RunContext([train], Outcome(None, "stall", [0], 20.0, 0.0), 12, 2, "", {}, 8.0,
                      60.0, backend="nccl", options=SmokeOptions(device="cuda", nproc=4))
    commands = [s.command for s in stall_findings(nccl)[0].remediation]
    assert "NCCL_P2P_DISABLE=1 ddp-doctor smoke --device cuda --nproc 4" in commands
    data = _state(1, [{"kind": "begin", "phase": "data"}], tmp_path)
    ctx = RunContext([data], Outcome(None, "stall", [1], 20.0, 0.0), 12, 2, "", {}, 8.0,
                     60.0, backend="gloo", options=options)
    commands = [s.command for s in stall_findings(ctx)[0].remediation]
    assert "ddp-doctor smoke --device cpu --nproc 2 --steps 12 --workers 0" in commands
    assert "df -h /dev/shm" in commands


def test_rerun_command_keeps_options_and_applies_changes():
    options = SmokeOptions(device="cpu", nproc=2, imgsz=64, amp=False, sync_bn=True)
    assert rerun_command(options, steps=100) == (
        "ddp-doctor smoke --device cpu --nproc 2 --steps 100 --imgsz 64 --sync-bn --no-amp")
    assert rerun_command(None, steps=100) == "ddp-doctor smoke --steps 100"


def test_too_few_steps_skip_the_loss_criterion_with_a_note(tmp_path):
    flat = [1.306, 1.2, 1.307]
    ctx = RunContext([_finished(0, flat, tmp_path)], Outcome(0, None), 3, 1, "", {}, 8.0,
                     60.0, backend="gloo")
    [note] = criteria_findings(ctx)
    assert note.code.id == "SMK016" and note.effective_severity is Severity.INFO
    assert "Loss not judged" in note.title
    assert "not judged" in summarize({"ranks": 1, "device": "cpu", "steps_done": 3,
                                      "steps": 3, "loss_first": 1.3, "loss_last": 1.3,
                                      "loss_judged": False})
    # From LOSS_MIN_STEPS on, a flat loss is judged again.
    flat10 = [1.0] * LOSS_MIN_STEPS
    assert _criteria([_finished(0, flat10, tmp_path)], LOSS_MIN_STEPS) == ["SMK006"]


SURVIVOR_AND_KILLED = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Failures:
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 11)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 10)
"""


def test_a_killed_rank_comes_before_survivors_peer_errors(tmp_path):
    states = [_state(r, [{"kind": "begin", "phase": "train"}], tmp_path) for r in (0, 1)]
    ctx = RunContext(states, Outcome(1, None), 10, 2, SURVIVOR_AND_KILLED,
                     {0: "torch.distributed.DistBackendError: NCCL error: remote process "
                         "exited or there was a network error, ncclRemoteError\n", 1: ""},
                     8.0, 60.0, backend="nccl")
    findings = failure_findings(ctx)
    assert [f.code.id for f in findings] == ["LOG007"]
    assert findings[0].affects == ("rank:1",)
    assert "rank 0 (exit 1)" in {e.label: e.value for e in findings[0].evidence}["also stopped"]
    # torchrun's root cause first, then signal deaths, then SIGTERMed survivors.
    assert order_failed({0: -15, 1: 1, 2: -9, 3: 1}, "") == [2, 1, 3, 0]
    assert order_failed({1: -9, 3: 1}, "Root Cause (first observed failure):\n[0]:\n"
                        "  rank      : 3 (local_rank: 3)\n") == [3, 1]


def test_run_once_restores_the_signal_handlers(tmp_path):
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    result = run_once(SmokeOptions(device="cpu", nproc=2, python=str(tmp_path / "nopython"),
                                   run_dir=str(tmp_path / "run")))
    assert result.findings[0].code.id == "SMK010"
    assert {sig: signal.getsignal(sig) for sig in before} == before
