"""Real torchrun + gloo jobs that hang in planted ways (scripts/planted_hang.py): every
rank's stack is read from outside while the job hangs, and the verdict must name the rank
that holds the job up and the function it waits in."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddp_doctor.forensics.capture import py_spy_path
from ddp_doctor.smoke.launch import free_port

pytestmark = [pytest.mark.spawns, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parent / "scripts" / "planted_hang.py"


@pytest.fixture(autouse=True)
def _needs_py_spy():
    assert py_spy_path() is not None, "py-spy is a dependency of ddp-doctor"


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


# Each planted hang under ``ddp-doctor run --flight-recorder``: (mode, the code and words of
# the stacks' verdict, the code and words of the Flight Recorder's). The stacks are read by
# the same capture a bare ``capture_stacks`` is (forensics/capture.py); each hang was also
# planted and read without the supervisor until the whole run asserted all it did.
JOB_LINE = re.compile(r"^rank \d+(?: step \d+|: (?:started|joined|left training early))$")
RUN_CASES = [
    ("dataloader", "HNG001", "Rank 1 holds the job up: it waits in its data loader from "
     "read_sample_file (planted_hang.py:", "HNG008", "Rank 1 never called collective #"),
    ("barrier", "HNG002", "rank 1 in barrier from train (planted_hang.py:",
     "HNG007", "against rank 1 #"),
    ("lock", "HNG001", "Rank 1 holds the job up: it ", "HNG008",
     "Rank 1 never called collective #"),
    ("exit", "HNG004", "Rank 1 left the job while rank 0 waits in all_reduce",
     "HNG008", "Rank 1 never called collective #"),
    ("skip", "HNG002", "rank 1 in barrier from train (planted_hang.py:",
     "HNG007", "against rank 1 #"),
    ("init", "HNG005", "Rank 0 waits in init_process_group; rank 1 never joined", "HNG010",
     "had not joined a process group"),
]


@pytest.mark.parametrize(("mode", "code", "words", "fr_code", "fr_words"), RUN_CASES,
                         ids=[c[0] for c in RUN_CASES])
def test_run_names_the_culprit_of_each_planted_hang(tmp_path, mode, code, words, fr_code,
                                                    fr_words):
    """``ddp-doctor run --flight-recorder --stall-timeout``: the report leads with the rank
    that holds the job up and its function, the Flight Recorder's finding names the
    collective, the support bundle carries both, within the stall deadline plus 30 s,
    with nothing left running."""
    import json
    import zipfile

    from tests.support.smoke import marked_processes

    stall = 15.0  # above the silence of two torch imports (torchrun's, each rank's) when loaded
    marker = f"planted-{mode}-{tmp_path.name}"
    report, bundle = tmp_path / "report.json", tmp_path / "bundle.zip"
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddp_doctor", "run", "--flight-recorder", "--stall-timeout",
         f"{stall:g}", "--timeout", "240", "--json", str(report), "--bundle", str(bundle),
         "--no-status", "--", sys.executable, "-m", "torch.distributed.run",
         "--nproc-per-node", "2", "--master-port", str(free_port()), str(SCRIPT), mode,
         marker], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The job's lines come through the doctor's stdout as printed: the last one is when
    # the job fell silent, the hang's start as a user sees it.
    last_line = [started]

    def follow() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if JOB_LINE.match(line):  # not the report's own lines that quote them
                last_line[0] = time.monotonic()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        assert proc.stderr is not None
        stderr = proc.stderr.read()  # to its end: the doctor has exited or closed it
        proc.wait(timeout=300)
    finally:
        proc.kill()
    ended = time.monotonic()
    reader.join(timeout=5)
    assert proc.returncode == 125, stderr[-3000:]
    assert marked_processes(marker) == []
    data = json.loads(report.read_text())
    findings = data["findings"]
    lead = findings[0]
    assert (lead["code"], lead["affects"][:1]) == (code, ["rank:1"]), \
        ([(f["code"], f["title"], f["evidence"]) for f in findings], stderr[-2000:])
    assert words in lead["title"], lead["title"]
    recorded = next(f for f in findings if f["code"].startswith("HNG") and
                    f["code"] >= "HNG007")
    assert recorded["code"] == fr_code and fr_words in recorded["title"], recorded
    if fr_code != "HNG010":
        assert recorded["affects"] == ["rank:1"], recorded
    if mode == "lock":  # Lock.acquire is C: named when py-spy unwinds native frames
        assert ("waits on a lock (Lock.acquire) from train (planted_hang.py:" in lead["title"]
                or "is in its own code at train (planted_hang.py:" in lead["title"]), \
            lead["title"]
    if mode == "exit":  # the thread Python waits for is the job's, not the doctor's hook
        assert "its thread 'metrics-uploader' in upload_metrics (planted_hang.py:" \
            in lead["title"], lead["title"]
    run_end = next(f for f in findings if f["code"] == "RUN002")
    said = {e["label"]: e["value"] for e in run_end["evidence"]}
    capture = float(said["read before the stop"].split(", in ")[1].split(" s")[0])
    stopped = float(said["stopped"].split("ended ")[1].split(" s")[0])
    assert capture < 15, said["read before the stop"]  # every rank's stack, and the dumps
    # The verdict is in hand, and nothing left running, within the stall deadline plus
    # 30 s: the stacks, the dumps and the stop all fit in the 30 s.
    assert stopped < 30, said["stopped"]
    # The whole report also waits for the log's diagnosis and this machine's facts (a
    # torch probe in the job's interpreter: 10-15 s on a loaded 2-core machine).
    silent_to_report = ended - last_line[0]
    assert silent_to_report < stall + 45, silent_to_report
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
        assert {f"ddp-doctor-bundle/run/{kind}-rank{rank}.{ext}" for rank in (0, 1)
                for kind, ext in (("stack", "txt"), ("fr", "json"))} <= names, names
    print(f"\n{mode}: {lead['code']} {lead['title']}\n  {recorded['code']} "
          f"{recorded['title']}\n  silent to report {silent_to_report:.1f} s (stall "
          f"{stall:g} s); stacks and dumps read in {capture:.1f} s; {said['stopped']}; "
          f"{ended - started:.1f} s in all")
