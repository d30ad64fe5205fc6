"""The CLI through typer's runner: options, exit codes, and one clear line for bad input."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from ddp_doctor import __version__
from ddp_doctor.cli import app, normalize_argv
from tests.conftest import FACTS_DIR
from tests.support.cli import invoke, runner

SANDBOX = str(FACTS_DIR / "sandbox_cpu_container.json")


def assert_usage_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ddp-doctor: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.output + result.stderr


def test_bare_options_mean_doctor():
    assert normalize_argv([]) == ["doctor"]
    assert normalize_argv(["--json", "-"]) == ["doctor", "--json", "-"]
    assert normalize_argv(["check", "-q"]) == ["check", "-q"]
    assert normalize_argv(["--help"]) == ["--help"]
    assert normalize_argv(["--version"]) == ["--version"]


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"ddp-doctor {__version__}"


def test_help_lists_commands_and_exit_codes():
    result = invoke("--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for word in ("doctor", "check", "checks", "explain",
                 "Exit codes: 0 no problems (the verdict says what was proven), 1 problems found",
                 "3 the doctor itself failed", "`run` passes on its command's own"):
        assert word in text


def test_check_help_explains_every_option():
    result = invoke("check", "--help")
    for option in ("--json", "--markdown", "--strict", "--quiet", "--verbose", "--python",
                   "--facts", "--save-facts", "--probe-timeout"):
        assert option in result.stdout


def test_replayed_facts_to_json_on_stdout():
    result = invoke("check", "--facts", SANDBOX, "--json", "-")
    assert result.exit_code == 1
    report = json.loads(result.stdout)  # nothing but JSON on stdout
    assert report["facts_source"] == SANDBOX
    assert [f["code"] for f in report["findings"]] == ["DRV001", "TOR002"]
    assert report["exit_code"] == 1


def test_doctor_console_output_on_replayed_facts():
    result = invoke("--facts", SANDBOX)
    assert result.exit_code == 1
    out = result.stdout
    assert "replaying" in out
    assert "DRV001" in out and "TOR002" in out
    assert "Not ready: problems found" in out
    assert "exit code 1" in out


def test_quiet_shows_findings_and_verdict_only():
    out = invoke("check", "-q", "--facts", SANDBOX).stdout
    assert "Shared memory" not in out  # the per-check lines are gone
    assert "DRV001" in out and "Not ready" in out


def test_markdown_to_stdout_and_json_to_file(tmp_path):
    target = tmp_path / "report.json"
    result = invoke("check", "--facts", SANDBOX, "--markdown", "-", "--json", str(target))
    assert result.stdout.startswith("## ddp-doctor report")
    assert json.loads(target.read_text())["findings"][0]["code"] == "DRV001"


def test_strict_turns_warnings_into_failure(tmp_path):
    facts = json.loads((FACTS_DIR / "sandbox_cpu_container.json").read_text())
    # A machine where the only finding is the CPU-only torch warning: remove the driver problem.
    facts["facts"]["nvml"]["value"] = {"initialized": True, "error": None,
                                      "driver_version": "550.54.15",
                                      "cuda_driver_version": "12.4", "gpus": []}
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    assert invoke("check", "-q", "--facts", str(path)).exit_code == 0
    assert invoke("check", "-q", "--strict", "--facts", str(path)).exit_code == 1


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "not found"),
        (b"", "is empty"),
        (b'{"format": "ddp-doctor-facts", "schema_version": 1, "fac', "not valid JSON"),
        (b'{"some": "other tool"}', "not a ddp-doctor facts file"),
        (b"\xff\xfe\x00binary", "not UTF-8"),
        (b'{"format": "ddp-doctor-facts", "schema_version": 99, "facts": {}}', "version 99"),
        (b'{"format": "ddp-doctor-facts", "schema_version": 1, "facts": {"x": 3}}', "malformed"),
    ],
)
def test_unusable_facts_file(tmp_path, content, fragment):
    path = tmp_path / "facts.json"
    if content is not None:
        path.write_bytes(content)
    assert_usage_error(invoke("check", "--facts", str(path)), fragment)


def test_facts_path_is_a_directory(tmp_path):
    assert_usage_error(invoke("check", "--facts", str(tmp_path)), "is a directory")


def test_explain_prints_the_fixed_sections():
    result = invoke("explain", "drv001")
    assert result.exit_code == 0
    for section in ("DRV001: No usable NVIDIA driver", "category: driver_missing",
                    "What it means", "Why it matters", "How to fix"):
        assert section in result.stdout


def test_explain_unknown_code():
    # One line pointing to `ddp-doctor codes`, not every id crammed into it.
    result = invoke("explain", "XYZ999")
    assert_usage_error(result, "unknown code 'XYZ999'", "`ddp-doctor codes` lists every code")
    assert "DRV001" not in result.stderr


def test_checks_lists_every_check_with_codes():
    result = runner.invoke(app, ["checks"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for text in ("driver.present", "DRV001", "torch.import", "TOR001", "TOR002", "host.shm",
                 "HST001", "nccl_shared_memory"):
        assert text in result.stdout


def test_python_that_does_not_exist():
    assert_usage_error(invoke("check", "--python", "/no/such/python"), "no such file")


def test_python_that_is_a_directory(tmp_path):
    assert_usage_error(invoke("check", "--python", str(tmp_path)), "is a directory")


def test_python_that_is_not_python(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    assert_usage_error(invoke("check", "--python", str(fake)), "not a Python interpreter")


def test_output_into_missing_directory(tmp_path):
    target = tmp_path / "nope" / "r.json"
    assert_usage_error(invoke("check", "--facts", SANDBOX, "--json", str(target)),
                       "does not exist")


def test_output_that_cannot_be_written_even_by_root():
    """/proc accepts no new files: the write fails late, and is still one clean line."""
    result = invoke("check", "--facts", SANDBOX, "--json", "/proc/ddp-doctor-report.json")
    assert_usage_error(result, "--json /proc/ddp-doctor-report.json")
    assert "not writable" in result.stderr or "cannot write" in result.stderr


def test_output_into_read_only_directory(tmp_path):
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        result = invoke("check", "--facts", SANDBOX, "--json", str(tmp_path / "r.json"))
        if os.geteuid() == 0:  # root ignores the mode bits; the write itself succeeds
            assert result.exit_code == 1 and (tmp_path / "r.json").exists()
        else:
            assert_usage_error(result, "not writable")
    finally:
        tmp_path.chmod(stat.S_IRWXU)


def test_output_path_that_is_a_directory(tmp_path):
    assert_usage_error(invoke("check", "--facts", SANDBOX, "--markdown", str(tmp_path)),
                       "is a directory")


def test_contradicting_options():
    assert_usage_error(invoke("check", "--facts", SANDBOX, "--json", "-", "--markdown", "-"),
                       "--json and --markdown cannot both write to stdout ('-'); send one of "
                       "them to a file")
    assert_usage_error(invoke("check", "--facts", SANDBOX, "--json", "-", "--markdown", "-",
                              "--junit", "-"),
                       "--json, --markdown and --junit: only one of them can write to stdout")
    assert_usage_error(invoke("check", "--facts", SANDBOX, "--python", sys.executable),
                       "cannot be combined with --python")
    assert_usage_error(invoke("check", "-q", "-v", "--facts", SANDBOX), "contradict")


def test_unknown_option_is_exit_2():
    result = invoke("check", "--no-such-option")
    assert result.exit_code == 2
    assert "Traceback" not in result.output


COMMANDS = "check, checks, codes, compare, diagnose, doctor, explain, run, smoke"


@pytest.mark.parametrize(("args", "line"), [
    # what typer's parser refuses itself
    (("check", "--jsn", "-"), "check has no option --jsn; did you mean --json?"),
    (("smoke", "--stps", "3"), "smoke has no option --stps; did you mean --steps?"),
    (("doctor", "--global_batch", "8"), "doctor has no option --global_batch; did you mean "
                                        "--global-batch?"),
    (("check", "--no-such-option"), "check has no option --no-such-option; `ddp-doctor check "
                                    "--help` lists them"),
    (("--quite",), "doctor has no option --quite; did you mean --quiet?"),
    (("check", "--json"), "--json needs a value (PATH|-)"),
    (("smoke", "--steps"), "--steps needs a value (N)"),
    (("check", "--strict=yes"), "--strict takes no value (it is a switch)"),
    (("chek",), f"unknown command 'chek'; did you mean check? (commands: {COMMANDS})"),
    (("explain",), "explain needs CODE|CATEGORY"),
    (("explain", "DRV001", "extra"), "unexpected argument 'extra': explain takes CODE|CATEGORY"),
    (("codes", "--family"), "--family needs a value (FAMILY)"),
    (("codes", "--json", "-"), "unexpected argument '-': codes takes options only"),
    (("check", "now"), "unexpected argument 'now': check takes options only"),
    # numbers: the option, the value given and what is allowed
    (("check", "--probe-timeout", "0"), "--probe-timeout 0: must be 1 s or more"),
    (("check", "--probe-timeout", "soon"), "--probe-timeout 'soon': not a number; use 1 s or "
                                           "more"),
    (("check", "--probe-timeout", "nan"), "--probe-timeout 'nan': not a finite number; use 1 s "
                                          "or more"),
    (("smoke", "--steps", "abc"), "--steps 'abc': not a whole number; use 2 or more"),
    (("smoke", "--timeout", "x"), "--timeout 'x': not a number; use 20 s or more"),
    (("smoke", "--master-port", "http"), "--master-port 'http': not a whole number; use 1 to "
                                         "65535"),
    (("smoke", "--imgsz", "big"), "--imgsz 'big': not a whole number; use a multiple of 32, "
                                  "64 or more"),
    (("smoke", "--nproc", "1.5"), "--nproc '1.5': not a whole number; use 1 or more"),
    (("smoke", "--model", "xl"), "--model 'xl': choose one of n, s, m"),
    # common options that do not apply, or contradict each other
    # (options a command has no use for are not offered: its --help does not list them)
    (("diagnose", "--bundle", "b.zip", "x.log"), "diagnose has no option --bundle; "
                                                "`ddp-doctor diagnose --help` lists them"),
    (("diagnose", "--config", "p.toml", "x.log"), "diagnose has no option --config; "
                                                 "`ddp-doctor diagnose --help` lists them"),
    (("compare", "--config", "p.toml", "a.json", "b.json"),
     "compare has no option --config; `ddp-doctor compare --help` lists them"),
    (("check", "--force", "--facts", SANDBOX),
     "--force only lets --bundle (or run's --log) overwrite an existing file; add --bundle "
     "PATH or leave --force out"),
    (("smoke", "-q", "-v"), "--quiet and --verbose contradict each other"),
])
def test_every_bad_input_is_one_line_naming_the_option(args, line, monkeypatch):
    """Whoever refuses it, typer's parser or the doctor: one line, exit 2, no usage box."""
    monkeypatch.setattr("ddp_doctor.smoke.run.run_smoke", _never)
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"ddp-doctor: error: {line}"]
    assert result.stdout == ""
    assert "Usage:" not in result.output and "Traceback" not in result.output


def _never(*args, **kwargs):
    raise AssertionError("no work may start on bad input")


@pytest.mark.spawns  # ddp-doctor as a command: a fresh interpreter each, about 3 s loaded
@pytest.mark.parametrize("args", [("smoke", "--steps", "abc"), ("check", "--probe-timeout", "0"),
                                  ("check", "--jsn", "-"), ("chek",)])
def test_the_installed_entry_point_prints_the_same_one_line(args):
    proc = subprocess.run([sys.executable, "-m", "ddp_doctor", *args], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith("ddp-doctor: error: ")


def test_common_options_are_declared_once_for_every_report_command():
    """Every report command takes the common options from one table, but those it has no
    use for: diagnose writes no bundle and judges no policy, compare judges no policy."""
    from dataclasses import fields

    from ddp_doctor.app.requests import Common
    from ddp_doctor.cli import COMMON

    assert list(COMMON) == [f.name for f in fields(Common)]
    common = ("--quiet", "-q", "--verbose", "-v", "--strict", "--json", "--markdown", "--junit",
              "--bundle", "--force", "--config", "--anonymize")
    omitted = {"diagnose": ("--bundle", "--force", "--config"), "compare": ("--config",)}
    for command in ("check", "doctor", "smoke", "diagnose", "run", "compare"):
        text = runner.invoke(app, [command, "--help"], terminal_width=200).stdout
        for option in common:
            assert (f" {option}" in text) is (option not in omitted.get(command, ())), \
                (command, option)


def test_the_same_file_for_two_outputs_is_refused(tmp_path):
    target = str(tmp_path / "r.json")
    result = invoke("check", "--facts", SANDBOX, "--json", target, "--junit", target)
    assert_usage_error(result, f"--json and --junit both name {target}")


def test_internal_error_is_exit_3_without_traceback(monkeypatch, capsys):
    from ddp_doctor import cli

    def explode(*args, **kwargs):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr("ddp_doctor.runner.build_report", explode)
    monkeypatch.delenv("DDP_DOCTOR_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exc:
        cli.main(["check", "--facts", SANDBOX])
    assert exc.value.code == 3
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: simulated bug" in err
    assert "Traceback" not in err


def test_the_readme_option_tables_name_every_option():
    """README's tables are written by hand: every option of the commands is in them, and
    the retired --batch only as the name it was renamed from."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    rows = "\n".join(line for line in readme.splitlines() if line.startswith("| `"))
    for command in ("check", "doctor", "smoke", "diagnose", "run"):
        text = runner.invoke(app, [command, "--help"], terminal_width=200).stdout
        for option in set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text)) - {"--help"}:
            assert re.search(rf"(?<![\w-]){option}(?![\w-])", rows), (command, option)
    assert "`--batch B`" not in readme
    assert "--global-batch B" in readme and "--batch-per-process B" in readme


@pytest.mark.parametrize(("command", "absent"), [
    ("diagnose", ("--bundle", "--force", "--config")),
    ("compare", ("--config",)),
])
def test_help_offers_only_the_options_that_work(command, absent):
    """Before: diagnose's and compare's --help listed --bundle and --config, which they
    rejected or ignored."""
    shown = invoke(command, "--help").stdout
    assert "--json" in shown
    for option in absent:
        assert option not in shown, option
    assert "--bundle" in invoke("check", "--help").stdout
