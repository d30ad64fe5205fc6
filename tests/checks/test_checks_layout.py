"""How the built-in checks are laid out: what they take, and who may import their helpers."""

from __future__ import annotations

import ast
import inspect
import re
import typing
from pathlib import Path

from ddp_doctor.checklist import builtin_modules, load_catalogue
from ddp_doctor.facts import shapes
from ddp_doctor.facts.view import FactsView
from ddp_doctor.registry import load_catalogue as load_modules

REPO = Path(__file__).resolve().parents[2]


def test_every_builtin_check_is_declared_to_take_the_facts_view():
    catalogue = load_catalogue(entry_points=[])
    assert catalogue.failures == []
    for spec in catalogue.specs:
        func = inspect.unwrap(spec.func)
        [param] = inspect.signature(func).parameters.values()
        assert param.annotation in ("FactsView", FactsView), (spec.id, param.annotation)


def test_each_module_holds_the_checks_of_its_area():
    by_module = {module.__name__.rsplit(".", 1)[1]: [s.id for s in load_modules(
        [module], entry_points=[]).specs] for module in builtin_modules()}
    assert by_module["packages"] and all(i.startswith("packages.") for i in by_module["packages"])
    assert by_module["torch_build"] and all(i.startswith("torch.")
                                            for i in by_module["torch_build"])
    # torch's install is judged before its companions, and both before CUDA.
    order = list(by_module)
    assert order.index("torch_build") + 1 == order.index("packages") < order.index("cuda")


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_core_code_never_imports_a_private_module_of_the_checks():
    offenders = {}
    for path in sorted((REPO / "src" / "ddp_doctor").rglob("*.py")):
        private = {m for m in _imported_modules(path)
                   if m.startswith("ddp_doctor.checks.") and
                   m.split(".")[2].startswith("_")}
        if private:
            offenders[str(path.relative_to(REPO))] = sorted(private)
    assert offenders == {}



def _literal_keys(path: Path) -> set[str]:
    """Every string key read as ``x.get("key")`` or ``x["key"]`` in PATH."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
        elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
              and isinstance(node.slice.value, str)):
            found.add(node.slice.value)
    return found


def test_every_key_a_check_reads_is_a_declared_fact_key():
    """mypy types ``shape.get("misspelt")`` as ``object`` and lets it pass in an ``if``;
    this catches the misspelling there too. Upper-case keys are environment variables."""
    declared = {key for value in vars(shapes).values()
                if isinstance(value, type) and issubclass(value, dict)
                and hasattr(value, "__total__") for key in typing.get_type_hints(value)}
    readers = [*sorted((REPO / "checks").glob("*.py")),
               REPO / "src" / "ddp_doctor" / "facts" / "view.py",
               REPO / "src" / "ddp_doctor" / "runner.py"]
    unknown = {path.name: sorted(k for k in _literal_keys(path)
                                 if k not in declared and not k.isupper())
               for path in readers}
    assert {name: keys for name, keys in unknown.items() if keys} == {}


def _names_map() -> dict[str, tuple[str, str, str]]:
    """CONTRIBUTING's map of the built-in checks' names: module -> (ids, area, prefix)."""
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `checks/(\w+)\.py` \| `(\w+)\.\*` \| `(\w+)` \| `([A-Z]{3})` \|",
                      text, re.MULTILINE)
    return {module: (ids, area, prefix) for module, ids, area, prefix in rows}


def test_each_modules_ids_area_and_code_prefix_are_the_ones_contributing_maps():
    """One name per check across id, area and code prefix, or the documented exception."""
    found: dict[str, set[tuple[str, str, str]]] = {}
    for spec in load_catalogue(entry_points=[]).specs:
        module = spec.plugin.rsplit(".", 1)[1]
        for code in spec.codes:
            found.setdefault(module, set()).add(
                (spec.id.split(".")[0], spec.area, code.id.rstrip("0123456789")))
    mapped = _names_map()
    assert sorted(mapped) == sorted(m.__name__.rsplit(".", 1)[1] for m in builtin_modules())
    for module, names in found.items():
        assert names == {mapped[module]}, (module, names, mapped[module])


def test_a_check_is_blocked_only_by_checks_that_run_before_it():
    """The runner ignores a blocker that has not run yet: such a blocked_by is dead."""
    earlier: set[str] = set()
    for spec in load_catalogue(entry_points=[]).specs:
        assert set(spec.blocked_by) <= earlier, (spec.id, set(spec.blocked_by) - earlier)
        earlier.add(spec.id)
