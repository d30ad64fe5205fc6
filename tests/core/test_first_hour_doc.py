"""docs/first-hour.md cannot drift: its commands, exit codes and finding codes are re-run."""

from __future__ import annotations

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


def test_the_page_shows_the_three_paths_with_their_commands():
    page = (REPO / "docs" / "first-hour.md").read_text(encoding="utf-8")
    for title in ("## Before training", "## CI pre-flight", "## Support ticket"):
        assert title in page
    assert page.count("```console\n$ ") == 9
    assert "/work/" not in page and "/tmp/" not in page  # no path of the machine that ran it
