"""Which finding is the root cause: the order in which causes explain each other.

A log of a failed job holds the cause and its consequences. The contract's categories
are ordered so that a cause comes before what it produces: no driver explains every CUDA
error after it; a wrong torch build explains a missing kernel image; a rank killed for
memory explains the watchdog timeouts of the ranks that waited for it. WSL comes first:
running under WSL 1, or with a Linux driver installed inside WSL, explains a missing
driver. Within one severity the earliest category in this list leads; the first line
seen breaks ties.
"""

from __future__ import annotations

from gpu_doctor.categories import Category
from gpu_doctor.logrules import CATEGORY_PRECEDENCE
from gpu_doctor.model import Finding

CATEGORY_ORDER: tuple[Category, ...] = CATEGORY_PRECEDENCE
_POSITION = {category: index for index, category in enumerate(CATEGORY_ORDER)}


def category_position(category: Category) -> int:
    return _POSITION.get(category, len(CATEGORY_ORDER))


def root_cause_key(finding: Finding, first_seen: int = 0) -> tuple[int, int, int]:
    """Sort key: errors first, then the category's place in the causal order."""
    return (-finding.effective_severity.rank, category_position(finding.code.category),
            first_seen)
