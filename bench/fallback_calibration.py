"""Calibrate diagnose's fallback classifier on the shipped solved threads, ten-fold.

    python bench/fallback_calibration.py [--folds 10] [--epochs 10] [--seeds 5] [--naive-bayes]

The threads are dealt into folds (a seeded shuffle); each fold is classified by a model
trained on the others and on the catalogues' messages (less the entries that read a line of
a held-out thread: ``catalogue_readers``), as shipped
(``SoftmaxRegression.train`` then ``to_dict``'s rounding and pruning). For each threshold
the script prints how many threads are classified at that probability or above and how many
of those are right, and the most threads any threshold classifies at 80% precision.
diagnose/fallback.py's THRESHOLD is the lowest one whose precision is at least 80% with 95%
confidence (the one-sided Wilson lower bound, printed as "at least") and whose bands, from
it up, are each right at least half the time (printed band by band; ``chosen_threshold``).
It scores also the threads whose logs no rule explains (``served``: the fallback's own cases,
fewer and harder than the corpus as a whole), pooled over ``--seeds`` fold seeds, whose leads
must be right at least 80% of the time at the chosen threshold. ``--naive-bayes``
scores the Bernoulli naive Bayes the model replaced, leave-one-out, for
the comparison in fallback.py's docstring. Only the corpus's threads are used: the unseen
split (tests/data/unseen) is never read here.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddp_doctor.diagnose.fallback import (
    EPOCHS,
    MIN_TERMS,
    MIN_THREADS,
    SoftmaxRegression,
    documents,
    shipped_catalogue_documents,
    shipped_catalogue_entries,
    shows_a_failure,
)
from ddp_doctor.diagnose.literals import required_literals
from ddp_doctor.diagnose.similar import SolvedThread, load_index
from ddp_doctor.logrules.catalogue import entry_rule
from tests.support.corpus import LOGS, read_cases

Row = tuple[float, bool, int]  # probability of the best category, right, known words
GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # steps of 0.1


LONG_LINE = 8192  # a line is read up to here, as the scan reads its first part


def _corpus_files() -> dict[str, str]:
    """Each corpus case's log file by its thread's URL (the index keeps the URL)."""
    return {case["url"]: case["file"] for case in read_cases(LOGS, "cases_*.toml")}


def catalogue_readers(threads: list[SolvedThread]) -> list[set[int]]:
    """For each of ``shipped_catalogue_entries()``, the indices of the threads one of whose
    logged lines the entry reads (its rule, or its bare message): many entries were written
    from a corpus thread, whose answer they would hand the model when it is held out."""
    files = _corpus_files()
    logs = [(LOGS / files[t.url]).read_text(encoding="utf-8", errors="replace").splitlines()
            if t.url in files else [] for t in threads]
    lowered = [[line[:LONG_LINE].lower() for line in lines] for lines in logs]
    readers: list[set[int]] = []
    for entry in shipped_catalogue_entries():
        rule = entry_rule(entry)
        bare = rule.bare_message
        # the literal phrases a bare message must hold: most lines are rejected by them
        phrases = required_literals(bare) if bare is not None else None
        reads: set[int] = set()
        for index, lines in enumerate(logs):
            for whole, low in zip(lines, lowered[index], strict=True):
                line = whole[:LONG_LINE]
                if ((any(a in low for a in rule.anchors) and rule.pattern.search(line))
                        or (bare is not None
                            and (phrases is None or any(p in low for p in phrases))
                            and bare.search(line))):
                    reads.add(index)
                    break
        readers.append(reads)
    return readers


def served(threads: list[SolvedThread]) -> set[int]:
    """The indices of the threads whose logs no rule explains, which diagnose hands to the
    fallback: those whose findings hold DIAG001 ("no known failure signature"), which diagnose
    adds exactly where nothing but context was found, before it asks the low-confidence
    readings, the fallback among them."""
    from ddp_doctor.diagnose import diagnose

    files = _corpus_files()
    return {i for i, t in enumerate(threads) if t.url in files
            and any(f.code.id == "DIAG001"
                    for f in diagnose(str(LOGS / files[t.url])).report.results[0].findings)}


def cross_validate_indexed(folds: int = 10, epochs: int = EPOCHS,
                           seed: int = 1) -> list[tuple[int, Row]]:
    """(thread index, row) for each thread the model is asked about, each classified by a
    model trained on the other folds and on the catalogue documents of entries that read no
    thread of its fold."""
    threads = load_index().threads
    docs = documents(threads)
    catalogued = shipped_catalogue_documents()
    readers = catalogue_readers(list(threads))
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    rows: list[tuple[int, Row]] = []
    for fold in range(folds):
        held = set(order[fold::folds])
        # the catalogue's documents, less those of entries that read a held-out thread
        kept = [doc for doc, reads in zip(catalogued, readers, strict=True) if not reads & held]
        trained = SoftmaxRegression.train(
            [d for i, d in enumerate(docs) if i not in held] + kept, epochs=epochs)
        shipped = SoftmaxRegression.from_dict(trained.to_dict())
        for i in sorted(held):
            if not threads[i].has_error_lines or not shows_a_failure(threads[i].lines):
                continue  # diagnose does not ask the model either
            guess = shipped.guess(threads[i].lines)
            if guess is not None:
                rows.append((i, (guess.posterior, guess.category == threads[i].category,
                                 guess.known_terms)))
    return rows


def cross_validate(folds: int = 10, epochs: int = EPOCHS) -> list[Row]:
    """One row per thread the model is asked about."""
    return [row for _, row in cross_validate_indexed(folds, epochs)]


def naive_bayes_leave_one_out(alpha: float = 0.5) -> list[Row]:
    """The model fallback.py shipped until 2026-11-29, for the record."""
    docs = documents(load_index().threads)
    rows: list[Row] = []
    for i, (category, words) in enumerate(docs):
        rest = docs[:i] + docs[i + 1:]
        seen = Counter(c for c, _ in rest)
        counts = {c: Counter() for c in seen}
        for c, w in rest:
            counts[c].update(w)
        vocab = {w for per in counts.values() for w in per}
        known = [w for w in words if w in vocab]
        scores = {c: math.log(n / len(rest))
                  + sum(math.log((counts[c][w] + alpha) / (n + 2 * alpha)) for w in known)
                  for c, n in seen.items() if n >= MIN_THREADS}
        best = max(scores, key=lambda c: scores[c])
        norm = sum(math.exp(s - scores[best]) for s in scores.values())
        rows.append((1 / norm, best == category, len(known)))
    return rows


def lower_bound(right: int, total: int, z: float = 1.645) -> float:
    """The one-sided 95% Wilson lower bound of a proportion right/total: how low the
    precision could be, given how many leads it was measured on."""
    if total == 0:
        return 0.0
    p = right / total
    centre = p + z * z / (2 * total)
    spread = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    return (centre - spread) / (1 + z * z / total)


def bands(rows: list[Row], grid: tuple[float, ...] = GRID) -> list[tuple[float, int, int]]:
    """(threshold, leads, right) of each band of the grid: the leads at or above a threshold
    and below the next one up (the top band has no upper end)."""
    ordered = sorted(grid)
    found = []
    for i, low in enumerate(ordered):
        high = ordered[i + 1] if i + 1 < len(ordered) else float("inf")
        band = [r for r in rows if low <= r[0] < high and r[2] >= MIN_TERMS]
        found.append((low, len(band), sum(1 for r in band if r[1])))
    return found


SERVED_PRECISION = 0.80  # what the leads must reach on the threads no rule explains
MIN_SERVED_LEADS = 5  # ...from at least this many leads a fold seed: fewer say nothing
SEEDS = 5  # fold seeds pooled for the served threads, which are few


def chosen_threshold(rows: list[Row], grid: tuple[float, ...] = GRID,
                     served_rows: list[Row] | None = None, seeds: int = 1) -> float | None:
    """The lowest threshold on the grid whose precision is at least 80% with 95% confidence,
    and whose bands, its own and every one above it, are each right at least half the time
    (an empty band says nothing and passes): a lower threshold that keeps the total above 80%
    by the leads above it, while the ones a band adds are mostly wrong, makes a wrong lead of
    an "unknown" more often than a right one (with split R's studied half, 0.3 kept 80.2% at
    least, but its band 0.3-0.4 was right in 11 of 31).

    With ``served_rows`` (the threads no rule explains, which diagnose actually hands the
    model, pooled over ``seeds`` fold seeds), their leads at the threshold must also be right
    at least ``SERVED_PRECISION`` of the time, from at least ``MIN_SERVED_LEADS`` leads a seed:
    the corpus as a whole is mostly threads rules read, easier than these (a review of
    2026-11-29: 86.8% on all threads at 0.5, 75% on these), and a threshold with hardly any
    leads there proves nothing."""
    ordered = sorted(grid)
    per_band = bands(rows, grid)
    for i, threshold in enumerate(ordered):
        chosen = [r for r in rows if r[0] >= threshold and r[2] >= MIN_TERMS]
        if lower_bound(sum(1 for r in chosen if r[1]), len(chosen)) < 0.80:
            continue
        if not all(right * 2 >= leads for _, leads, right in per_band[i:]):
            continue
        if served_rows is not None:
            served_chosen = [r for r in served_rows if r[0] >= threshold and r[2] >= MIN_TERMS]
            right = sum(1 for r in served_chosen if r[1])
            if (len(served_chosen) < MIN_SERVED_LEADS * seeds
                    or right < SERVED_PRECISION * len(served_chosen)):
                continue
        return threshold
    return None


def table(rows: list[Row], total: int, grid: tuple[float, ...] = GRID,
          choose: bool = True) -> None:
    for threshold in grid:
        chosen = [r for r in rows if r[0] >= threshold and r[2] >= MIN_TERMS]
        right = sum(1 for r in chosen if r[1])
        share = right / len(chosen) if chosen else 0.0
        print(f"  probability >= {threshold:<5} classified {len(chosen):3} "
              f"({len(chosen) / total:.0%}), right {right:3} ({share:.1%}, at least "
              f"{lower_bound(right, len(chosen)):.1%})")
    ranked = sorted((r for r in rows if r[2] >= MIN_TERMS), key=lambda r: -r[0])
    most = right = 0
    for n, row in enumerate(ranked, 1):
        right += row[1]
        if right / n >= 0.8:
            most = n
    print(f"  most classified at 80% precision: {most} ({most / total:.0%})")
    for low, leads, right in bands(rows, grid):
        print(f"  band from {low:<5} {leads:3} leads, right {right:3}")
    if choose:
        print(f"  threshold (80% with 95% confidence, each band from it up right at least half the "
              f"time): {chosen_threshold(rows, grid)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--naive-bayes", action="store_true")
    parser.add_argument("--seeds", type=int, default=SEEDS,
                        help="fold seeds pooled for the threads no rule explains")
    args = parser.parse_args()
    total = len(load_index().threads)
    if args.naive_bayes:
        print(f"{total} threads, naive Bayes, leave-one-out")
        table(naive_bayes_leave_one_out(), total, (0.8, 0.9, 0.95, 0.99))
        return 0
    print(f"{total} threads, logistic regression, {args.folds}-fold cross-validation")
    indexed = cross_validate_indexed(args.folds, args.epochs)
    rows = [row for _, row in indexed]
    table(rows, total)
    asked = served(list(load_index().threads))
    served_rows = [row for i, row in indexed if i in asked]
    for seed in range(2, args.seeds + 1):
        served_rows += [row for i, row in cross_validate_indexed(args.folds, args.epochs, seed)
                        if i in asked]
    print(f"\nof them the {len(asked)} whose logs no rule explains (the fallback's own "
          f"cases), pooled over {args.seeds} fold seeds")
    table(served_rows, len(asked) * args.seeds, choose=False)
    chosen = chosen_threshold(rows, served_rows=served_rows, seeds=args.seeds)
    print(f"  threshold (the first, and right at least {SERVED_PRECISION:.0%} of the time on "
          f"these, from {MIN_SERVED_LEADS} leads a seed or more): {chosen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
