"""Which finding is the root cause: the order in which causes explain each other.

A log of a failed job holds the cause and its consequences. The contract's categories
are ordered so that a cause comes before what it produces: no driver explains every CUDA
error after it; a wrong torch build explains a missing kernel image; a rank killed for
memory explains the watchdog timeouts of the ranks that waited for it. WSL comes first:
running under WSL 1, or with a Linux driver installed inside WSL, explains a missing
driver. The list is ``logrules.CATEGORY_PRECEDENCE`` (the smoke job ranks by it too);
within one severity the earliest category in it leads, and the first line seen breaks ties.
"""

from __future__ import annotations

from ddp_doctor.logrules import category_position
from ddp_doctor.model import Finding


def root_cause_key(finding: Finding, first_seen: int = 0) -> tuple[int, int, int]:
    """Sort key: errors first, then the category's place in the causal order."""
    return (-finding.effective_severity.rank, category_position(finding.code.category),
            first_seen)
