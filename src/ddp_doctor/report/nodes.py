"""The nodes table: every field that differs, one column per node, the odd values marked.

With many nodes (``compare`` over a cluster) a column per node would not fit, so beyond
``WIDE`` nodes the table shows the majority's value and only the nodes that differ.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

WIDE = 6


def _columns(nodes: dict[str, Any]) -> list[str]:
    names: list[str] = list(nodes.get("nodes") or [])
    if len(names) <= WIDE:
        return names
    odd = {n for row in nodes.get("rows") or [] for n in row.get("differs") or []}
    return [n for n in names if n in odd]


def nodes_table(nodes: dict[str, Any]) -> Table:
    """A rich table of the differing fields (the console report)."""
    names = list(nodes.get("nodes") or [])
    columns = _columns(nodes)
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("Field")
    table.add_column("Code", style="dim")
    if len(columns) < len(names):
        table.add_column(f"{len(names) - len(columns)} others")
    for name in columns:
        table.add_column(name)
    for row in nodes.get("rows") or []:
        cells: list[Any] = [row["label"], row["code"]]
        if len(columns) < len(names):
            cells.append(row["baseline"])
        shown = dict(zip(names, row["values"]))
        for name in columns:
            value = shown.get(name, "")
            cells.append(Text(value, style="bold red" if name in row["differs"] else ""))
        table.add_row(*cells)
    return table


def nodes_markdown(nodes: dict[str, Any]) -> list[str]:
    """The same table in Markdown; values that differ are in bold."""
    names = list(nodes.get("nodes") or [])
    columns = _columns(nodes)
    rows = nodes.get("rows") or []
    lines = ["## Nodes compared", ""]
    if not rows:
        return [*lines, f"The {len(names)} nodes agree on everything compared.", ""]
    head = ["Field", "Code"] + ([f"{len(names) - len(columns)} others"]
                               if len(columns) < len(names) else []) + columns
    lines += ["| " + " | ".join(_cell(h) for h in head) + " |",
              "|" + "---|" * len(head)]
    for row in rows:
        cells = [_cell(row["label"]), row["code"]]
        if len(columns) < len(names):
            cells.append(_cell(row["baseline"]))
        shown = dict(zip(names, row["values"]))
        for name in columns:
            value = _cell(shown.get(name, ""))
            cells.append(f"**{value}**" if name in row["differs"] and value else value)
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")
