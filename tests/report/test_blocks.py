"""The shared terminal blocks: the full report and the smoke view use them, not each other."""

from __future__ import annotations

import ast
from pathlib import Path

from rich.console import Console

from ddp_doctor.report import blocks
from ddp_doctor.report.smoke import render_smoke_console
from tests.support.smoke_reports import failing_run

REPORT = Path(blocks.__file__).resolve().parent


def imported(path: Path) -> set[str]:
    """Every ddp_doctor module PATH imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("ddp_doctor.")}


def test_console_and_smoke_do_not_import_each_other():
    assert "ddp_doctor.report.console" not in imported(REPORT / "smoke.py")
    assert "ddp_doctor.report.smoke" not in imported(REPORT / "blocks.py")
    assert "ddp_doctor.report.console" not in imported(REPORT / "blocks.py")


def test_no_module_of_the_report_package_is_in_an_import_cycle():
    graph = {f"ddp_doctor.report.{p.stem}": imported(p) for p in REPORT.glob("*.py")}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, set()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    assert [m for m in graph if reaches(m, m, {m})] == []


def report_of(result):
    from ddp_doctor.model import Report

    return Report("0", "2025-01-01T00:00:00+00:00", (result.check_result(),),
                  smoke=result.data)


def render(report, **options) -> str:
    console = Console(record=True, width=100, highlight=False)
    render_smoke_console(report, console, **options)
    return console.export_text()


def test_the_smoke_view_quiet_keeps_only_findings_and_verdict():
    report = report_of(failing_run())
    full, quiet = render(report), render(report, quiet=True)
    assert "Smoke training" in full and "Median step time" in full
    assert "Smoke training" not in quiet and "Median step time" not in quiet
    for code in ("SMK006", "SMK014"):
        assert code in full and code in quiet
    assert quiet.rstrip().splitlines()[-2].startswith("Not ready: problems found (exit code 1)")


def test_the_smoke_view_strict_verdict_counts_warnings():
    from dataclasses import replace

    from ddp_doctor.model import Severity

    result = failing_run()
    warned = replace(result, findings=[replace(f, severity=Severity.WARNING)
                                       for f in result.findings])
    report = report_of(warned)
    assert "Ready for training (exit code 0)" in render(report)
    assert "Not ready: problems found (exit code 1)" in render(report, strict=True)
