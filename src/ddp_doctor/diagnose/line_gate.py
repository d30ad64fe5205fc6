"""Which lines of a chunk could hold one of many words: one pass for all of them.

The scan looks for a few dozen words (the rules' gates, the section markers, the NCCL and
stack-dump markers) in logs of gigabytes. A ``bytes.find`` per word over the whole log is
a pass per word; a regular expression alternation is slower still (the engine tries every
position). Most of a long log is noise whose *letters* repeat line after line: a progress
bar, a metric row or an NCCL channel line differs from the next only in its numbers and
bars. So each chunk is read once, letters only (lowered, everything else deleted but the
newlines, one ``translate``), its lines of letters are deduplicated (one ``set``), and the
words are searched for, letters only too, in those few distinct lines joined together.
The lines whose letters hold a word's letters are then picked out of the chunk in C
(``map`` and ``compress``), and only they reach Python.

A word's letters in a line's letters is necessary for the word to be in the line (what
lies between two letters of the word lies between them in the line, and is deleted in
both), never sufficient: the caller tests the words exactly on the lines handed to it.
A word without letters cannot be gated so: its group then picks every line.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate, compress

# ASCII letters lowered and newlines kept, every other byte deleted.
_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")
_NOT_LETTER = bytes(b for b in range(256)
                    if b != ord("\n") and not (chr(b).isascii() and chr(b).isalpha()))


def letters(word: bytes) -> bytes:
    """A word's letters, lowered, as the gate compares them (newlines dropped too)."""
    return word.translate(_LOWER, _NOT_LETTER).replace(b"\n", b"")


class LineGate:
    """Groups of words; ``select`` gives, per group, the lines of a chunk that may hold
    one of its words."""

    def __init__(self, groups: Sequence[Sequence[bytes]]) -> None:
        self._groups = len(groups)
        self._words: list[tuple[bytes, int]] = []  # (letters, bit), longest first
        self._always = 0  # groups with a word that has no letters: every line may hold it
        for index, group in enumerate(groups):
            for word in group:
                found = letters(word)
                if found:
                    self._words.append((found, 1 << index))
                else:
                    self._always |= 1 << index
        self._words = sorted(dict.fromkeys(self._words), key=lambda w: -len(w[0]))

    def select(self, chunk: bytes) -> tuple[int, list[bytes], list[list[int]]]:
        """How many newlines the chunk holds, its lines (split at ``\\n``; empty when none
        is selected) and, per group, the indices (in order) of the lines that may hold one
        of its words."""
        rows = chunk.translate(_LOWER, _NOT_LETTER).split(b"\n")
        masks = self._masks(list(set(rows)))
        newlines = len(rows) - 1
        if not masks and not self._always:
            return newlines, [], [[] for _ in range(self._groups)]
        everything = range(len(rows))
        picked: list[list[int]] = []
        for group in range(self._groups):
            bit = 1 << group
            if self._always & bit:
                picked.append(list(everything))
                continue
            held = {row for row, found in masks.items() if found & bit}
            picked.append(list(compress(everything, map(held.__contains__, rows)))
                          if held else [])
        return newlines, chunk.split(b"\n"), picked

    def _masks(self, distinct: list[bytes]) -> dict[bytes, int]:
        """Each distinct line of letters that holds some word's letters: its groups."""
        text = b"\n".join(distinct)
        # where each distinct line starts in ``text``
        starts = list(accumulate((len(row) + 1 for row in distinct[:-1]), initial=0))
        found: dict[bytes, int] = {}
        for word, bit in self._words:
            at = text.find(word)
            while at != -1:
                index = bisect_right(starts, at) - 1
                row = distinct[index]
                found[row] = found.get(row, 0) | bit
                following = starts[index] + len(row) + 1  # the next line's start
                at = text.find(word, following)
        return found
