"""A pytest plugin that keeps the quick loop quick: a test without a ``slow``, ``spawns`` or
``gpu`` marker fails when it takes longer than ``quick_test_limit_s`` (pyproject.toml, 2 s).

The quick loop (``pytest -m "not slow and not spawns"``) is the one developers run after
every change; one unmarked test of ten seconds doubles it without anyone noticing. The
markers are how a test says it is slow, so an unmarked slow test is a mistake this plugin
reports on the test itself, with what to do.

The time charged is what the test would take on an idle machine: the wall time of its set-up
and call, less the time this process's threads were ready to run but waiting for a CPU (the
run-queue delay Linux keeps per thread in /proc/self/task/TID/schedstat, second field, in
nanoseconds: the kernel's Documentation/scheduler/sched-stats.rst), summed over the threads:
torch's own threads compute while the main thread waits for them, and their waits for a CPU
made a 1 s model test read 5.8 s at a load of 11 on two cores when only the main thread's wait
was left out. Two threads waiting at once are both left out, so a loaded machine can only
make the charge smaller, never make a test fail; on an idle machine nothing waits and the
charge is the wall time. On a machine shared with other jobs that delay is
most of the wall time, and counting it would fail tests for the load rather than for
themselves; time blocked (sleeping, waiting for a child or a file) still counts, because an
idle machine waits just as long. Where schedstat is missing (not Linux), the plain wall time
is used. The set-up includes the module and session fixtures the test is the first to need:
an expensive fixture shared by unmarked tests is quick-loop time too.

A run under a tracer (a debugger, coverage) is not a timing run, and the check is off there;
so is a pytest-xdist worker (CI's ``-n 4``): the quick loop runs in one process.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import pytest

LONG_MARKERS = ("slow", "spawns", "gpu")
SCHEDSTAT = Path("/proc/self/schedstat")
TASKS = Path("/proc/self/task")
_START = pytest.StashKey[tuple[float, float]]()


def run_queue_wait_s(schedstat: Path = SCHEDSTAT) -> float:
    """Seconds this thread has spent runnable but not running, since it started (0.0 where
    the kernel does not say)."""
    try:
        return int(schedstat.read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def process_run_queue_wait_s(tasks: Path = TASKS) -> float:
    """Seconds this process's live threads have spent runnable but not running, summed (the
    main thread's alone where the kernel keeps no per-thread figures)."""
    try:
        threads = list(tasks.iterdir())
    except OSError:
        return run_queue_wait_s()
    return sum(run_queue_wait_s(thread / "schedstat") for thread in threads)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("quick_test_limit_s", "seconds an unmarked test may take (idle-machine time)",
                  default="2.0")


def _is_marked_long(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(name) is not None for name in LONG_MARKERS)


def now() -> tuple[float, float]:
    """The wall clock and the run-queue wait so far, read together."""
    return time.monotonic(), process_run_queue_wait_s()


def idle_machine_seconds(start: tuple[float, float], end: tuple[float, float]) -> float:
    """The wall time from ``start`` to ``end`` (both from ``now()``) less the time spent
    waiting for a CPU in between."""
    return (end[0] - start[0]) - (end[1] - start[1])


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item):
    item.stash[_START] = now()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if call.when != "call" or not report.passed or _is_marked_long(item):
        return
    if sys.gettrace() is not None or hasattr(item.config, "workerinput"):  # see the docstring
        return
    start: Optional[tuple[float, float]] = item.stash.get(_START, None)
    if start is None:
        return
    limit = float(str(item.config.getini("quick_test_limit_s")))
    took = idle_machine_seconds(start, now())
    if took > limit:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {took:.1f} s (set-up and call, less the time spent waiting "
            f"for a CPU), over the quick loop's {limit:g} s for an unmarked test. Make it "
            "faster (share an expensive fixture at module or session scope), or mark it "
            "@pytest.mark.slow (and spawns, if it starts a real process).")
