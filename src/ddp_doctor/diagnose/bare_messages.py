"""Catalogued messages pasted bare: a line that spells no gate word, read where no error was.

The scan reads only lines that hold a gate word (``logrules.rule.GATES``), and a catalogue
template that spells none is read after its source's prefix ("CUDA error: ", "ValueError:
"), so that a common phrase in prose is not taken for the error. Users paste such messages
without that prefix all the same: an issue title, a sentence quoting the error, a line
copied without its exception type ("Invalid rank 4, rank should be in the interval [0,
3]"). When the scan read no error in a log, its start and end are searched for the messages whose
templates are long enough to name their cause alone (``logrules.catalogue.bare_message``):
most specific first, the first line that holds one and that no rule reads (a warning the
scan read keeps its own reading, whatever launcher prefix its line carries).

One prefix-tree filter over every such message's phrases rejects most lines before any
pattern runs, so this costs a pass over each document's start and end (the 256 KB and 64 KB
the scan keeps of it: a message at the end of a long log, after its progress output, is read
too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddp_doctor.diagnose.literals import phrase_test, required_literals
from ddp_doctor.diagnose.rank_prefixes import split_rank
from ddp_doctor.diagnose.scan import ScanResult
from ddp_doctor.logrules import RULES, match_text
from ddp_doctor.logrules.rule import Rule


@dataclass(frozen=True)
class BareReading:
    """A catalogued message found bare: the rule whose message it is, the document, the
    1-based line number in it, and the line."""

    rule: Rule
    document: str
    line: int
    text: str


def _bare_rules() -> tuple[tuple[Rule, re.Pattern[str], tuple[str, ...] | None], ...]:
    found = [(rule, rule.bare_message, required_literals(rule.bare_message))
             for rule in RULES if rule.catalogue and rule.bare_message is not None]
    return tuple(sorted(found, key=lambda item: -item[0].specificity))


_BARE = _bare_rules()
# A line is searched up to this many characters: the templates' holes make a search of a very
# long line slow (a 256 KB line without a gate word took minutes), and a pasted message
# starts near the beginning of its line.
MAX_LINE_CHARS = 2048
# None: some message has no phrase to filter on, so every line is tried
_PHRASES: tuple[str, ...] | None = (
    None if any(phrases is None for _, _, phrases in _BARE)
    else tuple(dict.fromkeys(p for _, _, phrases in _BARE for p in phrases or ())))


def find_bare(scan: ScanResult) -> BareReading | None:
    """The first catalogued message pasted bare in the start or end of the scanned documents, the
    most specific where one line holds several; None when there is none."""
    if not _BARE:
        return None
    line_filter = phrase_test(_PHRASES) if _PHRASES else None
    for context in scan.contexts:
        for number, whole in context.numbered_lines():
            line = whole[:MAX_LINE_CHARS]
            low = line.lower()
            if line_filter is not None and not line_filter(
                    low.encode("utf-8", "surrogatepass")):
                continue
            for rule, pattern, phrases in _BARE:
                if phrases is not None and not any(map(low.__contains__, phrases)):
                    continue
                if pattern.search(line):
                    if _read_by_a_rule(line):
                        break  # that rule's reading stands (a warning, which did not lead)
                    return BareReading(rule, context.document, number, line)
    return None


def _read_by_a_rule(line: str) -> bool:
    """Whether a rule of the scan reads LINE (without its launcher's rank prefix)."""
    return bool(match_text(split_rank(line)[1]))
