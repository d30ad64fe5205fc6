"""A calibrated fallback for logs no rule explains: which category their error lines resemble.

When no rule matched (DIAG001), the log's normalised error lines (``similar.error_lines``)
are classified by a multinomial logistic regression (softmax) over their distinct words,
trained on the solved threads the package ships (``knowledge/solved_threads.json``: every
corpus case, its category and its error lines). Its weights are trained when the index is
built and shipped beside it (``knowledge/fallback_model.json``, written by
``python -m ddp_doctor.diagnose.fallback_build``), since training in pure Python takes about a
second and ``diagnose`` must not pay that; a test retrains it and compares.

Why logistic regression, not the Bernoulli naive Bayes it replaced (2026-11-29): naive Bayes
multiplies every shared word as if independent, so a thread's boilerplate ("error", "rank",
"cuda", "device", "traceback") made its posteriors near 0 or 1 and wrong with confidence.
Measured on the same 614 corpus threads, each classified by a model that never saw it
(``bench/fallback_calibration.py``): naive Bayes at its threshold 0.95 classified 363 threads
(59%), 292 of them right (80.4%); at most 61% of threads could be classified at 80%
precision. The regression classifies 84% at 80% precision; at 0.4, 483 threads (79%), 402
of them right (83.2%). With split M's studied half (643 threads): at 0.4, 504 (78%) classified,
423 of them (83.9%) right. Asked only where an error line reports a failure
(``shows_a_failure``): at 0.4, 482 (75%) classified, 408 of them (84.6%) right
; 0.3 gives 81.0%. With split N's studied half (676 threads), and asked only of the threads
diagnose would ask it about (the 70 with no error line of their own, whose index lines are all
their lines, and 29 more with warnings only left out; the figures before counted them): at
0.4, 476 (70%) classified, 409 of them (85.9%, at least 83.1%) right; 0.3 gives 82.4%, at
least 79.5%. With split O's studied half (703 threads): at 0.4, 497 (71%) classified, 420 of
them (84.5%, at least 81.7%) right; 0.3 gives 82.0%, at least 79.1%. With split P's (725
threads): at 0.4, 520 (72%) classified, 435 of them (83.7%, at least 80.8%) right; 0.3
gives 81.3%, at least 78.4%. With split Q's (762 threads): at 0.4, 547 (72%) classified,
464 of them (84.8%, at least 82.1%) right; 0.3 gives 82.1%, at least 79.3%. With split R's
(787 threads): at 0.4, 566 (72%) classified, 484 of them (85.5%, at least 82.9%) right;
0.3 would then keep 80% with 95% confidence (597, 82.9%, at least 80.2%), but the 31 leads
it adds were right in only 11: the calibration also asks each band from the threshold up to
be right at least half the time, so it stays 0.4. With split S's (846 threads): at 0.4, 599
(71%) classified, 507 of them (84.6%, at least 82.1%) right (``CV_COVERAGE``,
``CV_PRECISION``); 0.3 gives 81.6%, at least 78.9%, and its band is right in 16 of 42. With
split U's studied half (891 threads): at 0.4, 633 (71%) classified, 538 of them (85.0%, at
least 82.5%) right; 0.3 gives 82.6% (at least 80.1%), and its band is right in 19 of 41. With
split V's studied half (913 threads): at 0.4, 653 (72%) classified, 558 of them (85.5%, at
least 83.0%) right; 0.3 gives 82.0% (at least 79.5%), and
its band is right in 19 of 51. Trained on the catalogues' messages too
(``catalogue_documents``, 296 documents in every fold, 2026-11-29): at 0.4, 696 (76%)
classified, 591 of them (84.9%, at least 82.5%) right;
0.3 gives 83.2% (at least 80.8%), and its band is right in 14 of 31. With split W's studied
half (956 threads, 2026-11-29): at 0.4, 716 (75%) classified, 598 of them (83.5%, at least
81.1%) right, but the band from 0.4 to 0.5 was right in 18 of 48, under half, so THRESHOLD
rose to 0.5: 668 (70%) classified, 580 of them (86.8%, at least 84.5%) right. Without the
catalogues' documents the same rule chose 0.5 too (its band from 0.4 right in 12 of 33), with
636 classified and 550 right.

Two corrections after that day's review. First, many catalogue entries were written from a
corpus thread, so training every fold on every entry handed the model the answer of threads it
was said not to have seen: the calibration now leaves out of each fold the entries that read a
line of one of its threads (at 0.5: 645 classified, 554 right, 85.9%). Second, the corpus is
mostly threads the rules read, easier than the ones diagnose hands the fallback; on the 88
corpus threads no rule explains, the same folds' leads at 0.5 were right in 24 of 32 (75%),
and the unseen splits agreed (35 of 48 fallback leads right, 73%). The threshold is now also
held to 80% on those threads: 0.7 gave 19 of 24 (79.2%), 0.8 gave 17 of 21 (81.0%; pooled
over five fold seeds, 89 of 111, 80.2%), so THRESHOLD became 0.8. With split X's studied half
(990 threads, 98 of them no rule explains) the leads on those threads were right about three
times in four at every threshold from 0.5 to 0.9 (pooled over five fold seeds: 131 of 173 at
0.5, 97 of 127 at 0.8, 52 of 71 at 0.9) and 28 of 31 (90.3%) at 0.95: on the threads it
serves, the posterior tells a right reading from a wrong one only when it is near certain.
THRESHOLD is 0.95: over all threads, 319 (32%) classified, 309 of them (96.9%, at least
94.8%) right (``CV_COVERAGE``, ``CV_PRECISION``); on the threads it serves (114: those whose
findings hold DIAG001), 28 of 31 pooled over the bench's five fold seeds (``CV_SERVED``), 5
of 6 with its first.

It speaks only when the probability of its best category is at least ``THRESHOLD`` and the
log has at least ``MIN_TERMS`` known words, and then as a *low-confidence* lead that says
so, with one code per category (``DIAG101``...): the lead's category is what the report,
the CI and the scores read. The threshold is chosen on the corpus alone, by ten-fold
cross-validation (each thread classified by a model trained on the other nine tenths): the
lowest probability on the bench's grid (steps of 0.1) whose leads are right at least 80% of
the time with 95% confidence (the one-sided Wilson lower bound: a precision measured on a
few hundred leads is uncertain by a few points), each band from it up right at least half
the time, and whose leads on the corpus threads no rule explains (the ones it serves) are
right at least 80% of the time. The unseen split (tests/data/unseen) never chose it.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.scan import ScanResult
from ddp_doctor.diagnose.similar import SolvedThread, error_lines, terms
from ddp_doctor.logrules import CATALOGUES, is_fatal_line, is_warning_line
from ddp_doctor.logrules.catalogue import Entry, template_text
from ddp_doctor.model import Code, Evidence, Finding, Severity, Step

THRESHOLD = 0.95
MIN_TERMS = 3
# A category needs this many solved threads to be named: with one, every common word of that
# thread ("error", "rank", "cuda", "device") is read as evidence for it. When split H's
# studied half brought the first node_mismatch thread, that one thread took 74 of the first
# 120 leave-one-out guesses of the naive Bayes this model replaced.
MIN_THREADS = 3
# Training: stochastic gradient descent on the cross-entropy, a fixed shuffle (seeded) so a
# build is reproducible, the step shrinking per epoch, a small L2 penalty, and each thread's
# gradient divided by the square root of its word count so a long log does not outweigh a
# short one. Ten epochs: thirty classified as many threads at 80% precision (83% against 84%)
# and took three times as long (bench/fallback_calibration.py).
EPOCHS = 10
RATE = 0.5
L2 = 1e-3
SEED = 0
CV_PRECISION = 0.969  # ten-fold cross-validated precision at THRESHOLD on the shipped index
CV_COVERAGE = 0.32  # ...and the share of threads classified at that threshold
CV_SERVED = (28, 31)  # ...and (right, leads) on the threads no rule explains, 5 seeds pooled
MODEL_PACKAGE, MODEL_FILE = "ddp_doctor.knowledge", "fallback_model.json"
MODEL_FORMAT = 1
# Weights smaller than this are not shipped: at 0.02 the file is 263 KB instead of 746 KB and
# the cross-validated table is the same within one thread per row.
PRUNE = 2e-2


def _lead_code(number: int, category: Category) -> Code:
    return declare(
        f"DIAG{number}", category,
        f"Low confidence: the error lines resemble solved {category.value} threads",
        what=f"No log rule matched, and a classifier trained on the shipped solved threads "
             f"and the catalogues' messages "
             f"reads this log's error lines as {category.value} with a posterior of "
             f"{THRESHOLD:.0%} or more.",
        why="A lead, not a diagnosis: similar words are weaker evidence than a rule that "
            "knows the message; at this confidence the classifier was right about 9 times "
            "in 10 on the threads it serves (no rule explains them) that it had not seen.",
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


Document = tuple[str, frozenset[str]]  # a thread's category and the distinct words of its lines


def documents(threads: Sequence[SolvedThread]) -> list[Document]:
    return [(t.category, frozenset(terms(t.lines))) for t in threads]


def catalogue_documents(entries: Iterable[Entry]) -> list[Document]:
    """One document per catalogue entry: the words of its templates, its code's category.

    Why (issue 23 point 3, "trained on the corpus and the catalogues"): the fallback speaks
    where no rule read a line, often a message in a wording no template spells (an older
    release, a paraphrase in a title) whose words are the catalogue's. Many entries were
    written from a corpus thread, so the calibration leaves out of each fold's training the
    entries that read a line of a thread held out in that fold (bench/fallback_calibration.py,
    ``catalogue_readers``): an entry cannot vouch for the thread it was written from. Only
    the templates, never an entry's ``real`` lines (copied from threads).
    """
    return [(entry.code.category.value,
             frozenset(terms(map(template_text, entry.templates))))
            for entry in entries if entry.code.category.value in LEAD_CODES]


def shipped_catalogue_entries() -> list[Entry]:
    """The shipped catalogues' entries whose category the model can name, in the order of
    ``shipped_catalogue_documents``."""
    return [entry for _, entries in CATALOGUES.values() for entry in entries
            if entry.code.category.value in LEAD_CODES]


def shipped_catalogue_documents() -> list[Document]:
    """``catalogue_documents`` of every shipped catalogue: what the model trains on beside
    the solved threads (``fallback_build``; bench/fallback_calibration.py, in each fold less
    the entries that read a held-out thread)."""
    return catalogue_documents(shipped_catalogue_entries())


class SoftmaxRegression:
    """Multinomial logistic regression over the distinct words of each thread's error lines."""

    def __init__(self, weights: dict[str, dict[str, float]], bias: dict[str, float],
                 trained_on: int) -> None:
        self.weights = weights
        self.bias = bias
        self.total = trained_on
        self.vocab = {w for per_word in weights.values() for w in per_word}

    @classmethod
    def train(cls, docs: Sequence[Document], epochs: int = EPOCHS) -> SoftmaxRegression:
        """Fit on (category, words) documents; categories under MIN_THREADS are left out."""
        seen = Counter(c for c, _ in docs)
        classes = sorted(c for c, n in seen.items() if n >= MIN_THREADS)
        data = [(c, sorted(words)) for c, words in docs if c in classes]
        weights: dict[str, dict[str, float]] = {c: {} for c in classes}
        bias = dict.fromkeys(classes, 0.0)
        shuffle = random.Random(SEED).shuffle
        for epoch in range(epochs):
            shuffle(data)
            step = RATE / (1 + 0.2 * epoch)
            for category, words in data:
                probs = _softmax({c: bias[c] + sum(weights[c].get(w, 0.0) for w in words)
                                  for c in classes})
                scale = 1 / math.sqrt(len(words)) if words else 0.0
                for c in classes:
                    gradient = probs[c] - (1.0 if c == category else 0.0)
                    if abs(gradient) < 1e-4:
                        continue
                    bias[c] -= step * gradient
                    per_word = weights[c]
                    for w in words:
                        old = per_word.get(w, 0.0)
                        per_word[w] = old - step * (gradient * scale + L2 * old)
        return cls(weights, bias, len(data))

    def guess(self, lines: Sequence[str]) -> Guess | None:
        if not self.bias:
            return None
        words = [w for w in set(terms(lines)) if w in self.vocab]
        probs = _softmax({c: b + sum(self.weights[c].get(w, 0.0) for w in words)
                          for c, b in self.bias.items()})
        best = max(probs, key=lambda c: probs[c])
        return Guess(best, probs[best], len(words))

    def to_dict(self) -> dict[str, object]:
        """The shipped form: weights rounded, those too small to change a guess dropped."""
        return {"format": MODEL_FORMAT, "trained_on": self.total,
                "bias": {c: round(b, 4) for c, b in sorted(self.bias.items())},
                "weights": {c: {w: round(v, 4) for w, v in sorted(per_word.items())
                                if abs(v) >= PRUNE}
                            for c, per_word in sorted(self.weights.items())}}

    @classmethod
    def from_dict(cls, data: Any) -> SoftmaxRegression:
        """The shipped form read back; ValueError for anything else (a damaged or foreign
        file must cost the lead, never the diagnosis)."""
        if not isinstance(data, dict) or data.get("format") != MODEL_FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"fallback model format {found!r}, expected {MODEL_FORMAT}")
        weights, bias, trained_on = data.get("weights"), data.get("bias"), data.get("trained_on")
        if not (isinstance(weights, dict) and isinstance(bias, dict)
                and isinstance(trained_on, int) and set(bias) <= set(weights)
                and all(_is_number(b) for b in bias.values())
                and all(isinstance(per_word, dict) and all(map(_is_number, per_word.values()))
                        for per_word in weights.values())):
            raise ValueError("fallback model: weights, bias or trained_on malformed")
        return cls(weights, bias, trained_on)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _softmax(scores: dict[str, float]) -> dict[str, float]:
    top = max(scores.values())
    exps = {c: math.exp(s - top) for c, s in scores.items()}
    total = sum(exps.values())
    return {c: e / total for c, e in exps.items()}


@lru_cache(maxsize=1)
def model() -> SoftmaxRegression:
    """The shipped model, read once (package data; never the repository's tests/)."""
    from importlib.resources import files

    text = files(MODEL_PACKAGE).joinpath(MODEL_FILE).read_text(encoding="utf-8")
    return SoftmaxRegression.from_dict(json.loads(text))


# A failed from-import that names its own cause: a circular import (CPython's import_from:
# "cannot import name ... from partially initialized module ... (most likely due to a
# circular import)"), a bug in the importing code, not an environment. Every corpus thread
# with "cannot import name" is package_conflict, so the classifier would read it as one.
# A name missing from a project's own package is not excluded: LLaVA's "cannot import name
# 'LlavaLlamaForCausalLM' from 'llava.model' (/home/LLaVA/llava/model/__init__.py)" was
# flash-attn built for another torch, its import failure swallowed (haotian-liu/LLaVA#1034).
# https://github.com/python/cpython/blob/v3.12.7/Python/ceval.c (import_from)
_OWN_CODE = re.compile(r"partially initiali[sz]ed module")


# A warning as the normalised lines show it: c10's "[W socket.cpp:<n>]" and glog's
# "[W<n> <n>:<n>:<n> socket.cpp:<n>]" (torch 2.4 and later; their digits replaced, so logrules'
# patterns with digits no longer match) or a line that names itself a warning ("To avoid this
# warning pass in values ...").
_WARNING_WORD = re.compile(r"^\s*\[W[ \]]|^\s*\[?W<n> <n>:|warning", re.IGNORECASE)
# Error words a working job prints too: NCCL probing for its plugins at start-up ("NET/Plugin:
# Failed to find ncclNetPlugin_v9 symbol.", "PROFILER/Plugin: Could not find:
# libnccl-profiler.so.", NCCL's init.cc/plugin code, also pasted without "NCCL INFO") and
# collect_env's "cuDNN version: Could not collect" for a field it has no value for.
_NOT_A_FAILURE = re.compile(
    r"\b(?:NET|PROFILER|TUNER|ENV|COLLNET|GIN)/Plugin\b|\bPlugin load\b|Could not find: ?lib"
    r"|:\s*could not collect\s*$", re.IGNORECASE)


def shows_a_failure(lines: Sequence[str]) -> bool:
    """Whether the error lines hold one that reports a failure, not only warnings and NCCL's
    INFO trace. A healthy run prints warnings with error words (a DataLoader's worker count,
    a deprecated autocast, NCCL's "Plugin load ... cannot open shared object file",
    collect_env's "Could not collect"); read by the classifier, the harmless warnings of
    tests/fixtures/logs/benign.log came out as torch_arch_unsupported at 0.86. Of the 606
    corpus threads with error lines, 29 show only such lines."""
    return any(is_fatal_line(line.replace("<n>", "1"))  # "exitcode: -<n>", "signal <n> (...)"
               or not (is_warning_line(line) or _WARNING_WORD.search(line)
                       or "NCCL INFO" in line or _NOT_A_FAILURE.search(line))
               for line in lines)


def confident(guess: Guess | None) -> bool:
    return (guess is not None and guess.posterior >= THRESHOLD
            and guess.known_terms >= MIN_TERMS and guess.category in LEAD_CODES)


def fallback_lead(scan: ScanResult) -> Finding | None:
    """The low-confidence lead for a log no rule explained, or None when unsure."""
    lines = error_lines(scan)
    if not shows_a_failure(lines) or any(_OWN_CODE.search(q.text) for q in scan.exceptions):
        return None
    try:
        guess = model().guess(lines)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        # a broken install must not break diagnose
        return None
    if not confident(guess) or guess is None:
        return None
    code = LEAD_CODES[guess.category]
    return Finding(
        code, f"LOW CONFIDENCE: no rule matched; the error lines read as {guess.category} "
        f"(posterior {guess.posterior:.2f})",
        (Evidence("classifier", f"logistic regression over {guess.known_terms} known words "
                                f"of the error lines, trained on {model().total} solved "
                                f"threads and catalogued messages",
                  "knowledge/fallback_model.json"),
         Evidence("calibration", f"at posterior >= {THRESHOLD:g} it was right in "
                                 f"{CV_SERVED[0]} of {CV_SERVED[1]} readings of corpus threads "
                                 f"no rule explains, each by a model that had not seen the "
                                 f"thread (ten-fold cross-validation, five fold seeds)",
                  "diagnose/fallback.py"),
         Evidence("error lines read", "; ".join(lines[:3])[:300], "the log")),
        (Step(f"Treat it as a lead: check {guess.category}'s usual causes first.",
              command=f"ddp-doctor explain {guess.category}"),))
