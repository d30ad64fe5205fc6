"""The code book: every code of ddp-doctor, as its families declare them into the registry.

``codes.py`` is the registry each family declares into; it sits under all of them, so it
cannot name them without imports that run back up. The book is the registry's composition,
one floor above the families: it imports each family's module in an import statement (a
reader and the layering test see that the book, and whoever asks it for every code, depend
on the checks, the smoke job, diagnose, the policy, ``run``, the nodes and the hang
forensics), and it adds the codes of the check plugins the catalogue brings.
``ddp-doctor explain``, docs/codes.md (``python -m ddp_doctor.codebook``; a test
regenerates and compares) and the uniqueness test read it. A part of the tool under the
families that needs every code (the policy's check of the ids it names, ``diagnose``
rebuilding a recorded report's findings) is handed them by its caller.
"""

from __future__ import annotations

import ddp_doctor.diagnose.accelerate_state
import ddp_doctor.diagnose.compose
import ddp_doctor.diagnose.context
import ddp_doctor.diagnose.data_wait
import ddp_doctor.diagnose.fallback
import ddp_doctor.diagnose.similar
import ddp_doctor.diagnose.stated_memory
import ddp_doctor.diagnose.stated_slowness
import ddp_doctor.diagnose.transport
import ddp_doctor.forensics.codes
import ddp_doctor.job.codes
import ddp_doctor.logrules
import ddp_doctor.nodes.codes
import ddp_doctor.policy.codes
import ddp_doctor.smoke.codes
from ddp_doctor import checklist
from ddp_doctor.categories import Category
from ddp_doctor.codes import closest_ids, registered, render_codes_markdown
from ddp_doctor.model import Code, Family
from ddp_doctor.registry import Catalogue

FAMILY_MODULES: dict[Family, tuple[str, ...]] = {
    Family.CHECK: tuple(m.__name__ for m in checklist.builtin_modules()),
    Family.PLAN: ("ddp_doctor.checks.launch",),
    Family.SMOKE: (ddp_doctor.smoke.codes.__name__,),
    Family.LOG: (ddp_doctor.logrules.__name__,),  # imports every area module of the rules
    # (diagnose's package binds the name ``compose`` to its function: the module's name)
    Family.DIAGNOSE: ("ddp_doctor.diagnose.compose", ddp_doctor.diagnose.context.__name__,
                      ddp_doctor.diagnose.accelerate_state.__name__,
                      ddp_doctor.diagnose.data_wait.__name__,
                      ddp_doctor.diagnose.similar.__name__, ddp_doctor.diagnose.fallback.__name__,
                      ddp_doctor.diagnose.stated_memory.__name__,
                      ddp_doctor.diagnose.stated_slowness.__name__,
                      ddp_doctor.diagnose.transport.__name__),
    Family.POLICY: (ddp_doctor.policy.codes.__name__,),
    Family.RUN: (ddp_doctor.job.codes.__name__,),
    Family.NODES: (ddp_doctor.nodes.codes.__name__,),
    Family.HANG: (ddp_doctor.forensics.codes.__name__,),
}
"""The modules where each family's codes are declared, by name: each is imported above,
which declares every built-in code (the names are for the tests that read them back)."""


def declared_codes() -> dict[str, Code]:
    """Every code ddp-doctor itself declares (no plugins), by id, in id order."""
    return registered()


def all_codes(catalogue: Catalogue | None = None) -> dict[str, Code]:
    """Every code, by id: the declared ones plus the codes of the catalogue's checks.

    The catalogue brings third-party plugins' codes (entry-point group
    ``ddp_doctor.checks.v1``); without one, the installed ones are loaded. A plugin code
    whose id is already declared is left out: the built-in meaning stands.
    """
    if catalogue is None:
        catalogue = checklist.load_catalogue()
    codes = declared_codes()
    for code_id, code in catalogue.codes().items():
        codes.setdefault(code_id, code)
    return dict(sorted(codes.items()))


def get(code_id: str, catalogue: Catalogue | None = None) -> Code | None:
    """The code with this id (any case, surrounding blanks ignored), or None."""
    return all_codes(catalogue).get(code_id.strip().upper())


def suggest(text: str, catalogue: Catalogue | None = None, limit: int = 3) -> list[str]:
    """The codes closest to TEXT, for "did you mean" (``codes.closest_ids``)."""
    return closest_ids(text, all_codes(catalogue), limit)


def by_family(catalogue: Catalogue | None = None) -> dict[Family, tuple[Code, ...]]:
    """Every family, in ``Family`` order, with its codes in id order."""
    codes = all_codes(catalogue).values()
    return {family: tuple(c for c in codes if c.family is family) for family in Family}


def by_category(catalogue: Catalogue | None = None) -> dict[Category, tuple[Code, ...]]:
    """Every category, in ``Category`` order, with its codes in id order (maybe none)."""
    codes = all_codes(catalogue).values()
    return {category: tuple(c for c in codes if c.category is category)
            for category in Category}


if __name__ == "__main__":
    import sys
    from pathlib import Path

    # Run as a script this file is ``__main__``, a second copy; the families declared into
    # the one registry (``ddp_doctor.codes``) all the same, so its codes are complete.
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/codes.md")
    # Built-in codes only: a plugin installed on this machine is not part of the reference.
    target.write_text(render_codes_markdown(declared_codes().values()), encoding="utf-8")
    print(f"wrote {target}")
