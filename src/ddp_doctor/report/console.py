"""The terminal report a person reads before training.

Layout: a header line with the machine at a glance; checks grouped by area, each with
a status glyph and a one-line summary; skipped checks collapsed into one line per
area; then the findings, errors first, each with its evidence and numbered fix steps;
then a one-line verdict. Verbosity changes how much is shown, never what is judged.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ddp_doctor.model import CheckResult, Report, Status
from ddp_doctor.report.blocks import Line, finding_block, indent, print_block, verdict_line
from ddp_doctor.report.glyphs import STATUS_GLYPH, STATUS_STYLE, area_title
from ddp_doctor.report.smoke import smoke_table


def _header(report: Report, width: int) -> Text:
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
    from_log = report.facts_source.startswith("log: ")
    if from_log:  # only what the text showed; silence is not "no driver"
        known = [env.get("os"), f"Python {env['python']}" if env.get("python") else None,
                 f"torch {env['torch']}" if env.get("torch") else None,
                 f"driver {env['driver']}" if env.get("driver") else None,
                 gpu_text if gpus else None]
        parts = [part for part in known if part]
    text = Text()
    text.append(f"ddp-doctor {report.tool_version}", style="bold")
    line_len = len(text) + 2
    text.append("  ")
    for number, part in enumerate(parts):  # wrap between parts, never inside one
        sep = " · " if number else ""
        if number and line_len + len(sep) + len(part) > width:
            text.append(" ·\n  ")
            sep, line_len = "", 2
        text.append(sep + part)
        line_len += len(sep) + len(part)
    if from_log:
        text.append(f"\ndiagnosis of the {report.facts_source}", style="dim")
    elif report.facts_source != "live":
        text.append(f"\nreplaying facts saved in {report.facts_source}", style="dim")
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
        timing = "" if result.status is Status.SKIP else f", {result.duration_s * 1000:.0f} ms"
        summary.append(f"  [{result.check_id}{timing}]", style="dim")
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
        commands: list[Any] = []
        for result in results:
            if result.status is Status.SKIP and not verbose:
                skipped[result.skip_reason or "skipped"].append(result.title)
                continue
            _add_check_row(grid, result, verbose)
            if result.command:
                commands.append(Line(Text("$ " + result.command, style="cyan"), 4))
            if result.status is Status.ERROR and verbose and result.error:
                tracebacks.extend(Line(Text(line, style="magenta"), 6)
                                  for line in result.error.rstrip().splitlines())
        for reason, titles in skipped.items():
            noun = "check" if len(titles) == 1 else "checks"
            grid.add_row("", Text(STATUS_GLYPH[Status.SKIP], style="dim"),
                         Text(f"{len(titles)} {noun} skipped", style="dim"),
                         Text(f"{', '.join(titles)} — {reason}", style="dim"))
        out.append(grid)
        out.extend(commands)
        out.extend(tracebacks)
    return out


def render_console(
    report: Report, console: Console, *, verbose: bool = False, quiet: bool = False,
    strict: bool = False,
) -> None:
    """Print the report; ``quiet`` keeps only findings and the verdict."""
    if not quiet:
        print_block(console, _header(report, console.width))
        console.print()
        for item in _checks_section(report, verbose):
            print_block(console, item)
        console.print()
        if report.smoke is not None:
            console.print(Text("Smoke training", style="bold underline"))
            print_block(console, indent(smoke_table(report.smoke), 2))
            console.print()
    findings = report.findings
    if findings:
        console.print(Text(f"Findings ({len(findings)})", style="bold underline"))
        for finding in findings:
            print_block(console, finding_block(finding, verbose))
            console.print()
    if verbose and report.probe_errors:
        console.print(Text("Probes that could not gather their facts", style="bold underline"))
        for name, error in report.probe_errors.items():
            console.print(Text(f"  {name}: {error}", style="magenta"))
        console.print()
    print_block(console, verdict_line(report, strict))
