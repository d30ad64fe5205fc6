"""Build the solved-threads index (``knowledge/solved_threads.json``) from the log corpus.

Regenerate it whenever the corpus (tests/data/logs) or the normalisation in ``similar.py``
changes; tests/diagnose/test_similar.py fails until the shipped file is a fresh build::

    python -m ddp_doctor.diagnose.similar_build tests/data/logs \\
        > src/ddp_doctor/knowledge/solved_threads.json

Each case's error lines are read exactly as ``diagnose`` reads a log (``scan_input`` then
``similar.error_lines``), so a user's copy of an error and the thread's copy compare alike.
Every case is in it, the blind split included: that split was scored before and after the
rules changed and then joined the corpus, so its solved threads help users like the rest.
``bench/similar_precision.py`` builds its own index without the blind cases to measure
retrieval on them as unseen logs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddp_doctor.diagnose import scan_input
from ddp_doctor.diagnose.rank_prefixes import split_rank
from ddp_doctor.diagnose.similar import (
    INDEX_FORMAT,
    MAX_TITLE_CHARS,
    NCCL_PREFIX,
    SolvedThread,
    error_lines,
    is_error_line,
)
from ddp_doctor.redact.secrets import redact_text

_SPACE = re.compile(r"\s+")


def read_cases(logs: Path, pattern: str = "cases_*.toml") -> list[dict[str, Any]]:
    """The cases of every index file in ``logs`` matching ``pattern`` (one file's name
    picks that file alone)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the dependency pyproject.toml declares for Python < 3.11
        import tomli as tomllib
    found: list[dict[str, Any]] = []
    for index in sorted(logs.glob(pattern)):
        found += tomllib.loads(index.read_text(encoding="utf-8"))["case"]
    return found


_EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b:\s*\S")


def telling_line(raw_lines: Sequence[str]) -> str:
    """The line that stands for a log without a recorded title.

    Python's last exception line when there is one (what the traceback ends with), else the
    first line that says "error", else the first error line at all.
    """
    stripped = [split_rank(line.strip())[1].strip() for line in raw_lines]
    stripped = [NCCL_PREFIX.sub("", line) for line in stripped if line]
    exceptions = [line for line in stripped if _EXCEPTION_LINE.match(line)]
    said = [line for line in stripped if "error" in line.lower()]
    line = (exceptions[-1:] or said[:1] or stripped[:1] or [""])[0]
    line = redact_text(_SPACE.sub(" ", line))
    return line if len(line) <= MAX_TITLE_CHARS else line[:MAX_TITLE_CHARS - 1] + "…"


def thread_of(case: dict[str, Any], log: Path) -> SolvedThread:
    """One corpus case as an index entry, its error lines read as ``diagnose`` reads them."""
    scan = scan_input(str(log))[0]
    errors = error_lines(scan)
    lines = errors or error_lines(scan, every_line_if_none=True)
    title = case.get("title")
    if title:
        source = "thread"
    else:
        text = log.read_text(encoding="utf-8", errors="replace").splitlines()
        title, source = telling_line([line for line in text if is_error_line(line)] or text), "log"
    root_cause = _SPACE.sub(" ", case["root_cause"]).strip()
    return SolvedThread(url=case["url"], title=_SPACE.sub(" ", title).strip(),
                        title_source=source, category=case["category"],
                        root_cause=root_cause,
                        fix=_SPACE.sub(" ", case.get("fix") or root_cause).strip(),
                        lines=tuple(lines), has_error_lines=bool(errors))


def build_index_data(logs: Path, include_blind: bool = True) -> dict[str, Any]:
    """The index's JSON document for the corpus in ``logs`` (every case by default)."""
    threads = [thread_of(case, logs / case["file"]) for case in read_cases(logs)
               if include_blind or case.get("split", "train") != "blind"]
    threads.sort(key=lambda t: t.url)
    return {"format": INDEX_FORMAT,
            "about": "Solved public threads of the log corpus: link, title (title_source "
                     "'log': no thread title was recorded and the title is the log's most "
                     "telling error line, not the thread's title), category, root cause, the "
                     "fix that worked (absent: none was recorded apart from the root cause) "
                     "and the normalised error lines retrieval compares. Built by python -m "
                     "ddp_doctor.diagnose.similar_build tests/data/logs.",
            "threads": [t.to_dict() for t in threads]}


def dump_index(data: dict[str, Any]) -> str:
    """The index as shipped: one thread per line, so a diff shows which threads changed."""
    head = {k: v for k, v in data.items() if k != "threads"}
    rows = ",\n".join(json.dumps(t, ensure_ascii=False, separators=(",", ":"))
                      for t in data["threads"])
    return json.dumps(head, ensure_ascii=False)[:-1] + ', "threads": [\n' + rows + "\n]}\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the solved-threads index.")
    parser.add_argument("logs", type=Path,
                        help="the corpus folder (tests/data/logs); the index goes to stdout")
    args = parser.parse_args(argv)
    sys.stdout.write(dump_index(build_index_data(args.logs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
