"""Real torchrun + gloo jobs that hang in planted ways (scripts/planted_hang.py): every
rank's stack is read from outside while the job hangs, and the verdict must name the rank
that holds the job up and the function it waits in."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ddp_doctor.forensics.capture import capture_stacks, missing_ranks, py_spy_path
from ddp_doctor.forensics.verdict import hang_findings
from ddp_doctor.smoke.launch import free_port

pytestmark = [pytest.mark.spawns, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parent / "scripts" / "planted_hang.py"


def _hang(mode: str, tmp_path: Path, ready: str, settle_s: float = 3.0):
    """Start the job, wait until it hangs (``ready`` printed, then ``settle_s`` of quiet),
    read every rank's stack, stop the job; returns the findings and the capture's cost."""
    out = tmp_path / f"{mode}.out"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
             "--master-port", str(free_port()), str(SCRIPT), mode, f"planted-{mode}"],
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while ready not in out.read_text(errors="replace"):
            assert time.monotonic() < deadline, out.read_text()[-2000:]
            assert proc.poll() is None, out.read_text()[-2000:]
            time.sleep(0.2)
        time.sleep(settle_s)
        procs = psutil.Process(proc.pid).children(recursive=True)
        started = time.monotonic()
        stacks = capture_stacks(procs)
        cost = time.monotonic() - started
        return hang_findings(stacks, missing_ranks(stacks, procs)), cost
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture(autouse=True)
def _needs_py_spy():
    assert py_spy_path() is not None, "py-spy is a dependency of ddp-doctor"


@pytest.mark.parametrize(("mode", "ready", "code", "culprit", "words"), [
    ("dataloader", "rank 0 step 2", "HNG001", "rank:1",
     "Rank 1 holds the job up: it waits in its data loader from read_sample_file"),
    ("barrier", "rank 0 step 2", "HNG002", "rank:1", "rank 1 in barrier from train"),
    # Lock.acquire is C: named when py-spy unwinds native frames, else the line is.
    ("lock", "rank 0 step 2", "HNG001", "rank:1", "Rank 1 holds the job up: it "),
    ("skip", "rank 0 step 2", "HNG002", "rank:1", "rank 1 in barrier from train"),
    ("init", "rank 0: started", "HNG005", "rank:1",
     "Rank 0 waits in init_process_group; rank 1 never joined (rank 1 sleeps in its own "
     "code at main"),
])
def test_the_verdict_names_the_rank_and_the_line_it_waits_on(tmp_path, mode, ready, code,
                                                             culprit, words):
    findings, cost = _hang(mode, tmp_path, ready)
    lead = findings[0]
    assert (lead.code.id, lead.affects[0]) == (code, culprit), [f.title for f in findings]
    assert words in lead.title, lead.title
    if mode == "lock":
        assert ("waits on a lock (Lock.acquire) from train (planted_hang.py:68)" in lead.title
                or "is in its own code at train (planted_hang.py:68)" in lead.title), lead.title
    assert cost < 15
    print(f"\n{mode}: {lead.code.id} {lead.title} (stacks read in {cost:.2f} s)")


def test_run_names_the_culprit_of_a_hung_torchrun_job_and_leaves_nothing(tmp_path):
    """``ddp-doctor run --stall-timeout`` on the user's own hung job: the report leads with
    the rank that holds it up and its line, soon after the stall, with nothing left."""
    import json

    from tests.support.smoke import marked_processes

    stall = 8.0
    marker = f"planted-run-{tmp_path.name}"
    report = tmp_path / "report.json"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ddp_doctor", "run", "--stall-timeout", f"{stall:g}",
         "--timeout", "240", "--json", str(report), "--", sys.executable, "-m",
         "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
         str(SCRIPT), "dataloader", marker],
        capture_output=True, text=True, timeout=300, check=False)
    wall = time.monotonic() - started
    assert proc.returncode == 125, proc.stderr[-3000:]  # run's exit code for a stall
    data = json.loads(report.read_text())
    lead = data["findings"][0]
    assert lead["code"] == "HNG001" and lead["affects"] == ["rank:1"], lead
    assert "waits in its data loader from read_sample_file (planted_hang.py:" in lead["title"]
    assert any(f["code"] == "RUN002" for f in data["findings"])
    assert marked_processes(marker) == []
    # Start-up (two torch imports under torchrun), a few steps, the silence, the stacks and
    # the cleanup: the stall deadline plus 30 s covers all but the start-up.
    silent_s = float(next(e["value"] for f in data["findings"] if f["code"] == "RUN002"
                          for e in f["evidence"] if e["label"] == "stopped")
                     .split("ended ")[1].split(" s")[0])
    assert silent_s < 30
    print(f"\nrun on a planted data-loader hang: {wall:.1f} s in all; {lead['title']}")
