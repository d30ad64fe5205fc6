"""The code registry: every finding code is declared here once and found here.

A code is declared with ``declare(...)`` where it is used (a check module, a log-rule
module, the smoke job's, the policy's and ``diagnose``'s code modules); a second
declaration of an id with different text raises at import, so two parts of the tool can
never give one code two meanings. The registry knows the modules of every family
(``FAMILY_MODULES``), so ``all_codes()`` imports them and returns every code, plus the
codes of third-party check plugins, which come through the check catalogue: nothing here
lists codes by hand. ``ddp-doctor explain``, docs/codes.md (``python -m ddp_doctor.codes``;
a test regenerates and compares) and the uniqueness test all read it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ddp_doctor.categories import Category
from ddp_doctor.model import Code, Family, Severity, family_of

if TYPE_CHECKING:
    from ddp_doctor.registry import Catalogue

__all__ = [
    "FAMILY_MODULES",
    "CodeRegistry",
    "DuplicateCode",
    "Family",
    "all_codes",
    "by_category",
    "by_family",
    "category_named",
    "declare",
    "declared_codes",
    "family_of",
    "foreign",
    "get",
    "render_code_text",
    "render_codes_markdown",
    "suggest",
    "suggest_categories",
]

_BUILTIN_CHECKS = "ddp_doctor.checks.BUILTIN_MODULES"
"""Stands for the built-in check modules (read from ``ddp_doctor.checks`` when loading,
so the run order of the checks stays written in one place)."""

FAMILY_MODULES: dict[Family, tuple[str, ...]] = {
    Family.CHECK: (_BUILTIN_CHECKS,),
    Family.PLAN: ("ddp_doctor.checks.launch",),
    Family.SMOKE: ("ddp_doctor.smoke.codes",),
    Family.LOG: ("ddp_doctor.logrules",),  # imports every area module of the rules
    Family.DIAGNOSE: ("ddp_doctor.diagnose.compose", "ddp_doctor.diagnose.context",
                      "ddp_doctor.diagnose.similar", "ddp_doctor.diagnose.fallback",
                      "ddp_doctor.diagnose.transport"),
    Family.POLICY: ("ddp_doctor.policy.codes",),
    Family.RUN: ("ddp_doctor.job.codes",),
    Family.NODES: ("ddp_doctor.nodes.codes",),
    Family.HANG: ("ddp_doctor.forensics.codes",),
}
"""Where each family's codes are declared: importing these declares every built-in code."""


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


def _family_modules() -> list[str]:
    # By name: checks/ installs as ddp_doctor.checks, a mapping mypy cannot follow.
    builtin: tuple[str, ...] = importlib.import_module("ddp_doctor.checks").BUILTIN_MODULES
    names: list[str] = []
    for modules in FAMILY_MODULES.values():
        for name in modules:
            names += builtin if name == _BUILTIN_CHECKS else (name,)
    return list(dict.fromkeys(names))


def declared_codes() -> dict[str, Code]:
    """Every code ddp-doctor itself declares (no plugins), by id, in id order."""
    for name in _family_modules():
        importlib.import_module(name)  # a no-op once imported; declaring happens on import
    return _REGISTRY.codes()


def all_codes(catalogue: Catalogue | None = None) -> dict[str, Code]:
    """Every code, by id: the declared ones plus the codes of the catalogue's checks.

    The catalogue brings third-party plugins' codes (entry-point group
    ``ddp_doctor.checks.v1``); without one, ``load_catalogue()`` loads the installed ones.
    A plugin code whose id is already declared is left out: the built-in meaning stands.
    """
    if catalogue is None:
        from ddp_doctor.registry import load_catalogue

        catalogue = load_catalogue()
    codes = declared_codes()
    for code_id, code in catalogue.codes().items():
        codes.setdefault(code_id, code)
    return dict(sorted(codes.items()))


def get(code_id: str, catalogue: Catalogue | None = None) -> Code | None:
    """The code with this id (any case, surrounding blanks ignored), or None."""
    return all_codes(catalogue).get(code_id.strip().upper())


def suggest(text: str, catalogue: Catalogue | None = None, limit: int = 3) -> list[str]:
    """The codes closest to TEXT, for "did you mean": a misspelt id ("DRV01", "drv0001")
    first by shared prefix and length, then by similarity."""
    wanted = text.strip().upper()
    ids = list(all_codes(catalogue))
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


def by_family(catalogue: Catalogue | None = None) -> dict[Family, tuple[Code, ...]]:
    """Every family, in ``Family`` order, with its codes in id order."""
    codes = all_codes(catalogue).values()
    return {family: tuple(c for c in codes if c.family is family) for family in Family}


def by_category(catalogue: Catalogue | None = None) -> dict[Category, tuple[Code, ...]]:
    """Every category, in ``Category`` order, with its codes in id order (maybe none)."""
    codes = all_codes(catalogue).values()
    return {category: tuple(c for c in codes if c.category is category)
            for category in Category}


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
        "Generated from the code registry (`ddp_doctor.codes`; `python -m ddp_doctor.codes`"
        " rewrites this file, a test keeps it current). `ddp-doctor explain CODE` prints the"
        " same text. Categories are described in [categories.md](categories.md).",
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


if __name__ == "__main__":
    import sys
    from pathlib import Path

    # Run as a script this file is ``__main__``, a second copy with an empty registry: the
    # code modules declare into ``ddp_doctor.codes``, so read that one.
    from ddp_doctor import codes as registry

    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/codes.md")
    # Built-in codes only: a plugin installed on this machine is not part of the reference.
    target.write_text(registry.render_codes_markdown(registry.declared_codes().values()),
                      encoding="utf-8")
    print(f"wrote {target}")
