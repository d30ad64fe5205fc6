"""``run`` judges the interpreter the command runs, and what the job touched (issue 24, 2 and 4).

The interpreter comes from the command itself: a Python named in it, a console script's
first line (pip's two launcher forms), wrappers looked through, and only then the active
venv. The scripts here are real files in a temporary directory; nothing is started.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ddp_doctor.categories import Category
from ddp_doctor.job.interpreter import find_interpreter, shebang_python
from ddp_doctor.job.judge import CONTEXT, as_context, gpu_use, problem_results
from ddp_doctor.job.supervise import JobOptions, JobOutcome, apart, rank_of
from ddp_doctor.model import CheckResult, Code, Finding, Severity, Status, status_of


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
    return path


def venv(tmp_path: Path, name: str) -> Path:
    """A venv's bin directory: its python (a stand-in file) and a console script."""
    bin_dir = tmp_path / name / "bin"
    executable(bin_dir / "python", "#!/bin/sh\n")
    executable(bin_dir / "yolo", f"#!{bin_dir / 'python'}\nimport sys\n")
    return bin_dir


def test_a_console_script_is_judged_by_its_shebang_not_by_the_doctors_python(tmp_path):
    """The issue's case: /venv-b/bin/yolo, ddp-doctor installed elsewhere."""
    bin_dir = venv(tmp_path, "venv-b")
    found = find_interpreter([str(bin_dir / "yolo"), "detect", "train", "device=0,1"],
                             {"PATH": "/usr/bin"})
    assert found.path == str(bin_dir / "python") != sys.executable
    assert found.how == f"the interpreter of {bin_dir / 'yolo'}, from its first line"


def test_a_name_on_the_commands_path_is_resolved_there(tmp_path):
    bin_dir = venv(tmp_path, "venv-c")
    executable(bin_dir / "torchrun", f"#!{bin_dir / 'python'}\n")
    env = {"PATH": f"{bin_dir}:/usr/bin"}
    assert find_interpreter(["torchrun", "--nproc-per-node", "2", "t.py"], env).path == \
        str(bin_dir / "python")
    assert find_interpreter(["python", "-m", "torch.distributed.run", "t.py"], env) \
        .how == "the Python the command runs"
    assert find_interpreter(["python", "t.py"], env).path == str(bin_dir / "python")


def test_env_and_nohup_are_looked_through(tmp_path):
    bin_dir = venv(tmp_path, "venv-d")
    found = find_interpreter(["env", "-u", "X", "CUDA_VISIBLE_DEVICES=0,1", "nohup",
                              str(bin_dir / "yolo"), "train"], {"PATH": "/usr/bin"})
    assert found.path == str(bin_dir / "python")
    assert find_interpreter(["NCCL_DEBUG=INFO", str(bin_dir / "python"), "t.py"],
                            {"PATH": "/usr/bin"}).path == str(bin_dir / "python")


def test_both_launcher_forms_of_pip_and_env_python(tmp_path):
    bin_dir = venv(tmp_path, "venv-e")
    long = executable(tmp_path / "accelerate",
                      f"#!/bin/sh\n'''exec' \"{bin_dir / 'python'}\" \"$0\" \"$@\"\n' '''\n")
    assert shebang_python(str(long), {}) == str(bin_dir / "python")
    by_env = executable(tmp_path / "deepspeed", "#!/usr/bin/env python\n")
    assert shebang_python(str(by_env), {"PATH": str(bin_dir)}) == str(bin_dir / "python")
    shell = executable(tmp_path / "train.sh", "#!/bin/bash\npython t.py\n")
    assert shebang_python(str(shell), {}) is None


def test_a_command_that_names_no_python_falls_back_to_the_active_venv(tmp_path):
    bin_dir = venv(tmp_path, "venv-f")
    script = executable(tmp_path / "train.sh", "#!/bin/bash\npython t.py\n")
    found = find_interpreter(["bash", str(script)],
                             {"PATH": "/usr/bin:/bin", "VIRTUAL_ENV": str(bin_dir.parent)})
    assert found.path == str(bin_dir / "python")
    assert found.how.startswith("the active venv (VIRTUAL_ENV)")
    assert find_interpreter([str(script)], {"PATH": os.defpath}).how.startswith(
        ("python3 on PATH", "ddp-doctor's own"))


# --- each rank's last line apart (point 4) ---------------------------------------------

def test_two_ranks_glued_on_one_line_are_kept_apart():
    """Before: "last line: rank 0 step 2rank 1 step 2"."""
    assert apart("rank 0 step 2rank 1 step 2") == ["rank 0 step 2", "rank 1 step 2"]
    assert apart("[rank0]: loss 2.1[rank1]: loss 2.3") == ["[rank0]: loss 2.1",
                                                            "[rank1]: loss 2.3"]
    assert apart("rank 0: waiting for rank 1") == ["rank 0: waiting for rank 1"]
    assert apart("epoch 3 rank 1") == ["epoch 3 rank 1"]
    assert [rank_of(p) for p in apart("rank 0 step 2rank 1 step 2")] == ["rank 0", "rank 1"]
    assert rank_of("[default3]:[rank3]: x") == "rank 3"
    assert rank_of("ranking the results") is None


# --- findings about parts the job did not use are context -------------------------------

GPU_CODE = Code("XGP001", Category.DRIVER_MISSING, "no driver", "w", "w", "f")
HOST_CODE = Code("XHS001", Category.NCCL_SHARED_MEMORY, "small shm", "w", "w", "f",
                 severity=Severity.WARNING)
PORT_CODE = Code("XPT001", Category.RENDEZVOUS_PORT_IN_USE, "port taken", "w", "w", "f")


def result(*codes: Code) -> CheckResult:
    findings = tuple(Finding(code, code.summary) for code in codes)
    return CheckResult("x.y", "X", "x", status_of(findings), "s", findings=findings)


def outcome(tmp_path: Path, text: str = "", cuda: bool = False) -> JobOutcome:
    log = tmp_path / "out.log"
    log.write_text(text, encoding="utf-8")
    return JobOutcome(returncode=None, stopped_by="stall", wall_s=5.0, log_path=str(log),
                      tag="t", cuda_loaded="pid 7 (python)" if cuda else None)


def test_gpu_findings_of_a_job_that_never_used_the_gpus_are_context(tmp_path):
    cpu_job = JobOptions(command=("python", "-m", "torch.distributed.run", "t.py"))
    assert gpu_use(outcome(tmp_path, "rank 0 step 2\n"), cpu_job, None) is None
    checks = [result(GPU_CODE), result(HOST_CODE), result(PORT_CODE)]
    judged = as_context(checks, "nothing shows the job used the GPUs")
    gpu, shm, port = judged
    assert gpu.status is Status.PASS and shm.status is Status.PASS
    assert gpu.findings[0].effective_severity is Severity.INFO
    assert gpu.findings[0].evidence[-1].label == CONTEXT
    assert port.status is Status.FAIL  # a taken port stops a CPU job as well
    assert problem_results(judged) == judged  # context is still shown


def test_what_shows_a_job_used_the_gpus(tmp_path):
    plain = JobOptions(command=("python", "t.py"))
    assert "CUDA driver library" in gpu_use(outcome(tmp_path, cuda=True), plain, None)
    yolo = JobOptions(command=("/venv-b/bin/yolo", "detect", "train", "device=0,1"))
    assert "device=0" in gpu_use(outcome(tmp_path), yolo, None)
    assert gpu_use(outcome(tmp_path), JobOptions(("python", "t.py", "--device", "cuda")),
                   None)
    assert gpu_use(outcome(tmp_path, "host:12:40 [0] NCCL INFO Bootstrap\n"), plain, None)
    log = result(GPU_CODE)
    assert "XGP001" in gpu_use(outcome(tmp_path), plain, log)
    assert gpu_use(outcome(tmp_path), JobOptions(("python", "t.py", "--gpus", "0")),
                   None) is None
