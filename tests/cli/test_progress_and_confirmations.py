"""Where a person or a CI log is watching: phases on stderr, every written file confirmed.

In a pipe (as CI runs it) the slow phases print plain lines on stderr as they happen, so a
stuck run is visible before its deadline; every file written is named with its path;
``-q`` silences both. stdout stays the report's alone.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import FACTS_DIR
from tests.support.cli import invoke
from tests.support.real_runs import GROUP as REAL_RUN_GROUP

HEALTHY = str(FACTS_DIR / "healthy_8x_h100_nvlink.json")


def test_every_file_written_is_confirmed_with_its_path(tmp_path):
    out = tmp_path / "r.json"
    junit = tmp_path / "r.xml"
    bundle = tmp_path / "b.zip"
    result = invoke("check", "--facts", HEALTHY, "--json", str(out), "--junit", str(junit),
                    "--bundle", str(bundle), "--markdown", "-")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    for what, path in (("support bundle", bundle), ("JSON report", out),
                       ("JUnit report", junit)):
        assert any(line.startswith(f"ddp-doctor: wrote the {what} to {path.resolve()}, ")
                   for line in lines), lines
    assert not any("Markdown" in line for line in lines)  # stdout is no file
    assert result.stdout.startswith("## ddp-doctor report")


def test_quiet_confirms_nothing(tmp_path):
    result = invoke("check", "--facts", HEALTHY, "-q", "--json", str(tmp_path / "r.json"))
    assert result.exit_code == 0 and result.stderr == ""


@pytest.mark.slow
@pytest.mark.spawns
def test_gathering_facts_in_a_pipe_says_so_before_and_after():
    proc = subprocess.run([sys.executable, "-m", "ddp_doctor", "check", "--json", "-"],
                          capture_output=True, text=True, timeout=300, check=False)
    lines = proc.stderr.splitlines()
    from ddp_doctor.facts.torch_probe import TORCH_PROBE_TIMEOUT_S

    assert lines[0] == ("ddp-doctor: gathering facts (driver, CUDA, torch, host; the torch "
                        f"probe has {TORCH_PROBE_TIMEOUT_S:.0f} s)")
    assert lines[1].startswith("ddp-doctor: done in ")
    json.loads(proc.stdout)  # stdout is the report alone


@pytest.mark.slow
@pytest.mark.spawns
@pytest.mark.xdist_group(REAL_RUN_GROUP)
def test_the_smoke_job_in_a_pipe_prints_its_phases_and_steps(cli_smoke_run):
    lines = [line for line in cli_smoke_run.proc.stderr.splitlines()
             if line.startswith("ddp-doctor: smoke: ")]
    text = "\n".join(lines)
    assert lines[0].startswith("ddp-doctor: smoke: launched 2 ranks (ranks 0-1), 12 steps each")
    for phase in ("rendezvous: init_process_group", "training", "ranks exited"):
        assert phase in text, text
    assert cli_smoke_run.report["smoke"]["ok"] is True
    quiet = subprocess.run([sys.executable, "-m", "ddp_doctor", "smoke", "--device", "cpu",
                            "--mode", "dp", "--steps", "2", "--imgsz", "64", "-q"],
                           capture_output=True, text=True, timeout=300, check=False)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr  # a real job ran, silently
    assert "ddp-doctor: smoke:" not in quiet.stderr


def test_a_report_to_a_fifo_or_device_is_written_into_never_replaced(tmp_path):
    """`--json /dev/null` must not rename a file over the null device: a FIFO stands in."""
    import os
    import stat
    import threading

    from tests.conftest import FACTS_DIR
    from tests.support.cli import invoke

    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    result = invoke("check", "--facts", str(FACTS_DIR / "healthy_8x_h100_nvlink.json"),
                    "--json", str(fifo), "-q")
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the FIFO, not a file renamed over it
    assert json.loads(got[0])["verdict"] == "no problems found"
