"""The quick loop's budget (tests/support/quick_budget.py, loaded by tests/conftest.py): an
unmarked test that takes longer than the limit fails with what to do; a test marked slow or
spawns may take as long as it needs; time spent waiting for a CPU is not charged."""

from __future__ import annotations

import pytest

from tests.support import quick_budget

TIMED = """
import time
import pytest

def test_quick():
    pass

def test_sleeps_past_the_limit():
    time.sleep(0.15)

@pytest.mark.slow
def test_marked_slow():
    time.sleep(0.15)

@pytest.mark.spawns
def test_marked_spawns():
    time.sleep(0.15)

def test_fails_on_its_own():
    time.sleep(0.15)
    assert False, "its own failure"
"""


def test_an_unmarked_test_over_the_limit_fails_and_a_marked_one_does_not(pytester):
    pytester.makeini("[pytest]\nmarkers =\n    slow: x\n    spawns: x\n    gpu: x\n")
    pytester.makepyfile(test_timed=TIMED)
    # 0.05 s: a sleep of 0.15 s is over it on any machine, load or not (sleeping is not
    # waiting for a CPU, so it is all charged), and an empty test is far under it.
    result = pytester.runpytest("-p", "tests.support.quick_budget", "-o",
                                "quick_test_limit_s=0.05", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines([
        "*test_sleeps_past_the_limit took 0.* s (set-up and call, less the time spent waiting "
        "for a CPU), over the quick loop's 0.05 s for an unmarked test*"])
    # A test that fails by itself keeps its own failure, not the budget's.
    result.stdout.fnmatch_lines(["*AssertionError: its own failure*"])
    assert "test_fails_on_its_own took" not in result.stdout.str()


def test_the_time_charged_leaves_out_the_wait_for_a_cpu():
    # Started 3 s ago with 10 s of run-queue wait behind it; 2.5 s more of waiting since:
    # on an idle machine the same work would have taken 0.5 s.
    assert quick_budget.idle_machine_seconds((100.0, 10.0), (103.0, 12.5)) == pytest.approx(0.5)


def test_the_run_queue_wait_is_read_from_the_kernel(tmp_path):
    stat = tmp_path / "schedstat"
    stat.write_text("970337 433774000 2\n")  # cpu ns, run-queue wait ns, time slices
    assert quick_budget.run_queue_wait_s(stat) == pytest.approx(0.433774)
    assert quick_budget.run_queue_wait_s(tmp_path / "absent") == 0.0  # not Linux: wall time


def test_the_wait_of_every_thread_of_the_process_is_summed(tmp_path):
    """torch's threads wait for a CPU while the main thread waits for them."""
    for tid, wait_ns in (("101", 433774000), ("102", 1500000000)):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "schedstat").write_text(f"970337 {wait_ns} 2\n")
    assert quick_budget.process_run_queue_wait_s(tmp_path) == pytest.approx(1.933774)
    assert quick_budget.process_run_queue_wait_s() >= 0.0  # this process, read live
