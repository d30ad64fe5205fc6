"""Faults planted on a real GPU machine give the findings their CPU counterparts give:
hidden or missing GPUs, more ranks than GPUs, a taken rendezvous port, a rank killed
mid-run, a probe deadline shorter than CUDA's start, another process busy on the GPU; and
`diagnose` names the cause from the real NCCL output of those runs. The codes are the
ones the CPU tests assert for the same faults (tests/checks/test_checks_visibility.py,
tests/smoke/test_smoke_faults.py, tests/job/test_run_job.py)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any, Optional

import pytest

from ddp_doctor.smoke.launch import free_port
from tests.conftest import FACTS_DIR
from tests.gpu.conftest import GPUS
from tests.support import gpu_validation as gv
from tests.support.smoke import marked_processes

pytestmark = [pytest.mark.spawns, pytest.mark.slow]

NCCL_JOB = Path(__file__).parent / "scripts" / "nccl_job.py"
# `run` judges the machine too when the job fails; a recorded healthy one keeps these tests
# about the job's log (as tests/job does).
HEALTHY = FACTS_DIR / "healthy_8x_h100_nvlink.json"
NO_SUCH_UUID = "GPU-00000000-0000-0000-0000-000000000000"
NO_NCCL_DEBUG: dict[str, Optional[str]] = {
    "NCCL_DEBUG": None, "NCCL_DEBUG_FILE": None, "NCCL_DEBUG_SUBSYS": None}


def env_with(**changes: Optional[str]) -> dict[str, str]:
    env = dict(os.environ)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def report_of(*args: str, env: dict[str, str] | None = None,
              timeout: float = 600) -> tuple[subprocess.CompletedProcess[str], dict[str, Any],
                                             float]:
    """`ddp-doctor ARGS --json -`: the process, its JSON report and its wall time."""
    started = time.monotonic()
    proc = gv.run_doctor(*args, "--json", "-", env=env, timeout=timeout)
    wall = time.monotonic() - started
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc, json.loads(proc.stdout), wall


def run_nccl_job(tmp_path: Path, mode: str, nproc: int, port: int) -> tuple[dict[str, Any], Path]:
    """`ddp-doctor run --nccl-debug` of the NCCL job; its report and its kept log."""
    marker = f"nccljob-{uuid.uuid4().hex}"
    log = tmp_path / f"{mode}.log"
    command = [sys.executable, "-m", "ddp_doctor", "run", "--nccl-debug", "--log", str(log),
               "--facts", str(HEALTHY), "--json", str(tmp_path / f"{mode}.json"), "--",
               sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
               "--master-port", str(port), str(NCCL_JOB), mode, marker]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False,
                          env=env_with(**NO_NCCL_DEBUG))  # NCCL's INFO lines into the log
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert marked_processes(marker) == []
    return json.loads((tmp_path / f"{mode}.json").read_text(encoding="utf-8")), log


def diagnosed(log: Path) -> dict[str, Any]:
    """`ddp-doctor diagnose LOG --json -`."""
    _, report, _ = report_of("diagnose", str(log), timeout=300)
    return report


# ---------------------------------------------------------------- GPUs hidden or missing


@pytest.mark.parametrize("visible", ["", "7" if GPUS <= 7 else "99", NO_SUCH_UUID],
                         ids=["empty", "absent-index", "unknown-uuid"])
def test_cuda_visible_devices_that_names_no_gpu_is_vis001_and_the_smoke_job_is_refused(
        visible):
    env = env_with(CUDA_VISIBLE_DEVICES=visible)
    _, report, _ = report_of("check", env=env)
    hidden = gv.finding(report, "VIS001")
    assert hidden["category"] == "gpu_not_visible" and hidden["severity"] == "error"
    assert f"CUDA_VISIBLE_DEVICES={visible!r}" in hidden["title"]
    proc, smoke, _ = report_of("smoke", "--device", "cuda", env=env)
    assert proc.returncode == 1
    refused = gv.finding(smoke, "SMK012")
    assert refused["category"] == "gpu_not_visible"
    assert smoke["smoke"]["command"] is None  # nothing was launched


@pytest.mark.gpus_exactly(1)
def test_two_ranks_on_one_gpu_are_refused_before_launch():
    proc, report, wall = report_of("smoke", "--device", "cuda", "--nproc", "2")
    assert proc.returncode == 1
    refused = gv.finding(report, "SMK012")
    assert refused["category"] == "gpu_not_visible"
    assert "needs 2 GPUs" in refused["title"] and "sees only 1" in refused["title"]
    assert report["smoke"]["command"] is None
    # NCCL never ran, so it never saw two ranks on one device.
    assert "Duplicate GPU" not in proc.stdout + proc.stderr
    assert wall < 90


# ---------------------------------------------------------------- the rendezvous port


def test_a_taken_master_port_is_smk009_and_its_torchrun_log_is_log001(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        proc, report, wall = report_of("smoke", "--device", "cuda", "--nproc", "1",
                                       "--master-port", str(port))
        job, log = run_nccl_job(tmp_path, "ok", 1, port)
    assert proc.returncode == 1
    smk = gv.finding(report, "SMK009")
    assert smk["category"] == "rendezvous_port_in_use" and str(port) in smk["title"]
    assert report["smoke"]["command"] is None and wall < 90
    # The same fault in a job of one's own: the log rule names it, in `run` and `diagnose`.
    assert gv.finding(job, "LOG001")["category"] == "rendezvous_port_in_use"
    assert gv.finding(diagnosed(log), "LOG001")["category"] == "rendezvous_port_in_use"


# ---------------------------------------------------------------- a rank killed mid-run


def test_a_rank_killed_in_the_smoke_job_is_log007_with_its_rank_and_phase(tmp_path):
    nproc = min(2, GPUS)
    killed = nproc - 1
    # NCCL_DEBUG unset, so the smoke job sends NCCL's INFO lines to files in its run dir.
    env = env_with(DDP_DOCTOR_SMOKE_FAULT=f"kill:{killed}:4", **NO_NCCL_DEBUG)
    proc, report, wall = report_of("smoke", "--device", "cuda", "--nproc", str(nproc),
                                   "--steps", "12", "--stall-timeout", "20", env=env)
    assert proc.returncode == 1
    finding = gv.finding(report, "LOG007")
    assert finding["category"] == "host_out_of_memory"
    assert finding["affects"] == [f"rank:{killed}"]
    evidence = {e["label"]: e["value"] for e in finding["evidence"]}
    assert evidence["exit code"] == "-9 (SIGKILL)"
    assert evidence["phase"] == "train (after step 3 of 12)"
    assert wall < 200
    # The run's directory is kept: the launcher's and the ranks' output and NCCL's INFO
    # files (nccl.HOST.PID.log), diagnosed together as a user would paste them.
    run_dir = Path(report["smoke"]["run_dir"])
    try:
        nccl_files = sorted(run_dir.glob("nccl.*.log"))
        assert len(nccl_files) >= nproc, sorted(p.name for p in run_dir.iterdir())
        parts = [run_dir / "launcher.stderr", *sorted(run_dir.glob("rank*.stderr")),
                 *nccl_files]
        log = tmp_path / "smoke-kill.log"
        log.write_text("".join(p.read_text(errors="replace") for p in parts))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    assert "NCCL INFO" in log.read_text()
    assert "LOG007" in gv.codes(diagnosed(log))


def test_a_rank_killed_in_an_nccl_job_is_found_in_its_nccl_info_log(tmp_path):
    nproc = min(2, GPUS)
    job, log = run_nccl_job(tmp_path, "sigkill", nproc, free_port())
    killed = gv.finding(job, "LOG007")
    assert killed["affects"] == [f"rank {nproc - 1}"]
    text = log.read_text(errors="replace")
    assert "NCCL INFO" in text  # --nccl-debug: the real NCCL output is what is diagnosed
    found = diagnosed(log)
    assert gv.finding(found, "LOG007")["category"] == "host_out_of_memory"


# ---------------------------------------------------------------- the probe's deadline


def test_a_probe_deadline_shorter_than_cuda_start_is_a_finding_not_a_hang(tmp_path):
    facts_path = tmp_path / "facts.json"
    proc, report, wall = report_of("check", "--probe-timeout", "1", "--save-facts",
                                   str(facts_path))
    # The probe is killed at 1 s; the other probes have their own short deadlines.
    assert wall < 60, wall
    probe = json.loads(facts_path.read_text())["facts"]["torch"]["value"]["probe"]
    assert probe["timed_out"] is True and probe["completed"] is False
    assert probe["duration_s"] < 5
    # Cut inside `import torch` (the usual case: a CUDA torch takes seconds to import) it
    # is TOR001; cut after it, before CUDA's answer, CUD001 names the stage, and the
    # probe's starting device count of 0 is not taken for a missing GPU (no VIS003).
    last = probe["last_stage"]
    print(f"\ncheck --probe-timeout 1: stopped at {last!r}; {gv.codes(report)}")
    if last == "import torch":
        # The first H200 run said "import torch fails" here, with steps to reinstall torch:
        # a deadline cut is no broken install.
        tor = gv.finding(report, "TOR001")
        assert tor["title"].startswith("import torch did not finish before the probe's "
                                       "deadline")
        assert "--probe-timeout 300" in [s.get("command") for s in tor["remediation"]][1]
    elif last in ("python", "packages"):
        assert gv.finding(report, "TOR001")["title"].startswith("import torch")
    else:
        assert gv.finding(report, "CUD001")["title"].endswith(f" in {last}")
    assert "VIS003" not in gv.codes(report)
    assert proc.returncode == 1


# ---------------------------------------------------------------- a GPU busy elsewhere


BUSY_LOOP = textwrap.dedent("""
    import sys, time, torch
    a = torch.rand(8192, 8192, device="cuda:0")
    hold = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    print("busy", flush=True)
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        for _ in range(20):
            b = a @ a
        torch.cuda.synchronize()
""")


def test_a_gpu_busy_with_another_process_is_vis006_and_the_smoke_job_still_finishes():
    hold = 4 * 2**30  # over the check's threshold (1 GiB and 10% of an 80 GB card: 8 GB)
    total = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,"
                            "nounits", "-i", "0"], capture_output=True, text=True,
                           check=True, timeout=60).stdout
    hold = max(hold, int(int(total.split()[0]) * 2**20 * 0.15))
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(hold), "240"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None and busy.stdout.readline().strip() == "busy"
        _, report, _ = report_of("check")
        vis = gv.finding(report, "VIS006")
        assert "gpu:0" in vis["affects"]
        proc, smoke, wall = report_of("smoke", "--device", "cuda", "--nproc", "1",
                                      "--steps", "12")
        assert busy.poll() is None  # the load ran through the whole smoke job
    finally:
        busy.kill()
        busy.wait(30)
    data = smoke["smoke"]
    figures = gv.load_summary_module().smoke_figures(smoke)
    print(f"\nsmoke beside a busy process: {json.dumps(figures)}")
    # Sharing the GPU slows the job, it does not break it.
    assert proc.returncode == 0 and data["ok"] is True, [f["code"] for f in smoke["findings"]]
    assert data["steps_done"] == 12 and data["measurements"]["images_per_s_total"] > 0
    assert wall < 300
