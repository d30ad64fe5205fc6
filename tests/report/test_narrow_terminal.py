"""The console report at 60, 80 and 120 columns, in a terminal's width and in a pipe.

A path, URL, finding code or command that the report prints must come out whole on one
line of the rendered text: a reader copies it from there, and a newline folded into the
middle of a path gives a path that does not exist. What is checked is taken from the
report's own data (its JSON), so every machine in tests/fixtures/facts, every recorded
log in tests/data/logs and every smoke outcome in tests/support/smoke_reports is held to
it, through the renderers and through the real CLI (typer's CliRunner, which is not a
terminal, with COLUMNS set as a shell sets it). Prose must still wrap: only a single long
word, a quoted command or a ``$ command`` line may run past the width.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ddp_doctor.checklist import load_catalogue
from ddp_doctor.cli import app, normalize_argv
from ddp_doctor.facts.snapshot import load_facts
from ddp_doctor.model import Report
from ddp_doctor.report.console import render_console
from ddp_doctor.report.json import render_json
from ddp_doctor.report.smoke import render_smoke_console, smoke_rows
from ddp_doctor.runner import build_report
from tests.conftest import FACTS_DIR
from tests.report.test_render_golden import full_report, smoke_report
from tests.support import smoke_reports
from tests.support.cli import runner
from tests.support.corpus import corpus_reports

WIDTHS = (60, 80, 120)
LOGS_DIR = Path(__file__).parents[1] / "data" / "logs"
FACT_FILES = sorted(FACTS_DIR.glob("*.json"))
# Recorded logs whose findings carry long paths, URLs and commands, run through the CLI.
CLI_LOGS = ["pytorch-119072", "wsl-13027", "nccl-2013", "llama-699", "ultralytics-18979"]
SMOKE_RUNS = ["passing_run", "failing_run", "short_run", "stalled_run"]

CODE = re.compile(r"\b[A-Z]{3,4}\d{3}\b")
URL = re.compile(r"https?://\S+")
# A `quoted command` may hold spaces and still be one thing to copy.
QUOTED = re.compile(r"(?:[^\s`]*`[^`]*`)+[^\s`]*")


def shown_texts(data: dict[str, Any], verbose: bool, checks: bool = True
                ) -> tuple[list[str], list[str], list[str]]:
    """(texts, commands, raw lines) the console shows for the report ``data`` (its JSON).

    It follows what the renderers print: a skipped check is one line naming its reason
    unless verbose, a step's URL only when verbose or without a command, evidence sources
    only when verbose; the smoke view (``checks=False``) has no check rows.
    """
    texts: list[str] = [data.get("facts_source") or ""]
    commands: list[str] = []
    raw: list[str] = []
    if checks:
        for check in data["checks"]:
            texts.append(check["title"])
            if check["status"] == "skip" and not verbose:
                texts.append(check["skip_reason"] or "skipped")
            else:
                texts.append(check["summary"])
            if check["command"]:
                commands.append(check["command"])
            if verbose and check["status"] == "error" and check["error"]:
                raw.extend(line.strip() for line in check["error"].splitlines())
        if verbose:
            texts.extend(data.get("probe_errors", {}).values())
    for finding in data["findings"]:
        texts += [finding["title"], finding.get("ignored") or "", ", ".join(finding["affects"])]
        for ev in finding["evidence"]:
            texts += [ev["label"], ev["value"]]
            if verbose and ev.get("source"):
                texts.append(ev["source"])
        for step in finding["remediation"]:
            texts.append(step["text"])
            if step["command"]:
                commands.append(step["command"])
            if step["url"] and (verbose or not step["command"]):
                texts.append(step["url"])
        texts.append(finding["docs_url"] or "")
    if data.get("smoke"):
        texts += [value for _, value in smoke_rows(data["smoke"])]
    return texts, commands, raw


def whole_tokens(text: str) -> set[str]:
    """The paths, URLs and codes in ``text``: what must never be split or cut."""
    tokens = {word for word in text.split() if "/" in word and len(word) >= 2}
    tokens.update(URL.findall(text))
    tokens.update(CODE.findall(text))
    return tokens


def assert_readable(output: str, data: dict[str, Any], width: int, verbose: bool,
                    checks: bool = True) -> None:
    texts, commands, raw = shown_texts(data, verbose, checks)
    lines = output.splitlines()
    assert lines, "nothing was rendered"
    broken = sorted(token for text in texts for token in whole_tokens(text)
                    if not any(token in line for line in lines))
    assert broken == [], f"split or cut at {width} columns: {broken}\n{output}"
    missing = [c for c in commands  # the report drops a trailing blank, nothing else
               if not any(line.strip() == f"$ {c}".strip() for line in lines)]
    assert missing == [], f"command lines not whole at {width} columns: {missing}\n{output}"
    data_words = {word for text in texts + commands for word in text.split()}
    cut = [word for line in lines for word in line.split()
           if "…" in word and word not in data_words]
    assert cut == [], f"text cut with … at {width} columns: {cut}\n{output}"
    for line in lines:  # prose wraps: only one unbreakable thing may pass the width
        if len(line) <= width:
            continue
        body = line.strip()
        assert (len(body.split()) == 1 or QUOTED.fullmatch(body) or body.startswith("$ ")
                or body in raw), f"prose not wrapped at {width} columns: {line!r}\n{output}"


def console_output(render: Any, report: Report, width: int, **options: Any) -> str:
    console = Console(width=width, color_system=None, file=io.StringIO())
    render(report, console, **options)
    output = console.file.getvalue()
    assert "\x1b" not in output
    return output


def report_data(report: Report) -> dict[str, Any]:
    return json.loads(render_json(report))


def fixture_report(path: Path) -> Report:
    facts = load_facts(path)
    return build_report(load_catalogue(entry_points=[]), facts,
                        facts_source=f"tests/fixtures/facts/{path.name}")


def smoke_view_report(name: str) -> Report:
    """What `ddp-doctor smoke` shows, for one of the smoke outcomes of the test support."""
    result = getattr(smoke_reports, name)()
    return Report("0.1.0", "2026-01-01T00:00:00+00:00", (result.check_result(),),
                  smoke=result.data)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", FACT_FILES, ids=[p.stem for p in FACT_FILES])
def test_every_fixture_machine_keeps_paths_codes_and_commands_whole(path, width):
    report = fixture_report(path)
    data = report_data(report)
    for verbose in (False, True):
        output = console_output(render_console, report, width, verbose=verbose)
        assert_readable(output, data, width, verbose)


@pytest.mark.slow  # the whole corpus's diagnoses (computed once: corpus_reports), rendered
# at the narrow widths only: it grows with every split of the corpus (~3 CPU-s a width for
# 846 logs), and what fits at 80 columns fits at 120 (the fixture machines, the golden
# reports and the CLI runs below keep all three widths)
@pytest.mark.parametrize("width", WIDTHS[:2])
def test_every_recorded_log_diagnosis_keeps_them_whole(width):
    reports = corpus_reports()
    assert len(reports) > 100
    for _path, report in reports:
        output = console_output(render_console, report, width)
        assert_readable(output, report_data(report), width, verbose=False)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("build", [full_report, smoke_report], ids=["full", "doctor-smoke"])
def test_the_golden_reports_keep_them_whole(build, width):
    """The hand-built report has tracebacks, probe errors, skipped and crashed checks."""
    report = build()
    for verbose in (False, True):
        output = console_output(render_console, report, width, verbose=verbose)
        assert_readable(output, report_data(report), width, verbose)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", SMOKE_RUNS)
def test_the_smoke_view_keeps_them_whole(name, width):
    report = smoke_view_report(name)
    for verbose in (False, True):
        output = console_output(render_smoke_console, report, width, verbose=verbose)
        assert_readable(output, report_data(report), width, verbose, checks=False)


def cli(tmp_path: Path, width: int, *args: str) -> tuple[str, dict[str, Any]]:
    """``ddp-doctor ARGS`` in a pipe COLUMNS wide: the console text and the same run's JSON."""
    json_path = tmp_path / f"report-{width}.json"
    result = runner.invoke(app, normalize_argv([*args, "--json", str(json_path)]),
                           env={"COLUMNS": str(width)})
    assert result.exit_code in (0, 1), result.output
    return result.stdout, json.loads(json_path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", FACT_FILES, ids=[p.stem for p in FACT_FILES])
def test_check_through_the_cli_in_a_pipe(tmp_path, path):
    for width in WIDTHS:
        output, data = cli(tmp_path, width, "check", "--facts", str(path))
        assert_readable(output, data, width, verbose=False)


@pytest.mark.parametrize("name", CLI_LOGS)
def test_diagnose_through_the_cli_in_a_pipe(tmp_path, name):
    for width in WIDTHS:
        output, data = cli(tmp_path, width, "diagnose", str(LOGS_DIR / f"{name}.log"))
        assert_readable(output, data, width, verbose=False)


def test_a_long_path_leaves_the_summary_column_for_a_line_of_its_own(tmp_path):
    """At 80 columns the torch path of this machine no longer fits beside the check title.

    It used to be folded inside the word ("…/site-packages/t" / "orch/__init__.py"); now
    the row keeps its title and the path follows whole, under the title.
    """
    path = "/opt/venvs/train/lib/python3.8/site-packages/torch/__init__.py"
    output, _ = cli(tmp_path, 80, "check", "--facts", str(FACTS_DIR / "healthy_8x_v100_pcie.json"))
    lines = output.splitlines()
    row = next(n for n, line in enumerate(lines) if "PyTorch import" in line)
    assert lines[row].split() == ["✓", "PyTorch", "import", "torch", "2.0.1+cu117", "from"]
    assert lines[row + 1] == "    " + path
    assert not any(line.endswith("/site-packages/t") for line in lines)


def test_a_path_that_fits_stays_beside_its_title():
    """Moving a path is the exception: one that fits the summary column stays in it."""
    report = fixture_report(FACTS_DIR / "container_64mb_shm.json")
    output = console_output(render_console, report, 80)
    assert ("  ✓ One torch install             /usr/local/lib/python3.8/dist-packages/torch"
            in output.splitlines())


def test_a_url_too_long_for_the_more_line_goes_under_it():
    report = fixture_report(FACTS_DIR / "container_64mb_shm.json")
    lines = console_output(render_console, report, 80).splitlines()
    more = lines.index("    More: ddp-doctor explain HST001 ·")
    assert lines[more + 1] == ("    https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/"
                               "troubleshooting.html")


def test_prose_keeps_wrapping_between_words_at_the_hanging_indent():
    report = fixture_report(FACTS_DIR / "healthy_8x_v100_pcie.json")
    lines = console_output(render_console, report, 80).splitlines()
    row = next(n for n, line in enumerate(lines) if "Driver vs torch CUDA" in line)
    assert lines[row].endswith("torch's CUDA 11.7 build runs on driver")
    assert lines[row + 1] == " " * 34 + "470.129.06 (CUDA 11.4) through minor-version"
    assert all(len(line) <= 80 for line in lines[row:row + 4])


def test_a_narrow_terminal_puts_the_summary_under_a_long_title():
    """The full report's plugin title leaves too little room beside it at 60 columns."""
    lines = console_output(render_console, full_report(), 60).splitlines()
    row = lines.index("  ‼ Load plugin broken (broken_checks)")
    assert lines[row + 1].startswith("      plugin failed to load:")


def test_a_long_run_directory_in_the_smoke_table_gets_a_line_of_its_own():
    report = smoke_view_report("failing_run")
    run_dir = "/scratch/team-vision/ddp-doctor-runs/2026-01-01/smoke-3f9a1c-node07"
    report = Report(report.tool_version, report.created_at, report.results,
                    smoke={**(report.smoke or {}), "run_dir": run_dir})
    lines = console_output(render_smoke_console, report, 60).splitlines()
    row = lines.index("Rank logs kept in")
    assert lines[row + 1] == "  " + run_dir
    assert_readable("\n".join(lines), report_data(report), 60, verbose=False, checks=False)
