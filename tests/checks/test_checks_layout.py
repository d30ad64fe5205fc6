"""How the built-in checks are laid out: what they take, and who may import their helpers."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from ddp_doctor.checks import BUILTIN_MODULES

from ddp_doctor.facts.view import FactsView
from ddp_doctor.registry import load_catalogue

REPO = Path(__file__).resolve().parents[2]


def test_every_builtin_check_is_declared_to_take_the_facts_view():
    catalogue = load_catalogue(entry_points=[])
    assert catalogue.failures == []
    for spec in catalogue.specs:
        func = inspect.unwrap(spec.func)
        [param] = inspect.signature(func).parameters.values()
        assert param.annotation in ("FactsView", FactsView), (spec.id, param.annotation)


def test_each_module_holds_the_checks_of_its_area():
    by_module = {name.rsplit(".", 1)[1]: [s.id for s in load_catalogue(
        [name], entry_points=[]).specs] for name in BUILTIN_MODULES}
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

