"""The suite's `--dist loadgroup` groups hold: the tests of one group run on one worker.

tests/conftest.py groups the tests that share a module-scoped real job, and the tests that need
the Ultralytics venv, so each job runs once and the venv is built once. Under pytest 9.2 with
pytest-xdist 3.8 no group held (xdist renames ``Node._nodeid``, which pytest 9 no longer reads):
every grouped test went its own way, and nothing said so. constraints/test.txt pins the pytest
that works; this test fails if the pin or the grouping is lost.
"""

from __future__ import annotations

import pytest

GROUPED = """
import os
import pytest

@pytest.mark.parametrize("i", range(4))
def test_in_a_group(i):
    print("WORKER", os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.parametrize("i", range(4))
def test_free(i):
    pass
"""

# The conftest adds the group at collection time, as tests/conftest.py does: before xdist's
# own hook reads the groups (tryfirst), or the group comes too late.
CONFTEST = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if item.name.startswith("test_in_a_group"):
            item.add_marker(pytest.mark.xdist_group("shared-job"))
"""


@pytest.mark.slow
@pytest.mark.spawns
def test_a_group_added_at_collection_runs_on_one_worker(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_grouped=GROUPED)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-v", "-s",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8)
    ran_on = {line.split()[0] for line in result.stdout.lines
              if "PASSED" in line and "test_in_a_group" in line}
    assert len(ran_on) == 1, result.stdout.str()  # e.g. {"[gw1]"}
    assert all("@shared-job" in line for line in result.stdout.lines
               if "PASSED" in line and "test_in_a_group" in line)
