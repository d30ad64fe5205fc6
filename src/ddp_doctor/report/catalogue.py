"""What the doctor knows, listed for a person: its checks, and every code of every family.

Listings are read in terminals of any width and pasted into tickets, so nothing is ever
cut short with "…": a code, a check id or a category is one word that wraps whole, a
summary wraps between words, and no line ends in the spaces a table pads it with. Where
the table's fixed columns leave too little room for the summaries (a narrow terminal),
each code takes two lines instead: its columns, then its summary beneath.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ddp_doctor.categories import Category
from ddp_doctor.model import Code, Family
from ddp_doctor.registry import Catalogue
from ddp_doctor.report.blocks import Wrapped, indent, print_block
from ddp_doctor.report.glyphs import area_title
from ddp_doctor.wording import count

_FAMILY_ORDER = {family: i for i, family in enumerate(Family)}
_GAP = 2  # spaces between the columns of a listing
_MIN_SUMMARY = 24  # narrower than this, a summary column is a stack of broken words


def ordered(codes: Iterable[Code]) -> list[Code]:
    """Codes as every listing shows them: by family in ``Family`` order, then by id."""
    return sorted(codes, key=lambda c: (_FAMILY_ORDER[c.family], c.id))


def _columns(code: Code, category: bool) -> list[str]:
    cells = [code.id, code.family.value, code.severity.value]
    return [*cells, code.category.value] if category else cells


def codes_table(codes: Sequence[Code], *, category: bool = True) -> Table:
    """Codes with their family, severity and (unless ``category`` is off, for a listing of
    one category) category; the summary wraps between words."""
    table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, _GAP, 0, 0),
                  header_style="bold")
    for header in ("Code", "Family", "Severity", *(("Category",) if category else ())):
        table.add_column(header, no_wrap=True)
    table.add_column("Summary", overflow="fold", ratio=1)
    for code in codes:
        table.add_row(*_columns(code, category), code.summary)
    return table


def _stacked(codes: Sequence[Code], *, category: bool) -> list[Any]:
    """The narrow form of ``codes_table``: a line of columns, the summary indented below."""
    parts: list[Any] = []
    for code in codes:
        head = Text(code.id, style="bold")
        head.append("".join(f"  {cell}" for cell in _columns(code, category)[1:]))
        parts += [head, indent(Text(code.summary), 4)]
    return parts


def _fits(codes: Sequence[Code], width: int, *, category: bool) -> bool:
    """Whether the table form leaves the summaries a readable column at WIDTH."""
    headers = ["Code", "Family", "Severity", "Category"]
    fixed = sum(max(len(headers[i]), *(len(_columns(c, category)[i]) for c in codes)) + _GAP
                for i in range(len(_columns(codes[0], category))))
    return width - fixed >= _MIN_SUMMARY


def _print_codes(codes: Sequence[Code], console: Console, *, category: bool, at: int = 0
                 ) -> None:
    """The table form when it fits the console, else the stacked one; indented by AT."""
    if _fits(codes, console.width - at, category=category):
        print_block(console, indent(codes_table(codes, category=category), at))
    else:
        for part in _stacked(codes, category=category):
            print_block(console, indent(part, at))


def render_codes(codes: Iterable[Code], console: Console, *, empty: str = "no code matches"
                 ) -> None:
    """The codes listing: every code given, by family in ``Family`` order, then by id.

    ``empty`` is what is said when nothing is given (a filter that matches no code).
    """
    listed = ordered(codes)
    if not listed:
        print_block(console, Text(empty))
        return
    _print_codes(listed, console, category=True)
    print_block(console, Text(f"{count(len(listed), 'code')} · "
                              "`ddp-doctor explain CODE` explains one", style="dim"))


def render_code(code: Code, console: Console) -> None:
    """``explain CODE``: the sections of ``codes.render_code_text``, each wrapped between
    words at the console's width (80 in a pipe), so no line is left for the terminal to
    break mid-word; commands in `backticks` stay whole (see ``blocks.wrap``)."""
    print_block(console, Text(f"{code.id}: {code.summary}", style="bold"))
    print_block(console, Text(f"category: {code.category.value}    default severity: "
                              f"{code.severity.value}    family: {code.family.value}"))
    for title, body in (("What it means", code.what), ("Why it matters", code.why),
                        ("How to fix", code.fix)):
        print_block(console, Text(""))
        print_block(console, Text(title, style="bold"))
        print_block(console, Wrapped(Text(body), 2))
    if code.docs_url:
        print_block(console, Text(""))
        print_block(console, Text(f"Reference: {code.docs_url}"))


def render_category(category: Category, codes: Iterable[Code], console: Console) -> None:
    """One failure category: what it means (docs/categories.md's text), then its codes of
    every family with their severity and summary."""
    listed = ordered(c for c in codes if c.category is category)
    head = Text(category.value, style="bold")
    head.append(" (failure category)", style="dim")
    print_block(console, head)
    # The description is Markdown's; in a terminal its backticks are only noise.
    print_block(console, indent(Text(category.description.replace("`", "")), 2))
    print_block(console, Text(""))
    if not listed:
        print_block(console, Text("No code reports this category."))
        return
    print_block(console, Text(f"{count(len(listed), 'code')} report it:"))
    _print_codes(listed, console, category=False, at=2)
    print_block(console, Text("`ddp-doctor explain CODE` explains one", style="dim"))


def codes_json(codes: Iterable[Code]) -> list[dict[str, Any]]:
    """The codes listing as JSON objects, in listing order: the explanation's fields (code,
    family, category, severity, summary, what, why, fix, docs_url)."""
    return [code.to_dict() for code in ordered(codes)]


def render_checks(catalogue: Catalogue, console: Console) -> None:
    """Every check by area: its id, title and the facts it needs, then one line per code it
    reports (code, category, summary), so an id or a code is never split or cut.

    The code and category columns are as wide for every check, so the summaries of the
    whole listing start in one column.
    """
    codes = {code.id: code for spec in catalogue.specs for code in spec.codes}.values()
    code_width = max((len(c.id) for c in codes), default=0)
    category_width = max((len(c.category.value) for c in codes), default=0)
    area = None
    for spec in catalogue.specs:
        if spec.area != area:
            area = spec.area
            print_block(console, Text(area_title(area), style="bold"))
        line = Text(spec.id, style="bold")
        line.append(f"  {spec.title}")
        if spec.requires:
            line.append(f"  (needs {', '.join(spec.requires)})", style="dim")
        print_block(console, indent(line, 2))
        if not spec.codes:
            print_block(console, indent(Text("reports no code (a summary only)", style="dim"),
                                        4))
            continue
        grid = Table.grid(padding=(0, _GAP, 0, 0))
        grid.add_column(no_wrap=True, min_width=code_width)
        grid.add_column(no_wrap=True, min_width=category_width, style="dim")
        grid.add_column(overflow="fold", ratio=1)
        for code in spec.codes:
            grid.add_row(code.id, code.category.value, code.summary)
        print_block(console, indent(grid, 4))
    for failure in catalogue.failures:
        print_block(console, Text(f"plugin {failure.plugin} failed to load: {failure.error}",
                                  style="magenta"))
    print_block(console, Text(
        f"{len(catalogue.specs)} checks, {len(codes)} codes · `ddp-doctor codes` lists every "
        "code, also those of the smoke job, the log rules, diagnose and the policy",
        style="dim"))
