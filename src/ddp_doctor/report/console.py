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
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from ddp_doctor.model import CheckResult, Finding, Report, Severity, Status
from ddp_doctor.report.glyphs import (
    SEVERITY_GLYPH,
    SEVERITY_STYLE,
    STATUS_GLYPH,
    STATUS_STYLE,
    area_title,
)


def _indent(renderable: Any, spaces: int) -> Padding:
    """Indent without padding lines out to the terminal width (copy-paste stays clean)."""
    return Padding(renderable, (0, 0, 0, spaces), expand=False)


class _Trimmed:
    """Render without the trailing spaces tables pad lines with, and never crop a line.

    Printed with ``crop=False``, a line longer than the terminal (a command) is left for
    the terminal to soft-wrap, so it copy-pastes as one line.
    """

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: Any) -> Any:
        for line in Segment.split_lines(console.render(self.renderable, options)):
            while line and not line[-1].control and not line[-1].text.rstrip(" "):
                line.pop()
            if line and not line[-1].control:
                line[-1] = Segment(line[-1].text.rstrip(" "), line[-1].style)
            yield from line
            yield Segment.line()


class _Line:
    """One line printed as is at an indent: never wrapped, so a command stays whole."""

    def __init__(self, text: Text, indent: int) -> None:
        self.text, self.indent = text, indent

    def __rich_console__(self, console: Console, options: Any) -> Any:
        yield Segment(" " * self.indent)
        yield from self.text.render(console, end="")
        yield Segment.line()


def _print(console: Console, renderable: Any) -> None:
    console.print(_Trimmed(renderable), crop=False)


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
                commands.append(_Line(Text("$ " + result.command, style="cyan"), 4))
            if result.status is Status.ERROR and verbose and result.error:
                tracebacks.extend(_Line(Text(line, style="magenta"), 6)
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


def _steps(finding: Finding, verbose: bool) -> list[Any]:
    """Numbered steps with a hanging indent, each command whole on its own line beneath.

    A step's URL is shown when verbose, or when the step has no command to run.
    """
    parts: list[Any] = []
    for number, step in enumerate(finding.remediation, 1):
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=8, justify="right")
        grid.add_column()
        grid.add_row(f"{number}.", Text(step.text))
        parts.append(grid)
        if step.command:
            parts.append(_Line(Text("$ " + step.command, style="cyan"), 9))
        if step.url and (verbose or not step.command):
            parts.append(_Line(Text(step.url, style="blue underline"), 9))
    return parts


def _finding_block(finding: Finding, verbose: bool) -> Group:
    sev = finding.effective_severity
    head = Text()
    head.append(f"{SEVERITY_GLYPH[sev]} {finding.code.id}",
                style="dim" if finding.ignored is not None else SEVERITY_STYLE[sev])
    head.append(f" [{finding.category.value}] ", style="dim")
    head.append(finding.title, style="bold")
    parts: list[Any] = [head]
    if finding.ignored is not None:
        parts.append(_indent(Text(f"ignored by policy: {finding.ignored}", style="yellow"), 4))
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
        parts.extend(_steps(finding, verbose))
    docs = finding.docs_url or finding.code.docs_url
    more = f"More: ddp-doctor explain {finding.code.id}" + (f" · {docs}" if docs else "")
    parts.append(_Line(Text(more, style="dim"), 4))
    return Group(*parts)


def verdict_line(report: Report, strict: bool) -> Text:
    findings = [f for f in report.findings if f.ignored is None]
    ignored = len(report.findings) - len(findings)
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
    if code == 0 and report.cpu_fallback:  # trained, but not where it was asked to
        style, label = "bold yellow", "Passed on CPU only; GPU training not proven"
    if report.facts_source.startswith("log: "):  # a log says what failed, not what is ready
        label = {0: "No failure cause found" if not warnings else "Warnings only, no failure "
                    "cause found", 1: "Failure cause found"}.get(code, label)
    text.append(f"{label} (exit code {code})", style=style)
    text.append(f" — {errors} error{'s' * (errors != 1)}, "
                f"{warnings} warning{'s' * (warnings != 1)}"
                + (f", {ignored} ignored by policy" if ignored else ""))
    noun = "check" if len(report.results) == 1 else "checks"
    text.append(f"\n{len(report.results)} {noun}: {counts}", style="dim")
    return text


def render_console(
    report: Report, console: Console, *, verbose: bool = False, quiet: bool = False,
    strict: bool = False,
) -> None:
    """Print the report; ``quiet`` keeps only findings and the verdict."""
    if not quiet:
        _print(console, _header(report, console.width))
        console.print()
        for item in _checks_section(report, verbose):
            _print(console, item)
        console.print()
        if report.smoke is not None:
            from ddp_doctor.report.smoke import smoke_table

            console.print(Text("Smoke training", style="bold underline"))
            _print(console, _indent(smoke_table(report.smoke), 2))
            console.print()
    findings = report.findings
    if findings:
        console.print(Text(f"Findings ({len(findings)})", style="bold underline"))
        for finding in findings:
            _print(console, _finding_block(finding, verbose))
            console.print()
    if verbose and report.probe_errors:
        console.print(Text("Probes that could not gather their facts", style="bold underline"))
        for name, error in report.probe_errors.items():
            console.print(Text(f"  {name}: {error}", style="magenta"))
        console.print()
    _print(console, verdict_line(report, strict))
