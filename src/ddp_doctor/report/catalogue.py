"""What the doctor knows, listed for a person: its checks, and every code of every family.

Listings are read in terminals of any width and pasted into tickets, so nothing is ever
cut short with "…": a code, a check id or a category is one word that wraps whole, and a
summary wraps between words.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ddp_doctor.model import Code, Family
from ddp_doctor.registry import Catalogue
from ddp_doctor.report.glyphs import area_title


def codes_table(codes: Iterable[Code]) -> Table:
    """Every code with its family, severity and category; the summary wraps between words."""
    table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 1),
                  header_style="bold")
    table.add_column("Code", no_wrap=True)
    table.add_column("Family", no_wrap=True)
    table.add_column("Severity", no_wrap=True)
    table.add_column("Category", no_wrap=True)
    table.add_column("Summary", overflow="fold", ratio=1)
    for code in codes:
        table.add_row(code.id, code.family.value, code.severity.value, code.category.value,
                      code.summary)
    return table


def render_codes(codes: Iterable[Code], console: Console) -> None:
    """The codes listing: one table, grouped by family in ``Family`` order."""
    order = {family: i for i, family in enumerate(Family)}
    ordered = sorted(codes, key=lambda c: (order[c.family], c.id))
    if not ordered:
        console.print("no code matches")
        return
    console.print(codes_table(ordered), crop=False)
    console.print(Text(f"{len(ordered)} codes · `ddp-doctor explain CODE` explains one",
                       style="dim"))


def codes_json(codes: Iterable[Code]) -> list[dict[str, Any]]:
    """The codes listing as JSON objects: the explanation's fields plus the family."""
    return [{**code.to_dict(), "family": code.family.value} for code in codes]


def render_checks(catalogue: Catalogue, console: Console) -> None:
    """Every check by area: its id, title and the facts it needs, then one line per code it
    reports (code, category, summary), so an id or a code is never split or cut."""
    area = None
    for spec in catalogue.specs:
        if spec.area != area:
            area = spec.area
            console.print(Text(area_title(area), style="bold"))
        line = Text("  ")
        line.append(spec.id, style="bold")
        line.append(f"  {spec.title}")
        if spec.requires:
            line.append(f"  (needs {', '.join(spec.requires)})", style="dim")
        console.print(line, crop=False)
        if not spec.codes:
            console.print(Padding(Text("reports no code (a summary only)", style="dim"),
                                  (0, 0, 0, 4), expand=False))
            continue
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column(overflow="fold", ratio=1)
        for code in spec.codes:
            grid.add_row(code.id, code.category.value, code.summary)
        console.print(Padding(grid, (0, 0, 0, 4), expand=False), crop=False)
    for failure in catalogue.failures:
        console.print(Text(f"plugin {failure.plugin} failed to load: {failure.error}",
                           style="magenta"), crop=False)
