"""docs/first-hour.md cannot drift: its commands are re-run, and their exit codes, finding
codes and output (numbers and progress lines masked) compared with the page."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.spawns
def test_the_first_hour_page_is_what_the_tool_does_today():
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "first_hour.py"), "--check"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr


def first_hour():  # docs/ is not a package: the script is loaded as the test runs it
    import importlib.util

    spec = importlib.util.spec_from_file_location("first_hour", REPO / "docs" / "first_hour.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["first_hour"] = module
    spec.loader.exec_module(module)
    return module


def test_the_page_shows_the_three_paths_with_their_commands():
    page = (REPO / "docs" / "first-hour.md").read_text(encoding="utf-8")
    for title in ("## Before training", "## CI pre-flight", "## Support ticket"):
        assert title in page
    assert page.count("```console\n$ ") == 11
    assert "/work/" not in page and "/tmp/" not in page  # no path of the machine that ran it
    # Issue 24: the log it diagnoses is shown, the policy's removal is a step, and the smoke
    # table has today's rows.
    assert "$ cat train.log\nMASTER_ADDR=localhost" in page
    assert page.index("$ rm ddp-doctor.toml") < page.index("$ ddp-doctor doctor --no-smoke")
    assert "Compute / sync per step" in page


def test_stale_rendering_is_drift_and_timings_are_not():
    """Before, the check compared codes only: a stale row or wording passed."""
    module = first_hour()
    shown = module.page_results((REPO / "docs" / "first-hour.md").read_text(encoding="utf-8"))
    assert len(shown) == 11 and module.drift(shown, shown) == []
    first = shown[0]
    faster = [module.Ran(first.command, first.exit_code,
                         re.sub(r"\d+\.\d+ s\b", "0.1 s", first.output)), *shown[1:]]
    assert faster[0].output != first.output and module.drift(shown, faster) == []
    assert "Compute / sync per step" in first.output  # the doctor's smoke table
    stale = [module.Ran(first.command, first.exit_code,
                        first.output.replace("Compute / sync per step", "Step time")),
             *shown[1:]]
    found = module.drift(shown, stale)
    assert len(found) == 1 and found[0].startswith("`ddp-doctor` prints otherwise: page ")
    assert "Compute / sync per step" in found[0] and "Step time" in found[0]
    progress = [module.Ran(first.command, first.exit_code,
                           "ddp-doctor: smoke: step 3/20 (14 s)\n" + first.output),
                *shown[1:]]
    assert module.drift(shown, progress) == []

