"""The terminal report a person reads before training.

Layout: a header line with the machine at a glance; checks grouped by area, each with
a status glyph and a one-line summary; skipped checks collapsed into one line per
area; then the findings, errors first, each with its evidence and numbered fix steps;
then a one-line verdict. Verbosity changes how much is shown, never what is judged.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rich.cells import cell_len
from rich.console import Console, Group
from rich.text import Text

from ddp_doctor.model import CheckResult, Report, Status
from ddp_doctor.report.blocks import Line, Wrapped, finding_block, print_block, verdict_line
from ddp_doctor.report.glyphs import STATUS_GLYPH, STATUS_STYLE, area_title
from ddp_doctor.report.nodes import nodes_table
from ddp_doctor.report.smoke import smoke_table


def _header(report: Report, width: int) -> Group:
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
    own_words = report.facts_source.startswith(("run: ", "compare: "))
    if from_log or not env:  # only what is known; silence is not "no driver"
        known = [env.get("os"), f"Python {env['python']}" if env.get("python") else None,
                 f"torch {env['torch']}" if env.get("torch") else None,
                 f"driver {env['driver']}" if env.get("driver") else None,
                 gpu_text if gpus else None]
        parts = [part for part in known if part]
    lines: list[Any] = []
    text = Text(f"ddp-doctor {report.tool_version}", style="bold")
    text.append("  ")
    used = cell_len(text.plain)
    for number, part in enumerate(parts):  # wrap between parts, never inside one
        sep = " · " if number else ""
        tail = 2 if number < len(parts) - 1 else 0  # room for the " ·" a break leaves
        if number and used + cell_len(sep + part) + tail > width:
            text.append(" ·")
            lines.append(Line(text, 0))
            text, sep, used = Text("  "), "", 2
        text.append(sep + part)
        used += cell_len(sep + part)
    lines.append(Line(text, 0))
    if from_log:
        lines.append(Wrapped(Text(f"diagnosis of the {report.facts_source}", style="dim")))
    elif own_words:  # "run: <the log>; facts: <their source>", "compare: <the inputs>"
        lines.append(Wrapped(Text(report.facts_source, style="dim")))
    elif report.facts_source != "live":
        lines.append(Wrapped(Text(f"replaying facts saved in {report.facts_source}",
                                  style="dim")))
    return Group(*lines)


# The summary column needs this much room beside the titles, or it goes under the title.
_MIN_SUMMARY_WIDTH = 24


class _CheckRow:
    """A check: glyph, title padded to the shared title width, summary wrapped beside it.

    Summaries wrap between words only; a path longer than the summary column gets a line
    of its own under the title, whole. Where the terminal leaves the summary too little
    room, it goes on the lines under the title instead.
    """

    def __init__(self, glyph: Text, title: Text, summary: Text, title_width: int) -> None:
        self.glyph, self.title, self.summary = glyph, title, summary
        self.title_width = title_width

    def __rich_console__(self, console: Console, options: Any) -> Any:
        head = Text("  ")
        head.append_text(self.glyph)
        head.append(" ")
        head.append_text(self.title)
        column = 4 + self.title_width + 1
        if options.max_width - column >= _MIN_SUMMARY_WIDTH:
            head.append(" " * (column - cell_len(head.plain)))
            yield Wrapped(self.summary, prefix=head, fallback=4)
        else:
            yield Line(head, 0)
            yield Wrapped(self.summary, 6, fallback=4)


def _check_row(result: CheckResult, verbose: bool, title_width: int) -> _CheckRow:
    summary = Text(result.summary, style="dim" if result.status is Status.SKIP else "")
    if verbose:
        # "12ms", one word: the wrap never leaves "12" on one line and "ms]" on the next.
        timing = "" if result.status is Status.SKIP else f", {result.duration_s * 1000:.0f}ms"
        summary.append(f"  [{result.check_id}{timing}]", style="dim")
    return _CheckRow(Text(STATUS_GLYPH[result.status], style=STATUS_STYLE[result.status]),
                     Text(result.title, style="bold" if result.status is not Status.PASS else ""),
                     summary, title_width)


def _checks_section(report: Report, verbose: bool) -> list[Any]:
    by_area: dict[str, list[CheckResult]] = defaultdict(list)
    for result in report.results:
        by_area[result.area].append(result)
    out: list[Any] = []
    # One title width for every area keeps the summaries aligned down the whole report.
    title_width = max((cell_len(r.title) for r in report.results), default=10)
    title_width = max(title_width, len("99 checks skipped"))
    for area, results in by_area.items():
        out.append(Text(area_title(area), style="bold underline"))
        rows: list[Any] = []
        skipped: dict[str, list[str]] = defaultdict(list)
        tracebacks: list[Any] = []
        commands: list[Any] = []
        for result in results:
            if result.status is Status.SKIP and not verbose:
                skipped[result.skip_reason or "skipped"].append(result.title)
                continue
            rows.append(_check_row(result, verbose, title_width))
            if result.command:
                commands.append(Line(Text("$ " + result.command, style="cyan"), 4))
            if result.status is Status.ERROR and verbose and result.error:
                tracebacks.extend(Line(Text(line, style="magenta"), 6)
                                  for line in result.error.rstrip().splitlines())
        for reason, titles in skipped.items():
            noun = "check" if len(titles) == 1 else "checks"
            rows.append(_CheckRow(Text(STATUS_GLYPH[Status.SKIP], style="dim"),
                                  Text(f"{len(titles)} {noun} skipped", style="dim"),
                                  Text(f"{', '.join(titles)} — {reason}", style="dim"),
                                  title_width))
        out.extend(rows)
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
        # A skipped smoke job is already its row above, with the reason: no second section.
        if report.smoke is not None and not report.smoke.get("skipped"):
            console.print(Text("Smoke training", style="bold underline"))
            print_block(console, smoke_table(report.smoke, indent=2))
            console.print()
        if report.nodes is not None:
            console.print(Text("Nodes compared", style="bold underline"))
            if report.nodes.get("rows"):
                console.print(nodes_table(report.nodes))
            else:
                console.print(f"  The {len(report.nodes.get('nodes') or [])} nodes agree on "
                              f"everything compared.")
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
            print_block(console, Wrapped(Text(f"{name}: {error}", style="magenta"), 2,
                                         hang=4))
        console.print()
    print_block(console, verdict_line(report, strict))
