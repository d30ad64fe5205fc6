"""GitHub Actions output: escaped workflow commands, one per finding, and the step summary."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.model import CheckResult, Code, Evidence, Finding, Report, Severity, Status, Step
from ddp_doctor.report.github import (
    annotation_lines,
    emit_github,
    escape_data,
    escape_property,
    summary_markdown,
    workflow_command,
)
from tests.conftest import FACTS_DIR

DOCTOR = Path(sys.executable).parent / "ddp-doctor"


def runner_unescape(text: str, prop: bool) -> str:
    """What GitHub's runner does to a command's data or property (ActionCommand.Unescape)."""
    pairs = [("%0D", "\r"), ("%0A", "\n")] + ([("%3A", ":"), ("%2C", ",")] if prop else [])
    for escaped, plain in [*pairs, ("%25", "%")]:
        text = text.replace(escaped, plain)
    return text


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    """A workflow command line as the runner splits it: name, properties, message."""
    found = re.fullmatch(r"::(\w+)(?: ([^:]*))?::(.*)", line)
    assert found, line
    props = {}
    for pair in (found.group(2) or "").split(","):
        key, _, value = pair.partition("=")
        props[key] = runner_unescape(value, prop=True)
    return found.group(1), props, runner_unescape(found.group(3), prop=False)


def code(code_id: str, severity: Severity = Severity.ERROR,
         category: Category = Category.NCCL_SHARED_MEMORY) -> Code:
    return Code(code_id, category, "summary", "what", "why", "fix", severity)


def finding(code_id: str, severity: Severity, title: str = "A problem",
            evidence: tuple[Evidence, ...] = (), steps: tuple[Step, ...] = ()) -> Finding:
    return Finding(code(code_id, severity), title, evidence, steps)


def report(*findings: Finding, crashed: bool = False, smoke: dict | None = None) -> Report:
    results = [CheckResult("area.check", "A check", "host",
                           Status.FAIL if findings else Status.PASS, "summary", findings)]
    if crashed:
        results.append(CheckResult("area.broken", "Broken", "host", Status.ERROR, "crashed",
                                   error="Traceback ...\nKeyError: 'gpus'"))
    return Report("0.1.0", "2025-01-01T00:00:00+00:00", tuple(results), smoke=smoke)


SHM = finding("HST001", Severity.ERROR, "/dev/shm is only 64 MiB",
              (Evidence("/dev/shm size", "64.0 MiB", "statvfs"), Evidence("other", "x")),
              (Step("Give the container more shared memory", "docker run --shm-size=16g ..."),
               Step("Second step", "never shown")))


def test_escaping_is_githubs():
    assert escape_data("50% done\r\nnext::x, y: z") == "50%25 done%0D%0Anext::x, y: z"
    assert escape_property("50% a:b,c\n") == "50%25 a%3Ab%2Cc%0A"
    # % first: an existing "%0A" in the text stays literal text, not a newline.
    assert escape_data("%0A") == "%250A"


def test_a_command_cannot_be_broken_or_forged_by_its_text():
    title = "T: 1, 2 %0A"
    message = "line 1\r\nline 2\n::error title=forged::boom 100%"
    line = workflow_command("warning", title, message)
    assert "\n" not in line and "\r" not in line
    assert parse_command(line) == ("warning", {"title": title}, message)


def test_one_annotation_per_error_and_warning_finding_errors_first():
    rep = report(finding("WRN001", Severity.WARNING, "Warned"), SHM,
                 finding("INF001", Severity.INFO, "Just so you know"))
    lines = annotation_lines(rep)
    assert [parse_command(line)[:2] for line in lines] == [
        ("error", {"title": "HST001 nccl_shared_memory"}),
        ("warning", {"title": "WRN001 nccl_shared_memory"}),
    ]


def test_message_is_title_first_evidence_and_first_fix_command():
    (line,) = annotation_lines(report(SHM))
    assert parse_command(line)[2].splitlines() == [
        "/dev/shm is only 64 MiB",
        "Evidence: /dev/shm size: 64.0 MiB",
        "Fix: docker run --shm-size=16g ...",
        "Details: ddp-doctor explain HST001",
    ]


def test_a_step_without_a_command_is_named_by_its_text_and_long_values_are_cut():
    long = "x" * 1000
    rep = report(finding("LOG001", Severity.ERROR, "Title\nwith a break",
                         (Evidence("line", long),), (Step("Restart the node"),)))
    message = parse_command(annotation_lines(rep)[0])[2].splitlines()
    assert message[0] == "Title with a break"
    assert message[1].startswith("Evidence: line: xxx") and len(message[1]) == 200
    assert message[2] == "Fix: Restart the node"


def test_strict_turns_warnings_into_errors():
    rep = report(finding("WRN001", Severity.WARNING), finding("INF001", Severity.INFO))
    assert [parse_command(line)[0] for line in annotation_lines(rep, strict=True)] == ["error"]
    assert [parse_command(line)[0] for line in annotation_lines(rep)] == ["warning"]


def test_policy_fail_on_warnings_makes_errors_and_ignored_findings_are_not_annotated():
    ignored = Finding(code("NCC002", Severity.WARNING), "Ignored | here",
                      ignored="single-node | only")
    rep = replace(report(finding("VIS006", Severity.WARNING), finding("WRN001", Severity.WARNING),
                         ignored),
                  fail_on_warnings=("VIS006",), policy_file="/repo/ddp-doctor.toml")
    assert [parse_command(line)[:2] for line in annotation_lines(rep)] == [
        ("error", {"title": "VIS006 nccl_shared_memory"}),
        ("warning", {"title": "WRN001 nccl_shared_memory"}),
    ]
    text = summary_markdown(rep)
    assert "policy: `/repo/ddp-doctor.toml`" in text
    assert "| warning (fails the run) | `VIS006` |" in text
    assert "| warning | `WRN001` |" in text
    assert "| warning (ignored by policy: single-node \\| only) | `NCC002` | nccl_shared_memory " \
        "| Ignored \\| here |" in text


def test_a_crashed_check_is_an_error_annotation():
    (line,) = annotation_lines(report(crashed=True))
    name, props, message = parse_command(line)
    assert (name, props["title"]) == ("error", "ddp-doctor check area.broken crashed")
    assert "KeyError: 'gpus'" in message and "exit code 3" in message


def test_emit_prints_to_out_and_appends_the_summary(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("# Earlier step output\n", encoding="utf-8")
    out = io.StringIO()
    rep = report(SHM)
    emit_github(rep, environ={"GITHUB_STEP_SUMMARY": str(summary)}, out=out)
    emit_github(rep, environ={"GITHUB_STEP_SUMMARY": str(summary)}, out=out)
    assert out.getvalue() == "\n".join(annotation_lines(rep) * 2) + "\n"
    text = summary.read_text(encoding="utf-8")
    assert text == "# Earlier step output\n" + summary_markdown(rep) * 2


def test_emit_without_a_summary_file_writes_only_annotations(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    emit_github(report(SHM), environ={})
    captured = capsys.readouterr()
    assert captured.out.startswith("::error title=HST001 ")
    assert captured.err == "" and list(tmp_path.iterdir()) == []


def test_a_clean_report_prints_nothing(capsys):
    emit_github(report(), environ={})
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("where", ["a_directory", "missing/dir/summary.md"])
def test_an_unwritable_summary_is_one_warning_and_not_fatal(tmp_path, capsys, where):
    (tmp_path / "a_directory").mkdir()
    path = tmp_path / where
    emit_github(report(SHM), environ={"GITHUB_STEP_SUMMARY": str(path)})
    captured = capsys.readouterr()
    assert captured.out.startswith("::error ")  # the annotations still went out
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"ddp-doctor: warning: cannot append the job summary to {path}")


def test_summary_has_verdict_counts_findings_table_and_strict_note():
    rep = report(SHM, finding("WRN001", Severity.WARNING, "A | piped title"))
    text = summary_markdown(rep)
    assert text.startswith("## ❌ ddp-doctor: problems found\n")
    assert "| pass | warn | fail | skip | error |\n|---|---|---|---|---|\n| 0 | 0 | 1 | 0 | 0 |" \
        in text
    assert "| error | `HST001` | nccl_shared_memory | /dev/shm is only 64 MiB |" in text
    assert "| warning | `WRN001` | nccl_shared_memory | A \\| piped title |" in text
    assert "--strict" not in text
    strict = summary_markdown(report(finding("WRN001", Severity.WARNING)), strict=True)
    assert strict.startswith("## ❌ ddp-doctor: problems found")
    assert "| warning (fails the run) | `WRN001` |" in strict
    # checks alone trained nothing: never "ready" (issue 24)
    assert summary_markdown(report()).startswith("## ✅ ddp-doctor: no problems found\n")
    assert "No problems found." in summary_markdown(report())


def test_summary_shows_the_smoke_measurements():
    smoke = {"ok": True, "ranks": 2, "local_ranks": 2, "device": "cpu", "backend": "gloo",
             "launcher": "torchrun", "mode": "ddp", "model": "n", "imgsz": 64, "batch": 8,
             "steps": 20, "steps_done": 20, "params_in_sync": True, "wall_s": 12.5,
             "measurements": {"median_step_s": 0.125, "allreduce_busbw_gbps": 1.5,
                              "allreduce_bytes": 64 * 2**20}}
    text = summary_markdown(report(smoke=smoke))
    assert "\n### Smoke training\n" in text
    for row in ("| Result | passed |", "| Median step time | 125.0 ms |",
                "| All-reduce bus bandwidth | 1.50 GB/s (64 MiB buffer, nccl-tests busbw) |"):
        assert row in text


# --- through the command line --------------------------------------------------------------

def doctor(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    return subprocess.run([str(DOCTOR), "check", "--facts",
                           str(FACTS_DIR / "container_64mb_shm.json"), *args],
                          cwd=tmp_path, env={**base, "COLUMNS": "100", **env},
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.spawns
def test_cli_under_github_prints_annotations_and_summary(tmp_path):
    summary = tmp_path / "summary.md"
    result = doctor(tmp_path, "-q", GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary))
    assert result.returncode == 1
    annotations = [line for line in result.stdout.splitlines() if line.startswith("::")]
    assert len(annotations) == 1 and annotations[0].startswith("::error title=HST001 ")
    assert "HST001" in summary.read_text(encoding="utf-8")


@pytest.mark.spawns
def test_cli_with_a_report_on_stdout_sends_annotations_to_stderr(tmp_path):
    """`--json -` stays valid JSON; the runner reads workflow commands on stderr too."""
    result = doctor(tmp_path, "--json", "-", GITHUB_ACTIONS="true")
    assert result.returncode == 1
    assert json.loads(result.stdout)["exit_code"] == 1
    assert [line[:21] for line in result.stderr.splitlines() if line.startswith("::")] == \
        ["::error title=HST001 "]


@pytest.mark.spawns
def test_cli_outside_github_prints_no_annotations(tmp_path):
    summary = tmp_path / "summary.md"
    result = doctor(tmp_path, "-q", GITHUB_ACTIONS="false", GITHUB_STEP_SUMMARY=str(summary))
    assert result.returncode == 1
    assert "::error" not in result.stdout + result.stderr
    assert not summary.exists()


@pytest.mark.spawns
def test_cli_unwritable_summary_keeps_the_exit_code(tmp_path):
    result = doctor(tmp_path, "-q", GITHUB_ACTIONS="true",
                    GITHUB_STEP_SUMMARY=str(tmp_path / "missing" / "summary.md"))
    assert result.returncode == 1
    assert [line for line in result.stderr.splitlines() if line.startswith("ddp-doctor:")] \
        == [f"ddp-doctor: warning: cannot append the job summary to "
            f"{tmp_path / 'missing' / 'summary.md'}: No such file or directory"]
