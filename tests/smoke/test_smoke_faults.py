"""Faults in a real 2-rank CPU run: each ends with the right finding, within its deadline,
with no process left behind. Faults are injected with the worker's test hook
(DDP_DOCTOR_SMOKE_FAULT=KIND:RANK:STEP) or a socket bound by the test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddp_doctor.smoke.launch import SmokeOptions
from ddp_doctor.smoke.run import run_smoke
from tests.support.smoke import assert_nothing_left, run_tag

pytestmark = pytest.mark.spawns

# Deadlines a loaded machine cannot reach (CI runs two pytest-xdist workers on two cores):
# a healthy rank is silent for ~15 s in its data and model phases (torch._dynamo's import on
# the first optimizer) at a load of 8 on two cores. A fault that ends the job by itself (a
# killed rank, an NCCL error) needs neither deadline; each test asserts the job ended on its
# own (``stopped_by`` None), an event, rather than a time.
WALL_S = 240.0
STALL_S = 60.0
# The hang tests wait for the stall deadline itself, so it is as short as a loaded machine's
# silent phases allow, with a margin of two.
HANG_STALL_S = 30


def run_with_fault(monkeypatch, fault: str, tmp_path: Path, **extra):
    monkeypatch.setenv("DDP_DOCTOR_SMOKE_FAULT", fault)
    # The failed run keeps its directory by design: put it where pytest cleans up.
    options = dict(device="cpu", nproc=2, steps=12, imgsz=64, timeout=WALL_S,
                   stall_timeout=STALL_S, run_dir=str(tmp_path / "run"))
    return run_smoke(SmokeOptions(**{**options, **extra}))


def only(result, code: str):
    codes = [f.code.id for f in result.findings]
    assert code in codes, codes
    return next(f for f in result.findings if f.code.id == code)


@pytest.mark.slow
def test_a_rank_killed_by_sigkill(monkeypatch, tmp_path):
    result = run_with_fault(monkeypatch, "kill:1:4", tmp_path)
    finding = only(result, "LOG007")
    assert finding.category.value == "host_out_of_memory"
    assert finding.affects == ("rank:1",)
    evidence = {e.label: e.value for e in finding.evidence}
    assert evidence["exit code"] == "-9 (SIGKILL)"
    assert evidence["phase"] == "train (after step 3 of 12)"
    assert not result.ok and result.data["stopped_by"] is None  # no deadline: the exit
    assert result.data["run_dir"]  # kept for the user to read
    assert_nothing_left(run_tag(result.data["command"]))


@pytest.mark.slow
def test_a_rank_that_stops_making_progress(monkeypatch, tmp_path):
    result = run_with_fault(monkeypatch, "hang:1:4", tmp_path, stall_timeout=HANG_STALL_S)
    finding = only(result, "SMK002")
    assert finding.category.value == "collective_timeout"
    assert finding.title.startswith("Rank 1 stopped making progress in train (after step 3")
    assert finding.title.endswith(f"no event for {HANG_STALL_S} s")
    assert finding.affects == ("rank:1",)
    assert result.data["stopped_by"] == "stall"
    # Its stack, read before the job was stopped, names the line it is stuck on; the other
    # rank waits in the collective it never joined.
    culprit = only(result, "HNG001")
    assert culprit.affects == ("rank:1",)
    assert "sleeps in its own code at _apply_fault (worker.py:" in culprit.title
    assert "rank 0 waits in broadcast (DDP's buffer sync before forward)" in culprit.title
    # The dumps stay with the run (and go into a support bundle).
    for rank in (0, 1):
        assert "MainThread" in (tmp_path / "run" / f"stack-rank{rank}.txt").read_text()
    # The smoke job always runs with torch's Flight Recorder: each rank's dump, asked for
    # before the stop, says which collective rank 1 never called.
    recorded = only(result, "HNG008")
    assert recorded.affects == ("rank:1",), recorded.title
    assert recorded.title.startswith("Rank 1 never called collective #"), recorded.title
    for rank in (0, 1):
        assert '"entries"' in (tmp_path / "run" / f"fr-rank{rank}.json").read_text()
    # Located by the stall deadline (stopped_by and the title above), before the process-group
    # timeout made the waiting rank fail on its own and before the wall-clock deadline (before:
    # also "wall_s < 200", a time a loaded machine could exceed).
    assert_nothing_left(run_tag(result.data["command"]))


@pytest.mark.slow
def test_without_py_spy_a_hung_rank_dumps_its_own_stack(monkeypatch, tmp_path):
    """No py-spy (or no ptrace permission): the smoke job's ranks answer SIGUSR1 with a
    faulthandler dump of every thread, and the verdict stands on that."""
    from ddp_doctor.forensics import capture

    monkeypatch.setattr(capture, "py_spy_path", lambda: None)
    result = run_with_fault(monkeypatch, "hang:1:4", tmp_path, stall_timeout=HANG_STALL_S)
    culprit = only(result, "HNG001")
    assert culprit.affects == ("rank:1",) and "_apply_fault" in culprit.title
    assert all(e.source == "faulthandler (SIGUSR1)" for e in culprit.evidence)
    assert (tmp_path / "run" / "local1.stacks").read_text().count("most recent call first")
    assert_nothing_left(run_tag(result.data["command"]))


@pytest.mark.slow
def test_a_rank_that_exits_with_an_nccl_error(monkeypatch, tmp_path):
    result = run_with_fault(monkeypatch, "nccl:1:2", tmp_path)
    # NCCL's "Last error" names the shared-memory segment: that specific code, not the
    # generic "unhandled system error" wrapper (LOG002), is the finding.
    finding = only(result, "LOG042")
    assert finding.category.value == "nccl_shared_memory"
    evidence = {e.label: e.value for e in finding.evidence}
    assert "Error while creating shared memory segment" in evidence["matched"]
    assert "ncclSystemError" in evidence["rank 1 stderr (last lines)"]
    assert evidence["exit code"] == "1"
    assert result.data["stopped_by"] is None  # it ended by its exit, not a deadline
    assert_nothing_left(run_tag(result.data["command"]))


def test_the_given_master_port_is_already_bound():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = run_smoke(SmokeOptions(device="cpu", nproc=2, master_port=port))
    finding = only(result, "SMK009")
    assert finding.category.value == "rendezvous_port_in_use"
    assert str(port) in finding.title
    # Refused before anything was started (before: "took under 5 s", a time a loaded
    # machine could exceed): no launcher command, no run folder.
    assert result.data["command"] is None and result.data["run_dir"] is None


@pytest.mark.slow
def test_sigterm_to_the_doctor_ends_the_whole_job(tmp_path):
    tag = "ddp-doctor-smoke-sigtermtest"
    script = textwrap.dedent(f"""
        from ddp_doctor.smoke import run as smoke
        from ddp_doctor.smoke.launch import SmokeOptions
        smoke.new_tag = lambda: {tag!r}
        smoke.run_smoke(SmokeOptions(device="cpu", nproc=2, steps=500, imgsz=64,
                                     run_dir={str(tmp_path / "run")!r}))
    """)
    doctor = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    events = tmp_path / "run" / "local1.jsonl"
    deadline = time.monotonic() + 240  # the first step: generous for a loaded machine
    while time.monotonic() < deadline and not (events.exists() and '"step"' in events.read_text()):
        time.sleep(0.2)
    assert events.exists(), "the ranks never started"
    os.kill(doctor.pid, signal.SIGTERM)
    assert doctor.wait(timeout=30) == 128 + signal.SIGTERM
    assert_nothing_left(tag)
