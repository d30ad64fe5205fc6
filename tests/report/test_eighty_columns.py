"""Every text at 80 columns (issue 24, point 6): what a pipe or a plain terminal gets.

A line may pass 80 columns only when it is one unbreakable piece (a URL, a path): then
the terminal soft-wraps it and a copy still gives it whole. Prose never runs past the
width for the terminal to cut mid-word, and nothing is cut short with "...".
"""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from ddp_doctor.app.catalogue import run_explain
from ddp_doctor.checklist import load_catalogue
from ddp_doctor.cli import app
from ddp_doctor.codebook import all_codes
from ddp_doctor.facts.snapshot import load_facts
from ddp_doctor.model import CheckResult, Report, Status
from ddp_doctor.report.console import render_console
from ddp_doctor.runner import build_report
from tests.conftest import FACTS_DIR
from tests.support.cli import runner


def too_wide(text: str, width: int = 80) -> list[str]:
    """Lines wider than ``width`` that hold more than one word (prose left to the terminal)."""
    return [line for line in text.splitlines()
            if len(line) > width and len(line.strip().split()) > 1]


@pytest.mark.slow  # every code's explanation, over 260 codes
def test_explain_wraps_every_code_between_words(capsys):
    """Before: `explain DRV001` printed lines of 171-311 characters."""
    for code in sorted(all_codes(load_catalogue())):
        assert run_explain(code) == 0
        text = capsys.readouterr().out
        assert not too_wide(text), (code, too_wide(text))
        assert text.startswith(f"{code}: ")
    run_explain("DRV001")
    drv = capsys.readouterr().out
    assert "\nWhat it means\n  NVML" in drv and "\nHow to fix\n  " in drv


def test_top_level_help_cuts_no_description():
    """Before: "Gather facts and run the checks only (the pre-flight step for..."."""
    text = runner.invoke(app, ["--help"], terminal_width=80).stdout
    assert "..." not in text.split("\n", 1)[1]  # (after the usage line's "[ARGS]...")
    assert not too_wide(text)
    for command in ("doctor", "check", "diagnose", "compare", "smoke", "run"):
        line = next(row for row in text.splitlines() if row.startswith(f"  {command} "))
        assert line.rstrip().endswith(".")  # a whole sentence


def render(report: Report, **options: bool) -> str:
    console = Console(record=True, width=80, highlight=False, force_terminal=False)
    render_console(report, console, **options)
    return console.export_text()


def test_verbose_never_splits_a_timing():
    """Before: "[packages.python_version, 0" on one line and "ms]" on the next."""
    facts = load_facts(FACTS_DIR / "sandbox_cpu_container.json")
    text = render(build_report(load_catalogue(), facts, facts_source="live"), verbose=True)
    assert re.search(r", \d+ms\]", text)
    assert not re.search(r", \d+\s*$", text, re.MULTILINE)
    assert not re.search(r"^\s*ms\]", text, re.MULTILINE)


def test_a_skipped_smoke_job_is_one_row_not_a_second_section():
    """Before: doctor printed the "Smoke training" section twice when the job was skipped."""
    reason = "blocked by TOR001: torch cannot be imported"
    skipped = CheckResult("smoke.run", "DDP smoke training", "smoke", Status.SKIP, reason,
                          skip_reason=reason)
    report = Report("0", "2026-01-01T00:00:00+00:00", (skipped,),
                    smoke={"ok": None, "skipped": reason})
    text = render(report)
    assert text.count("Smoke training") == 1, text
    assert reason.split(":")[0] in text
