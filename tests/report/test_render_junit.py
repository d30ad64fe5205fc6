"""The JUnit XML report: valid for CI readers, and saying what the Report says.

Every document is validated with ``xmlschema`` against tests/fixtures/junit/*.xsd (a
schema with the element set of Jenkins' junit-10.xsd, see SOURCES.md there), then read
back with ElementTree to check that the test cases, their outcomes and the counts follow
the Report: the recorded machines in tests/fixtures/facts, diagnose reports of real logs,
the hand-built report of the golden tests, and smoke jobs judged by the smoke verdict.
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import xmlschema

from ddp_doctor.categories import Category
from ddp_doctor.checklist import load_catalogue
from ddp_doctor.diagnose import diagnose
from ddp_doctor.facts.snapshot import load_facts
from ddp_doctor.model import CheckResult, Code, Evidence, Finding, Report, Status, Step
from ddp_doctor.redact.redactor import Redactor
from ddp_doctor.report.json import render_json
from ddp_doctor.report.junit import render_junit
from ddp_doctor.runner import build_report
from ddp_doctor.smoke.junit_codes import SMOKE_CODES
from ddp_doctor.smoke.run import skipped
from tests.conftest import FACTS_DIR, FIXTURES
from tests.report.test_render_golden import full_report, pinned, sandbox_report
from tests.support.cli import invoke
from tests.support.smoke_reports import failing_run, passing_run, short_run, stalled_run

REPO = Path(__file__).resolve().parents[2]
SCHEMA_FILES = sorted((FIXTURES / "junit").glob("*.xsd"))
SCHEMAS = [xmlschema.XMLSchema10(str(path)) for path in SCHEMA_FILES]
OURS = xmlschema.XMLSchema10(str(FIXTURES / "junit" / "junit.xsd"))
REPORT_SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text(encoding="utf-8"))
FACT_FILES = sorted(FACTS_DIR.glob("*.json"))
LOGS = [REPO / "tests" / "data" / "logs" / name
        for name in ("accelerate-223.log", "bevfusion-283.log", "archwsl-248.log")]
CRITERIA = ["smoke.ran", "smoke.all_steps", "smoke.loss_finite", "smoke.loss_falls",
            "smoke.ranks_in_sync", "smoke.all_reduce", "smoke.measurements"]


def parse(text: str) -> ET.Element:
    """Validate a JUnit document against every schema, check its counts, return its root."""
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    for schema in SCHEMAS:
        errors = list(schema.iter_errors(text))
        assert not errors, f"invalid under {schema.url}: {errors[0]}"
    root = ET.fromstring(text.encode("utf-8"))
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for suite in root.iter("testsuite"):
        cases = suite.findall("testcase")
        counted = {"tests": len(cases),
                   "failures": sum(c.find("failure") is not None for c in cases),
                   "errors": sum(c.find("error") is not None for c in cases),
                   "skipped": sum(c.find("skipped") is not None for c in cases)}
        assert {k: int(suite.get(k)) for k in counted} == counted, suite.get("name")
        assert {c.get("classname") for c in cases} == {suite.get("name")}
        for key in totals:
            totals[key] += counted[key]
    assert {k: int(root.get(k)) for k in totals} == totals
    return root


def cases(root: ET.Element) -> dict[str, ET.Element]:
    found = {c.get("name"): c for c in root.iter("testcase")}
    assert len(found) == len(list(root.iter("testcase"))), "test case names repeat"
    return found


def outcome(case: ET.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return tag
    return "passed"


def assert_follows_report(report: Report, strict: bool) -> ET.Element:
    """One test case per check with the outcome its status and findings call for."""
    root = parse(render_junit(report, strict, SMOKE_CODES))
    by_name = cases(root)
    for result in report.results:
        case = by_name[result.check_id]
        assert case.get("classname") == f"ddp_doctor.{result.area}"
        failing = [f for f in result.findings if f.effective_severity.value == "error"
                   or (strict and f.effective_severity.value == "warning")]
        if result.status is Status.SKIP:
            assert case.find("skipped").get("message") == result.skip_reason
        elif result.status is Status.ERROR:
            assert outcome(case) == "error"
        elif result.area == "smoke":  # its findings fail the criterion cases instead
            assert outcome(case) == "passed", result.check_id
            claimed = [c for c in by_name.values() if c.get("name", "").startswith("smoke.")
                       and c.get("name") != result.check_id and outcome(c) == "failure"]
            assert bool(claimed) == bool(failing)
        elif failing:
            failure = case.find("failure")
            assert failure.get("message").startswith(f"{failing[0].code.id}: ")
            assert failure.get("type") == failing[0].category.value
            for finding in failing:
                assert f"{finding.code.id} [{finding.category.value}]" in failure.text
        else:
            assert outcome(case) == "passed", result.check_id
    problems = sum(outcome(c) in ("failure", "error") for c in by_name.values())
    assert (problems > 0) == (report.exit_code(strict) != 0)
    for suite in root.iter("testsuite"):
        props = {p.get("name"): p.get("value") for p in suite.iter("property")}
        assert props["ddp_doctor.verdict"] == report.verdict(strict)
        assert props["ddp_doctor.exit_code"] == str(report.exit_code(strict))
        assert props["ddp_doctor.version"] == report.tool_version
        assert suite.get("timestamp") == report.created_at
    return root


def test_schema_rejects_what_ci_readers_would_not_take():
    """The validation can fail: a bad count, a missing name, an unknown element."""
    good = ('<testsuites><testsuite name="s" tests="1" failures="1" errors="0">'
            '<testcase name="c" time="0.5"><failure message="m" type="t">x</failure>'
            '</testcase></testsuite></testsuites>')
    assert OURS.is_valid(good)
    for bad in (good.replace('tests="1"', 'tests="one"'),
                good.replace('<testcase name="c"', '<testcase'),
                good.replace('time="0.5"', 'time="1e-05"'),
                good.replace(' message="m"', ''),
                good.replace('<failure', '<broken').replace('</failure>', '</broken>'),
                good.replace('</testcase>', '<skipped/></testcase>')):
        assert not OURS.is_valid(bad), bad


@pytest.mark.parametrize("path", FACT_FILES, ids=[p.stem for p in FACT_FILES])
@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_every_recorded_machine(path, strict):
    report = build_report(load_catalogue(entry_points=[]), load_facts(path),
                          facts_source=str(path))
    assert_follows_report(report, strict)


def test_a_missing_driver_fails_with_evidence_and_fix_steps():
    report = build_report(load_catalogue(entry_points=[]),
                          load_facts(FACTS_DIR / "no_driver.json"))
    driver = next(r for r in report.results if r.check_id == "driver.present")
    [finding] = driver.findings
    failure = cases(parse(render_junit(report)))["driver.present"].find("failure")
    assert failure.get("message") == f"DRV001: {finding.title}"
    assert failure.get("type") == "driver_missing"
    for ev in finding.evidence:
        assert f"  - {ev.label}: {ev.value.splitlines()[0]}" in failure.text
    for number, step in enumerate(finding.remediation, 1):
        assert f"  {number}. {step.text}" in failure.text
        if step.command:
            assert f"     $ {step.command}" in failure.text
    assert "ddp-doctor explain DRV001" in failure.text


def test_warnings_pass_unless_strict_and_a_crash_is_an_error():
    report = full_report()
    by_name = cases(assert_follows_report(report, strict=False))
    compat = by_name["driver.cuda_compat"]
    assert outcome(compat) == "passed"
    assert "DRV002 [driver_too_old] warning" in compat.find("system-out").text
    crashed = by_name["acme.swap"].find("error")
    assert crashed.get("message") == "check crashed: KeyError: 'swap_total'"
    assert "KeyError: 'swap_total'" in crashed.text and "Traceback" in crashed.text
    assert outcome(by_name["plugin:broken (broken_checks)"]) == "error"
    strict = cases(assert_follows_report(report, strict=True))
    assert strict["driver.cuda_compat"].find("failure").get("message").startswith("DRV002: ")
    # a check with a warning and an info note fails on the warning only
    shm = strict["host.shm"].find("failure")
    assert shm.get("message").startswith("HST001: ") and "(and" not in shm.get("message")
    assert "HST002" in strict["host.shm"].find("system-out").text


def test_diagnose_reports_of_real_logs():
    for log in LOGS:
        assert_follows_report(diagnose(str(log)).report, strict=False)


def _with_smoke(result) -> Report:
    """The sandbox's report with a smoke job, through the redaction every run applies."""
    report = sandbox_report()
    return Redactor().report(pinned(dataclasses.replace(
        report, results=(*report.results, result.check_result()), smoke=result.data)))


def _smoke_cases(report: Report, strict: bool = False) -> dict[str, ET.Element]:
    root = assert_follows_report(report, strict)
    [suite] = [s for s in root.iter("testsuite") if s.get("name") == "ddp_doctor.smoke"]
    names = [c.get("name") for c in suite.findall("testcase")]
    assert names == ["smoke.train", *CRITERIA]
    return {c.get("name"): c for c in suite.findall("testcase")}


def test_smoke_data_of_the_helpers_is_what_the_schema_describes():
    for build in (passing_run, failing_run, short_run, stalled_run):
        document = json.loads(render_json(_with_smoke(build())))
        jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(document)


def test_smoke_criteria_of_a_passing_run():
    smoke = _smoke_cases(_with_smoke(passing_run()))
    assert {name: outcome(c) for name, c in smoke.items()} == dict.fromkeys(smoke, "passed")
    assert smoke["smoke.all_steps"].find("system-out").text.startswith("12 of 12 steps")
    measured = smoke["smoke.measurements"].find("system-out").text
    assert "Median step time: 250.0 ms" in measured
    assert "All-reduce bus bandwidth: 0.34 GB/s" in measured


def test_smoke_criteria_name_the_failed_ones():
    smoke = _smoke_cases(_with_smoke(failing_run()))
    assert {name: outcome(c) for name, c in smoke.items()} == {
        "smoke.train": "passed", "smoke.ran": "passed", "smoke.all_steps": "passed",
        "smoke.loss_finite": "passed", "smoke.loss_falls": "failure",
        "smoke.ranks_in_sync": "failure", "smoke.all_reduce": "passed",
        "smoke.measurements": "passed"}
    assert smoke["smoke.loss_falls"].find("failure").get("message").startswith(
        "SMK006: The loss did not fall")
    in_sync = smoke["smoke.ranks_in_sync"].find("failure")
    assert in_sync.get("message").startswith("SMK014: Parameters of rank 1 differ")
    assert "rank 1: 9c04e1b7a2d35f80" in in_sync.text
    # each problem fails exactly one case: the job's own case only reports them
    assert "SMK006" in smoke["smoke.train"].find("system-out").text


def test_smoke_criteria_not_judged_are_skipped_with_the_reason():
    short = _smoke_cases(_with_smoke(short_run()))
    assert short["smoke.loss_falls"].find("skipped").get("message").startswith(
        "SMK016: Loss not judged: 4 steps")
    assert "--mode dp" in short["smoke.ranks_in_sync"].find("skipped").get("message")
    assert outcome(short["smoke.loss_finite"]) == "passed"
    stalled = _smoke_cases(_with_smoke(stalled_run()))
    assert stalled["smoke.ran"].find("failure").get("message").startswith(
        "SMK002: Rank 1 stopped making progress")
    for name in CRITERIA[1:]:
        assert stalled[name].find("skipped").get("message") == (
            "not judged: the job did not finish (see smoke.ran)")


def test_a_skipped_smoke_job_skips_every_criterion():
    smoke = _smoke_cases(_with_smoke(skipped("blocked by DRV001: no usable GPU")))
    for name, case in smoke.items():
        message = case.find("skipped").get("message")
        assert message.endswith("blocked by DRV001: no usable GPU"), name


def test_a_smoke_only_report_still_has_its_suite():
    """`ddp-doctor smoke` reports hold the smoke check alone."""
    result = failing_run()
    report = Report("0.1.0", "2026-01-01T00:00:00+00:00", (result.check_result(),),
                    environment={"python_executable": "python"}, smoke=result.data)
    root = assert_follows_report(report, strict=False)
    assert [s.get("name") for s in root.iter("testsuite")] == ["ddp_doctor.smoke"]


CODE = Code("TST001", Category.UNKNOWN, "test", "w", "w", "w")


def _one_finding_report(finding: Finding, **report_fields) -> Report:
    result = CheckResult("odd.check", "Odd", "host", Status.FAIL, finding.title,
                         findings=(finding,))
    return Report("0.1.0", "2026-01-01T00:00:00+00:00", (result,), **report_fields)


def test_markup_and_control_characters_survive():
    """Quotes, angle brackets and ANSI colours from a rank's stderr stay readable XML."""
    nasty = 'rank 0: <torch.Tensor> & "x" \x1b[31mRuntimeError\x1b[0m \x00 ok'
    finding = Finding(CODE, nasty, evidence=(Evidence("stderr", nasty + "\nline 2", "rank 0"),),
                      remediation=(Step("Run it", command="grep -E '<|&' log"),))
    case = cases(parse(render_junit(_one_finding_report(finding))))["odd.check"]
    failure = case.find("failure")
    readable = 'rank 0: <torch.Tensor> & "x" \\x1b[31mRuntimeError\\x1b[0m \\x00 ok'
    assert failure.get("message") == f"TST001: {readable}"
    assert f"  - stderr: {readable}\n      line 2 (rank 0)" in failure.text
    assert "     $ grep -E '<|&' log" in failure.text


def test_hostname_only_from_the_report():
    """The renderer never looks the host up: an anonymized report must stay anonymous."""
    finding = Finding(CODE, "x")
    plain = parse(render_junit(_one_finding_report(finding)))
    assert all(s.get("hostname") is None for s in plain.iter("testsuite"))
    named = parse(render_junit(_one_finding_report(finding,
                                                   environment={"hostname": "host-1"})))
    assert {s.get("hostname") for s in named.iter("testsuite")} == {"host-1"}


def test_a_finding_ignored_by_policy_does_not_fail():
    """A policy-ignored finding (``Finding.ignored``: the reason) is shown, not failed."""
    finding = Finding(CODE, "known on this box")
    object.__setattr__(finding, "ignored", "shared dev box")
    case = cases(parse(render_junit(_one_finding_report(finding))))["odd.check"]
    assert outcome(case) == "passed"
    assert "ignored by policy: shared dev box" in case.find("system-out").text


def test_cli_writes_the_junit_file(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    out = tmp_path / "out.xml"
    result = invoke("check", "--facts", str(FACTS_DIR / "no_driver.json"), "--junit", str(out))
    assert result.exit_code == 1, result.output
    root = parse(out.read_text(encoding="utf-8"))
    messages = [f.get("message") for f in root.iter("failure")]
    assert any(m.startswith("DRV001: ") for m in messages), messages
    assert "Findings" in result.stdout  # the console report is still printed


def test_cli_junit_to_stdout(monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    result = invoke("check", "--facts", str(FACTS_DIR / "no_driver.json"), "--junit", "-")
    assert result.exit_code == 1
    root = parse(result.stdout)
    assert any(f.get("message").startswith("DRV001: ") for f in root.iter("failure"))


@pytest.mark.slow
@pytest.mark.spawns
def test_junit_follows_the_policy_like_the_exit_code(tmp_path):
    """A warning the policy makes fail is a <failure>; an ignored finding never is."""
    import subprocess
    import sys
    from pathlib import Path

    fixture = Path(__file__).parents[1] / "fixtures" / "facts" / "healthy_8x_v100_pcie.json"
    for policy, code, failures in (
        ('fail-on-warnings = ["VIS006"]\n', 1, 1),
        ('ignore = { VIS006 = "shared box: other jobs are expected" }\n'
         'fail-on-warnings = true\n', 0, 0),
    ):
        (tmp_path / "ddp-doctor.toml").write_text(policy)
        done = subprocess.run([sys.executable, "-m", "ddp_doctor", "check", "--facts",
                               str(fixture), "--junit", "-"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == code, done.stderr
        assert done.stdout.count("<failure ") == failures, policy
