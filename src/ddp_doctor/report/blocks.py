"""Rendering blocks every terminal view shares: a finding, the verdict, clean printing.

The full report (``report.console``) and the smoke job's own view (``report.smoke``) show
findings and the verdict the same way, so both import these from here and neither imports
the other's internals.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.padding import Padding
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from ddp_doctor.model import Finding, Report, Severity, Status
from ddp_doctor.report.glyphs import SEVERITY_GLYPH, SEVERITY_STYLE


def indent(renderable: Any, spaces: int) -> Padding:
    """Indent without padding lines out to the terminal width (copy-paste stays clean)."""
    return Padding(renderable, (0, 0, 0, spaces), expand=False)


class Trimmed:
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


class Line:
    """One line printed as is at an indent: never wrapped, so a command stays whole."""

    def __init__(self, text: Text, indent: int) -> None:
        self.text, self.indent = text, indent

    def __rich_console__(self, console: Console, options: Any) -> Any:
        yield Segment(" " * self.indent)
        yield from self.text.render(console, end="")
        yield Segment.line()


def print_block(console: Console, renderable: Any) -> None:
    console.print(Trimmed(renderable), crop=False)


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
            parts.append(Line(Text("$ " + step.command, style="cyan"), 9))
        if step.url and (verbose or not step.command):
            parts.append(Line(Text(step.url, style="blue underline"), 9))
    return parts


def finding_block(finding: Finding, verbose: bool) -> Group:
    sev = finding.effective_severity
    head = Text()
    head.append(f"{SEVERITY_GLYPH[sev]} {finding.code.id}",
                style="dim" if finding.ignored is not None else SEVERITY_STYLE[sev])
    head.append(f" [{finding.category.value}] ", style="dim")
    head.append(finding.title, style="bold")
    parts: list[Any] = [head]
    if finding.ignored is not None:
        parts.append(indent(Text(f"ignored by policy: {finding.ignored}", style="yellow"), 4))
    if finding.affects:
        parts.append(indent(Text(f"affects: {', '.join(finding.affects)}", style="dim"), 4))
    for ev in finding.evidence:
        line = Text()
        line.append(f"{ev.label}: ", style="dim")
        line.append(ev.value)
        if verbose and ev.source:
            line.append(f"  ({ev.source})", style="dim")
        parts.append(indent(line, 4))
    if finding.remediation:
        parts.append(indent(Text("How to fix:", style="bold"), 4))
        parts.extend(_steps(finding, verbose))
    docs = finding.docs_url or finding.code.docs_url
    more = f"More: ddp-doctor explain {finding.code.id}" + (f" · {docs}" if docs else "")
    parts.append(Line(Text(more, style="dim"), 4))
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
