"""Which finding leads: a rank's fatal error is never outranked by a warning every process prints.

The lines are real: a 2-rank ``torchrun --nproc_per_node 2`` job (torch 2.13.0+cpu, gloo)
whose rank 1 asked for more host memory than there is, in an environment without NumPy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.diagnose import diagnose
from ddp_doctor.diagnose.causal_order import rank, shows_failure, warning_only
from ddp_doctor.logrules import match_text
from ddp_doctor.model import Evidence, Finding

# torch/_subclasses/functional_tensor.py warns at import when NumPy cannot be loaded; the
# text comes from torch/csrc/utils/tensor_numpy.cpp. Every process prints it, healthy or not.
NUMPY_MISSING = (
    "/venv/lib/python3.11/site-packages/torch/_subclasses/functional_tensor.py:368: "
    "UserWarning: Failed to initialize NumPy: No module named 'numpy' (Triggered internally "
    "at /__w/pytorch/pytorch/torch/csrc/utils/tensor_numpy.cpp:84.)\n"
    "  cpu = _conversion_method_template(device=torch.device(\"cpu\"))\n")
# The same import-time warning when NumPy 2 meets a torch built against NumPy 1.x
# (pytorch/pytorch#107302): LOG026 reads it, and it is printed by every process too.
NUMPY_ABI = (
    "/venv/lib/python3.11/site-packages/torch/_subclasses/functional_tensor.py:368: "
    "UserWarning: Failed to initialize NumPy: _ARRAY_API not found (Triggered internally at "
    "/__w/pytorch/pytorch/torch/csrc/utils/tensor_numpy.cpp:84.)\n"
    "  cpu = _conversion_method_template(device=torch.device(\"cpu\"))\n")
# Rank 1's death: the message of c10/core/impl/alloc_cpu.cpp, then the survivor and
# torchrun's summary.
JOB = (
    "W1125 18:00:56.044000 6460 torch/distributed/run.py:874] Setting OMP_NUM_THREADS "
    "environment variable for each process to be 1 in default\n"
    "{warning}{warning}"
    "[rank1]: Traceback (most recent call last):\n"
    "[rank1]:   File \"/tmp/job.py\", line 4, in <module>\n"
    "[rank1]:     x = torch.empty(1 << 50, dtype=torch.uint8)\n"
    "[rank1]: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
    "can't allocate memory: you tried to allocate 1125899906842624 bytes. Error code 12 "
    "(Cannot allocate memory)\n"
    "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
    "pair.cc:553] Connection closed by peer [127.0.0.1]:3508. This is typically caused by a "
    "remote worker crashing.\n"
    "Root Cause (first observed failure):\n"
    "[0]:\n"
    "  time      : 2026-11-25_18:00:57\n"
    "  host      : localhost\n"
    "  rank      : 1 (local_rank: 1)\n"
    "  exitcode  : 1 (pid: 6465)\n")


def _findings(tmp_path: Path, text: str) -> tuple[Finding, ...]:
    path = tmp_path / "job.log"
    path.write_text(text, encoding="utf-8")
    return diagnose(str(path)).report.results[0].findings


@pytest.mark.parametrize("warning", [NUMPY_MISSING, NUMPY_ABI], ids=["missing", "abi"])
def test_a_ranks_host_oom_leads_over_the_numpy_warning_of_every_process(
        tmp_path: Path, warning: str) -> None:
    findings = _findings(tmp_path, warning + JOB.format(warning=warning))
    lead = findings[0]
    assert (lead.code.id, lead.code.category.value) == ("LOG006", "host_out_of_memory")
    assert lead.affects == ("rank 1",)
    assert "DefaultCPUAllocator: can't allocate memory" in lead.evidence[0].value


def test_the_numpy_abi_warning_is_still_reported_below_the_cause(tmp_path: Path) -> None:
    """Demoted, not dropped: the warning can matter later (a tensor.numpy() call)."""
    codes = [f.code.id for f in _findings(tmp_path, JOB.format(warning=NUMPY_ABI))]
    assert codes.index("LOG006") < codes.index("LOG026")


def test_the_numpy_abi_warning_alone_still_leads(tmp_path: Path) -> None:
    """Without a failure in the log the warning is all there is, so it keeps its place."""
    lead = _findings(tmp_path, NUMPY_ABI + "epoch 1 loss 0.41\n")[0]
    assert lead.code.id == "LOG026"


def test_a_warning_whose_consequence_is_the_failure_keeps_the_lead(tmp_path: Path) -> None:
    """torch warns that the driver is too old, then YOLO's device check fails because of it:
    the failure is folded into the warning's finding, so the warning explains it."""
    log = ("UserWarning: CUDA initialization: The NVIDIA driver on your system is too old "
           "(found version 11040).\n"
           "ValueError: Invalid CUDA 'device=0' requested. Use 'device=cpu' or pass valid CUDA "
           "device(s) if available\n"
           "  exitcode  : 1 (pid: 812)\n")
    assert _findings(tmp_path, log)[0].code.id == "LOG011"


def _finding(code_id: str, *evidence: tuple[str, str]) -> Finding:
    from ddp_doctor.codebook import declared_codes

    code = declared_codes()[code_id]
    return Finding(code, code.summary, evidence=tuple(Evidence(*e) for e in evidence))


def test_rank_demotes_warning_only_findings_below_any_failure() -> None:
    numpy = _finding("LOG026", ("line 1", "UserWarning: Failed to initialize NumPy: _ARRAY_API "
                                          "not found"))
    memory = _finding("LOG006", ("line 9", "RuntimeError: [enforce fail at alloc_cpu.cpp:127] "
                                           "err == 0. DefaultCPUAllocator: can't allocate "
                                           "memory"))
    assert warning_only(numpy) and not shows_failure(numpy)
    assert shows_failure(memory) and not warning_only(memory)
    assert [f.code.id for f, _ in rank([(numpy, 1), (memory, 2)])] == ["LOG006", "LOG026"]
    # Without the failure the category order decides, as before.
    plain = _finding("LOG006", ("line 9", "DefaultCPUAllocator: can't allocate memory"))
    assert [f.code.id for f, _ in rank([(numpy, 1), (plain, 2)])] == ["LOG026", "LOG006"]


@pytest.mark.parametrize("warning", [
    "[W socket.cpp:426] [c10d] The server socket has failed to listen on [::]:29500 (errno: 98 "
    "- Address already in use).",
    "W1125 18:00:56.044000 6460 torch/distributed/run.py:874] something",
    "FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated.",
    "WARNING:root:the dataset cache is stale",
    "2024-05-01 10:00:00,123 WARNING worker 3 is slow",
])
def test_warning_lines_are_recognised(warning: str) -> None:
    from ddp_doctor.logrules import is_fatal_line, is_warning_line

    assert is_warning_line(warning) and not is_fatal_line(warning)


@pytest.mark.parametrize("fatal", [
    "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0.",
    "torch.OutOfMemoryError: CUDA out of memory.",
    "  exitcode  : -9 (pid: 812917)",
    "  traceback : Signal 9 (SIGKILL) received by PID 812917",
    "Killed",
    "Bus error (core dumped)",
    "subprocess.CalledProcessError: Command '['python']' returned non-zero exit status 1.",
])
def test_failure_lines_are_recognised(fatal: str) -> None:
    from ddp_doctor.logrules import is_fatal_line, is_warning_line

    assert is_fatal_line(fatal) and not is_warning_line(fatal)


def test_the_smoke_jobs_ranking_demotes_the_warning_too() -> None:
    """match_text reads a failed smoke rank's stderr, which carries the same warning."""
    stderr = NUMPY_ABI + JOB.format(warning="").replace("[rank1]: ", "").replace("[rank0]: ", "")
    assert match_text(stderr)[0].rule.code.id == "LOG006"
