"""The layering rule of docs/architecture.md, enforced: who may import whom inside ddp_doctor.

Every module's imports are read with ``ast``, giving the package's import graph.
Function-level imports count: they run as surely as top-level ones, only later. Imports
under ``if TYPE_CHECKING:`` count too: code written against a type from another layer
depends on that layer, and two modules that need each other only for annotations are
still one design split over two files.

A rule broken here is a design decision to make, not a test to loosen: move the shared
piece down a layer (a type to model.py, a helper to facts/view.py), or pass it in.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]

# What may import what; the same table is in docs/architecture.md. A module matches a name
# when it is that module or inside it ("ddp_doctor.facts" covers ddp_doctor.facts.gather);
# "ddp_doctor.checks._*" is every private module of the checks package; <stdlib> is any
# standard-library module. Importing the root package (``from ddp_doctor import
# __version__``) is always allowed: any submodule import runs it anyway.
#
#  who                        rule                 modules                      except    why
IMPORTS_ONLY, NEVER_IMPORTS, IMPORTED_ONLY_BY = "imports only", "never imports", "imported only by"
LAYERS: tuple[tuple[str, str, str, str, str], ...] = (
    ("ddp_doctor.model, ddp_doctor.categories, ddp_doctor.wording", IMPORTS_ONLY,
     "ddp_doctor.model, ddp_doctor.categories, ddp_doctor.wording, <stdlib>", "",
     "the bottom layer: everything else builds on the finding model"),
    ("ddp_doctor.codes", IMPORTS_ONLY,
     "ddp_doctor.model, ddp_doctor.categories, ddp_doctor.codes, ddp_doctor.registry, <stdlib>",
     "", "codes are declared over the model; plugins' codes arrive with the check catalogue "
         "(the families' modules are imported by name, to declare theirs)"),
    ("ddp_doctor.process", IMPORTS_ONLY, "ddp_doctor.process, psutil, <stdlib>", "",
     "starting, stopping and finding the doctor's child processes is one floor that facts, "
     "the smoke job and run all stand on"),
    ("ddp_doctor.facts, ddp_doctor.knowledge", NEVER_IMPORTS,
     "ddp_doctor.checks, ddp_doctor.smoke, ddp_doctor.report, ddp_doctor.app, ddp_doctor.cli",
     "", "gathering and reference tables know nothing of what judges or shows them"),
    ("ddp_doctor.checks", IMPORTS_ONLY,
     "ddp_doctor.model, ddp_doctor.categories, ddp_doctor.codes, ddp_doctor.registry, "
     "ddp_doctor.wording, ddp_doctor.knowledge, ddp_doctor.facts.view, ddp_doctor.facts.shapes, "
     "ddp_doctor.facts.sizing, ddp_doctor.checks, <stdlib>", "",
     "a check is a pure function of facts, written against the API third-party plugins get"),
    ("ddp_doctor.checks._*", IMPORTED_ONLY_BY, "ddp_doctor.checks", "",
     "the built-in checks' private helpers are not an API for the core"),
    ("ddp_doctor.report", NEVER_IMPORTS,
     "ddp_doctor.facts, ddp_doctor.smoke.launch, ddp_doctor.smoke.run, "
     "ddp_doctor.smoke.monitor, ddp_doctor.cli, ddp_doctor.app",
     "ddp_doctor.facts.view, ddp_doctor.facts.shapes",
     "renderers turn a finished Report into text: they gather and launch nothing"),
    ("ddp_doctor.job", NEVER_IMPORTS, "ddp_doctor.report, ddp_doctor.cli, ddp_doctor.app", "",
     "supervising a job and judging how it ended know nothing of how the Report is shown"),
    ("ddp_doctor.nodes", NEVER_IMPORTS,
     "ddp_doctor.report, ddp_doctor.cli, ddp_doctor.app, ddp_doctor.smoke", "",
     "judging nodes is one pure step that compare and the smoke job both call"),
    ("ddp_doctor.forensics", NEVER_IMPORTS,
     "ddp_doctor.report, ddp_doctor.cli, ddp_doctor.app, ddp_doctor.smoke, ddp_doctor.job, "
     "ddp_doctor.diagnose", "",
     "reading where a hung job's ranks wait is one step the smoke job, run and diagnose all "
     "call"),
    ("ddp_doctor.train_smoke", IMPORTS_ONLY, "ddp_doctor.train_smoke, torch, <stdlib>", "",
     "it runs in the training interpreter, where ddp-doctor's dependencies may be absent"),
    ("typer", IMPORTED_ONLY_BY, "ddp_doctor.cli, ddp_doctor.parse_errors", "",
     "the command-line framework stays at the edge; the rest is usable as a library"),
    ("ddp_doctor.app", IMPORTED_ONLY_BY, "ddp_doctor.cli, ddp_doctor.__main__, ddp_doctor.app",
     "",
     "the application flow is driven from the command line alone"),
)


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # a ddp_doctor module, or a top-level third-party/stdlib name
    line: int


def package_dirs() -> dict[str, Path]:
    """Import package -> folder, from pyproject's setuptools package-dir (the wheel's map)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    dirs = {name: REPO / folder for name, folder in mapping.items() if name}
    dirs["ddp_doctor"] = REPO / mapping[""] / "ddp_doctor"
    return dirs


def module_files() -> dict[str, Path]:
    """Every module of the ddp_doctor distribution, by dotted name."""
    dirs = package_dirs()
    mapped = set(dirs.values())
    modules: dict[str, Path] = {}
    for package, folder in dirs.items():
        for path in folder.rglob("*.py"):
            # A folder mapped to its own package (checks/) is not also a subpackage here.
            if any(parent in mapped and parent != folder for parent in path.parents):
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """The modules ``name`` imports: a ddp_doctor module where the name is one, else the
    top-level name (``torch``, ``os``). ``from pkg import mod`` is an import of pkg.mod."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def add(target: str, node: ast.stmt) -> None:
        if not target.startswith("ddp_doctor") or target.split(".")[0] != "ddp_doctor":
            target = target.split(".")[0]
        else:
            while target not in modules and "." in target:  # a name inside a module
                target = target.rpartition(".")[0]
        found.append(Import(name, target, node.lineno))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node)
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        if base == "__future__":
            continue
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            add(sub if sub in modules else base, node)
    return found


def import_graph() -> tuple[dict[str, Path], list[Import]]:
    modules = module_files()
    edges = [imp for name, path in sorted(modules.items())
             for imp in imports_of(name, path, modules)]
    return modules, edges


def within(module: str, pattern: str) -> bool:
    if pattern.endswith("._*"):
        parent = pattern[:-3]
        rest = module[len(parent) + 1:] if module.startswith(parent + ".") else ""
        return rest.startswith("_") and rest != "__main__"
    return module == pattern or module.startswith(pattern + ".")


def is_stdlib(name: str) -> bool:
    names = getattr(sys, "stdlib_module_names", None)
    if names is not None:
        return name in names
    spec = importlib.util.find_spec(name)  # Python 3.9: where the module lies
    if spec is None:
        return False
    origin = spec.origin or ""
    stdlib = sysconfig.get_paths()["stdlib"]
    return origin in ("built-in", "frozen") or (
        origin.startswith(stdlib) and "site-packages" not in origin)


def cycles(modules: dict[str, Path], edges: list[Import]) -> list[list[str]]:
    """One cycle path (a -> b -> ... -> a) for each strongly connected group of modules."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for edge in edges:
        if edge.target in modules and edge.target != edge.importer:
            graph[edge.importer].add(edge.target)

    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm; the package is small
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)

    paths = []
    for group in groups:
        members = set(group)
        start = group[0]
        # Breadth-first from start back to start, inside the group: the shortest cycle.
        previous: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in previous:
            following = []
            for node in frontier:
                for nxt in sorted(graph[node] & members):
                    if nxt not in previous:
                        previous[nxt] = node
                        following.append(nxt)
            frontier = following
        path = [start]
        node = previous[start]
        while node != start:
            path.append(node)
            node = previous[node]
        path.append(start)
        paths.append(path[::-1])
    return sorted(paths)


def names(cell: str) -> list[str]:
    return [n.strip() for n in cell.split(",") if n.strip()]


def matches(module: str, patterns: list[str]) -> bool:
    for pattern in patterns:
        if pattern == "<stdlib>":
            if module.split(".")[0] != "ddp_doctor" and is_stdlib(module):
                return True
        elif within(module, pattern):
            return True
    return False


def violations(modules: dict[str, Path], edges: list[Import]) -> list[str]:
    """Every runtime import that breaks a row of LAYERS, as 'file:line: a -> b (why)'."""
    problems = []
    for edge in edges:
        src, dst = edge.importer, edge.target
        if dst == "ddp_doctor":
            continue
        for who, rule, listed, exempt, why in LAYERS:
            if rule == IMPORTS_ONLY:
                broken = matches(src, names(who)) and not matches(dst, names(listed))
            elif rule == NEVER_IMPORTS:
                broken = (matches(src, names(who)) and matches(dst, names(listed))
                          and not matches(dst, names(exempt)))
            else:
                broken = matches(dst, names(who)) and not matches(src, names(listed))
            if broken:
                where = modules[src].relative_to(REPO) if src in modules else src
                problems.append(f"{where}:{edge.line}: {src} imports {dst}: {who} {rule} "
                                f"{listed} ({why})")
    return sorted(set(problems))


# --- the rules --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, Path], list[Import]]:
    """The distribution's import graph, read once (every module parsed: about a second of
    CPU) for the tests below, which only read it."""
    return import_graph()


def test_no_import_cycles_between_modules(graph):
    modules, edges = graph
    found = cycles(modules, edges)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_every_import_respects_the_layers(graph):
    modules, edges = graph
    problems = violations(modules, edges)
    assert not problems, "layering broken:\n" + "\n".join(problems)


def table_row(row: tuple[str, str, str, str, str]) -> str:
    """A LAYERS row as docs/architecture.md writes it: names in backticks."""
    who, rule, listed, exempt, why = row
    cells = [", ".join(f"`{n}`" for n in names(c)) for c in (who, listed, exempt)]
    return f"| {cells[0]} | {rule} | {cells[1]} | {cells[2] or '-'} | {why} |"


def test_the_rules_table_in_the_docs_is_the_one_enforced_here():
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    for row in LAYERS:
        assert table_row(row) in doc, f"docs/architecture.md lacks the row: {table_row(row)}"


# --- the analysis itself, on small made-up packages --------------------------------------------

def test_imports_are_read_at_every_depth_and_resolved_to_modules(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text(
        "from __future__ import annotations\n"
        "import os.path\n"
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from .sibling import thing\n"
        "from ddp_doctor.pkg import helper, name_in_init\n"
        "if TYPE_CHECKING:\n"
        "    from ddp_doctor.top import Type\n"
        "def later():\n"
        "    class Inner:\n"
        "        def method(self):\n"
        "            import torch.nn\n"
        "    return Inner\n",
        encoding="utf-8")
    known = {m: src for m in ("ddp_doctor.pkg", "ddp_doctor.pkg.mod", "ddp_doctor.pkg.sibling",
                              "ddp_doctor.pkg.helper", "ddp_doctor.top")}
    got = {(i.target, i.line) for i in imports_of("ddp_doctor.pkg.mod", src, known)}
    assert got == {
        ("os", 2), ("typing", 3),
        ("ddp_doctor.pkg.sibling", 4), ("ddp_doctor.pkg.sibling", 5),
        ("ddp_doctor.pkg.helper", 6), ("ddp_doctor.pkg", 6),
        ("ddp_doctor.top", 8), ("torch", 12),
    }


def test_cycles_are_reported_as_their_shortest_path():
    modules = {m: Path(m) for m in ("ddp_doctor.a", "ddp_doctor.b", "ddp_doctor.c",
                                    "ddp_doctor.d")}
    edges = [Import("ddp_doctor.a", "ddp_doctor.b", 1),
             Import("ddp_doctor.b", "ddp_doctor.c", 1),
             Import("ddp_doctor.c", "ddp_doctor.a", 9),
             Import("ddp_doctor.d", "ddp_doctor.a", 1),
             Import("ddp_doctor.b", "ddp_doctor.d", 1)]
    assert cycles(modules, edges) == [["ddp_doctor.a", "ddp_doctor.b", "ddp_doctor.c",
                                       "ddp_doctor.a"]]  # a -> b -> d -> a is as short
    assert cycles(modules, edges[:2] + edges[3:]) == [["ddp_doctor.a", "ddp_doctor.b",
                                                       "ddp_doctor.d", "ddp_doctor.a"]]
    assert cycles(modules, edges[:2] + edges[3:4]) == []


def test_each_kind_of_layer_break_is_caught():
    names = ("ddp_doctor.model", "ddp_doctor.cli", "ddp_doctor.app", "ddp_doctor.__main__",
             "ddp_doctor.facts.gather", "ddp_doctor.facts.view", "ddp_doctor.report.console",
             "ddp_doctor.checks.host", "ddp_doctor.checks._util", "ddp_doctor.policy.load",
             "ddp_doctor.train_smoke.worker", "ddp_doctor.smoke.run", "ddp_doctor.registry")
    modules = {m: REPO / "x.py" for m in names}

    def broken(src: str, dst: str) -> bool:
        return bool(violations(modules, [Import(src, dst, 1)]))

    assert broken("ddp_doctor.model", "ddp_doctor.registry")
    assert broken("ddp_doctor.facts.gather", "ddp_doctor.checks.host")
    assert broken("ddp_doctor.checks.host", "ddp_doctor.facts.gather")
    assert not broken("ddp_doctor.checks.host", "ddp_doctor.facts.view")
    assert not broken("ddp_doctor.checks.host", "ddp_doctor.checks._util")
    assert broken("ddp_doctor.policy.load", "ddp_doctor.checks._util")
    assert broken("ddp_doctor.report.console", "ddp_doctor.smoke.run")
    assert broken("ddp_doctor.report.console", "ddp_doctor.facts.gather")
    assert not broken("ddp_doctor.report.console", "ddp_doctor.facts.view")
    assert broken("ddp_doctor.train_smoke.worker", "ddp_doctor.model")
    assert broken("ddp_doctor.train_smoke.worker", "numpy")
    assert not broken("ddp_doctor.train_smoke.worker", "torch")
    assert not broken("ddp_doctor.train_smoke.worker", "json")
    assert broken("ddp_doctor.smoke.run", "typer")
    assert not broken("ddp_doctor.cli", "typer")
    assert broken("ddp_doctor.smoke.run", "ddp_doctor.app")
    assert not broken("ddp_doctor.__main__", "ddp_doctor.app")
    assert not broken("ddp_doctor.model", "ddp_doctor")  # the root package: __version__


def test_the_graph_covers_every_module_of_the_distribution(graph):
    modules, edges = graph
    assert {"ddp_doctor.cli", "ddp_doctor.checks", "ddp_doctor.checks._util",
            "ddp_doctor.train_smoke.worker", "ddp_doctor.facts.gather"} <= set(modules)
    assert modules["ddp_doctor.checks.host"] == REPO / "checks" / "host.py"
    assert not any(m.startswith("ddp_doctor.src") or ".checks.checks" in m for m in modules)
    # A function-level import is seen: reading a bundle's facts needs the archive reader.
    assert any(e.importer == "ddp_doctor.facts.snapshot" and e.target == "ddp_doctor.bundle.archive"
               for e in edges)
