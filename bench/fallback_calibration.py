"""Calibrate diagnose's fallback classifier on the shipped solved threads, leave-one-out.

    python bench/fallback_calibration.py

Each thread is classified by a model trained on every other thread; for each threshold the
script prints how many threads are classified at that posterior or above and how many of
those are right. diagnose/fallback.py's THRESHOLD is the lowest one right at least 80% of
the time. Only the corpus's threads are used: the unseen split (tests/data/unseen) is never
read here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddp_doctor.diagnose.fallback import MIN_TERMS, NaiveBayes
from ddp_doctor.diagnose.similar import load_index, terms


def leave_one_out() -> list[tuple[float, bool, int]]:
    threads = load_index().threads
    docs = [(t.category, frozenset(terms(t.lines))) for t in threads]  # read once
    rows = []
    for i, thread in enumerate(threads):
        guess = NaiveBayes.from_words(docs[:i] + docs[i + 1:]).guess(thread.lines)
        if guess is not None:
            rows.append((guess.posterior, guess.category == thread.category,
                         guess.known_terms))
    return rows


def main() -> int:
    rows = leave_one_out()
    print(f"{len(rows)} threads, leave-one-out")
    for threshold in (0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99):
        chosen = [r for r in rows if r[0] >= threshold and r[2] >= MIN_TERMS]
        right = sum(1 for r in chosen if r[1])
        share = right / len(chosen) if chosen else 0.0
        print(f"  posterior >= {threshold:<5} classified {len(chosen):3} "
              f"({len(chosen) / len(rows):.0%}), right {right:3} ({share:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
