"""The layering rule of docs/architecture.md, enforced: who may import whom inside ddp_doctor.

The rule is the floors: each part of the package (a top-level module or subpackage of
ddp_doctor) stands on one floor, and an import goes only to a lower floor or stays inside
its own part; a few rows add what the floors cannot say (what a check or the training job
may import at all). No project module is imported by a string (``importlib``,
``__import__``): such an edge hides from this test and from a reader.

``python tests/core/test_layering.py`` prints the parts floor by floor, with the imports
between them and the count of those that run back up (0 while this test passes).

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
import functools
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

# The floors, from the ground up; the same table is in docs/architecture.md. A part is a
# top-level module or subpackage of ddp_doctor ("ddp_doctor.facts" holds facts.gather). An
# import from one part to another goes to a strictly lower floor, so two parts of one floor
# never import each other. The root package (``from ddp_doctor import __version__``) is
# below every floor.
#
#  parts on the floor                                                    why
FLOORS: tuple[tuple[str, str], ...] = (
    ("ddp_doctor.categories, ddp_doctor.wording, ddp_doctor.files, ddp_doctor.knowledge, "
     "ddp_doctor.process, ddp_doctor.train_smoke",
     "the ground: failure categories, words, file kinds and reference tables; the doctor's "
     "child processes, started, stopped and proved gone; the training job, which runs with "
     "torch alone"),
    ("ddp_doctor.model", "the one data model every part fills: Finding, CheckResult, Report"),
    ("ddp_doctor.codes, ddp_doctor.redact",
     "the code registry every family declares into; secrets out of everything written"),
    ("ddp_doctor.facts, ddp_doctor.logrules, ddp_doctor.forensics",
     "what is read: the machine's facts, failure text to codes, a hung job's stacks"),
    ("ddp_doctor.registry, ddp_doctor.textfacts, ddp_doctor.nodes, ddp_doctor.policy",
     "checks declared over facts; pasted text as facts; nodes against each other; the CI "
     "policy"),
    ("ddp_doctor.checks, ddp_doctor.report, ddp_doctor.runner",
     "the checks; renderers of a finished Report; the checks run on the facts"),
    ("ddp_doctor.checklist, ddp_doctor.bundle",
     "the built-in checks with the plugins; the support bundle"),
    ("ddp_doctor.inputs, ddp_doctor.usage, ddp_doctor.option_values",
     "what a file given to a command holds; bad usage and unreadable input; option values "
     "coerced as typer does, without its pydantic adapters"),
    ("ddp_doctor.diagnose, ddp_doctor.smoke, ddp_doctor.parse_errors",
     "a log in, causes out; the smoke-training job; the option parser's errors"),
    ("ddp_doctor.job", "the user's own job, supervised and judged through diagnose"),
    ("ddp_doctor.codebook", "every code of every family, each imported by name"),
    ("ddp_doctor.app", "one flow per command"),
    ("ddp_doctor.cli", "the command line"),
    ("ddp_doctor.__main__", "python -m ddp_doctor"),
)

# What the floors cannot say, in the same words as docs/architecture.md. A module matches a
# name when it is that module or inside it; "ddp_doctor.checks._*" is every private module
# of the checks package; <stdlib> is any standard-library module.
#
#  who                        rule                 modules                      except    why
IMPORTS_ONLY, NEVER_IMPORTS, IMPORTED_ONLY_BY = "imports only", "never imports", "imported only by"
LAYERS: tuple[tuple[str, str, str, str, str], ...] = (
    ("ddp_doctor.model, ddp_doctor.categories, ddp_doctor.wording", IMPORTS_ONLY,
     "ddp_doctor.model, ddp_doctor.categories, ddp_doctor.wording, <stdlib>", "",
     "the bottom layer: everything else builds on the finding model"),
    ("ddp_doctor.process", IMPORTS_ONLY, "ddp_doctor.process, psutil, <stdlib>", "",
     "starting, stopping and finding the doctor's child processes is one floor that facts, "
     "the smoke job and run all stand on"),
    ("ddp_doctor.checks", IMPORTS_ONLY,
     "ddp_doctor.model, ddp_doctor.categories, ddp_doctor.codes, ddp_doctor.registry, "
     "ddp_doctor.wording, ddp_doctor.knowledge, ddp_doctor.facts.view, ddp_doctor.facts.shapes, "
     "ddp_doctor.facts.sizing, ddp_doctor.checks, <stdlib>", "",
     "a check is a pure function of facts, written against the API third-party plugins get"),
    ("ddp_doctor.checks._*", IMPORTED_ONLY_BY, "ddp_doctor.checks", "",
     "the built-in checks' private helpers are not an API for the core"),
    ("ddp_doctor.report", NEVER_IMPORTS, "ddp_doctor.facts",
     "ddp_doctor.facts.view, ddp_doctor.facts.shapes",
     "renderers turn a finished Report into text: they gather nothing"),
    ("ddp_doctor.job", NEVER_IMPORTS, "ddp_doctor.report", "",
     "supervising a job and judging how it ended know nothing of how the Report is shown"),
    ("ddp_doctor.train_smoke", IMPORTS_ONLY, "ddp_doctor.train_smoke, torch, <stdlib>", "",
     "it runs in the training interpreter, where ddp-doctor's dependencies may be absent"),
    ("typer", IMPORTED_ONLY_BY,
     "ddp_doctor.cli, ddp_doctor.parse_errors, ddp_doctor.option_values", "",
     "the command-line framework stays at the edge; the rest is usable as a library"),
)

# Imports by a string, each with its reason. Any other call of importlib.import_module or
# __import__ with a name that is not written out, or whose name is a module of this project
# (it starts with "ddp_doctor"), fails: such an edge is invisible to the floors.
#  module                                   the name imported (None: a name it is given)
BY_NAME: dict[tuple[str, str | None], str] = {
    ("ddp_doctor.registry", None):
        "loads the plugin modules it is given by name; the built-in checks arrive imported",
    ("ddp_doctor.smoke.ultralytics.driver", "ddp_doctor_ultra_hooks"):
        "runs in the training interpreter beside the hooks file, which Ultralytics' DDP "
        "script imports by its module name: there it is a top-level module, not a part",
}


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


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for the tests that read it."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def statements(tree: ast.AST) -> list[ast.AST]:
    """Every statement of a tree, at any depth (in functions, classes, ifs, trys...), and
    nothing else: an import is a statement, and skipping the expressions halves the walk."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        found.append(node)
        for _field, value in ast.iter_fields(node):
            if isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, (ast.stmt, ast.excepthandler))
                             or type(v).__name__ == "match_case")
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """The modules ``name`` imports: a ddp_doctor module where the name is one, else the
    top-level name (``torch``, ``os``). ``from pkg import mod`` is an import of pkg.mod."""
    tree = parsed(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def add(target: str, node: ast.stmt) -> None:
        if not target.startswith("ddp_doctor") or target.split(".")[0] != "ddp_doctor":
            target = target.split(".")[0]
        else:
            while target not in modules and "." in target:  # a name inside a module
                target = target.rpartition(".")[0]
        found.append(Import(name, target, node.lineno))

    for node in statements(tree):
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


def part_of(module: str) -> str:
    """The part a module belongs to: ddp_doctor.facts for ddp_doctor.facts.gather."""
    return ".".join(module.split(".")[:2])


def floor_of() -> dict[str, int]:
    """Part -> its floor (1 is the ground), from FLOORS."""
    return {part: number for number, (parts, _why) in enumerate(FLOORS, start=1)
            for part in names(parts)}


def upward(edges: list[Import]) -> list[Import]:
    """The imports from one part to another that do not go to a lower floor (a part on no
    floor counts as above everything: it must be given one)."""
    floors = floor_of()
    found = []
    for edge in edges:
        src, dst = part_of(edge.importer), part_of(edge.target)
        if edge.target == "ddp_doctor" or not edge.target.startswith("ddp_doctor.") \
                or src == dst:
            continue
        if floors.get(src, len(FLOORS) + 1) <= floors.get(dst, len(FLOORS) + 1):
            found.append(edge)
    return found


def violations(modules: dict[str, Path], edges: list[Import]) -> list[str]:
    """Every runtime import that runs back up the floors or breaks a row of LAYERS, as
    'file:line: a -> b (why)'."""
    problems = []
    floors = floor_of()

    def where(module: str) -> object:
        return modules[module].relative_to(REPO) if module in modules else module

    for edge in upward(edges):
        src, dst = edge.importer, edge.target
        problems.append(f"{where(src)}:{edge.line}: {src} imports {dst}, which stands on "
                        f"floor {floors.get(part_of(dst), '(none)')}, from floor "
                        f"{floors.get(part_of(src), '(none)')}: imports go down the floors")
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
                problems.append(f"{where(src)}:{edge.line}: {src} imports {dst}: {who} {rule} "
                                f"{listed} ({why})")
    return sorted(set(problems))


@dataclass(frozen=True)
class ByName:
    module: str
    name: str | None  # the module name written out, or None: a name computed at run time
    line: int


def imports_by_name(name: str, path: Path) -> list[ByName]:
    """The calls of importlib.import_module / __import__ in a module, and the places where
    either is handed on uncalled (``functools.partial(importlib.import_module, name)``):
    those import a name computed at run time."""
    loaders = ("import_module", "__import__")
    if not any(word in path.read_text(encoding="utf-8") for word in loaders):
        return []  # (the text first: walking every tree again costs seconds)
    tree = parsed(path)

    def loader(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr in loaders) or \
            (isinstance(node, ast.Name) and node.id in loaders)

    found = []
    called = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and loader(node.func):
            called.add(id(node.func))
            first = node.args[0] if node.args else None
            written = first.value if isinstance(first, ast.Constant) and \
                isinstance(first.value, str) else None
            found.append(ByName(name, written, node.lineno))
    for node in ast.walk(tree):
        if loader(node) and id(node) not in called:
            found.append(ByName(name, None, getattr(node, "lineno", 0)))
    return sorted(found, key=lambda c: c.line)


def calls_by_name(modules: dict[str, Path]) -> list[ByName]:
    return [call for name, path in sorted(modules.items())
            for call in imports_by_name(name, path)]


def hidden_edges(modules: dict[str, Path], calls: list[ByName] | None = None) -> list[str]:
    """Imports by a string that BY_NAME does not allow, as 'file:line: ...'."""
    problems = []
    for call in calls_by_name(modules) if calls is None else calls:
        if (call.module, call.name) in BY_NAME:
            continue
        if call.name is not None and not call.name.startswith("ddp_doctor"):
            continue  # a third-party module (torchvision, ultralytics) by its own name
        path = modules[call.module]
        what = repr(call.name) if call.name is not None else "a computed name"
        shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        problems.append(f"{shown}:{call.line}: {call.module} imports {what} "
                        f"by a string: write the import out, so the floors see it")
    return problems


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


def test_every_part_stands_on_one_floor(graph):
    modules, _edges = graph
    listed = [part for parts, _why in FLOORS for part in names(parts)]
    assert len(listed) == len(set(listed)), "a part is on two floors"
    parts = {part_of(m) for m in modules if m != "ddp_doctor"}
    assert sorted(parts - set(listed)) == [], "give these parts a floor in FLOORS"
    assert sorted(set(listed) - parts) == [], "FLOORS names parts that do not exist"


def test_no_project_module_is_imported_by_a_string(graph):
    modules, _edges = graph
    calls = calls_by_name(modules)
    problems = hidden_edges(modules, calls)
    assert not problems, "imports hidden in strings:\n" + "\n".join(problems)
    allowed = {(c.module, c.name) for c in calls}
    assert sorted(set(BY_NAME) - allowed) == [], "BY_NAME allows calls that no longer exist"


def table_row(row: tuple[str, str, str, str, str]) -> str:
    """A LAYERS row as docs/architecture.md writes it: names in backticks."""
    who, rule, listed, exempt, why = row
    cells = [", ".join(f"`{n}`" for n in names(c)) for c in (who, listed, exempt)]
    return f"| {cells[0]} | {rule} | {cells[1]} | {cells[2] or '-'} | {why} |"


def floor_row(number: int, row: tuple[str, str]) -> str:
    """A FLOORS row as docs/architecture.md writes it."""
    parts, why = row
    return f"| {number} | {', '.join(f'`{n}`' for n in names(parts))} | {why} |"


def test_the_rules_table_in_the_docs_is_the_one_enforced_here():
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    for number, row in enumerate(FLOORS, start=1):
        assert floor_row(number, row) in doc, \
            f"docs/architecture.md lacks the floor: {floor_row(number, row)}"
    for row in LAYERS:
        assert table_row(row) in doc, f"docs/architecture.md lacks the row: {table_row(row)}"
    for (module, name), why in BY_NAME.items():
        assert f"| `{module}` | {f'`{name}`' if name else 'a name it is given'} | {why} |" \
            in doc, f"docs/architecture.md lacks the import by name of {module}"


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
    # the floors: the three arrows that once ran back up, and one within a floor
    assert broken("ddp_doctor.facts.snapshot", "ddp_doctor.bundle.archive")
    assert broken("ddp_doctor.facts.kernel_log", "ddp_doctor.logrules")
    assert broken("ddp_doctor.report.junit", "ddp_doctor.smoke.codes")
    assert broken("ddp_doctor.codes", "ddp_doctor.smoke.codes")
    assert broken("ddp_doctor.registry", "ddp_doctor.checks")
    assert broken("ddp_doctor.facts.gather", "ddp_doctor.logrules")  # one floor, two parts
    assert broken("ddp_doctor.model", "ddp_doctor.newpart")  # on no floor: above them all
    assert not broken("ddp_doctor.app.compare", "ddp_doctor.inputs")
    assert not broken("ddp_doctor.facts.gather", "ddp_doctor.facts.seam")  # inside a part


def test_an_import_by_a_string_is_caught(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text(
        "import importlib\n"
        "from importlib import import_module\n"
        "importlib.import_module('ddp_doctor.smoke.codes')\n"
        "import_module(name)\n"
        "__import__('ddp_doctor_ultra_hooks')\n"
        "importlib.import_module('torchvision')\n"
        "load = functools.partial(importlib.import_module, name)\n",
        encoding="utf-8")
    calls = imports_by_name("ddp_doctor.pkg.mod", src)
    assert [(c.name, c.line) for c in calls] == [
        ("ddp_doctor.smoke.codes", 3), (None, 4), ("ddp_doctor_ultra_hooks", 5),
        ("torchvision", 6), (None, 7)]
    problems = hidden_edges({"ddp_doctor.pkg.mod": src})
    assert [p.split(": ", 1)[0].rsplit(":", 1)[1] for p in problems] == ["3", "4", "5", "7"]
    assert "'ddp_doctor.smoke.codes' by a string" in problems[0]


def test_the_graph_covers_every_module_of_the_distribution(graph):
    modules, edges = graph
    assert {"ddp_doctor.cli", "ddp_doctor.checks", "ddp_doctor.checks._util",
            "ddp_doctor.train_smoke.worker", "ddp_doctor.facts.gather"} <= set(modules)
    assert modules["ddp_doctor.checks.host"] == REPO / "checks" / "host.py"
    assert not any(m.startswith("ddp_doctor.src") or ".checks.checks" in m for m in modules)
    # A function-level import is seen: the kernel-log probe is handed the rule engine.
    assert any(e.importer == "ddp_doctor.app.examine" and e.target == "ddp_doctor.logrules"
               for e in edges)
    # ... and so is the checks package imported by its name under the root package.
    assert any(e.importer == "ddp_doctor.checklist" and e.target == "ddp_doctor.checks"
               for e in edges)


# --- the picture in numbers: python tests/core/test_layering.py ------------------------------

def summary(modules: dict[str, Path], edges: list[Import]) -> str:
    """The parts floor by floor, top first, each with the parts it imports (and how many
    import statements), then the totals and every import that runs back up."""
    floors = floor_of()
    between = [e for e in edges if e.target.startswith("ddp_doctor.")
               and part_of(e.importer) != part_of(e.target)]
    pairs: dict[tuple[str, str], int] = {}
    for edge in between:
        key = (part_of(edge.importer), part_of(edge.target))
        pairs[key] = pairs.get(key, 0) + 1
    up = upward(edges)
    up_pairs = sorted({(part_of(e.importer), part_of(e.target)) for e in up})
    parts = sorted({part_of(m) for m in modules if m != "ddp_doctor"},
                   key=lambda p: (-floors.get(p, len(FLOORS) + 1), p))
    lines = []
    for part in parts:
        out = sorted((dst, n) for (src, dst), n in pairs.items() if src == part)
        floor = floors.get(part, "-")
        lines.append(f"floor {floor!s:>2}  {part.removeprefix('ddp_doctor.'):<13} imports "
                     f"{len(out):>2} parts in {sum(n for _, n in out):>3} statements: "
                     + ", ".join(d.removeprefix("ddp_doctor.") for d, _ in out))
    lines.append(f"{len(parts)} parts; {len(pairs)} arrows between parts "
                 f"({len(between)} import statements); running back up: {len(up_pairs)} "
                 f"arrows ({len(up)} statements)")
    lines += [f"  UP {src} -> {dst}" for src, dst in up_pairs]
    hidden = hidden_edges(modules)
    lines.append(f"imports hidden in strings: {len(hidden)}")
    lines += [f"  {h}" for h in hidden]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(*import_graph()))
