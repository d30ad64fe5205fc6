"""The code registry: every code declared once, through ``declare``, and found through it.

The uniqueness test lives here and reads the registry: ``declare`` refuses a second meaning
for an id, and the tests below prove that every code constant of ddp-doctor went through
it (so none escaped the check) and that ``all_codes`` finds them all.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from ddp_doctor import codebook as registry
from ddp_doctor.categories import Category
from ddp_doctor.codebook import (
    FAMILY_MODULES,
    all_codes,
    by_category,
    by_family,
    declared_codes,
    get,
)
from ddp_doctor.codes import CodeRegistry, DuplicateCode, declare
from ddp_doctor.model import Code, Family, Severity, family_of
from ddp_doctor.registry import ENTRY_POINT_GROUP, Catalogue, load_catalogue

REPO = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((REPO / "src" / "ddp_doctor").rglob("*.py")),
           *sorted((REPO / "checks").glob("*.py"))]


def _module_name(path: Path) -> str:
    if path.is_relative_to(REPO / "checks"):
        parts = ["ddp_doctor", "checks", *path.relative_to(REPO / "checks").with_suffix("").parts]
    else:
        parts = list(path.relative_to(REPO / "src").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _listed_modules(family: Family) -> list[str]:
    return list(FAMILY_MODULES[family])


def _code_constants(module_name: str) -> dict[str, Code]:
    """The Code objects a module (and, for a package, its already imported submodules) holds
    at module level, by ``module.NAME``."""
    found: dict[str, Code] = {}
    for name, module in list(sys.modules.items()):
        if name != module_name and not name.startswith(module_name + "."):
            continue
        for attr, value in vars(module).items():
            if isinstance(value, Code):
                found[f"{name}.{attr}"] = value
    return found


# --- declare ---------------------------------------------------------------------------------

def _code(code_id: str, summary: str = "s") -> Code:
    return Code(code_id, Category.UNKNOWN, summary, "w", "w", "w")


def test_a_second_meaning_for_an_id_raises():
    codes = CodeRegistry()
    first = codes.add(_code("TST001", "first meaning"))
    with pytest.raises(DuplicateCode, match="TST001 is declared twice"):
        codes.add(_code("TST001", "second meaning"))
    assert codes.codes() == {"TST001": first}


def test_the_same_code_imported_again_is_not_a_duplicate():
    codes = CodeRegistry()
    first = codes.add(_code("TST001"))
    assert codes.add(_code("TST001")) is first
    assert list(codes.codes()) == ["TST001"]


def test_declare_refuses_an_existing_id_of_the_tool():
    before = declared_codes()
    with pytest.raises(DuplicateCode, match="DRV001"):
        declare("DRV001", Category.UNKNOWN, "another meaning", "w", "w", "w")
    assert declared_codes() == before


def test_declare_takes_exactly_the_fields_of_code():
    """declare builds the Code itself: a field added to Code must be added to declare."""
    params = inspect.signature(declare).parameters
    fields = dataclasses.fields(Code)
    assert list(params) == [f.name for f in fields]
    for f in fields:
        if f.default is not dataclasses.MISSING:
            assert params[f.name].default == f.default, f.name


# --- the uniqueness test: every code goes through the registry ---------------------------------

def test_no_module_makes_a_code_except_through_declare():
    """A ``Code(...)`` written anywhere else would bypass the duplicate check and be missing
    from explain and docs/codes.md."""
    direct = re.compile(r"(?<![\w.])Code\(")
    allowed = {REPO / "src" / "ddp_doctor" / "model.py", REPO / "src" / "ddp_doctor" / "codes.py"}
    offenders = [str(p.relative_to(REPO)) for p in SOURCES
                 if p not in allowed and direct.search(p.read_text())]
    assert offenders == []


@pytest.mark.spawns  # a fresh interpreter that imports every ddp_doctor module
def test_loading_the_registry_imports_every_module_that_declares():
    """In a fresh interpreter, so modules other tests imported cannot hide a gap."""
    declaring = sorted(_module_name(p) for p in SOURCES
                       if re.search(r"^[A-Z_0-9]+ = declare\($", p.read_text(), re.MULTILINE))
    script = ("import sys; from ddp_doctor.codebook import declared_codes; declared_codes(); "
              "print(' '.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True).stdout.split()
    assert len(declaring) > 20
    assert [m for m in declaring if m not in loaded] == []


def test_every_code_constant_is_the_registered_code_with_a_unique_id():
    registered = declared_codes()
    constants = {}
    for family in Family:
        for module_name in _listed_modules(family):
            constants.update(_code_constants(module_name))
    assert len(constants) >= len(registered) == 323
    for where, code in constants.items():
        assert registered.get(code.id) is code, f"{where} ({code.id}) is not the registered code"
    assert {c.id for c in constants.values()} == set(registered)


def test_each_family_module_declares_codes_of_its_family():
    declared_codes()
    for family in Family:
        for module_name in _listed_modules(family):
            families = {c.family for c in _code_constants(module_name).values()}
            assert families, f"{module_name} declares no code"
            # The built-in check modules hold the plan checks too (checks/launch.py).
            allowed = {Family.CHECK, Family.PLAN} if family is Family.CHECK else {family}
            assert families <= allowed, (module_name, families)


def test_codes_per_family():
    counts = {family: len(found) for family, found in by_family(Catalogue()).items()}
    assert counts == {Family.CHECK: 73, Family.PLAN: 2, Family.SMOKE: 30, Family.LOG: 137,
                      Family.DIAGNOSE: 45, Family.POLICY: 7,
                      Family.RUN: 3, Family.NODES: 16, Family.HANG: 10}


def test_log_family_is_exactly_the_codes_the_log_rules_report():
    from ddp_doctor.logrules import LOG_CODES

    assert by_family(Catalogue())[Family.LOG] == LOG_CODES


def test_family_comes_from_the_id_prefix():
    assert [family_of(i) for i in ("DRV001", "PLN002", "SMK009", "LOG061", "DIAG004",
                                   "POL006", "RUN002", "PLG001")] == [
        Family.CHECK, Family.PLAN, Family.SMOKE, Family.LOG, Family.DIAGNOSE, Family.POLICY,
        Family.RUN, Family.CHECK]
    assert _code("SMK001").family is Family.SMOKE


def test_every_category_has_a_code_and_by_category_partitions_the_codes():
    grouped = by_category(Catalogue())
    assert list(grouped) == list(Category)
    assert all(grouped.values()), [c.value for c, found in grouped.items() if not found]
    assert sorted(c.id for found in grouped.values() for c in found) == list(declared_codes())


def test_get_finds_any_family_in_any_case():
    catalogue = Catalogue()
    assert get(" smk002 ", catalogue) is registry.declared_codes()["SMK002"]
    assert get("DIAG003", catalogue).category is Category.WSL_SETUP
    assert get("POL004", catalogue).severity is Severity.ERROR
    assert get("XYZ999", catalogue) is None


def test_declaring_again_after_a_module_is_reimported():
    """A test that drops a code module from sys.modules and imports it again must not crash."""
    name = "ddp_doctor.policy.codes"
    importlib.import_module(name)
    original = sys.modules.pop(name)
    try:
        again = importlib.import_module(name)
        assert again.FEWER_GPUS is original.FEWER_GPUS
    finally:
        sys.modules[name] = original


# --- plugins come through the catalogue --------------------------------------------------------

PLUGIN = textwrap.dedent('''
    from ddp_doctor.categories import Category
    from ddp_doctor.model import Code, Finding
    from ddp_doctor.registry import check

    OWN = Code("PLG101", Category.NCCL_NETWORK, "a plugin's code", "w", "w", "w")
    CLASH = Code("DRV001", Category.UNKNOWN, "a plugin's other DRV001", "w", "w", "w")

    @check(id="plugin.own", title="Own", area="test", codes=(OWN,))
    def own(facts):
        yield Finding(OWN, "own")

    @check(id="plugin.clash", title="Clash", area="test", codes=(CLASH,))
    def clash(facts):
        yield Finding(CLASH, "clash")
''')


@pytest.fixture
def plugin_entry_point(tmp_path, monkeypatch):
    (tmp_path / "codes_demo_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield metadata.EntryPoint("demo", "codes_demo_plugin", ENTRY_POINT_GROUP)
    sys.modules.pop("codes_demo_plugin", None)


def test_plugin_codes_are_included_and_cannot_redefine_a_builtin(plugin_entry_point):
    catalogue = load_catalogue([], entry_points=[plugin_entry_point])
    codes = all_codes(catalogue)
    assert codes["PLG101"].summary == "a plugin's code"
    assert codes["PLG101"].family is Family.CHECK
    assert codes["DRV001"] is declared_codes()["DRV001"]
    assert set(codes) == set(declared_codes()) | {"PLG101"}
    assert get("plg101", catalogue) is codes["PLG101"]
    assert "PLG101" in [c.id for c in by_family(catalogue)[Family.CHECK]]
    assert "PLG101" not in declared_codes()  # the registry itself stays the tool's own
