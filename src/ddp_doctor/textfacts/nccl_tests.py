"""nccl-tests output (``all_reduce_perf`` and its siblings): one run's results table, read
into the ``nccl_tests`` shape (``diagnose.node_lines`` hands it the lines of each run a log
holds, from the run's first line on).

Every run of an nccl-tests binary prints (src/common.cu of https://github.com/NVIDIA/nccl-tests):

- a first line "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) ..."
  (2018 releases print it without the "#", as NVIDIA/nccl-tests#7 shows);
- "# Using devices" and one line per rank, "#  Rank  0 Group  0 Pid 123 on HOST device  0
  [0x1a] MODEL" (older releases: "#   Rank  0 Pid 123 on HOST device 0 [0x1a] MODEL");
- a column header, "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time
  algbw  busbw  #wrong" (out-of-place, then in-place; "root" since 2.x, "#wrong" since
  2.10, before that "error", the largest deviation, instead of the count of wrong
  elements), then one row per message size; "N/A" where a figure does not apply;
- "# Out of bounds values : N OK|FAILED" (N elements outside the expected result over the
  whole run) and "# Avg bus bandwidth : X".

busbw is the all-reduce-equivalent bandwidth over the slowest link (doc/PERFORMANCE.md), so
it compares with a link's rate. The section starts at the "# nThread" line and ends where
the run's "# Avg bus bandwidth" line is, or at the next run; NCCL INFO lines interleaved
with the table are skipped. What a reader judges from it: wrong results (any "#wrong" above
0, or a FAILED out-of-bounds count) and the largest message's bus bandwidth.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ddp_doctor.textfacts.parsed import Parsed, normalize_line

START = re.compile(r"^#?\s*nThread\s+\d+\s+nGpus\s+\d+", re.IGNORECASE)
MAX_LINES = 2000
_DEVICE = re.compile(r"^#\s*Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+"
                     r"device\s+\d+\s+\[[^\]]*\]\s+(?P<model>.+?)\s*$")
_BOUNDS = re.compile(r"^#?\s*Out of bounds values\s*:\s*(?P<n>\d+)\s+(?P<verdict>OK|FAILED)",
                     re.IGNORECASE)
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(?P<v>[\d.]+)")
_TEST = re.compile(r"^#\s*Collective test concluded:\s*(?P<name>\S+)")


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value else None  # NaN is not a measurement


def _columns(line: str) -> list[str] | None:
    """The header's column names ("size", ..., "busbw", "#wrong" or "error"), or None."""
    words = line.lstrip("#").split()
    if "busbw" not in words or ("size" not in words[:2] and "bytes" not in words[:2]):
        return None
    return ["wrong" if w in ("#wrong", "error", "res") else w for w in words]


def _row(columns: list[str], line: str) -> dict[str, Any] | None:
    values = line.split()
    if len(values) != len(columns) or not values[0].isdigit():
        return None
    row: dict[str, Any] = {"bytes": int(values[0]), "type": values[columns.index("type")]
                           if "type" in columns else None}
    half = 0  # 0: out-of-place figures, 1: in-place
    seen: set[str] = set()
    for name, value in zip(columns, values):
        if name in seen and name in ("time", "algbw", "busbw", "wrong"):
            half = 1
            seen = set()
        seen.add(name)
        if name == "busbw":
            row[("busbw_oop", "busbw_ip")[half]] = _number(value)
        elif name == "wrong":
            row[("wrong_oop", "wrong_ip")[half]] = _number(value)
    return row


def parse(lines: Sequence[str]) -> Parsed | None:
    """Read one run whose "# nThread" line is LINES[0]; None without a results row or the
    run's out-of-bounds verdict."""
    if not lines or not START.match(normalize_line(lines[0]).strip()):
        return None
    first = normalize_line(lines[0]).strip()
    run: dict[str, Any] = {"header": first, "ranks": [], "rows": []}
    columns: list[str] | None = None
    for raw in lines[1:MAX_LINES]:
        line = normalize_line(raw).strip()
        if START.match(line):
            break  # the next run
        if (m := _DEVICE.match(line)) is not None:
            run["ranks"].append({"host": m.group("host"), "model": m.group("model")})
        elif line.startswith("#") and (found := _columns(line)) is not None:
            columns = found
            run["wrong_is_count"] = "#wrong" in line
        elif (m := _BOUNDS.match(line)) is not None:
            run["out_of_bounds"] = int(m.group("n"))
            run["failed"] = m.group("verdict").upper() == "FAILED"
        elif (m := _AVG.match(line)) is not None:
            run["avg_busbw"] = float(m.group("v"))
        elif (m := _TEST.match(line)) is not None:
            run["test"] = m.group("name")
            break
        elif columns is not None and (row := _row(columns, line)) is not None:
            run["rows"].append(row)
    if not run["rows"] and "out_of_bounds" not in run:
        return None  # a paste cut before any result says nothing yet
    hosts = sorted({r["host"] for r in run["ranks"]})
    run["hosts"] = hosts
    out = Parsed(kind="nccl_tests")
    out.facts["nccl_tests"] = {"runs": [run]}
    largest = run["rows"][-1] if run["rows"] else {}
    out.summary = (f"nccl-tests: {len(run['rows'])} sizes"
                   + (f" on {len(run['ranks'])} ranks" if run["ranks"] else "")
                   + (f", {len(hosts)} hosts" if len(hosts) > 1 else "")
                   + (f", busbw {largest.get('busbw_oop')} GB/s at {largest.get('bytes')} B"
                      if largest.get("busbw_oop") is not None else "")
                   + (f", out of bounds values: {run['out_of_bounds']} FAILED"
                      if run.get("failed") else ""))
    return out
