"""The code registry: every finding code is declared here once.

A code is declared with ``declare(...)`` where it is used (a check module, a log-rule
module, the smoke job's, the policy's and ``diagnose``'s code modules); a second
declaration of an id with different text raises at import, so two parts of the tool can
never give one code two meanings. This module knows no family: it sits under all of them
and each family's module declares into it when imported. The book of every code, which
imports each family by name so the dependency reads in its imports, is
``ddp_doctor.codebook`` (``ddp-doctor explain``, docs/codes.md and the uniqueness test read
it).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from ddp_doctor.categories import Category
from ddp_doctor.model import Code, Family, Severity, family_of

__all__ = [
    "CodeRegistry",
    "DuplicateCode",
    "Family",
    "category_named",
    "closest_ids",
    "declare",
    "family_of",
    "foreign",
    "registered",
    "render_code_text",
    "render_codes_markdown",
    "suggest_categories",
]

class DuplicateCode(ValueError):
    """Two declarations gave one code id different meanings."""


class CodeRegistry:
    """Codes by id, each declared once.

    Declaring an id again with an equal ``Code`` returns the first one: that is the same
    module imported a second time (a test that dropped it from ``sys.modules``), not a
    second meaning. Anything else under a known id raises ``DuplicateCode``.
    """

    def __init__(self) -> None:
        self._codes: dict[str, Code] = {}

    def add(self, code: Code) -> Code:
        known = self._codes.get(code.id)
        if known is None:
            self._codes[code.id] = code
            return code
        if known == code:
            return known
        raise DuplicateCode(f"code {code.id} is declared twice: {known.summary!r} and "
                            f"{code.summary!r}")

    def codes(self) -> dict[str, Code]:
        """Every code declared so far, by id, in id order."""
        return dict(sorted(self._codes.items()))


_REGISTRY = CodeRegistry()


def declare(id: str, category: Category, summary: str, what: str, why: str, fix: str,
            severity: Severity = Severity.ERROR, docs_url: str | None = None) -> Code:
    """Make a ``Code`` (same arguments) and record it; raise ``DuplicateCode`` on a clash.

    One call per code at module level, so a module's constants are its declarations and
    nothing else has to repeat them.
    """
    return _REGISTRY.add(Code(id, category, summary, what, why, fix, severity=severity,
                              docs_url=docs_url))


def registered() -> dict[str, Code]:
    """Every code declared so far, by id, in id order: complete only once every family's
    module is imported, which is what ``ddp_doctor.codebook`` does (ask it, not this)."""
    return _REGISTRY.codes()


def closest_ids(text: str, ids: Iterable[str], limit: int = 3) -> list[str]:
    """The ids among IDS closest to TEXT, for "did you mean": a misspelt id ("DRV01",
    "drv0001") first by shared prefix and length, then by similarity."""
    wanted = text.strip().upper()
    ids = list(ids)
    close = difflib.get_close_matches(wanted, ids, n=limit, cutoff=0.6)
    letters = wanted.rstrip("0123456789")
    digits = wanted[len(letters):]
    if letters and digits:  # DRV01 -> DRV001 (padding lost), DRV0001 -> DRV001
        padded = f"{letters}{int(digits):03d}"
        if padded in ids:  # first, even where a longer id shares more of the text (DIAG010)
            close = [padded, *(c for c in close if c != padded)]
    return close[:limit]


def category_named(text: str) -> Category | None:
    """The category TEXT names (``nccl_p2p``, ``NCCL-P2P``, ``nccl p2p``), or None."""
    key = text.strip().lower().replace("-", "_").replace(" ", "_")
    try:
        return Category(key)
    except ValueError:
        return None


def suggest_categories(text: str, limit: int = 3) -> list[Category]:
    """The categories closest to TEXT, for "did you mean": those containing it as a part of
    their id ("p2p" -> nccl_p2p, "nccl" -> the NCCL ones) first, then the similar ones
    ("ncclp2p", "driver_to_old")."""
    key = text.strip().lower().replace("-", "_").replace(" ", "_")
    ids = [category.value for category in Category]
    parts = [i for i in ids if len(key) >= 3 and key in i.split("_")]
    close = difflib.get_close_matches(key, ids, n=limit, cutoff=0.6)
    return [Category(i) for i in dict.fromkeys([*parts, *close])][:limit]


def foreign(code_id: str, category: str | None, summary: str, severity: str | None) -> Code:
    """A code this installation does not declare, rebuilt from a recorded report.

    A support bundle's report.json may carry a third-party plugin's code, or one from a
    newer ddp-doctor: it keeps the category and severity it was recorded with, and it is
    not registered (it has no explanation here).
    """
    try:
        known_category = Category(category)
    except ValueError:
        known_category = Category.UNKNOWN
    try:
        known_severity = Severity(severity)
    except ValueError:
        known_severity = Severity.WARNING
    return Code(code_id, known_category, summary, what=summary, why="", fix="",
                severity=known_severity)


def render_code_text(code: Code) -> str:
    """Plain text with fixed sections: what it means, why it matters, how to fix."""
    lines = [
        f"{code.id}: {code.summary}",
        f"category: {code.category.value}    default severity: {code.severity.value}    "
        f"family: {code.family.value}",
        "",
        "What it means",
        f"  {code.what}",
        "",
        "Why it matters",
        f"  {code.why}",
        "",
        "How to fix",
        f"  {code.fix}",
    ]
    if code.docs_url:
        lines += ["", f"Reference: {code.docs_url}"]
    return "\n".join(lines)


_FAMILY_TITLES = {
    Family.CHECK: "checks of the gathered facts (`ddp-doctor check`)",
    Family.PLAN: "checks of the launch plan (`--gpus`, `--batch`, `--workers`)",
    Family.SMOKE: "the DDP smoke-training job (`ddp-doctor smoke`)",
    Family.LOG: "log rules (`ddp-doctor diagnose`, and the smoke job's stderr)",
    Family.DIAGNOSE: "`ddp-doctor diagnose` judging a whole log",
    Family.POLICY: "the CI policy's requirements (`[tool.ddp-doctor]`, `ddp-doctor.toml`)",
    Family.RUN: "how the user's own job ended (`ddp-doctor run`)",
    Family.NODES: "differences between the nodes of one job (`ddp-doctor compare`, the "
                  "multi-node smoke job)",
    Family.HANG: "where the ranks of a hung job wait, from their stacks (the smoke job, "
                 "`ddp-doctor diagnose` of pasted stacks)",
}


def render_codes_markdown(codes: Iterable[Code]) -> str:
    """docs/codes.md: every code with its explanation, by family, then in code order."""
    order = {family: i for i, family in enumerate(Family)}
    codes = sorted(codes, key=lambda c: (order[c.family], c.id))
    counts = [(f, sum(1 for c in codes if c.family is f)) for f in Family]
    lines = [
        "# Finding codes",
        "",
        "Generated from the code registry (`ddp_doctor.codebook`; "
        "`python -m ddp_doctor.codebook` rewrites this file, a test keeps it current). "
        "`ddp-doctor explain CODE` prints the same text. Categories are described in "
        "[categories.md](categories.md).",
        "",
        f"{len(codes)} codes, by the part of ddp-doctor that reports them:",
        "",
        *(f"- {family.value} ({n}): {_FAMILY_TITLES[family]}" for family, n in counts if n),
        "",
        "| Code | Family | Category | Severity | Summary |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| [{c.id}](#{c.id.lower()}) | {c.family.value} | `{c.category.value}` | "
              f"{c.severity.value} | {c.summary} |" for c in codes]
    for c in codes:
        lines += [
            "",
            f"## {c.id}",
            "",
            f"**{c.summary}** · family {c.family.value} · category `{c.category.value}` · "
            f"default severity {c.severity.value}",
            "",
            f"**What it means.** {c.what}",
            "",
            f"**Why it matters.** {c.why}",
            "",
            f"**How to fix.** {c.fix}",
        ]
        if c.docs_url:
            lines += ["", f"Reference: <{c.docs_url}>"]
    return "\n".join(lines) + "\n"
