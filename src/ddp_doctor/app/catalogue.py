"""What the doctor knows: ``checks``, ``codes`` and ``explain`` list and explain the
checks, the codes of every family and the failure categories.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from typing import Optional

from rich.console import Console

from ddp_doctor.categories import Category
from ddp_doctor.checklist import load_catalogue
from ddp_doctor.codes import category_named, suggest_categories
from ddp_doctor.model import Family
from ddp_doctor.registry import Catalogue
from ddp_doctor.report.catalogue import (
    codes_json,
    render_category,
    render_checks,
    render_code,
    render_codes,
)
from ddp_doctor.usage import (
    EXIT_INTERNAL,
    EXIT_READY,
    UsageError,
)


def run_checks() -> int:
    """List every check and the codes it reports; 3 when a check plugin failed to load."""
    catalogue = load_catalogue()
    render_checks(catalogue, Console(highlight=False))
    return EXIT_INTERNAL if catalogue.failures else EXIT_READY


def run_codes(family: Optional[str], category: Optional[str], as_json: bool) -> int:
    """List every code of every family, or those of one family and/or category, as a table
    or (``as_json``) a JSON array on stdout. Both filters are judged before anything is
    listed; 3 when a check plugin failed to load (its codes are missing from the list)."""
    wanted_family = _family(family)
    wanted_category = _category(category)
    from ddp_doctor.codebook import all_codes  # every family: imported when asked for

    catalogue = load_catalogue()
    codes = [code for code in all_codes(catalogue).values()
             if wanted_family in (None, code.family)
             and wanted_category in (None, code.category)]
    if as_json:
        sys.stdout.write(json.dumps(codes_json(codes), indent=2, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    else:
        render_codes(codes, Console(highlight=False),
                     empty=_nothing_matches(wanted_family, wanted_category))
    for failure in catalogue.failures:  # stderr: a JSON listing on stdout stays parseable
        print(f"ddp-doctor: plugin {failure.plugin} failed to load: {failure.error}",
              file=sys.stderr)
    return EXIT_INTERNAL if catalogue.failures else EXIT_READY


def run_explain(topic: str) -> int:
    """Explain a code (``DRV001``, any case) or a failure category (``nccl_p2p``, any case,
    dashes or underscores); anything else is a UsageError with the closest of both."""
    from ddp_doctor.codebook import all_codes  # every family: imported when asked for

    catalogue = load_catalogue()
    codes = all_codes(catalogue)
    code = codes.get(topic.strip().upper())
    if code is not None:
        render_code(code, Console(highlight=False))
        return EXIT_READY
    category = category_named(topic)
    if category is not None:
        render_category(category, codes.values(), Console(highlight=False))
        return EXIT_READY
    raise UsageError(_unknown_topic(topic, catalogue))


_CODE_SHAPED = re.compile(r"\s*[A-Za-z]+\d+\s*")


def _unknown_topic(topic: str, catalogue: Catalogue) -> str:
    """One line for an unknown ``explain`` topic: the closest codes and categories, the
    kind the text looks like first (letters then digits: a code), and where to look."""
    from ddp_doctor.codebook import suggest

    codes = suggest(topic, catalogue)
    categories = [c.value for c in suggest_categories(topic)]
    code_shaped = _CODE_SHAPED.fullmatch(topic) is not None
    close = (codes + categories if code_shaped else categories + codes)[:5]
    what = "code" if code_shaped else "code or category"
    hint = (f"did you mean {', '.join(close)}?" if close
            else "no code or category is close to it;")
    return f"unknown {what} {topic!r}; {hint} `ddp-doctor codes` lists every code"


def _family(text: Optional[str]) -> Optional[Family]:
    """The family ``--family`` names (any case), or a UsageError with the allowed ones."""
    if text is None:
        return None
    names = [family.value for family in Family]
    key = text.strip().lower()
    if key in names:
        return Family(key)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UsageError(f"--family {text!r}: choose one of {', '.join(names)}{hint}")


def _category(text: Optional[str]) -> Optional[Category]:
    """The category ``--category`` names (any case, dashes or underscores), or a UsageError
    with the closest ones and every id."""
    if text is None:
        return None
    category = category_named(text)
    if category is not None:
        return category
    close = [c.value for c in suggest_categories(text)]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UsageError(f"--category {text!r}: not a failure category{hint} (categories: "
                     f"{', '.join(c.value for c in Category)})")


def _nothing_matches(family: Optional[Family], category: Optional[Category]) -> str:
    """What an empty listing says: which filters together matched no code."""
    kind = f"{family.value} code" if family is not None else "code"
    where = f" has category {category.value}" if category is not None else " is known"
    return f"no {kind}{where}"
