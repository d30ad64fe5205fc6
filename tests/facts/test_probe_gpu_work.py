"""The torch probe's GPU work, run in-process with a stand-in torch: deadlines, errors, P2P.

The functions under test run inside the diagnosed interpreter in real use; here they get
``tests.support.fake_gpu_torch.FakeTorch``, whose GPUs can hang, raise or compute wrong numbers.
"""

from __future__ import annotations

import time

import pytest

from ddp_doctor.facts import python_probe_script as script
from ddp_doctor.facts.seam import CommandResult
from ddp_doctor.facts.torch_probe import TORCH_PROBE_TIMEOUT_S, interpret_probe
from tests.facts.test_probe_torch import AFTER_IMPORT, ARGV, BEFORE_IMPORT, PY, out, put, stage
from tests.support.fake_gpu_torch import FakeTorch

ILLEGAL = "CUDA error: an illegal memory access was encountered"


@pytest.fixture
def quiet(monkeypatch):
    """Collect the stage lines the GPU threads announce instead of printing them."""
    lines: list[dict] = []
    monkeypatch.setattr(script, "emit", lines.append)
    return lines


def _run(torch: FakeTorch, count: int, deadline: float = 5.0):
    try:
        return script.test_gpus(torch, count, deadline=deadline)
    finally:
        torch.release.set()


def test_healthy_gpus_pass_both_tests(quiet):
    functional, cudnn, stuck = _run(FakeTorch(), 2)
    assert [(r["index"], r["ok"], r["timed_out"], r["error"]) for r in functional] == [
        (0, True, False, None), (1, True, False, None)]
    assert [(r["index"], r["ok"]) for r in cudnn] == [(0, True), (1, True)]
    assert stuck is False
    assert all(isinstance(r["duration_s"], float) for r in functional + cudnn)
    assert [line["stage"] for line in quiet] == [
        "cuda.functional:0", "cuda.cudnn_test:0", "cuda.functional:1", "cuda.cudnn_test:1"]


def test_a_hung_matmul_is_named_and_the_next_gpu_still_runs(quiet):
    torch = FakeTorch({1: ("matmul", "hang")})
    start = time.monotonic()
    functional, cudnn, stuck = _run(torch, 3, deadline=0.2)
    # The fault hangs for 30 s: finishing well before that proves the deadline stopped it; a
    # margin of 100x over the 0.2 s deadline for a loaded machine (before: "< 3 s").
    assert time.monotonic() - start < 20
    assert stuck is True
    assert [(r["index"], r["ok"], r["timed_out"]) for r in functional] == [
        (0, True, False), (1, False, True), (2, True, False)]
    assert functional[1]["error"] == "no answer within 0.2s"
    assert functional[1]["duration_s"] >= 0.2
    # The cuDNN test of the hung GPU never started: it is timed out, not passed.
    assert [(r["index"], r["ok"], r["timed_out"]) for r in cudnn] == [
        (0, True, False), (1, False, True), (2, True, False)]


def test_hung_thread_released_later_announces_nothing(quiet):
    torch = FakeTorch({0: ("matmul", "hang")})
    script.test_gpus(torch, 1, deadline=0.1)
    before = list(quiet)
    torch.release.set()
    time.sleep(0.1)
    assert quiet == before  # no late "cuda.cudnn_test:0" to mislead the parent


def test_an_illegal_memory_access_at_synchronize_is_recorded(quiet):
    """The asynchronous error surfaces at synchronize (ssbuild/moss_finetuning#9: the
    traceback ends in torch._C._cuda_synchronize on an idle GPU)."""
    functional, _, stuck = _run(FakeTorch({0: ("synchronize", ILLEGAL)}), 2)
    assert functional[0] == {"index": 0, "ok": False, "timed_out": False,
                             "error": f"RuntimeError: {ILLEGAL}",
                             "duration_s": functional[0]["duration_s"]}
    assert functional[1]["ok"] is True
    assert stuck is False


def test_wrong_numbers_fail_the_comparison_with_the_cpu(quiet):
    functional, _, _ = _run(FakeTorch({0: ("matmul", "wrong")}), 1)
    assert functional[0]["ok"] is False
    assert functional[0]["error"] == "result differs from the CPU: max abs difference 256"


def test_cudnn_failure_is_recorded_per_gpu(quiet):
    error = "cuDNN error: CUDNN_STATUS_NOT_INITIALIZED"
    functional, cudnn, _ = _run(FakeTorch({1: ("conv", error)}), 2)
    assert [r["ok"] for r in functional] == [True, True]
    assert [r["ok"] for r in cudnn] == [True, False]
    assert cudnn[1]["error"] == f"RuntimeError: {error}"


def test_cudnn_test_runs_backward_too(quiet):
    error = "cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"
    _, cudnn, _ = _run(FakeTorch({0: ("backward", error)}), 1)
    assert cudnn[0]["error"] == f"RuntimeError: {error}"


def test_p2p_matrix_has_none_on_the_diagonal():
    torch = FakeTorch(peers={(0, 1): True, (1, 0): True, (0, 2): False, (2, 0): False,
                             (1, 2): False, (2, 1): False})
    p2p, stuck = script.p2p_matrix(torch, 3)
    assert p2p == {"matrix": [[None, True, False], [True, None, False], [False, False, None]],
                   "error": None, "timed_out": False}
    assert stuck is False


def test_p2p_query_that_fails_leaves_none_and_says_why():
    torch = FakeTorch({1: ("peer", "CUDA error: invalid device ordinal")})
    p2p, _ = script.p2p_matrix(torch, 2)
    assert p2p["matrix"] == [[None, True], [None, None]]
    assert p2p["error"] == "GPU 1 -> GPU 0: RuntimeError: CUDA error: invalid device ordinal"
    assert p2p["timed_out"] is False


def test_p2p_query_that_hangs_times_out_with_what_it_had():
    torch = FakeTorch({1: ("peer", "hang")})
    try:
        p2p, stuck = script.p2p_matrix(torch, 2, deadline=0.2)
    finally:
        torch.release.set()
    assert stuck is True
    assert p2p["timed_out"] is True
    assert p2p["matrix"][0] == [None, True]
    assert p2p["error"] == "no answer within 0.2s"


def test_parent_deadline_fits_eight_gpus_each_at_their_deadline():
    budget = 8 * script.GPU_DEADLINE_S + script.P2P_DEADLINE_S
    assert budget + 30 <= TORCH_PROBE_TIMEOUT_S  # time left to start and import torch
    assert TORCH_PROBE_TIMEOUT_S <= 240


def test_child_killed_inside_a_gpu_test_is_blamed_on_that_gpu():
    """The parent's view: the child segfaulted while GPU 1 ran its functional test."""
    ok = {"index": 0, "ok": True, "timed_out": False, "error": None, "duration_s": 0.8}
    cuda = {"available": True, "device_count": 2, "init_error": None, "devices": [],
            "functional": [ok], "cudnn_test": [ok], "p2p": None}
    stdout = out(*BEFORE_IMPORT, *AFTER_IMPORT, put("cuda", cuda), stage("cuda.functional:1"))
    result = CommandResult(ARGV, -11, stdout, "", duration_s=3.0)
    _, torch = interpret_probe(result, PY)
    functional = torch.value["cuda"]["functional"]
    assert functional[0] == ok
    assert functional[1] == {
        "index": 1, "ok": False, "timed_out": False, "duration_s": 0.0,
        "error": f"the probe stopped here: {PY}: killed by SIGSEGV (exit code -11)"}
    assert torch.value["cuda"]["cudnn_test"] == [ok]


def _cuda_torch(count: int, init_error: str | None = None) -> FakeTorch:
    """FakeTorch with the CUDA queries cuda_facts makes before the per-GPU tests."""
    torch = FakeTorch()
    torch.version = type("version", (), {"cuda": "12.4", "hip": None})
    torch.cuda.is_available = staticmethod(lambda: init_error is None)
    torch.cuda.device_count = staticmethod(lambda: count)

    def init() -> None:
        if init_error:
            raise RuntimeError(init_error)

    torch.cuda.init = staticmethod(init)
    return torch


def test_cuda_facts_times_initialisation_and_the_gpu_tests_apart(quiet, monkeypatch):
    monkeypatch.setattr(script, "TIMINGS", {})
    monkeypatch.setattr(script, "readings_under_load", lambda torch, working: ([], False))
    torch = _cuda_torch(2)
    try:
        cuda, stuck = script.cuda_facts(torch, {})
    finally:
        torch.release.set()
    assert stuck is False and [r["ok"] for r in cuda["functional"]] == [True, True]
    timings = script.TIMINGS
    assert set(timings) == {"cuda_init_s", "gpu_tests_s", "p2p_query_s", "under_load_s",
                            "p2p_copy_s"}
    per_gpu = sum(r["duration_s"] for r in cuda["functional"] + cuda["cudnn_test"])
    assert timings["gpu_tests_s"] >= per_gpu - 0.01
    # Each part is sent as it ends, so a probe killed later still has the earlier ones.
    assert sum(line.get("key") == "timings" for line in quiet) == len(timings)


def test_a_failed_cuda_init_still_has_its_time(quiet, monkeypatch):
    monkeypatch.setattr(script, "TIMINGS", {})
    monkeypatch.setattr(script, "EXCEPTIONS", [])
    cuda, stuck = script.cuda_facts(_cuda_torch(1, "CUDA driver initialization failed"), {})
    assert stuck is False
    assert cuda["init_error"] == "RuntimeError: CUDA driver initialization failed"
    assert list(script.TIMINGS) == ["cuda_init_s"] and script.TIMINGS["cuda_init_s"] >= 0


def test_the_drivers_start_counts_as_cuda_init_even_where_get_arch_list_starts_it(
        quiet, monkeypatch):
    """Seen on an H200 with torch 2.11: get_arch_list() calls is_available(), which starts
    the driver (0.22 s there), and cudnn.version() runs torch's lazy init. Asked in "torch
    build", they put CUDA's start into torch_facts_s and left cuda_init_s at 0.0001 s. The
    probe now asks them after CUDA's initialisation, whose time includes the start."""
    monkeypatch.setattr(script, "TIMINGS", {})
    monkeypatch.setattr(script, "readings_under_load", lambda torch, working: ([], False))
    torch = _cuda_torch(1)
    started: list[bool] = []

    def is_available() -> bool:  # the first call starts the driver, as cuInit does
        if not started:
            time.sleep(0.3)
            started.append(True)
        return True

    torch.cuda.is_available = staticmethod(is_available)
    torch.cuda.get_arch_list = staticmethod(lambda: ["sm_90"] if is_available() else [])
    build = script.torch_build(torch)
    assert "arch_list" not in build  # "torch build" no longer touches CUDA
    try:
        script.cuda_facts(torch, build)
    finally:
        torch.release.set()
    assert script.TIMINGS["cuda_init_s"] >= 0.3
    assert build["arch_list"] == ["sm_90"]
    stages = [line["stage"] for line in quiet if "stage" in line]
    assert stages[:3] == ["cuda.is_available", "cuda.init", "cuda.device_count"]
    assert stages.index("cuda.arch_list") < stages.index("cuda.libraries") < \
        stages.index("cuda.functional:0")
    assert {"key": "build", "value": build} in quiet
