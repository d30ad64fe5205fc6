"""`ddp-doctor smoke` and the smoke job inside `ddp-doctor doctor`, through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import FACTS_DIR
from tests.support.cli import invoke

SANDBOX = str(FACTS_DIR / "sandbox_cpu_container.json")


def doctor(*args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = subprocess.run([sys.executable, "-m", "ddp_doctor", *args, "--json", "-"],
                          capture_output=True, text=True, timeout=240, check=False)
    return proc, json.loads(proc.stdout)


@pytest.mark.parametrize(("args", "message"), [
    (("--imgsz", "100"), "--imgsz 100: must be a multiple of 32"),
    (("--device", "cpu", "--nnodes", "2", "--master-addr", "h0"),
     "--nnodes 2 needs --master-port"),
    (("--device", "gpu"), "--device 'gpu': choose one of auto, cuda, cpu"),
    (("--launcher", "mpirun"), "--launcher 'mpirun': choose one of torchrun, spawn"),
    (("--device", "cpu", "--nnodes", "2"), "--nnodes 2 needs --master-addr and --master-port"),
])
def test_bad_smoke_options_are_one_line_and_exit_2(args, message):
    result = invoke("smoke", *args)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"ddp-doctor: error: {message}")


@pytest.mark.parametrize("code", ["SMK002", "SMK009", "LOG001", "LOG007"])
def test_explain_knows_the_smoke_and_log_codes(code):
    result = invoke("explain", code)
    assert result.exit_code == 0 and result.stdout.startswith(f"{code}: ")


def test_replayed_facts_never_start_the_smoke_job():
    result = invoke("doctor", "--facts", SANDBOX, "--json", "-")
    report = json.loads(result.stdout)
    assert "smoke" not in report
    assert "smoke.train" not in [c["id"] for c in report["checks"]]


# The plain `doctor` (every check, then the CPU smoke job) is asserted on the run of
# tests/redact/test_no_secret_leaks.py, one real doctor run for both modules.


@pytest.mark.slow
@pytest.mark.spawns
def test_doctor_no_smoke_and_a_python_without_torch(tmp_path):
    _, plain = doctor("doctor", "--no-smoke")
    assert "smoke" not in plain
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    _, report = doctor("doctor", "--python", str(venv / "bin" / "python"))
    assert report["smoke"] == {"ok": None, "skipped": "blocked by TOR001: torch cannot be "
                                                      "imported"}
    smoke_check = {c["id"]: c for c in report["checks"]}["smoke.train"]
    assert smoke_check["status"] == "skip"


def test_smoke_takes_quiet_and_strict_like_every_report_command(tmp_path, monkeypatch):
    """-q: only the findings and the verdict; --strict: a warning fails the run (exit 1).

    The run is a judged two-rank gloo run (no job started); the policy asks for a scaling
    efficiency the run did not measure, which is a POL006 warning."""
    from tests.support.smoke_reports import passing_run

    monkeypatch.setattr("ddp_doctor.smoke.run.run_smoke",
                        lambda options, progress=None: passing_run())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ddp-doctor.toml").write_text("min-scaling-efficiency = 0.5\n")
    plain = invoke("smoke")
    assert plain.exit_code == 0, plain.output
    assert "Smoke training" in plain.stdout and "Median step time" in plain.stdout
    quiet = invoke("smoke", "-q")
    assert quiet.exit_code == 0, quiet.output
    assert "Smoke training" not in quiet.stdout and "Median step time" not in quiet.stdout
    assert "POL006" in quiet.stdout and "Ready for training (exit code 0)" in quiet.stdout
    strict = invoke("smoke", "--strict", "-q")
    assert strict.exit_code == 1, strict.output
    assert "Not ready: problems found (exit code 1)" in strict.stdout
    as_json = invoke("smoke", "--strict", "--json", "-")
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["exit_code"] == 1


def test_smoke_batch_per_process_reaches_the_job(monkeypatch):
    seen = []

    def fake_run(options, progress=None):
        seen.append(options.batch)
        from tests.support.smoke_reports import passing_run

        return passing_run()

    monkeypatch.setattr("ddp_doctor.smoke.run.run_smoke", fake_run)
    assert invoke("smoke", "--batch-per-process", "4", "--device", "cpu").exit_code == 0
    assert invoke("smoke", "--device", "cpu").exit_code == 0
    assert seen == [4, 8]  # 8: the default
