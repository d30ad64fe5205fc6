"""Score ``diagnose`` on the corpus of real logs, per split, with the confusion table.

    python bench/corpus_score.py              # every case
    python bench/corpus_score.py --split blind

The blind split was labelled before any rule was written for it; its score is the honest
estimate of how ``diagnose`` does on logs nobody here has seen. Prints the accuracy, the
confusion table (expected category: right/total, and what the misses were read as) and each
miss with the code that led.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import tomllib

from ddp_doctor.diagnose import diagnose

LOGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "logs"


def cases(split: str | None) -> list[dict]:
    found: list[dict] = []
    for index in sorted(LOGS.glob("cases_*.toml")):
        found += tomllib.loads(index.read_text(encoding="utf-8"))["case"]
    if split is not None:
        found = [c for c in found if c.get("split", "train") == split]
    return found


def confusion(rows: list[tuple[str, str]]) -> str:
    expected = sorted({e for e, _ in rows})
    counts = Counter(rows)
    width = max(len(e) for e in expected)
    lines = [f"{'expected':<{width}}  right/total  read as (when wrong)"]
    for category in expected:
        total = sum(n for (e, _), n in counts.items() if e == category)
        right = counts[(category, category)]
        wrong = ", ".join(f"{got} x{n}" for (e, got), n in sorted(counts.items())
                          if e == category and got != category)
        lines.append(f"{category:<{width}}  {right:>3}/{total:<3}     {wrong}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("blind", "train"), default=None)
    args = parser.parse_args()
    rows, misses = [], []
    for case in cases(args.split):
        lead = diagnose(str(LOGS / case["file"])).report.results[0].findings[0]
        got = lead.code.category.value
        rows.append((case["category"], got))
        if got != case["category"]:
            misses.append(f"  {case['file']}: expected {case['category']}, "
                          f"got {got} ({lead.code.id})")
    right = sum(1 for e, g in rows if e == g)
    print(f"{args.split or 'all'}: {right}/{len(rows)} = {right / len(rows):.1%}")
    print(confusion(rows))
    print("\n".join(misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
