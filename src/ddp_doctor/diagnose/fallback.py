"""A calibrated fallback for logs no rule explains: which category their error lines resemble.

When no rule matched (DIAG001), the log's normalised error lines (``similar.error_lines``)
are classified by a Bernoulli naive Bayes over their words, trained when first needed on
the solved threads the package ships (``knowledge/solved_threads.json``: every corpus case,
its category and its error lines). Naive Bayes because it needs no dependency, trains in
milliseconds on a few hundred threads and gives a posterior to calibrate.

It speaks only when the posterior of its best category is at least ``THRESHOLD`` and the
log has at least ``MIN_TERMS`` known words, and then as a *low-confidence* lead that says
so, with one code per category (``DIAG101``...): the lead's category is what the report,
the CI and the scores read. The threshold was chosen on the corpus alone, leave-one-out
(each thread classified by a model trained without it; ``bench/fallback_calibration.py``):
a posterior whose predictions are right at least 80% of the time, with a margin. Measured
on the 424 threads of the shipped index: at 0.9, 278 of 424 threads (66%) are classified
and 82% of those are right; 0.85 gave 80% (on the bar, no margin), 0.8 gave 77%. With the
studied split E in it (469 threads): at 0.9, 302 (64%) classified, 245 of them (81%) right;
0.85 gives 79%, under the bar, so the threshold stays. With the studied half of split H (539
threads) and categories of fewer than ``MIN_THREADS`` threads left unnamed: at 0.9, 335 (62%)
classified, 270 of them (81%) right; 0.85 gives 78%. With the studied half of split I (570
threads), 0.9 fell to 79% (289 of 364), under the bar: at 0.95, 313 (55%) classified, 255 of
them (81%) right, so the threshold rose to 0.95. The unseen split (tests/data/unseen) never
chose it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.scan import ScanResult
from ddp_doctor.diagnose.similar import SolvedThread, error_lines, load_index, terms
from ddp_doctor.model import Code, Evidence, Finding, Severity, Step

THRESHOLD = 0.95
MIN_TERMS = 3
# A category needs this many solved threads to be named: with one, every common word of that
# thread ("error", "rank", "cuda", "device") is read as near-certain evidence for it (a word
# seen in 1 of 1 threads weighs 0.75, in 5 of 50 0.1). When split H's studied half brought
# the first node_mismatch thread, that one thread took 74 of the first 120 leave-one-out
# guesses and precision at THRESHOLD fell from 81% to 41%.
MIN_THREADS = 3
ALPHA = 0.5  # additive smoothing of each word's rate in a category
LOO_PRECISION = 0.81  # leave-one-out precision at THRESHOLD on the shipped index
LOO_COVERAGE = 0.55  # ...and the share of threads classified at that threshold


def _lead_code(number: int, category: Category) -> Code:
    return declare(
        f"DIAG{number}", category,
        f"Low confidence: the error lines resemble solved {category.value} threads",
        what=f"No log rule matched, and a classifier trained on the shipped solved threads "
             f"reads this log's error lines as {category.value} with a posterior of "
             f"{THRESHOLD:.0%} or more.",
        why="A lead, not a diagnosis: similar words are weaker evidence than a rule that "
            "knows the message; at this confidence the classifier was right about 4 times "
            "in 5 on threads it had not seen.",
        fix="Check the category's usual causes (`ddp-doctor explain` on its codes, "
            "docs/categories.md) and the similar threads listed below before acting.",
        severity=Severity.WARNING)


# Categories that name how ddp-doctor's own run or policy ended, never a log's root cause:
# no solved thread has them, so no lead can.
NOT_A_LOG_CAUSE = (Category.UNKNOWN, Category.COMMAND_FAILED, Category.REQUIREMENT_UNCHECKED)
# One code per category a log can show, numbered in the enum's order (new categories are
# appended, so a released number keeps its meaning).
LEAD_CODES: dict[str, Code] = {
    category.value: _lead_code(101 + i, category)
    for i, category in enumerate(c for c in Category if c not in NOT_A_LOG_CAUSE)}
# Each also as a module constant (LEAD_GPU_OUT_OF_MEMORY, ...), as every other code is, so
# the registry's tests and a reader find them by name.
globals().update({f"LEAD_{code.category.name}": code for code in LEAD_CODES.values()})


@dataclass(frozen=True)
class Guess:
    category: str
    posterior: float
    known_terms: int


class NaiveBayes:
    """Bernoulli naive Bayes over the distinct words of each thread's error lines."""

    def __init__(self, threads: Sequence[SolvedThread]) -> None:
        self._fit([(t.category, frozenset(terms(t.lines))) for t in threads])

    @classmethod
    def from_words(cls, docs: Sequence[tuple[str, frozenset[str]]]) -> NaiveBayes:
        """A model of threads already read into (category, distinct words): leave-one-out
        calibration fits one model per thread, and reading every thread's words each time
        made it quadratic in the corpus's text (bench/fallback_calibration.py)."""
        model = cls.__new__(cls)
        model._fit(docs)
        return model

    def _fit(self, docs: Sequence[tuple[str, frozenset[str]]]) -> None:
        seen = Counter(c for c, _ in docs)
        self.count: dict[str, Counter[str]] = {c: Counter() for c in seen}
        for category, words in docs:
            self.count[category].update(words)
        self.vocab = {w for counts in self.count.values() for w in counts}
        self.total = len(docs)
        # only the categories with enough threads to be told apart are scored (MIN_THREADS)
        self.prior = Counter({c: n for c, n in seen.items() if n >= MIN_THREADS})

    def guess(self, lines: Sequence[str]) -> Guess | None:
        words = [w for w in set(terms(lines)) if w in self.vocab]
        if not self.prior:
            return None
        scores = {}
        for category, n in self.prior.items():
            counts = self.count[category]
            score = math.log(n / self.total)
            for word in words:
                score += math.log((counts[word] + ALPHA) / (n + 2 * ALPHA))
            scores[category] = score
        best = max(scores, key=lambda c: scores[c])
        top = scores[best]
        norm = sum(math.exp(s - top) for s in scores.values())
        return Guess(best, 1.0 / norm, len(words))


@lru_cache(maxsize=1)
def model() -> NaiveBayes:
    return NaiveBayes(load_index().threads)


def confident(guess: Guess | None) -> bool:
    return (guess is not None and guess.posterior >= THRESHOLD
            and guess.known_terms >= MIN_TERMS and guess.category in LEAD_CODES)


def fallback_lead(scan: ScanResult) -> Finding | None:
    """The low-confidence lead for a log no rule explained, or None when unsure."""
    lines = error_lines(scan)
    if not lines:
        return None
    try:
        guess = model().guess(lines)
    except (OSError, ValueError, KeyError):  # a broken install must not break diagnose
        return None
    if not confident(guess) or guess is None:
        return None
    code = LEAD_CODES[guess.category]
    return Finding(
        code, f"LOW CONFIDENCE: no rule matched; the error lines read as {guess.category} "
        f"(posterior {guess.posterior:.2f})",
        (Evidence("classifier", f"naive Bayes over {guess.known_terms} known words of the "
                                f"error lines, trained on {model().total} solved threads",
                  "knowledge/solved_threads.json"),
         Evidence("calibration", f"at posterior >= {THRESHOLD:g} it was right in "
                                 f"{LOO_PRECISION:.0%} of the threads it had not seen "
                                 f"(leave-one-out)", "diagnose/fallback.py"),
         Evidence("error lines read", "; ".join(lines[:3])[:300], "the log")),
        (Step(f"Treat it as a lead: check {guess.category}'s usual causes first.",
              command=f"ddp-doctor explain {guess.category}"),))
