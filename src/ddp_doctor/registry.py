"""Declaring checks and discovering them.

A check is a plain function of the gathered facts, declared with ``@check`` together
with the facts it needs and the codes it may emit. It receives them as a ``FactsView``
(``ddp_doctor.facts.view``): typed accessors over the snapshot that still answer
``facts["host"]`` and ``facts.get(name)`` like the snapshot itself. Built-in checks are an explicit,
ordered tuple of modules (``ddp_doctor.checks.BUILTIN_MODULES``); third-party checks
register a module under the entry-point group ``ddp_doctor.checks.v1``. Both go through
the same loader, and a module that fails to import becomes a recorded failure rather
than a crash, so one broken plugin never hides the rest of the report. This module sits
under the checks (they import ``@check`` from it), so it never names them: the built-in
ones are handed to ``load_catalogue`` by ``ddp_doctor.checklist``, one floor above.
"""

from __future__ import annotations

import functools
import importlib
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any, Callable, Union

from ddp_doctor.facts.snapshot import Facts
from ddp_doctor.facts.view import FactsView
from ddp_doctor.model import Code, Finding

ENTRY_POINT_GROUP = "ddp_doctor.checks.v1"
_SPEC_ATTR = "__ddp_doctor_check__"


@dataclass(frozen=True)
class Summary:
    """A one-line account of what a check saw, shown beside its status glyph.

    ``command`` is a shell command the user will want to copy (the launch command for this
    machine): renderers show it whole on its own line instead of wrapping it into the text.
    """

    text: str
    command: str | None = None


CheckOutput = Iterable[Union[Finding, Summary]]
CheckFunc = Callable[[FactsView], CheckOutput]


def _given_a_view(func: CheckFunc) -> Callable[[Union[Facts, FactsView]], CheckOutput]:
    """FUNC, callable with the snapshot itself too (it is then wrapped in a view)."""

    @functools.wraps(func)
    def call(facts: Union[Facts, FactsView]) -> CheckOutput:
        return func(FactsView.of(facts))

    return call


@dataclass(frozen=True)
class CheckSpec:
    """Everything the runner needs to know about one check."""

    id: str
    title: str
    area: str
    func: CheckFunc
    requires: tuple[str, ...] = ()
    codes: tuple[Code, ...] = ()
    blocked_by: tuple[str, ...] = ()
    plugin: str = "builtin"  # "builtin MODULE" or "NAME (MODULE)" for an entry point

    @property
    def code_ids(self) -> frozenset[str]:
        return frozenset(c.id for c in self.codes)


def check(
    *,
    id: str,
    title: str,
    area: str,
    requires: Iterable[str] = (),
    codes: Iterable[Code] = (),
    blocked_by: Iterable[str] = (),
) -> Callable[[CheckFunc], CheckFunc]:
    """Declare ``func`` as a check.

    ``requires`` names facts (``"nvml"``, ``"torch"``, ...); the check is skipped when
    one is unavailable. ``blocked_by`` names other checks; when one of them did not
    pass, this check is skipped with "blocked by CODE" instead of piling a second red
    line on the same root cause.
    """

    def decorate(func: CheckFunc) -> CheckFunc:
        spec = CheckSpec(
            id=id,
            title=title,
            area=area,
            func=_given_a_view(func),
            requires=tuple(requires),
            codes=tuple(codes),
            blocked_by=tuple(blocked_by),
        )
        setattr(func, _SPEC_ATTR, spec)
        return func

    return decorate


def specs_in_module(module: ModuleType, plugin: str) -> list[CheckSpec]:
    """The checks a module declares, in the order they are defined."""
    found = []
    for value in vars(module).values():
        spec = getattr(value, _SPEC_ATTR, None)
        if isinstance(spec, CheckSpec) and getattr(value, "__module__", None) == module.__name__:
            found.append(CheckSpec(**{**spec.__dict__, "plugin": plugin}))
    return found


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded, kept so the report can show it."""

    plugin: str
    error: str


@dataclass
class Catalogue:
    """The loaded checks, in run order, and the plugins that failed to load."""

    specs: list[CheckSpec] = field(default_factory=list)
    failures: list[PluginFailure] = field(default_factory=list)

    def codes(self) -> dict[str, Code]:
        """Every code any loaded check may emit, by id."""
        return {c.id: c for s in self.specs for c in s.codes}

    def add_module(self, plugin: str, load: Callable[[], Any]) -> None:
        """Load one plugin module and add its checks; record any failure instead of raising."""
        try:
            module = load()
            if not isinstance(module, ModuleType):
                raise TypeError(f"entry point must name a module, got {type(module).__name__}")
            specs = specs_in_module(module, plugin)
            if not specs:
                raise ValueError(f"module {module.__name__} declares no @check functions")
        except Exception:
            self.failures.append(PluginFailure(plugin, traceback.format_exc(limit=6)))
            return
        known_ids = {s.id for s in self.specs}
        known_codes = self.codes()
        for spec in specs:
            clash = [c.id for c in spec.codes if c.id in known_codes and known_codes[c.id] != c]
            if spec.id in known_ids or clash:
                what = f"check id {spec.id!r}" if spec.id in known_ids else f"codes {clash}"
                self.failures.append(PluginFailure(plugin, f"{what} already defined; ignored"))
                continue
            self.specs.append(spec)
            known_ids.add(spec.id)
            known_codes.update({c.id: c for c in spec.codes})


def load_catalogue(
    builtin_modules: Iterable[ModuleType | str],
    entry_points: Iterable[metadata.EntryPoint] | None = None,
) -> Catalogue:
    """Load the given modules (imported ones, or names of modules to import: a plugin
    under test), then third-party plugins, through one loader; the built-in checks come
    from ``ddp_doctor.checklist.load_catalogue``."""
    if entry_points is None:
        entry_points = _entry_points()
    catalogue = Catalogue()
    for module in builtin_modules:
        if isinstance(module, ModuleType):
            catalogue.add_module(f"builtin {module.__name__}", functools.partial(_given, module))
        else:
            catalogue.add_module(f"builtin {module}",
                                 functools.partial(importlib.import_module, module))
    for ep in entry_points:
        catalogue.add_module(f"{ep.name} ({ep.value})", ep.load)
    return catalogue


def _given(module: ModuleType) -> ModuleType:
    return module


def _entry_points() -> list[metadata.EntryPoint]:
    eps = metadata.entry_points()
    if hasattr(eps, "select"):
        return list(eps.select(group=ENTRY_POINT_GROUP))
    return list(eps.get(ENTRY_POINT_GROUP, []))  # Python < 3.10
