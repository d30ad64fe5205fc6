"""The checks ddp-doctor runs: its built-in checks, in run order, then the installed plugins.

``registry.py`` sits under the checks (every check module imports its ``@check``), so it
cannot name them without an import that runs back up; it loads whatever modules it is
given. This module, one floor above the checks, gives it the built-in ones by an import
that the layering test reads (``ddp_doctor.checks.BUILTIN_MODULES``), so the edge from the
core to the checks is written where it is. The import is made when the checks are first
asked for, so a command that runs none (``--help``, ``diagnose`` of a plain log) does not
load them.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata
from types import ModuleType

from ddp_doctor.registry import Catalogue
from ddp_doctor.registry import load_catalogue as load_modules


def builtin_modules() -> tuple[ModuleType, ...]:
    """The built-in check modules, root causes first (the order is written in checks/)."""
    # checks/ installs as ddp_doctor.checks (package-dir), a mapping mypy cannot follow.
    from ddp_doctor import checks  # type: ignore[attr-defined]

    modules: tuple[ModuleType, ...] = checks.BUILTIN_MODULES
    return modules


def load_catalogue(entry_points: Iterable[metadata.EntryPoint] | None = None) -> Catalogue:
    """The built-in checks, then the plugins of the entry-point group (the installed ones
    when ENTRY_POINTS is None)."""
    return load_modules(builtin_modules(), entry_points)
