"""Finding the codes: ``explain CODE|CATEGORY``, ``codes`` and ``checks``, read at 80 columns.

Every command runs through typer's runner, where stdout is not a terminal, with
``COLUMNS=80``: the width of a plain terminal, of a CI log and of a ticket. A listing there
must show every code id whole, cut nothing with "…" and end no line in padding spaces.
"""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

from ddp_doctor.categories import Category
from ddp_doctor.checklist import load_catalogue
from ddp_doctor.cli import app, normalize_argv
from ddp_doctor.codebook import all_codes, by_category, by_family, suggest
from ddp_doctor.model import Code, Family, Severity
from ddp_doctor.registry import CheckSpec, PluginFailure
from ddp_doctor.report.catalogue import render_category, render_codes
from tests.support.cli import runner

WIDTH = 80
CODE_ROW = re.compile(r"^\s*([A-Z]+\d+)\s")
FAMILIES = [family.value for family in Family]


def at80(*args: str):
    """``ddp-doctor ARGS`` at 80 columns, stdout not a terminal."""
    return runner.invoke(app, normalize_argv(list(args)), env={"COLUMNS": str(WIDTH)})


def assert_clean(text: str, width: int = WIDTH) -> None:
    """Nothing cut, nothing past the width, no padding left at a line's end."""
    assert "…" not in text
    assert text.strip(), "empty output"
    for line in text.splitlines():
        assert len(line) <= width, line
        assert line == line.rstrip(), f"trailing spaces: {line!r}"


def rows(text: str) -> dict[str, str]:
    """The listing's code rows: code id -> the row's line, for lines that start with an id."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = CODE_ROW.match(line)
        if match:
            assert match[1] not in found, f"{match[1]} listed twice"
            found[match[1]] = line
    return found


def assert_one_usage_line(result, line: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"ddp-doctor: error: {line}"]
    assert result.stdout == ""


# --- explain CODE: did you mean ------------------------------------------------------------

def test_a_misspelt_code_gets_the_closest_codes():
    result = at80("explain", "DRV01")
    close = suggest("DRV01")
    assert close[0] == "DRV001" and len(close) == 3
    assert_one_usage_line(result, f"unknown code 'DRV01'; did you mean {', '.join(close)}? "
                                  "`ddp-doctor codes` lists every code")


@pytest.mark.parametrize(("typed", "first"), [("drv0001", "DRV001"), ("smk1", "SMK001"),
                                              ("TOR2", "TOR002"), ("DIAG01", "DIAG001")])
def test_a_code_with_lost_or_extra_padding_is_suggested_first(typed, first):
    result = at80("explain", typed)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"ddp-doctor: error: unknown code {typed!r}; did you mean {first}")


@pytest.mark.parametrize(("typed", "close"), [("p2p", "nccl_p2p"), ("ncclp2p", "nccl_p2p"),
                                              ("driver-to-old", "driver_too_old")])
def test_a_misspelt_category_gets_the_closest_categories(typed, close):
    result = at80("explain", typed)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"ddp-doctor: error: unknown code or category {typed!r}; "
                           f"did you mean {close}")
    assert line.endswith("? `ddp-doctor codes` lists every code")


def test_nothing_close_says_so_and_points_to_the_listing():
    assert_one_usage_line(at80("explain", "zzzz"),
                          "unknown code or category 'zzzz'; no code or category is close to "
                          "it; `ddp-doctor codes` lists every code")


def test_a_code_is_explained_in_any_case_with_blanks_around():
    result = at80("explain", " smk002 ")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("SMK002: A rank stopped making progress")
    assert "How to fix" in result.stdout


# --- explain CATEGORY ----------------------------------------------------------------------

@pytest.mark.parametrize("typed", ["nccl_p2p", "NCCL-P2P", "Nccl_P2p", " nccl p2p "])
def test_a_category_prints_its_description_and_every_code_of_every_family(typed):
    result = at80("explain", typed)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert_clean(out)
    assert out.splitlines()[0] == "nccl_p2p (failure category)"
    description = Category.NCCL_P2P.description.replace("`", "")
    assert " ".join(description.split()) in " ".join(out.split())
    codes = by_category()[Category.NCCL_P2P]
    listed = rows(out)
    assert set(listed) == {c.id for c in codes}
    for code in codes:
        assert listed[code.id].split()[:3] == [code.id, code.family.value, code.severity.value]
    # the point of listing by category: the smoke job's, the logs' and the policy's codes too
    assert {c.family for c in codes} >= {Family.CHECK, Family.SMOKE, Family.LOG,
                                         Family.POLICY}
    assert f"{len(codes)} codes report it:" in out


@pytest.mark.parametrize("category", list(Category), ids=str)
def test_every_category_lists_exactly_its_codes(category):
    result = at80("explain", category.value)
    assert result.exit_code == 0, result.output
    assert_clean(result.stdout)
    assert set(rows(result.stdout)) == {c.id for c in by_category()[category]}


def test_a_category_without_codes_says_so():
    console = Console(file=io.StringIO(), width=WIDTH, highlight=False)
    render_category(Category.DRIVER_MISSING, [], console)
    text = console.file.getvalue()
    assert "No code reports this category." in text and not rows(text)


# --- codes ---------------------------------------------------------------------------------

def test_codes_lists_every_code_of_every_family_whole():
    result = at80("codes")
    assert result.exit_code == 0, result.output
    assert_clean(result.stdout)
    codes = all_codes()
    listed = rows(result.stdout)
    assert set(listed) == set(codes)
    for code_id, line in listed.items():
        code = codes[code_id]
        assert line.split()[:4] == [code_id, code.family.value, code.severity.value,
                                    code.category.value]
    assert {c.family for c in codes.values()} == set(Family)
    # by family in Family order, then by id
    order = [(FAMILIES.index(codes[i].family.value), i) for i in listed]
    assert order == sorted(order)
    assert f"{len(codes)} codes" in result.stdout.splitlines()[-1]


@pytest.mark.parametrize("family", list(Family), ids=str)
def test_codes_of_one_family(family):
    result = at80("codes", "--family", family.value.upper())
    assert result.exit_code == 0, result.output
    assert_clean(result.stdout)
    assert set(rows(result.stdout)) == {c.id for c in by_family()[family]}


def test_codes_of_one_category_and_of_both_filters():
    result = at80("codes", "--category", "Rendezvous-Port-In-Use")
    assert result.exit_code == 0, result.output
    wanted = by_category()[Category.RENDEZVOUS_PORT_IN_USE]
    assert set(rows(result.stdout)) == {c.id for c in wanted}
    assert len({c.family for c in wanted}) > 1, "the filter must span families to be tested"
    result = at80("codes", "--category", "rendezvous_port_in_use", "--family", "smoke")
    assert set(rows(result.stdout)) == {c.id for c in wanted if c.family is Family.SMOKE} != set()


def test_a_filter_matching_nothing_says_which():
    result = at80("codes", "--family", "policy", "--category", "driver_missing")
    assert result.exit_code == 0
    assert result.stdout == "no policy code has category driver_missing\n"
    result = at80("codes", "--json", "--family", "policy", "--category", "driver_missing")
    assert json.loads(result.stdout) == []


def test_codes_json_is_an_array_of_every_code_with_its_explanation():
    result = at80("codes", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    codes = all_codes()
    assert [item["code"] for item in listed] == [c.id for c in
                                                 sorted(codes.values(), key=lambda c: (
                                                     FAMILIES.index(c.family.value), c.id))]
    for item in listed:
        assert item == codes[item["code"]].to_dict()
        assert set(item) == {"code", "family", "category", "severity", "summary", "what", "why",
                             "fix", "docs_url"}


def test_codes_json_filtered():
    result = at80("codes", "--json", "--family", "log", "--category", "nccl_shared_memory")
    listed = json.loads(result.stdout)
    assert listed, "the filter must match some codes to be tested"
    assert {(i["family"], i["category"]) for i in listed} == {("log", "nccl_shared_memory")}
    assert {i["code"] for i in listed} == {c.id for c in by_family()[Family.LOG]
                                           if c.category is Category.NCCL_SHARED_MEMORY}


@pytest.mark.parametrize(("args", "line"), [
    (("--family", "smok"), "--family 'smok': choose one of check, plan, smoke, log, diagnose, "
                           "policy, run, nodes, hang; did you mean smoke?"),
    (("--family", "gpu"), "--family 'gpu': choose one of check, plan, smoke, log, diagnose, "
                          "policy, run, nodes, hang"),
    (("--json", "--family", "checks"), "--family 'checks': choose one of check, plan, smoke, "
                                       "log, diagnose, policy, run, nodes, hang; did you mean "
                                       "check?"),
    (("--category", "nccl"), "--category 'nccl': not a failure category; did you mean "
                             "nccl_shared_memory, nccl_p2p, nccl_network? (categories: "
                             + ", ".join(c.value for c in Category) + ")"),
    (("--family", "smoke", "--category", "zzz"), "--category 'zzz': not a failure category "
                                                 "(categories: "
                                                 + ", ".join(c.value for c in Category) + ")"),
])
def test_a_bad_filter_is_one_line_with_what_is_allowed(args, line):
    assert_one_usage_line(at80("codes", *args), line)


# --- checks --------------------------------------------------------------------------------

def test_checks_at_80_columns_cut_nothing():
    result = at80("checks")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert_clean(out)
    catalogue = load_catalogue()
    lines = out.splitlines()
    for spec in catalogue.specs:
        [head] = [line for line in lines if line.startswith(f"  {spec.id}  ")]
        assert spec.title in head
    listed = rows(out)
    for spec in catalogue.specs:
        for code in spec.codes:
            assert listed[code.id].split()[:2] == [code.id, code.category.value]
            assert listed[code.id].startswith(f"    {code.id}")
    # the summaries of the whole listing start in one column
    starts = {len(line) - len(line.split(maxsplit=2)[2]) for line in listed.values()}
    assert len(starts) == 1
    assert "`ddp-doctor codes` lists every code" in " ".join(lines[-2:])


# --- a third-party plugin ------------------------------------------------------------------

PLUGIN_CODE = Code("ACME001", Category.NCCL_P2P,
                   "The vendor's interconnect firmware is older than the cluster's baseline "
                   "and drops peer-to-peer traffic", what="w", why="y", fix="f",
                   severity=Severity.WARNING)


@pytest.fixture
def with_plugin(monkeypatch):
    """The installed checks plus one plugin check with a long summary, and a plugin that
    failed to load."""
    def catalogue():
        loaded = load_catalogue()
        loaded.specs.append(CheckSpec(id="acme.interconnect_firmware_baseline",
                                      title="ACME interconnect firmware", area="plugins",
                                      func=lambda facts: iter(()), codes=(PLUGIN_CODE,),
                                      plugin="acme (acme_checks)"))
        loaded.failures.append(PluginFailure("broken (broken_checks)", "ImportError: nope"))
        return loaded

    monkeypatch.setattr("ddp_doctor.app.catalogue.load_catalogue", catalogue)


def test_a_plugins_codes_are_listed_and_explained_and_a_failed_plugin_is_exit_3(with_plugin):
    result = at80("codes", "--category", "nccl_p2p")
    assert result.exit_code == 3
    assert_clean(result.stdout)
    assert rows(result.stdout)["ACME001"].split()[:3] == ["ACME001", "check", "warning"]
    assert result.stderr.splitlines() == [
        "ddp-doctor: plugin broken (broken_checks) failed to load: ImportError: nope"]
    result = at80("codes", "--json")
    assert result.exit_code == 3
    assert "ACME001" in {item["code"] for item in json.loads(result.stdout)}
    result = at80("explain", "nccl_p2p")
    assert "ACME001" in rows(result.stdout)
    result = at80("checks")
    assert result.exit_code == 3
    assert_clean(result.stdout)
    assert "  acme.interconnect_firmware_baseline  ACME interconnect firmware" in result.stdout
    assert "plugin broken (broken_checks) failed to load: ImportError: nope" in result.stdout


# --- the renderers at other widths ---------------------------------------------------------

@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_the_codes_listing_never_cuts_at_any_width(width):
    console = Console(file=io.StringIO(), width=width, highlight=False)
    render_codes(all_codes().values(), console)
    text = console.file.getvalue()
    assert_clean(text, width)
    assert set(rows(text)) == set(all_codes())


def test_a_narrow_terminal_stacks_each_summary_under_its_code():
    codes = by_family()[Family.SMOKE]
    narrow = Console(file=io.StringIO(), width=50, highlight=False)
    render_codes(codes, narrow)
    lines = narrow.file.getvalue().splitlines()
    first = lines.index("SMK001  smoke  error  unknown")
    assert lines[first + 1] == f"    {codes[0].summary}"
    wide = Console(file=io.StringIO(), width=WIDTH, highlight=False)
    render_codes(codes, wide)
    assert wide.file.getvalue().splitlines()[0].split() == ["Code", "Family", "Severity",
                                                            "Category", "Summary"]
