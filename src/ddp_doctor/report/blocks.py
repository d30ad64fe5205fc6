"""Rendering blocks every terminal view shares: a finding, the verdict, clean printing.

The full report (``report.console``) and the smoke job's own view (``report.smoke``) show
findings and the verdict the same way, so both import these from here and neither imports
the other's internals.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from rich.cells import cell_len
from rich.console import Console, Group
from rich.padding import Padding
from rich.segment import Segment
from rich.text import Text

from ddp_doctor.model import Finding, Report, Severity, Status
from ddp_doctor.report.glyphs import SEVERITY_GLYPH, SEVERITY_STYLE


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


# What a line may never be broken inside: a run of non-blanks, or a `code span` with the
# characters around it (a command quoted in prose copies whole, spaces and all).
_PIECE = re.compile(r"(?:[^\s`]*`[^`\n]*`)+[^\s`]*|\S+")


def wrap(text: Text, width: int, first: int, hang: int,
         fallback: Optional[int] = None) -> list[tuple[int, Text]]:
    """``text`` as (column, line) pairs, broken only between words.

    The first line starts at column ``first``, later ones at ``hang``. A word that does not
    fit at ``hang`` (a long path, URL, command) gets a line of its own at ``fallback`` and
    is left longer than ``width``: the terminal soft-wraps it and a copy gives it whole,
    where folding it would put a newline inside the path a reader pastes. An explicit
    newline starts a new line at ``hang``.
    """
    fallback = hang if fallback is None else fallback
    lines: list[tuple[int, Text]] = []
    column = first
    for paragraph in text.split("\n", allow_blank=True):
        lines.extend(_wrap_paragraph(paragraph, width, column, hang, fallback))
        column = hang
    return lines


def _wrap_paragraph(para: Text, width: int, first: int, hang: int,
                    fallback: int) -> list[tuple[int, Text]]:
    plain = para.plain
    spans: list[tuple[int, int, int]] = []  # (column, start, end) of each line
    column, start, end, used, empty = first, 0, 0, first, True
    for match in _PIECE.finditer(plain):
        size = cell_len(match.group())
        if empty and spans:  # a fresh continuation line: no gap before its first word
            start = match.start()
        gap = cell_len(plain[end:match.start()]) if not (empty and spans) else 0
        if used + gap + size <= width:
            end, used, empty = match.end(), used + gap + size, False
            continue
        if not empty or not spans:  # a first line may keep only what precedes the text
            spans.append((column, start, end))
        if hang + size <= width:
            column, start, end, used, empty = hang, match.start(), match.end(), hang + size, False
        else:
            spans.append((fallback, match.start(), match.end()))
            column, start, end, used, empty = hang, match.end(), match.end(), hang, True
    if not empty or not spans:
        spans.append((column, start, end))
    return [(col, para[a:b]) for col, a, b in spans]


class Wrapped:
    """Prose at an indent, wrapped between words only (see ``wrap``), never cropped.

    ``prefix`` (a check's glyph and title, a step's number) is printed before the first
    line instead of the indent and sets where that line's text begins; continuation lines
    start at ``hang`` (by default where the first line's text began).
    """

    def __init__(self, text: Text, indent: int = 0, *, prefix: Optional[Text] = None,
                 hang: Optional[int] = None, fallback: Optional[int] = None) -> None:
        self.text, self.indent, self.prefix = text, indent, prefix
        self.hang, self.fallback = hang, fallback

    def __rich_console__(self, console: Console, options: Any) -> Any:
        first = cell_len(self.prefix.plain) if self.prefix is not None else self.indent
        hang = first if self.hang is None else self.hang
        text = self.text.copy()
        text.expand_tabs()
        for number, (column, line) in enumerate(
                wrap(text, options.max_width, first, hang, self.fallback)):
            if number == 0 and self.prefix is not None:
                yield from self.prefix.render(console, end="")
            elif column:
                yield Segment(" " * column)
            yield from line.render(console, end="")
            yield Segment.line()


def indent(renderable: Any, spaces: int) -> Padding:
    """Indent without padding lines out to the terminal width (copy-paste stays clean).

    For listings whose words are short (codes, categories, summaries); a finding's text,
    where a path or URL may be longer than the line, goes through ``Wrapped`` instead.
    """
    return Padding(renderable, (0, 0, 0, spaces), expand=False)


def print_block(console: Console, renderable: Any) -> None:
    """Print without trailing spaces or cropping; bare text is wrapped between words only."""
    if isinstance(renderable, Text):
        renderable = Wrapped(renderable)
    console.print(Trimmed(renderable), crop=False)


def _steps(finding: Finding, verbose: bool) -> list[Any]:
    """Numbered steps with a hanging indent, each command whole on its own line beneath.

    A step's URL is shown when verbose, or when the step has no command to run.
    """
    parts: list[Any] = []
    for number, step in enumerate(finding.remediation, 1):
        parts.append(Wrapped(Text(step.text), prefix=Text(f"{number}.".rjust(8) + " ")))
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
    parts: list[Any] = [Wrapped(head)]
    if finding.ignored is not None:
        parts.append(Wrapped(Text(f"ignored by policy: {finding.ignored}", style="yellow"), 4))
    if finding.affects:
        parts.append(Wrapped(Text(f"affects: {', '.join(finding.affects)}", style="dim"), 4))
    for ev in finding.evidence:
        line = Text()
        line.append(f"{ev.label}: ", style="dim")
        line.append(ev.value)
        if verbose and ev.source:
            line.append(f"  ({ev.source})", style="dim")
        parts.append(Wrapped(line, 4))
    if finding.remediation:
        parts.append(Line(Text("How to fix:", style="bold"), 4))
        parts.extend(_steps(finding, verbose))
    docs = finding.docs_url or finding.code.docs_url
    more = f"More: ddp-doctor explain {finding.code.id}" + (f" · {docs}" if docs else "")
    parts.append(Wrapped(Text(more, style="dim"), 4))
    return Group(*parts)


_LONG_LABEL = 50  # beyond this, the verdict's label and its exit code share no line


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _passed(report: Report, strict: bool) -> str:
    """A passing run's label: "Ready for training" only where the smoke job trained on the
    device it was asked for; otherwise what was established ("no problems left after the
    policy ignored DRV001" is not a machine that was found ready)."""
    if report.verdict(strict) == "ready":
        return "Ready for training"
    return _sentence(report.proved(strict))


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
    label = {0: _passed(report, strict), 1: "Not ready: problems found",
             3: "The doctor itself failed"}[code]
    if code == 0 and report.cpu_fallback:  # trained, but not where it was asked to
        style, label = "bold yellow", "Passed on CPU only; GPU training not proven"
    if report.outcome is not None:  # run, compare: what they established, either way
        label = _sentence(report.outcome)
    if report.kind == "log":  # a log says what failed, not what is ready
        label = {0: "No failure cause found" if not warnings else "Warnings only, no failure "
                    "cause found", 1: "Failure cause found"}.get(code, label)
    # A sentence of what was established stays whole on its line, the exit code after it:
    # "(exit code" and "0)" wrapped apart read as two statements.
    joint = "\n" if cell_len(label) > _LONG_LABEL else " "
    shown = (f"exit code {code}" if report.exit_status is None
             else f"exit code {report.exit_status}, the command's own")
    text.append(f"{label}{joint}({shown})", style=style)
    text.append(f" — {errors} error{'s' * (errors != 1)}, "
                f"{warnings} warning{'s' * (warnings != 1)}"
                + (f", {ignored} ignored by policy" if ignored else ""))
    noun = "check" if len(report.results) == 1 else "checks"
    text.append(f"\n{len(report.results)} {noun}: {counts}", style="dim")
    return text
