"""JUnit XML report, for the test-report views of CI systems.

CI systems have no idea what a GPU pre-flight is, but all of them can show test
results. Each check becomes one test case, so a missing driver appears in the merge
request as a failed test named ``driver.present`` with the finding, its evidence and the
fix steps as the failure text:

- one ``<testsuite>`` per check area (``ddp_doctor.driver``, ``ddp_doctor.pytorch``, ...),
  one ``<testcase classname="ddp_doctor.<area>" name="<check id>">`` per check result;
- a check with error-severity findings is a ``<failure>`` (``message`` is "CODE: title",
  ``type`` the finding's category); a check with warnings passes unless ``strict`` (the
  same rule as the exit code); a crashed check is an ``<error>`` carrying its traceback; a
  skipped check is ``<skipped message="reason"/>``;
- the smoke-training job adds one test case per pass criterion (the job ran, all steps
  done, loss finite, loss fell, ranks in sync, all-reduce correct, measurements) to the
  ``ddp_doctor.smoke`` suite, so a CI history shows which criterion broke;
- every suite carries ``<properties>`` with the tool version, the verdict and the exit
  code, because ``<testsuites>`` may not carry any.

The element and attribute set is the one Jenkins' xUnit plugin accepts (its junit-10.xsd:
https://github.com/jenkinsci/xunit-plugin/tree/master/src/main/resources/org/jenkinsci/plugins/xunit/types/model/xsd
), which is also what GitLab reads for ``artifacts:reports:junit``
(https://docs.gitlab.com/ee/ci/testing/unit_test_reports.html) and what the JUnit
actions on GitHub parse. tests/report/test_render_junit.py validates the output against a
schema of that shape with the ``xmlschema`` library.

Like every renderer this is a pure function of the (already redacted) ``Report``: the
host name appears only if the report itself carries one, never looked up here.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ddp_doctor.model import CheckResult, Finding, Report, Severity, Status
from ddp_doctor.report.smoke import smoke_rows
from ddp_doctor.wording import count

PACKAGE = "ddp_doctor"
SMOKE_AREA = "smoke"
SMOKE_CHECK_ID = "smoke.train"
# XML 1.0 cannot carry these characters at all, not even escaped (ANSI colour codes in a
# rank's stderr are the usual source); they are written as visible \xNN escapes instead.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: object) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def _seconds(value: float) -> str:
    """Seconds as plain decimals: the time pattern of junit-10.xsd allows no exponent."""
    return f"{max(0.0, float(value or 0.0)):.3f}"


def _ignored(finding: Finding) -> str | None:
    """The policy's reason when this finding is ignored (it then never fails a test)."""
    reason = getattr(finding, "ignored", None)
    return str(reason) if reason else None


class _Judge:
    """--strict plus the report's own rule (``Report.is_problem``: ignored findings never
    fail, the policy's fail-on-warnings do), passed to whatever decides a test case."""

    def __init__(self, report: Report | None, strict: bool) -> None:
        self.report, self.strict = report, strict

    def fails(self, finding: Finding) -> bool:
        if self.report is not None:
            return self.report.is_problem(finding, self.strict)
        if _ignored(finding):
            return False
        severity = finding.effective_severity
        return severity is Severity.ERROR or (self.strict and severity is Severity.WARNING)


def _judge(strict: bool | _Judge) -> _Judge:
    """A bare --strict flag judged without a report's policy, or the judge given."""
    return strict if isinstance(strict, _Judge) else _Judge(None, strict)


def finding_text(finding: Finding) -> str:
    """A finding as plain text: title, evidence, numbered fix steps with their commands."""
    sev = finding.effective_severity.value
    lines = [f"{finding.code.id} [{finding.category.value}] {sev}: {finding.title}"]
    if _ignored(finding):
        lines.append(f"ignored by policy: {_ignored(finding)}")
    if finding.affects:
        lines.append(f"affects: {', '.join(finding.affects)}")
    if finding.evidence:
        lines.append("Evidence:")
        for ev in finding.evidence:
            value = ev.value.rstrip().replace("\n", "\n      ")
            source = f" ({ev.source})" if ev.source else ""
            lines.append(f"  - {ev.label}: {value}{source}")
    if finding.remediation:
        lines.append("How to fix:")
        for number, step in enumerate(finding.remediation, 1):
            lines.append(f"  {number}. {step.text}")
            if step.command:
                lines.append(f"     $ {step.command}")
            if step.url:
                lines.append(f"     {step.url}")
    docs = finding.docs_url or finding.code.docs_url
    lines.append(f"Details: ddp-doctor explain {finding.code.id}"
                 + (f" · {docs}" if docs else ""))
    return "\n".join(lines)


@dataclass
class _Case:
    """One test case before it becomes XML."""

    classname: str
    name: str
    time: float = 0.0
    failing: tuple[Finding, ...] = ()
    failure_message: str | None = None  # a failure without a finding (smoke fallback)
    error: tuple[str, str] | None = None  # (message, traceback)
    skipped: str | None = None
    out: str = ""

    def element(self) -> ET.Element:
        case = ET.Element("testcase", classname=_xml_text(self.classname),
                          name=_xml_text(self.name),
                          time=_seconds(self.time))
        if self.skipped is not None:
            ET.SubElement(case, "skipped", message=_xml_text(self.skipped))
        elif self.error is not None:
            node = ET.SubElement(case, "error", message=_xml_text(self.error[0]),
                                 type="CheckError")
            node.text = _xml_text(self.error[1].rstrip() + "\n") if self.error[1] else None
        elif self.failing:
            first = self.failing[0]
            message = f"{first.code.id}: {first.title}"
            if len(self.failing) > 1:
                message += f" (and {len(self.failing) - 1} more)"
            node = ET.SubElement(case, "failure", message=_xml_text(message),
                                 type=first.category.value)
            node.text = _xml_text("\n\n".join(finding_text(f) for f in self.failing) + "\n")
        elif self.failure_message is not None:
            ET.SubElement(case, "failure", message=_xml_text(self.failure_message),
                          type="smoke")
        if self.out:
            ET.SubElement(case, "system-out").text = _xml_text(self.out.rstrip() + "\n")
        return case


def _out(summary: str, command: str | None, others: Iterable[Finding], strict: bool) -> str:
    """What a test case prints: its summary, a command to copy, and non-failing findings.

    The summary is left out of failed and crashed cases (the failure already says it).
    """
    parts = [summary] if summary else []
    if command:
        parts.append(f"$ {command}")
    shown = list(others)
    if shown:
        warned = any(f.effective_severity is Severity.WARNING and not _ignored(f)
                     for f in shown)
        note = " (not failing; --strict makes warnings fail)" if warned and not strict else ""
        parts.append(f"Also reported{note}:")
        parts.append("\n\n".join(finding_text(f) for f in shown))
    return "\n".join(parts)


def _check_case(result: CheckResult, judge: _Judge) -> _Case:
    strict = judge.strict
    case = _Case(f"{PACKAGE}.{result.area}", result.check_id, result.duration_s)
    if result.status is Status.SKIP:
        case.skipped = result.skip_reason or result.summary or "skipped"
        return case
    if result.status is Status.ERROR:
        case.error = (result.summary or "check crashed", result.error or "")
        case.out = _out("", result.command, result.findings, strict)
        return case
    if result.area == SMOKE_AREA:
        # The smoke job's findings fail the criterion cases that claim them (below); failing
        # them here too would count each problem twice on a CI dashboard.
        case.out = _out(result.summary, result.command, result.findings, strict)
        return case
    case.failing = tuple(f for f in result.findings if judge.fails(f))
    others = [f for f in result.findings if f not in case.failing]
    case.out = _out("" if case.failing else result.summary, result.command, others, strict)
    return case


_RAN = "smoke.ran"
CRITERIA = ("smoke.ran", "smoke.all_steps", "smoke.loss_finite", "smoke.loss_falls",
            "smoke.ranks_in_sync", "smoke.all_reduce", "smoke.measurements")
"""The smoke job's pass criteria (``smoke_verdict.criteria_findings``), one test case each."""


@dataclass(frozen=True)
class SmokeCodes:
    """Which of the smoke job's codes fail which criterion; every other finding of the job
    belongs to "the job ran".

    The codes are the smoke job's (``smoke/codes.py``), and a renderer lies under it: the
    job's own table (``smoke.junit_codes.SMOKE_CODES``) is handed in by whoever renders.
    """

    fails: Mapping[str, frozenset[str]]  # criterion -> the codes that report it failing
    loss_not_finite: str  # a code that leaves "the loss falls" unjudged
    loss_not_judged: str  # a note that the loss could not be judged: the case is skipped

    @property
    def claimed(self) -> frozenset[str]:
        return frozenset().union(*self.fails.values())


def _clean(data: dict[str, Any]) -> bool:
    """The job ran to its end: the only case in which the criteria were judged."""
    return data.get("exit_code") == 0 and not data.get("stopped_by")


def _not_judged(name: str, data: dict[str, Any], codes: set[str],
                smoke_codes: SmokeCodes) -> str | None:
    """Why a criterion was not judged in this run, or None when it was."""
    if name == _RAN:
        return None
    if not _clean(data):
        return "not judged: the job did not finish (see smoke.ran)"
    dp = data.get("mode") != "ddp"
    if name in ("smoke.loss_finite", "smoke.loss_falls") and data.get("loss_first") is None:
        return "not judged: no loss was recorded"
    if name == "smoke.loss_falls" and smoke_codes.loss_not_finite in codes:
        return "not judged: the loss was not finite"
    if name == "smoke.ranks_in_sync":
        if dp:
            return "not judged: one process (--mode dp) has no replicas to compare"
        if data.get("params_in_sync") is None:
            return "not judged: no parameter fingerprints were recorded"
    if name == "smoke.all_reduce":
        if dp:
            return "not judged: one process (--mode dp) runs no all-reduce"
        if data.get("all_reduce_ok") is None:
            return "not judged: no all-reduce result was recorded"
    if name == "smoke.measurements" and (
            (data.get("measurements") or {}).get("median_step_s") is None):
        return "not judged: no step timings were recorded"
    return None


def _passed_text(name: str, data: dict[str, Any]) -> str:
    """What a passing criterion saw, for the test case's output."""
    if name == _RAN:
        return (f"{count(int(data.get('ranks') or 0), 'rank')} on {data.get('device')}, exit code "
                f"{data.get('exit_code')}, {data.get('wall_s', 0):.1f} s")
    if name == "smoke.all_steps":
        return f"{data.get('steps_done')} of {data.get('steps')} steps on every rank"
    if name in ("smoke.loss_finite", "smoke.loss_falls"):
        return f"loss {data.get('loss_first'):.4g} → {data.get('loss_last'):.4g}"
    if name == "smoke.ranks_in_sync":
        return "parameters bit-identical on every rank after training"
    if name == "smoke.all_reduce":
        return "all-reduce returned the expected value on every rank"
    return "\n".join(f"{label}: {value}" for label, value in smoke_rows(data))


def smoke_cases(data: dict[str, Any], findings: tuple[Finding, ...],
                strict: bool | _Judge, smoke_codes: SmokeCodes) -> list[_Case]:
    """One test case per pass criterion of the smoke job (all skipped when it did not run)."""
    judge = _judge(strict)
    strict = judge.strict
    classname = f"{PACKAGE}.{SMOKE_AREA}"
    if data.get("skipped"):
        return [_Case(classname, name, skipped=f"smoke job not run: {data['skipped']}")
                for name in CRITERIA]
    codes = {f.code.id for f in findings}
    cases = []
    claimed = smoke_codes.claimed
    for name in CRITERIA:
        claims = smoke_codes.fails.get(name, frozenset())
        mine = [f for f in findings if (f.code.id in claims if claims
                                        else name == _RAN and f.code.id not in claimed)]
        failing = tuple(f for f in mine if judge.fails(f))
        others = [f for f in mine if f not in failing]
        case = _Case(classname, name)  # the time is the smoke.train case's
        reason = _not_judged(name, data, codes, smoke_codes)
        not_judged_note = next((f for f in mine if f.code.id == smoke_codes.loss_not_judged),
                               None)
        if failing:
            case.failing = failing
            case.out = _out("", None, others, strict)
        elif reason is not None:
            case.skipped = reason
        elif not_judged_note is not None:
            case.skipped = f"{not_judged_note.code.id}: {not_judged_note.title}"
        elif name == _RAN and not _clean(data) and not mine:
            case.failure_message = (f"the job did not exit cleanly (exit code "
                                    f"{data.get('exit_code')}, stopped by "
                                    f"{data.get('stopped_by') or 'nothing'})")
        else:
            case.out = _out(_passed_text(name, data), None, others, strict)
        cases.append(case)
    return cases


def _properties(report: Report, strict: bool) -> ET.Element:
    props = ET.Element("properties")
    for name, value in (("ddp_doctor.version", report.tool_version),
                        ("ddp_doctor.verdict", report.verdict(strict)),
                        ("ddp_doctor.exit_code", str(report.exit_code(strict))),
                        ("ddp_doctor.strict", "true" if strict else "false"),
                        ("ddp_doctor.facts_source", report.facts_source)):
        ET.SubElement(props, "property", name=name, value=_xml_text(value))
    return props


def _suite(report: Report, area: str, cases: list[_Case], time: float,
           strict: bool) -> ET.Element:
    elements = [c.element() for c in cases]

    def count(tag: str) -> str:
        return str(sum(1 for e in elements if e.find(tag) is not None))

    attrs = {"name": f"{PACKAGE}.{area}", "tests": str(len(elements)),
             "failures": count("failure"), "errors": count("error"),
             "skipped": count("skipped"), "time": _seconds(time),
             "timestamp": report.created_at}
    hostname = report.environment.get("hostname")
    if isinstance(hostname, str) and hostname:
        attrs["hostname"] = _xml_text(hostname)
    suite = ET.Element("testsuite", {k: _xml_text(v) for k, v in attrs.items()})
    suite.append(_properties(report, strict))
    suite.extend(elements)
    return suite


def render_junit(report: Report, strict: bool = False,
                 smoke_codes: SmokeCodes | None = None) -> str:
    """The report as a JUnit XML document (UTF-8, with its XML declaration). A report with
    a smoke job needs SMOKE_CODES (``smoke.junit_codes.SMOKE_CODES``) for its criteria."""
    judge = _Judge(report, strict)
    by_area: dict[str, list[CheckResult]] = {}
    for result in report.results:
        by_area.setdefault(result.area, []).append(result)
    if report.smoke is not None:
        by_area.setdefault(SMOKE_AREA, [])
    root = ET.Element("testsuites", name="ddp-doctor")
    for area, results in by_area.items():
        cases = [_check_case(r, judge) for r in results]
        if area == SMOKE_AREA and report.smoke is not None:
            smoke_findings = tuple(f for r in results if r.check_id == SMOKE_CHECK_ID
                                   for f in r.findings)
            if smoke_codes is None:
                raise ValueError("a report with a smoke job needs the smoke job's codes "
                                 "(smoke.junit_codes.SMOKE_CODES) to render its criteria")
            cases += smoke_cases(report.smoke, smoke_findings, judge, smoke_codes)
        root.append(_suite(report, area, cases, sum(r.duration_s for r in results), strict))
    suites = list(root)
    for attr in ("tests", "failures", "errors"):
        root.set(attr, str(sum(int(s.get(attr, "0")) for s in suites)))
    root.set("time", _seconds(sum(r.duration_s for r in report.results)))
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"
