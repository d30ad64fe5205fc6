"""Score ``diagnose`` on the corpus of real logs, per split, with the confusion table.

    python bench/corpus_score.py              # every case
    python bench/corpus_score.py --split blind
    python bench/corpus_score.py --unseen     # tests/data/unseen, the split never studied

The blind split was labelled before any rule was written for it; its score is the honest
estimate of how ``diagnose`` does on logs nobody here has seen. Prints the accuracy, the
confusion table (expected category: right/total, and what the misses were read as) and each
miss with the code that led.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests/

from ddp_doctor.diagnose import diagnose
from tests.support.corpus import LOGS, UNSEEN, confusion, read_cases


def cases(split: str | None, folder: Path = LOGS, pattern: str = "cases_*.toml") -> list[dict]:
    found = read_cases(folder, pattern)
    if split is not None:
        found = [c for c in found if c.get("split", "train") == split]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("blind", "train"), default=None)
    parser.add_argument("--unseen", action="store_true",
                        help="score tests/data/unseen (never studied) instead of the corpus")
    parser.add_argument("--cases", metavar="TOML", default=None,
                        help="only the cases of this file of the folder (e.g. cases_unseen_E.toml)")
    args = parser.parse_args()
    folder = UNSEEN if args.unseen else LOGS
    rows, misses = [], []
    chosen = cases(None if args.unseen else args.split, folder, args.cases or "cases_*.toml")
    if not chosen:
        parser.error(f"no cases in {folder} match {args.cases or 'cases_*.toml'}")
    for case in chosen:
        lead = diagnose(str(folder / case["file"])).report.results[0].findings[0]
        got = lead.code.category.value
        rows.append((case["category"], got))
        if got != case["category"]:
            misses.append(f"  {case['file']}: expected {case['category']}, "
                          f"got {got} ({lead.code.id})")
    right = sum(1 for e, g in rows if e == g)
    unknown = sum(1 for _, g in rows if g == "unknown")
    label = "unseen" if args.unseen else args.split or "all"
    print(f"{label}: {right}/{len(rows)} = {right / len(rows):.1%}, unknown leads: {unknown}")
    print(confusion(rows))
    print("\n".join(misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
