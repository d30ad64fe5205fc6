"""Which finding is the root cause: the order in which causes explain each other.

A log of a failed job holds the cause and its consequences. The contract's categories
are ordered so that a cause comes before what it produces: no driver explains every CUDA
error after it; a wrong torch build explains a missing kernel image; a rank killed for
memory explains the watchdog timeouts of the ranks that waited for it. WSL comes first:
running under WSL 1, or with a Linux driver installed inside WSL, explains a missing
driver. The list is ``logrules.CATEGORY_PRECEDENCE`` (the smoke job ranks by it too);
within one severity the earliest category in it leads, and the first line seen breaks ties.

One thing comes before the categories: what the quoted lines themselves are. Every process
of a job prints the same import-time warnings, healthy or not (torch's "UserWarning: Failed
to initialize NumPy", library FutureWarnings); a rank that died prints an exception, a
signal or an exit code. A finding read only from warning lines, none of whose consequences
is such a failure, ranks below every finding that quotes one, whatever its category.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ddp_doctor.logrules import category_position, is_fatal_line, is_warning_line
from ddp_doctor.model import Finding

# Evidence labels compose.py gives quoted lines: "line 12", "rank1.log line 12", and
# "consequence, line 40" for a symptom folded into the cause.
_OWN_LINE = re.compile(r"^(?:.+ )?line \d+$")
_CONSEQUENCE = "consequence, "
_CODE_SUFFIX = re.compile(r" \([A-Z]+\d+\)$")


def root_cause_key(finding: Finding, first_seen: int = 0,
                   demoted: bool = False) -> tuple[int, int, int, int]:
    """Sort key: errors first, then findings not demoted below a failure, then the
    category's place in the causal order, then the first line seen."""
    return (-finding.effective_severity.rank, int(demoted),
            category_position(finding.code.category), first_seen)


def _own_lines(finding: Finding) -> list[str]:
    return [e.value for e in finding.evidence
            if _OWN_LINE.match(e.label) and not e.label.startswith(_CONSEQUENCE)]


def _consequences(finding: Finding) -> list[str]:
    """The folded symptoms' lines, without the ranks in front and the code behind."""
    found: list[str] = []
    for item in finding.evidence:
        if not item.label.startswith(_CONSEQUENCE):
            continue
        text = _CODE_SUFFIX.sub("", item.value)
        found.append(text)
        if ": " in text:  # "ranks 0-3: RuntimeError: ..." -> "RuntimeError: ..."
            found.append(text.split(": ", 1)[1])
    return found


def shows_failure(finding: Finding) -> bool:
    """Whether the finding quotes a process failing (its own line or a folded symptom's)."""
    return any(is_fatal_line(line) for line in (*_own_lines(finding), *_consequences(finding)))


def warning_only(finding: Finding) -> bool:
    """Whether every line the finding was read from is a warning, and none of the
    consequences folded into it is a failure."""
    own = _own_lines(finding)
    return bool(own) and all(is_warning_line(line) for line in own) \
        and not shows_failure(finding)


def rank(pairs: Iterable[tuple[Finding, int]]) -> list[tuple[Finding, int]]:
    """Findings (with their first-seen order) sorted root cause first."""
    pairs = list(pairs)
    failure = any(shows_failure(finding) for finding, _ in pairs)
    return sorted(pairs, key=lambda pair: root_cause_key(
        pair[0], pair[1], demoted=failure and warning_only(pair[0])))
