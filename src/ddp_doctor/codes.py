"""The explanation of each code, as `ddp-doctor explain` prints it and docs/codes.md lists it.

Both come from the same ``Code`` objects, so the reference and the tool cannot disagree
(a test regenerates docs/codes.md and compares).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ddp_doctor.model import Code

if TYPE_CHECKING:
    from ddp_doctor.registry import Catalogue


def all_codes(catalogue: Catalogue) -> dict[str, Code]:
    """The checks' codes plus those the smoke job, the log rules, ``diagnose`` and the CI
    policy report (no check emits them, yet `explain` and docs/codes.md must know them)."""
    from ddp_doctor.diagnose.compose import DAMAGED_INPUT, NOTHING_MATCHED
    from ddp_doctor.diagnose.context import SILENT_HANG, UNDER_WSL
    from ddp_doctor.logrules import LOG_CODES
    from ddp_doctor.policy.codes import POLICY_CODES
    from ddp_doctor.smoke.codes import SMOKE_CODES

    extra = (*SMOKE_CODES, *LOG_CODES, NOTHING_MATCHED, SILENT_HANG, UNDER_WSL,
             DAMAGED_INPUT, *POLICY_CODES)
    return {**catalogue.codes(), **{c.id: c for c in extra}}


def render_code_text(code: Code) -> str:
    """Plain text with fixed sections: what it means, why it matters, how to fix."""
    lines = [
        f"{code.id}: {code.summary}",
        f"category: {code.category.value}    default severity: {code.severity.value}",
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


def render_codes_markdown(codes: Iterable[Code]) -> str:
    """docs/codes.md: every code with its explanation, in code order."""
    codes = sorted(codes, key=lambda c: c.id)
    lines = [
        "# Finding codes",
        "",
        "Generated from the checks' own `Code` definitions (`python -m ddp_doctor.codes`"
        " rewrites this file; a test keeps it current). `ddp-doctor explain CODE` prints the"
        " same text. Categories are described in [categories.md](categories.md).",
        "",
        "| Code | Category | Severity | Summary |",
        "|---|---|---|---|",
    ]
    lines += [f"| [{c.id}](#{c.id.lower()}) | `{c.category.value}` | {c.severity.value} | "
              f"{c.summary} |" for c in codes]
    for c in codes:
        lines += [
            "",
            f"## {c.id}",
            "",
            f"**{c.summary}** · category `{c.category.value}` · default severity "
            f"{c.severity.value}",
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

    from ddp_doctor.registry import load_catalogue

    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/codes.md")
    target.write_text(render_codes_markdown(all_codes(load_catalogue()).values()), encoding="utf-8")
    print(f"wrote {target}")
