"""The log corpus (tests/data/logs) as the corpus test and bench/corpus_score.py read it."""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path

from ddp_doctor.diagnose import diagnose
from ddp_doctor.diagnose.similar_build import read_cases
from ddp_doctor.model import Report

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
# The blind split collected before the catalogues (tests/data/unseen/README.md): scored, never
# studied, never in the similar-threads index.
UNSEEN = Path(__file__).resolve().parents[1] / "data" / "unseen"

__all__ = ["LOGS", "UNSEEN", "confusion", "corpus_report", "corpus_reports", "read_cases"]


@cache
def corpus_report(name: str) -> Report:
    """``diagnose`` of tests/data/logs/NAME, once per test process. Several tests read every
    corpus log's diagnosis (the accuracy and evidence tests, the wording test, the narrow
    terminal at three widths); diagnosing the ~420 logs costs about 45 s of CPU each time,
    and a report is frozen, so they share one."""
    return diagnose(str(LOGS / name)).report


def corpus_reports() -> list[tuple[Path, Report]]:
    """Every corpus log, in name order, with its diagnosis (``corpus_report``)."""
    return [(path, corpus_report(path.name)) for path in sorted(LOGS.glob("*.log"))]


def confusion(rows: list[tuple[str, str]]) -> str:
    """The confusion table of (expected, diagnosed) category pairs: per expected category,
    right/total and what the misses were read as."""
    expected = sorted({e for e, _ in rows})
    counts = Counter(rows)
    width = max(len(e) for e in expected)
    lines = [f"{'expected':<{width}}  correct/total  diagnosed as (when wrong)"]
    for category in expected:
        total = sum(n for (e, _), n in counts.items() if e == category)
        right = counts[(category, category)]
        wrong = ", ".join(f"{got} x{n}" for (e, got), n in sorted(counts.items())
                          if e == category and got != category)
        lines.append(f"{category:<{width}}  {right:>3}/{total:<3}        {wrong}")
    return "\n".join(lines)
