"""Registry and runner: discovery, plugin failures, crashes, blocking, status derivation."""

from __future__ import annotations

import sys
import textwrap
from importlib import metadata

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.checklist import load_catalogue as load_builtin_catalogue
from ddp_doctor.facts.snapshot import FactRecord, Facts
from ddp_doctor.model import Code, Finding, Severity, Status
from ddp_doctor.registry import (
    ENTRY_POINT_GROUP,
    Catalogue,
    CheckSpec,
    Summary,
    load_catalogue,
)
from ddp_doctor.runner import build_report, run_checks

PLUGIN_SOURCE = textwrap.dedent('''
    from ddp_doctor.categories import Category
    from ddp_doctor.model import Code, Finding, Severity
    from ddp_doctor.registry import Summary, check

    FIRST = Code("PLG001", Category.UNKNOWN, "first", "w", "w", "w")
    SECOND = Code("PLG002", Category.NCCL_P2P, "second", "w", "w", "w", severity=Severity.WARNING)

    @check(id="plugin.root", title="Root", area="test", requires=("demo",), codes=(FIRST,))
    def root(facts):
        if facts["demo"]["broken"]:
            yield Finding(FIRST, "root is broken")
        else:
            yield Summary("root fine")

    @check(id="plugin.child", title="Child", area="test", requires=("demo",),
           codes=(SECOND,), blocked_by=("plugin.root",))
    def child(facts):
        yield Finding(SECOND, "child warns")

    @check(id="plugin.crash", title="Crash", area="test", codes=())
    def crash(facts):
        raise RuntimeError("boom in check")
        yield

    @check(id="plugin.liar", title="Liar", area="test", codes=(FIRST,))
    def liar(facts):
        yield Finding(SECOND, "a code it never declared")

    @check(id="plugin.needs", title="Needs", area="test", requires=("absent",), codes=())
    def needs(facts):
        yield Summary("never runs")
''')


@pytest.fixture
def plugin_modules(tmp_path, monkeypatch):
    (tmp_path / "demo_plugin.py").write_text(PLUGIN_SOURCE)
    (tmp_path / "broken_plugin.py").write_text("import no_such_module_anywhere\n")
    (tmp_path / "empty_plugin.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("demo_plugin", "broken_plugin", "empty_plugin"):
        sys.modules.pop(name, None)


def _facts(broken: bool) -> Facts:
    facts = Facts()
    facts.add(FactRecord("demo", ok=True, value={"broken": broken}))
    return facts


def _by_id(results):
    return {r.check_id: r for r in results}


def test_checks_run_in_definition_order_and_statuses_are_derived(plugin_modules):
    catalogue = load_catalogue(["demo_plugin"], entry_points=[])
    assert [s.id for s in catalogue.specs] == [
        "plugin.root", "plugin.child", "plugin.crash", "plugin.liar", "plugin.needs"]
    results = _by_id(run_checks(catalogue, _facts(broken=False)))
    assert results["plugin.root"].status is Status.PASS
    assert results["plugin.root"].summary == "root fine"
    assert results["plugin.child"].status is Status.WARN
    assert results["plugin.child"].findings[0].category is Category.NCCL_P2P


def test_a_failing_check_blocks_its_dependents_with_the_code(plugin_modules):
    catalogue = load_catalogue(["demo_plugin"], entry_points=[])
    results = _by_id(run_checks(catalogue, _facts(broken=True)))
    assert results["plugin.root"].status is Status.FAIL
    child = results["plugin.child"]
    assert child.status is Status.SKIP
    assert child.skip_reason == "blocked by PLG001 (plugin.root)"
    assert child.findings == ()


def test_a_crashing_check_becomes_an_error_result_and_the_run_goes_on(plugin_modules):
    catalogue = load_catalogue(["demo_plugin"], entry_points=[])
    results = run_checks(catalogue, _facts(broken=False))
    crash = _by_id(results)["plugin.crash"]
    assert crash.status is Status.ERROR
    assert "RuntimeError: boom in check" in crash.summary
    assert "Traceback" in crash.error and "boom in check" in crash.error
    assert len(results) == 5  # the checks after it still ran


def test_an_undeclared_code_is_a_check_error(plugin_modules):
    catalogue = load_catalogue(["demo_plugin"], entry_points=[])
    liar = _by_id(run_checks(catalogue, _facts(broken=False)))["plugin.liar"]
    assert liar.status is Status.ERROR
    assert "undeclared code PLG002" in liar.summary


def test_a_missing_fact_skips_with_the_reason(plugin_modules):
    catalogue = load_catalogue(["demo_plugin"], entry_points=[])
    facts = _facts(broken=False)
    facts.add(FactRecord("absent", ok=False, error="probe hung after 20s"))
    needs = _by_id(run_checks(catalogue, facts))["plugin.needs"]
    assert needs.status is Status.SKIP
    assert needs.skip_reason == "fact 'absent' could not be gathered: probe hung after 20s"


def test_a_plugin_that_fails_to_import_is_an_error_result(plugin_modules):
    catalogue = load_catalogue(["broken_plugin", "demo_plugin", "empty_plugin"], entry_points=[])
    assert [f.plugin for f in catalogue.failures] == ["builtin broken_plugin",
                                                      "builtin empty_plugin"]
    assert "no_such_module_anywhere" in catalogue.failures[0].error
    assert "declares no @check functions" in catalogue.failures[1].error
    results = run_checks(catalogue, _facts(broken=False))
    errors = [r for r in results if r.check_id.startswith("plugin:")]
    assert len(errors) == 2 and all(r.status is Status.ERROR for r in errors)
    assert "No module named 'no_such_module_anywhere'" in errors[0].summary
    report = build_report(catalogue, _facts(broken=False))
    assert report.exit_code() == 3


def test_third_party_plugins_load_through_the_entry_point_group(plugin_modules):
    good = metadata.EntryPoint("demo", "demo_plugin", ENTRY_POINT_GROUP)
    bad = metadata.EntryPoint("bad", "broken_plugin", ENTRY_POINT_GROUP)
    catalogue = load_catalogue([], entry_points=[good, bad])
    assert {s.plugin for s in catalogue.specs} == {"demo (demo_plugin)"}
    assert [f.plugin for f in catalogue.failures] == ["bad (broken_plugin)"]
    assert set(catalogue.codes()) == {"PLG001", "PLG002"}


def test_a_plugin_cannot_redefine_a_builtin_check_or_code(plugin_modules):
    catalogue = load_catalogue(["demo_plugin", "demo_plugin"], entry_points=[])
    assert len(catalogue.specs) == 5
    assert all("already defined" in f.error for f in catalogue.failures)


def test_builtin_catalogue_loads_cleanly_with_registered_unique_codes():
    """Every code a built-in check declares is the code registry's, under one id, and no
    two checks claim the same code (the registry's own uniqueness tests are in
    test_codes_registry.py)."""
    from ddp_doctor.codebook import declared_codes
    from ddp_doctor.model import Family

    catalogue = load_builtin_catalogue(entry_points=[])
    assert catalogue.failures == []
    registered = declared_codes()
    ids = [c.id for s in catalogue.specs for c in s.codes]
    assert len(ids) == len(set(ids))
    assert {"DRV001", "TOR001", "TOR002", "HST001"} <= set(ids)
    for spec in catalogue.specs:
        for code in spec.codes:
            assert registered[code.id] is code, code.id
            assert code.family in (Family.CHECK, Family.PLAN), code.id
            assert code.what and code.why and code.fix, code.id
    checks = {c.id for c in registered.values() if c.family in (Family.CHECK, Family.PLAN)}
    assert set(ids) == checks  # no check code is declared without a check that emits it


def test_real_installed_entry_point_plugin(tmp_path):
    """An installed distribution (dist-info on sys.path) registers through the group."""
    dist_info = tmp_path / "site" / "gd_demo_plugin-0.0.1.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: gd-demo-plugin\n"
                                        "Version: 0.0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ndemo = gd_demo_plugin\n")
    site = tmp_path / "site"
    (site / "gd_demo_plugin").mkdir()
    (site / "gd_demo_plugin" / "__init__.py").write_text(PLUGIN_SOURCE)
    sys.path.insert(0, str(site))
    try:
        catalogue = load_builtin_catalogue()
        plugin_specs = [s for s in catalogue.specs if s.plugin.startswith("demo")]
        assert [s.id for s in plugin_specs][:2] == ["plugin.root", "plugin.child"]
        assert catalogue.specs[0].plugin.startswith("builtin")  # built-ins run first
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("gd_demo_plugin", None)


def test_summary_and_findings_only(plugin_modules, tmp_path):
    (tmp_path / "odd_plugin.py").write_text(textwrap.dedent('''
        from ddp_doctor.registry import check
        @check(id="odd", title="Odd", area="test")
        def odd(facts):
            yield "a bare string"
    '''))
    catalogue = load_catalogue(["odd_plugin"], entry_points=[])
    result = run_checks(catalogue, Facts())[0]
    assert result.status is Status.ERROR
    assert "yielded str" in result.summary
    sys.modules.pop("odd_plugin", None)


def test_status_from_worst_severity():
    info = Code("INF001", Category.UNKNOWN, "i", "w", "w", "w", severity=Severity.INFO)
    spec = CheckSpec("i", "I", "test", lambda facts: [Finding(info, "fyi"), Summary("ok")],
                     codes=(info,))
    result = run_checks(Catalogue(specs=[spec]), Facts())[0]
    assert result.status is Status.PASS
    assert result.summary == "ok" and len(result.findings) == 1
