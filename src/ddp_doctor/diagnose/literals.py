"""The words a regular expression cannot match without: a cheap test before the real one.

A candidate line (one holding a gate word) may still be tested against dozens of rules,
and a case-insensitive search costs microseconds per rule. Almost every rule spells out
a literal phrase in each of its alternatives ("out of memory", "unhandled system error"),
so the line can be rejected with ``in`` on its lowercased text first. The phrases are
read from the compiled pattern's parse tree, so they cannot drift from the pattern; when
an alternative has no literal of at least three characters the rule is always tested.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

try:  # the parser behind ``re``; public as sre_parse before Python 3.11
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_parse  # type: ignore[no-redef,unused-ignore]  # needed only below 3.11

_LITERAL = sre_parse.LITERAL
_SUBPATTERN = sre_parse.SUBPATTERN
_BRANCH = sre_parse.BRANCH
MIN_LENGTH = 3


MAX_ALTERNATIVES = 64


# Words every failing log is full of: a run made only of one of them filters little, so a
# rarer run of the same alternative ("p2p" in "warn.*p2p.*fail") is preferred.
COMMON_RUNS = frozenset({"warn", "error", "fail", "cuda", "time", "nccl", "memory", "signal",
                         "killed", "warning", "failed", "error:"})


def _best_run(items: list[Any]) -> str | None:
    """The most selective run of literal characters in a flat sequence (no groups, branches).

    Longest first, but a run that is just a common log word loses to any other run.
    """
    runs, run = [], []
    for op, arg in items:
        if op is _LITERAL:
            run.append(chr(arg))
            continue
        runs.append("".join(run))
        run = []
    runs.append("".join(run))
    usable = [r.lower() for r in runs if len(r) >= MIN_LENGTH]
    if not usable:
        return None
    return max(usable, key=lambda r: (r.strip() not in COMMON_RUNS, len(r)))


def _alternatives(items: list[Any], budget: list[int]) -> list[str] | None:
    """One required literal per way the sequence can match, or None if one has none.

    Required groups are inlined and branches expanded, so the parser's factoring of a
    common prefix out of alternatives ("cuda" out of "cuda error: ..." | "cuda_error_...")
    does not leave only the prefix as the required word.
    """
    for index, (op, arg) in enumerate(items):
        if op is _SUBPATTERN:
            return _alternatives(items[:index] + list(arg[-1]) + items[index + 1:], budget)
        if op is _BRANCH:
            found: list[str] = []
            for branch in arg[1]:
                budget[0] -= 1
                if budget[0] < 0:
                    return None
                sub = _alternatives(items[:index] + list(branch) + items[index + 1:], budget)
                if sub is None:
                    return None
                found += sub
            return found
    best = _best_run(items)
    return [best] if best is not None else None


@lru_cache(maxsize=1024)
def required_literals(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Lowercase phrases, one of which is in every line ``pattern`` matches; None: unknown.

    Only meaningful for case-insensitive patterns tested against lowercased lines.
    Remembered per pattern: every diagnosis builds a Scanner over the same rules, and
    parsing their patterns again each time cost more than scanning a short log.
    """
    if not pattern.flags & re.IGNORECASE:
        return None
    try:
        found = _alternatives(list(sre_parse.parse(pattern.pattern, pattern.flags)),
                              [MAX_ALTERNATIVES])
    except Exception:
        return None
    return tuple(dict.fromkeys(found)) if found else None


def phrase_pattern(phrases: list[str]) -> re.Pattern[str]:
    """One pattern for many literal phrases, merged into a prefix tree.

    ``a|b|c`` over eighty phrases makes the regex engine try every phrase at every
    position; a tree (``cu(?:da error|dnn)|...``) tries one branch per first letter.
    """
    return re.compile(phrase_source(phrases))


@lru_cache(maxsize=256)
def phrase_filter(phrases: tuple[str, ...]) -> re.Pattern[bytes]:
    """``phrase_pattern`` over bytes, remembered per set of phrases: every diagnosis builds a
    Scanner over the same rules, and building the prefix trees of their hundreds of phrases
    again cost more than scanning a short log (the test suite diagnoses ~500)."""
    return re.compile(phrase_source(list(phrases)).encode())


def phrase_source(phrases: list[str]) -> str:
    """The source of ``phrase_pattern``, to compile as bytes without compiling it twice."""
    tree: dict[str, Any] = {}
    for phrase in phrases:
        node = tree
        for char in phrase:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        if "" in node:
            return ""  # a shorter phrase already matches: the longer ones add nothing
        branches = [re.escape(char) + emit(child) for char, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return emit(tree)


COMPILE_AFTER = 256  # tests by ``in`` before a PhraseTest compiles its pattern


class PhraseTest:
    """Whether bytes hold any of many literal phrases: ``phrase_filter``, compiled only once
    it is worth it.

    Compiling the prefix tree of hundreds of phrases takes a tenth of a second or more, as
    long as a short log takes to scan, and most logs ask a given set of phrases only a few
    times (the scan remembers each line's answer). So the first COMPILE_AFTER tests are
    ``in`` per phrase (a C loop, tens of microseconds for hundreds of phrases); after that,
    when the tests have cost about what compiling would, the pattern is compiled and
    searched. The two give the same answer: the pattern is the alternation of the phrases.

    With ``guess``, the test is only a filter in front of exact tests of the same phrases
    (the scan's per-gate filter, before each rule's own phrases): until compiled it then
    answers True ("maybe") without looking, as the exact tests will decide.
    """

    def __init__(self, phrases: tuple[str, ...], guess: bool = False) -> None:
        self.phrases = phrases
        self.guess = guess
        self._words = tuple(phrase.encode() for phrase in phrases)
        self._left = COMPILE_AFTER
        self._pattern: re.Pattern[bytes] | None = None

    def __call__(self, data: bytes) -> bool:
        if self._pattern is not None:
            return self._pattern.search(data) is not None
        self._left -= 1
        if self._left < 0:
            self._pattern = phrase_filter(self.phrases)
            return self._pattern.search(data) is not None
        return self.guess or any(map(data.__contains__, self._words))


@lru_cache(maxsize=256)
def phrase_test(phrases: tuple[str, ...], guess: bool = False) -> PhraseTest:
    """A PhraseTest per set of phrases, shared by every Scanner in the process (the count
    towards compiling is too)."""
    return PhraseTest(phrases, guess)
