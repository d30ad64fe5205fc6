"""A support bundle's own report: the verdict the machine itself recorded leads.

A bundle carries ``report.json``, written on the machine by the run that made the
bundle, from measurements (the probe, the checks, the smoke job). Its logs carry every
line that run printed, harmless warnings included. Read alone, a log line such as a
NumPy warning can look like a cause; weighed against a run that trained and passed on
that very machine, it cannot be one. So the recorded findings come first, and when the
recorded run passed, what the log rules find in its logs is at most a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ddp_doctor.codes import foreign
from ddp_doctor.model import Code, Evidence, Finding, Severity, Step

RECORDED_SOURCE = "the bundle's report.json (recorded on the machine)"


def recorded_run_passed(report: Mapping[str, Any]) -> bool:
    """True when the recorded run found no problem: exit code 0, or a smoke job that passed."""
    smoke = report.get("smoke")
    if isinstance(smoke, Mapping) and smoke.get("ok") is True:
        return True
    return report.get("exit_code") == 0


def _severity(value: Any, default: Severity) -> Severity:
    try:
        return Severity(value)
    except ValueError:
        return default


def _code(data: Mapping[str, Any], known: Mapping[str, Code]) -> Code:
    """The registered code of a recorded finding; one rebuilt from the JSON when unknown here
    (a third-party plugin's code, or one from a newer ddp-doctor)."""
    code_id = str(data.get("code") or "UNKNOWN")
    if code_id in known:
        return known[code_id]
    return foreign(code_id, data.get("category"), str(data.get("title") or code_id),
                   data.get("severity"))


def recorded_findings(report: Mapping[str, Any], known: Mapping[str, Code]) -> list[Finding]:
    """The findings a recorded JSON report lists, as Findings, in the recorded order."""
    found: list[Finding] = []
    for data in report.get("findings") or ():
        if not isinstance(data, Mapping):
            continue
        code = _code(data, known)
        evidence = tuple(
            Evidence(str(e.get("label") or ""), str(e.get("value") or ""),
                     str(e.get("source") or RECORDED_SOURCE))
            for e in data.get("evidence") or () if isinstance(e, Mapping))
        steps = tuple(
            Step(str(s.get("text") or ""), s.get("command") or None, s.get("url") or None)
            for s in data.get("remediation") or () if isinstance(s, Mapping))
        found.append(Finding(
            code, str(data.get("title") or code.summary),
            (*evidence, Evidence("recorded by", RECORDED_SOURCE)),
            steps, severity=_severity(data.get("severity"), code.severity),
            affects=tuple(str(a) for a in data.get("affects") or ()),
            docs_url=data.get("docs_url") or None, ignored=data.get("ignored")))
    return found


def capped_by_passed_run(finding: Finding, report: Mapping[str, Any]) -> Finding:
    """A log finding of a bundle whose recorded run passed: an error becomes a warning, with why."""
    if finding.effective_severity is not Severity.ERROR:
        return finding
    verdict = str(report.get("verdict") or "ready")
    return replace(finding, severity=Severity.WARNING, evidence=(
        *finding.evidence,
        Evidence("but the run passed", f"the report made on the machine says {verdict!r}: "
                 "these lines did not stop it", RECORDED_SOURCE)))
