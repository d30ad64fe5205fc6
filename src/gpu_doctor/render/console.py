"""The terminal report a person reads before training.

Layout: a header line with the machine at a glance; checks grouped by area, each with
a status glyph and a one-line summary; skipped checks collapsed into one line per
area; then the findings, errors first, each with its evidence and numbered fix steps;
then a one-line verdict. Verbosity changes how much is shown, never what is judged.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpu_doctor.model import CheckResult, Finding, Report, Severity, Status
from gpu_doctor.render.glyphs import (
    SEVERITY_GLYPH,
    SEVERITY_STYLE,
    STATUS_GLYPH,
    STATUS_STYLE,
    area_title,
)


def _indent(renderable: Any, spaces: int) -> Padding:
    """Indent without padding lines out to the terminal width (copy-paste stays clean)."""
    return Padding(renderable, (0, 0, 0, spaces), expand=False)


def _header(report: Report) -> Text:
    env = report.environment
    gpus = env.get("gpus") or []
    if gpus:
        names = sorted(set(gpus))
        gpu_text = f"{len(gpus)}× {names[0]}" if len(names) == 1 else f"{len(gpus)} GPUs"
    else:
        gpu_text = "no GPU"
    parts = [
        env.get("os") or "unknown OS",
        f"Python {env.get('python') or '?'}",
        f"torch {env['torch']}" if env.get("torch") else "no torch",
        f"driver {env['driver']}" if env.get("driver") else "no driver",
        gpu_text,
    ]
    if env.get("wsl"):
        parts.insert(1, f"WSL{env['wsl']}")
    if env.get("container"):
        parts.insert(1, f"in {env['container']}")
    text = Text()
    text.append(f"gpu-doctor {report.tool_version}", style="bold")
    if report.facts_source != "live":
        text.append(f" (replaying {report.facts_source})", style="dim")
    text.append("  " + " · ".join(parts))
    return text


def _checks_grid(title_width: int) -> Table:
    """One grid per area; the shared title width keeps summaries aligned across areas."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=1)  # the indent
    grid.add_column(width=1)  # the status glyph
    grid.add_column(no_wrap=True, min_width=title_width)  # the check title
    grid.add_column(overflow="fold")  # the summary, wrapped (paths folded, never cut)
    return grid


def _add_check_row(grid: Table, result: CheckResult, verbose: bool) -> None:
    summary = Text(result.summary, style="dim" if result.status is Status.SKIP else "")
    if verbose:
        summary.append(f"  [{result.check_id}, {result.duration_s * 1000:.0f} ms]", style="dim")
    grid.add_row("", Text(STATUS_GLYPH[result.status], style=STATUS_STYLE[result.status]),
                 Text(result.title, style="bold" if result.status is not Status.PASS else ""),
                 summary)


def _checks_section(report: Report, verbose: bool) -> list[Any]:
    by_area: dict[str, list[CheckResult]] = defaultdict(list)
    for result in report.results:
        by_area[result.area].append(result)
    out: list[Any] = []
    title_width = max((len(r.title) for r in report.results), default=10)
    title_width = max(title_width, len("99 checks skipped"))
    for area, results in by_area.items():
        out.append(Text(area_title(area), style="bold underline"))
        grid = _checks_grid(title_width)
        skipped: dict[str, list[str]] = defaultdict(list)
        tracebacks: list[Any] = []
        for result in results:
            if result.status is Status.SKIP and not verbose:
                skipped[result.skip_reason or "skipped"].append(result.title)
                continue
            _add_check_row(grid, result, verbose)
            if result.status is Status.ERROR and verbose and result.error:
                tracebacks.append(_indent(Text(result.error.rstrip(), style="magenta"), 6))
        for reason, titles in skipped.items():
            noun = "check" if len(titles) == 1 else "checks"
            grid.add_row("", Text(STATUS_GLYPH[Status.SKIP], style="dim"),
                         Text(f"{len(titles)} {noun} skipped", style="dim"),
                         Text(f"{reason}: {', '.join(titles)}", style="dim"))
        out.append(grid)
        out.extend(tracebacks)
    return out


def _steps_grid(finding: Finding, verbose: bool) -> Table:
    """Numbered steps with a hanging indent, each command on its own line beneath."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=8, justify="right")
    grid.add_column()
    for number, step in enumerate(finding.remediation, 1):
        body = Text(step.text)
        if step.command:
            body.append("\n$ " + step.command, style="cyan")
        if step.url and verbose:
            body.append("\n" + step.url, style="blue underline")
        grid.add_row(f"{number}.", body)
    return grid


def _finding_block(finding: Finding, verbose: bool) -> Group:
    sev = finding.effective_severity
    head = Text()
    head.append(f"{SEVERITY_GLYPH[sev]} {finding.code.id}", style=SEVERITY_STYLE[sev])
    head.append(f" [{finding.category.value}] ", style="dim")
    head.append(finding.title, style="bold")
    parts: list[Any] = [head]
    if finding.affects:
        parts.append(_indent(Text(f"affects: {', '.join(finding.affects)}", style="dim"), 4))
    for ev in finding.evidence:
        line = Text()
        line.append(f"{ev.label}: ", style="dim")
        line.append(ev.value)
        if verbose and ev.source:
            line.append(f"  ({ev.source})", style="dim")
        parts.append(_indent(line, 4))
    if finding.remediation:
        parts.append(_indent(Text("How to fix:", style="bold"), 4))
        parts.append(_steps_grid(finding, verbose))
    docs = finding.docs_url or finding.code.docs_url
    more = f"More: gpu-doctor explain {finding.code.id}" + (f" · {docs}" if docs else "")
    parts.append(_indent(Text(more, style="dim"), 4))
    return Group(*parts)


def verdict_line(report: Report, strict: bool) -> Text:
    findings = report.findings
    errors = sum(1 for f in findings if f.effective_severity is Severity.ERROR)
    warnings = sum(1 for f in findings if f.effective_severity is Severity.WARNING)
    counts = ", ".join(
        f"{report.count(s)} {word}"
        for s, word in ((Status.PASS, "passed"), (Status.WARN, "warned"), (Status.FAIL, "failed"),
                        (Status.SKIP, "skipped"), (Status.ERROR, "crashed"))
        if report.count(s)
    )
    code = report.exit_code(strict)
    text = Text()
    style = {0: "bold green", 1: "bold red", 3: "bold magenta"}[code]
    label = {0: "Ready for training", 1: "Not ready: problems found",
             3: "The doctor itself failed"}[code]
    text.append(label, style=style)
    text.append(f" — {errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"
                f" · {len(report.results)} checks: {counts} · exit code {code}")
    return text


def render_console(
    report: Report, console: Console, *, verbose: bool = False, quiet: bool = False,
    strict: bool = False,
) -> None:
    """Print the report; ``quiet`` keeps only findings and the verdict."""
    if not quiet:
        console.print(_header(report))
        console.print()
        for item in _checks_section(report, verbose):
            console.print(item)
        console.print()
    findings = report.findings
    if findings:
        console.print(Text(f"Findings ({len(findings)})", style="bold underline"))
        for finding in findings:
            console.print(_finding_block(finding, verbose))
            console.print()
    if verbose and report.probe_errors:
        console.print(Text("Probes that could not gather their facts", style="bold underline"))
        for name, error in report.probe_errors.items():
            console.print(Text(f"  {name}: {error}", style="magenta"))
        console.print()
    console.print(verdict_line(report, strict))
