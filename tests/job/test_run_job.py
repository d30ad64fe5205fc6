"""``ddp-doctor run`` on real DDP jobs: two gloo ranks under ``python -m torch.distributed.run``.

Each case starts the doctor as a real process around tests/job/scripts/ddp_job.py with a
marker of its own on the command line, and ends by proving that no process carrying the
marker is left. Except the case that gathers this machine's facts, the checks judge a saved
healthy snapshot (``--facts``), which keeps each case to the job's own few seconds.

Time bounds are measured against this machine as it is now, not fixed: the healthy job's
own wall time (``ok_job``, start-up of torchrun and two ranks that import torch, then a few
all-reduces) is the yardstick, so a machine loaded by other jobs, where that start-up takes
four times as long, stretches the bounds with it instead of failing the tests.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Optional

import jsonschema
import pytest

from ddp_doctor.smoke.launch import free_port
from tests.conftest import FACTS_DIR
from tests.support.smoke import marked_processes

pytestmark = pytest.mark.spawns

SCRIPT = Path(__file__).parent / "scripts" / "ddp_job.py"
HEALTHY = FACTS_DIR / "healthy_8x_h100_nvlink.json"
GRACE_S = 3.0  # the doctor's SIGTERM-to-SIGKILL grace period
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "report.schema.json")
                    .read_text(encoding="utf-8"))


class Job:
    """One ``ddp-doctor run`` of the test job, and what it left."""

    def __init__(self, tmp_path: Path, mode: str, *options: str, facts: bool = True,
                 port: Optional[int] = None, launcher: tuple[str, ...] = (),
                 report_to_stdout: bool = False) -> None:
        self.marker = f"ddpjob-{uuid.uuid4().hex}"
        self.report_path = tmp_path / "report.json"
        report = "-" if report_to_stdout else str(self.report_path)
        self.command = [
            sys.executable, "-m", "ddp_doctor", "run", *options, "--json", report,
            *(["--facts", str(HEALTHY)] if facts else []), "--",
            sys.executable, "-m", "torch.distributed.run", *launcher, "--nproc-per-node", "2",
            "--master-port", str(port or free_port()), str(SCRIPT), mode, self.marker]
        self.report_to_stdout = report_to_stdout

    def run(self) -> Job:
        started = time.monotonic()
        proc = subprocess.run(self.command, capture_output=True, text=True, timeout=150,
                              check=False)
        self.wall_s = time.monotonic() - started
        self.rc, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr
        assert marked_processes(self.marker) == []
        return self

    @property
    def report(self) -> dict[str, Any]:
        text = self.stdout if self.report_to_stdout else self.report_path.read_text()
        data = json.loads(text)
        jsonschema.validate(data, SCHEMA)  # the same report format as every command's
        return dict(data)

    def findings(self) -> list[dict[str, Any]]:
        return list(self.report["findings"])

    def finding(self, code: str) -> dict[str, Any]:
        found = [f for f in self.findings() if f["code"] == code]
        assert found, (code, [f["code"] for f in self.findings()], self.stderr[-3000:])
        return found[0]


def evidence(finding: dict[str, Any], label: str) -> str:
    values = [e["value"] for e in finding["evidence"] if e["label"] == label]
    assert values, (label, finding["evidence"])
    return str(values[0])


@pytest.mark.slow
def test_a_rank_out_of_memory_is_named_with_its_rank_and_the_machine_is_checked(tmp_path):
    job = Job(tmp_path, "oom", "--nccl-debug", facts=False).run()
    assert job.rc == 1, job.stderr[-3000:]
    # The user's output passed through unchanged on stdout.
    assert "rank 1: started in mode oom" in job.stdout
    report = job.report
    codes = [f["code"] for f in report["findings"]]
    assert codes[0] == "RUN001"
    oom = job.finding("LOG005")
    assert oom["category"] == "gpu_out_of_memory" and oom["affects"] == ["rank 1"]
    run001 = job.finding("RUN001")
    assert "gpu_out_of_memory" in run001["title"]
    assert evidence(run001, "category").startswith("gpu_out_of_memory")
    assert "NCCL_DEBUG=INFO" in evidence(run001, "--nccl-debug")
    # Solved threads with similar errors come with the log's diagnosis, after its cause.
    similar = job.finding("DIAG008")
    assert codes.index("DIAG008") > codes.index("LOG005")
    assert all(" - https://" in e["value"] for e in similar["evidence"])
    # The log is kept and holds what the ranks saw: the variables --nccl-debug set.
    log = Path(evidence(run001, "log"))
    assert "NCCL_DEBUG=INFO" in log.read_text()
    # The job's result, the log's, then only the checks that found a problem (this
    # machine's own facts were gathered: "live").
    ids = [c["id"] for c in report["checks"]]
    assert ids[:2] == ["run.job", "run.log"]
    assert all(c["status"] in ("fail", "warn") for c in report["checks"][2:])
    assert "facts: live" in report["facts_source"]
    log.unlink()
    log.parent.rmdir()


@pytest.fixture(scope="module")
def ok_job(tmp_path_factory) -> Job:
    """One healthy run, its report on stdout: the success test asserts on it, and its wall
    time is how long this machine takes now to start and end the job."""
    return Job(tmp_path_factory.mktemp("ok"), "ok", report_to_stdout=True).run()


@pytest.mark.slow
def test_a_hung_rank_is_stopped_at_the_stall_deadline_with_every_process(tmp_path, ok_job):
    # The job is silent while torchrun and the ranks import torch, before its first line;
    # the stall deadline must outlast that, or it stops a job that has not hung yet (a fixed
    # 4 s did, on a loaded machine). The healthy job's whole run is longer than that silence.
    stall = max(4.0, 1.25 * ok_job.wall_s + 2)
    deadline = max(90.0, 3 * stall)
    job = Job(tmp_path, "hang", "--stall-timeout", f"{stall:.0f}", "--timeout",
              f"{deadline:.0f}", launcher=("--tee", "3")).run()
    assert job.rc == 125, job.stderr[-3000:]  # a stall's own exit code
    hang = job.finding("RUN002")
    assert hang["category"] == "collective_timeout"
    assert "first all_reduce" in evidence(hang, "last line")
    assert "rank 1: first all_reduce" in evidence(hang, "last line of rank 1")
    assert "rank 0: first all_reduce" in evidence(hang, "last line of rank 0")
    # Each rank's stack, read before the job was stopped, names the one that holds it up.
    culprit = job.finding("HNG001")
    assert culprit["affects"] == ["rank:1"]
    # "sleeps" when py-spy could unwind the native frames (time.sleep is C), else the line.
    assert "Rank 1 holds the job up: it " in culprit["title"]
    assert "in its own code at main (ddp_job.py:" in culprit["title"]
    assert "rank 0 waits in all_reduce from main (ddp_job.py:" in culprit["title"]
    assert job.report["findings"][0]["code"] == "HNG001"
    stopped = evidence(hang, "stopped")
    took = float(stopped.split("ended ")[1].split(" s")[0])
    # SIGKILL follows SIGTERM after the grace period, after every rank's stack was read
    # (py-spy, all ranks at once, 15 s at most); the sweep gets a generous margin, which a
    # loaded machine's slow process listing needs.
    assert took <= GRACE_S + 25.0, stopped
    # Stopped by the stall deadline, not the later one: start-up and end (twice the healthy
    # job's, for the load to vary between the two runs), the silence, the stacks and the
    # cleanup.
    assert "RUN003" not in [f["code"] for f in job.findings()]
    assert job.wall_s < 2 * ok_job.wall_s + stall + GRACE_S + 25, (job.wall_s, ok_job.wall_s)


@pytest.mark.slow
def test_a_rank_killed_by_sigkill_is_found_by_the_log_rule(tmp_path):
    job = Job(tmp_path, "sigkill").run()
    assert job.rc == 1
    killed = job.finding("LOG007")
    assert killed["affects"] == ["rank 1"]
    assert "LOG007" in job.finding("RUN001")["title"]
    # The saved snapshot is healthy: no check result joins the run's own.
    assert [c["id"] for c in job.report["checks"]] == ["run.job", "run.log"]


def test_a_successful_job_exits_0_with_the_report_on_stdout_and_the_output_on_stderr(ok_job):
    job = ok_job
    assert job.rc == 0, job.stderr[-3000:]
    report = job.report  # stdout is the JSON report alone
    assert report["findings"] == [] and report["exit_code"] == 0
    assert "succeeded" in report["checks"][0]["summary"]
    assert "rank 0: done" in job.stderr and "rank 1: done" in job.stderr
    assert "kept in" not in job.stderr  # a success keeps no log


@pytest.mark.slow
def test_until_stops_a_long_job_as_a_success(tmp_path, ok_job):
    log = tmp_path / "job.log"
    job = Job(tmp_path, "long", "--until", r"milestone\s+reached", "--log", str(log)).run()
    assert job.rc == 0, job.stderr[-3000:]
    assert job.report["checks"][0]["summary"].startswith("stopped at --until after ")
    assert job.report["verdict"] == "command succeeded"
    text = log.read_text()
    assert "milestone reached" in text and "rank 0: step 59" not in text
    # The job alone runs a minute; the milestone comes 3 s after its start-up.
    assert job.wall_s < 2 * ok_job.wall_s + 3 + 10, (job.wall_s, ok_job.wall_s)


@pytest.mark.slow
def test_the_rendezvous_port_taken_is_log001(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        job = Job(tmp_path, "ok", port=port).run()
    assert job.rc == 1
    assert job.finding("LOG001")["category"] == "rendezvous_port_in_use"
    assert evidence(job.finding("RUN001"), "category").startswith("rendezvous_port_in_use")


@pytest.mark.slow
def test_wall_clock_timeout_is_run003(tmp_path, ok_job):
    # The deadline must fall after the first step is printed and well before the job's
    # minute ends. A fixed 8 s failed on a loaded machine, where start-up alone took longer;
    # half as long again as the healthy job's whole run (plus 4 s) leaves the job time to
    # print steps at any load.
    timeout = max(8.0, 1.5 * ok_job.wall_s + 4)
    job = Job(tmp_path, "long", "--timeout", f"{timeout:.0f}").run()
    assert job.rc == 124  # GNU timeout's code for a deadline
    late = job.finding("RUN003")
    # The job's own last words before the deadline (how far it got depends on the load:
    # a step, rank 0's milestone, or a rank's start-up line), never the launcher's while it
    # is stopped; each rank's last line is its own.
    assert re.search(r"^rank \d: |^milestone reached$", evidence(late, "last line"))
    for item in late["evidence"]:
        who = re.fullmatch(r"last line of (rank \d)", item["label"])
        if who:
            assert item["value"].startswith(who.group(1) + ": "), item
    assert job.wall_s < timeout + GRACE_S + 25, (job.wall_s, timeout)


@pytest.mark.slow
def test_sigterm_to_the_doctor_ends_the_whole_job(tmp_path):
    job = Job(tmp_path, "hang", "--stall-timeout", "60")
    proc = subprocess.Popen(job.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the job is up once both ranks have all-reduced once
            if "rank 1: first all_reduce" in line:
                break
        assert len(marked_processes(job.marker)) >= 3  # torchrun and its two ranks
        os.kill(proc.pid, signal.SIGTERM)
        _out, err = proc.communicate(timeout=GRACE_S + 60)  # a margin for a loaded machine
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert "interrupted" in err
    assert marked_processes(job.marker) == []


@pytest.mark.parametrize(("options", "says"), [
    ((), "give the command to supervise after `--`"),
    (("--until", "("), "--until '(': not a regular expression"),
    (("--timeout", "soon"), "--timeout 'soon': not a number"),
    (("--stall-timeout", "30", "--timeout", "10"), "must be less than --timeout"),
])
def test_bad_invocations_are_one_line_and_exit_2(options, says):
    proc = subprocess.run([sys.executable, "-m", "ddp_doctor", "run", *options, "--",
                           *(["true"] if options else [])],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_a_detached_orphan_of_the_command_is_ended_too(tmp_path):
    """A process that left the command's session and lost its parent is still the run's:
    the tag in its environment names it."""
    marker = f"orphan-{uuid.uuid4().hex}"
    child = [sys.executable, "-c", "import time; time.sleep(300)", marker]
    parent = (f"import subprocess, sys; subprocess.Popen({child!r}, start_new_session=True); "
              "print('started a detached child', flush=True); sys.exit(4)")
    proc = subprocess.run([sys.executable, "-m", "ddp_doctor", "run", "-q", "--facts",
                           str(HEALTHY), "--json", str(tmp_path / "r.json"), "--",
                           sys.executable, "-c", parent],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 4, proc.stderr  # the command's own exit code
    assert "started a detached child" in proc.stdout
    assert marked_processes(marker) == []
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["findings"][0]["code"] == "RUN001"
    assert "exit status 4" in report["findings"][0]["title"]


@pytest.mark.slow
def test_every_report_output_of_a_failed_run_is_written(tmp_path):
    """The common options work as for check: a bundle, Markdown and JUnit from one report."""
    proc = subprocess.run([sys.executable, "-m", "ddp_doctor", "run", "--facts", str(HEALTHY),
                           "--bundle", str(tmp_path / "b.zip"),
                           "--markdown", str(tmp_path / "r.md"),
                           "--junit", str(tmp_path / "j.xml"), "--",
                           sys.executable, "-c",
                           "print('RuntimeError: Address already in use'); "
                           "print('export HF_TOKEN=' + 'hf_' + 'Q8rTzLm3VbNx7KpWc2YdHs9JfGa4Ue'); "
                           "raise SystemExit(2)"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    import xml.etree.ElementTree as ET
    import zipfile

    bundle = zipfile.ZipFile(tmp_path / "b.zip")
    names = bundle.namelist()
    assert "ddp-doctor-bundle/report.json" in names
    # the command's own output travels with the ticket, its secrets removed
    log = bundle.read("ddp-doctor-bundle/run/output.log").decode()
    assert "RuntimeError: Address already in use" in log
    assert "hf_Q8rTzLm3" not in log and "HF_TOKEN=<redacted>" in log
    # ...and the bundle is diagnosed from it, the recorded report first
    again = subprocess.run([sys.executable, "-m", "ddp_doctor", "diagnose",
                            str(tmp_path / "b.zip"), "--json", "-"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert "LOG001" in [f["code"] for f in json.loads(again.stdout)["findings"]]
    assert "`LOG001`" in (tmp_path / "r.md").read_text()
    cases = [c.get("name") for c in ET.parse(tmp_path / "j.xml").iter("testcase")]
    assert cases == ["run.job", "run.log"]  # the healthy snapshot adds no failed check
    assert "kept in" in proc.stderr  # a failure keeps the log and says where


NO_DRIVER = FACTS_DIR / "no_driver.json"


def run_doctor(tmp_path: Path, *options: str, command: list[str], timeout: float = 90
               ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "ddp_doctor", "run", *options, "--json",
                           str(report), "--", *command],
                          capture_output=True, text=True, timeout=timeout, check=False)
    data = json.loads(report.read_text())
    jsonschema.validate(data, SCHEMA)
    return proc, data


@pytest.mark.slow
def test_the_commands_own_exit_code_and_its_streams_stay_apart(tmp_path):
    """Before: exit code 1 for a command exiting 3, and its stderr on stdout."""
    proc, data = run_doctor(tmp_path, "--facts", str(HEALTHY), command=[
        sys.executable, "-c", "import sys; print('to-' + 'stdout'); "
        "print('to-' + 'stderr', file=sys.stderr); sys.exit(3)"])
    assert proc.returncode == 3, proc.stderr
    passed_through = proc.stdout.split("ddp-doctor ", 1)[0]  # before the report
    assert passed_through == "to-stdout\n"
    assert "to-stderr" in proc.stderr and "to-stdout" not in proc.stderr
    assert "(exit code 3, the command's own)" in proc.stdout
    assert data["exit_code"] == 1 and data["exit_status"] == 3
    assert data["findings"][0]["code"] == "RUN001"
    log = Path(evidence(data["findings"][0], "log")).read_text()
    assert "to-stdout" in log and "to-stderr" in log  # the log keeps both


def test_a_signal_gives_128_plus_its_number(tmp_path):
    proc, _data = run_doctor(tmp_path, "--facts", str(HEALTHY), command=[
        sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert proc.returncode == 128 + signal.SIGKILL


@pytest.mark.slow
def test_run_judges_the_interpreter_of_the_console_script_it_runs(tmp_path):
    """The machine's facts come from the job's interpreter, named in the report; on this
    machine without a driver, a job that never used the GPUs gets DRV001 as context."""
    bin_dir = tmp_path / "venv-b" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.symlink_to(sys.executable)
    script = bin_dir / "train-cpu"
    script.write_text(f"#!{python}\nimport sys\nprint('epoch 1 of a CPU job')\n"
                      "sys.exit(3)\n")
    script.chmod(0o755)
    proc, data = run_doctor(tmp_path, command=[str(script), "--epochs", "1"], timeout=150)
    assert proc.returncode == 3, proc.stderr[-3000:]
    run001 = data["findings"][0]
    assert run001["code"] == "RUN001"
    judged = f"{python} (the interpreter of {script}, from its first line)"
    assert evidence(run001, "interpreter judged") == judged
    assert f"torch of {judged}" in data["facts_source"]
    # The probe ran in the job's interpreter: a link to this Python outside its venv, so
    # without the venv's torch, which ddp-doctor's own interpreter has.
    assert data["environment"]["python_executable"] == str(python)
    assert evidence(next(f for f in data["findings"] if f["code"] == "TOR001"),
                    "interpreter").startswith(f"{python} ")
    for finding in data["findings"]:
        if finding["category"] in ("driver_missing", "torch_cpu_only", "gpu_not_visible"):
            assert finding["severity"] == "info"
            assert evidence(finding, "context, not the cause").startswith("nothing shows")


@pytest.mark.slow
def test_a_job_that_asked_for_gpus_on_a_box_without_a_driver_leads_with_drv001(tmp_path):
    proc, data = run_doctor(tmp_path, "--facts", str(NO_DRIVER), command=[
        sys.executable, "-c", "import sys; sys.exit(1)", "device=0,1"])
    assert proc.returncode == 1
    drv = next(f for f in data["findings"] if f["code"] == "DRV001")
    assert drv["severity"] == "error"


@pytest.mark.slow
def test_a_cpu_hang_reports_the_hang_not_the_machines_gpus_and_keeps_ranks_apart(tmp_path):
    """Before: DRV001 and TOR002 as errors beside RUN002, and the last line
    "rank 0 step 2rank 1 step 2". Two writers on one pipe, unbuffered, as two ranks are."""
    writer = ("import os, sys, time\n"
              "os.write(1, b'rank 0 step 2'); os.write(1, b'rank 1 step 2')\n"
              "os.write(1, b'\\n\\n'); time.sleep(60)\n")
    proc, data = run_doctor(tmp_path, "--facts", str(NO_DRIVER), "--stall-timeout", "2",
                            command=[sys.executable, "-c", writer])
    assert proc.returncode == 125
    errors = [f["code"] for f in data["findings"] if f["severity"] == "error"]
    assert errors == ["RUN002"], errors
    drv = next(f for f in data["findings"] if f["code"] == "DRV001")
    assert drv["severity"] == "info"
    hang = data["findings"][0]
    assert evidence(hang, "last line") == "rank 1 step 2"
    assert evidence(hang, "last line of rank 0") == "rank 0 step 2"
    assert evidence(hang, "last line of rank 1") == "rank 1 step 2"


@pytest.mark.slow
def test_log_keeps_an_existing_file_unless_forced(tmp_path):
    """Before: --log overwrote an existing file while --bundle refused without --force."""
    kept = tmp_path / "train.log"
    kept.write_text("yesterday's run\n")
    command = [sys.executable, "-m", "ddp_doctor", "run", "--log", str(kept)]
    job = [sys.executable, "-c", "print('today-' + 'run')"]
    refused = subprocess.run([*command, "--", *job], capture_output=True, text=True,
                             timeout=60, check=False)
    assert refused.returncode == 2
    assert refused.stderr == (f"ddp-doctor: error: --log {kept}: already exists (add --force "
                              "to overwrite it)\n")
    assert kept.read_text() == "yesterday's run\n"
    forced = subprocess.run([*command, "--force", "--", *job], capture_output=True, text=True,
                            timeout=60, check=False)
    assert forced.returncode == 0, forced.stderr
    assert kept.read_text() == "today-run\n"
