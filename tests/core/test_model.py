"""The data model: categories come from codes, severities order findings, exit codes."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.model import (
    CheckResult,
    Code,
    Evidence,
    Finding,
    Report,
    Severity,
    Status,
    Step,
    status_of,
)

WARN_CODE = Code("TST001", Category.NCCL_P2P, "warn", "w", "w", "w", severity=Severity.WARNING)
ERR_CODE = Code("TST002", Category.DRIVER_MISSING, "err", "w", "w", "w")
INFO_CODE = Code("TST003", Category.UNKNOWN, "info", "w", "w", "w", severity=Severity.INFO)
REPO = Path(__file__).resolve().parents[2]


def _result(status: Status, *findings: Finding) -> CheckResult:
    return CheckResult("c." + status.value, "T", "area", status, "s", findings=findings)


def test_finding_category_comes_from_its_code():
    finding = Finding(ERR_CODE, "title")
    assert finding.category is Category.DRIVER_MISSING
    assert finding.to_dict()["category"] == "driver_missing"


def test_finding_severity_defaults_to_code_and_can_be_overridden():
    assert Finding(WARN_CODE, "t").effective_severity is Severity.WARNING
    assert Finding(WARN_CODE, "t", severity=Severity.ERROR).effective_severity is Severity.ERROR


def test_finding_dict_has_every_contract_field():
    finding = Finding(
        ERR_CODE, "No driver", evidence=(Evidence("NVML", "not found", "nvmlInit"),),
        remediation=(Step("install", command="sudo ubuntu-drivers install"),), affects=("gpu:0",),
    )
    data = finding.to_dict()
    assert data == {
        "code": "TST002", "category": "driver_missing", "severity": "error", "title": "No driver",
        "evidence": [{"label": "NVML", "value": "not found", "source": "nvmlInit"}],
        "remediation": [{"text": "install", "command": "sudo ubuntu-drivers install",
                         "url": None}],
        "affects": ["gpu:0"], "docs_url": None,
    }


def test_report_lists_errors_before_warnings():
    warn, err = Finding(WARN_CODE, "w"), Finding(ERR_CODE, "e")
    report = Report("0", "now", (_result(Status.WARN, warn), _result(Status.FAIL, err)))
    assert [f.code.id for f in report.findings] == ["TST002", "TST001"]


def test_exit_codes():
    ready = Report("0", "now", (_result(Status.PASS),))
    warned = Report("0", "now", (_result(Status.WARN, Finding(WARN_CODE, "w")),))
    failed = Report("0", "now", (_result(Status.FAIL, Finding(ERR_CODE, "e")),))
    crashed = Report("0", "now", (_result(Status.ERROR),))
    crashed_and_failed = Report("0", "now", (_result(Status.ERROR),
                                            _result(Status.FAIL, Finding(ERR_CODE, "e"))))
    assert ready.exit_code() == 0
    assert warned.exit_code() == 0
    assert warned.exit_code(strict=True) == 1
    assert failed.exit_code() == 1
    assert crashed.exit_code() == 3
    assert crashed_and_failed.exit_code() == 1  # the user's problem is reported first
    assert failed.to_dict()["verdict"] == "problems found"
    assert crashed.to_dict()["verdict"] == "doctor error"


def test_report_dict_counts_statuses():
    report = Report("0", "now", (_result(Status.PASS), _result(Status.SKIP), _result(Status.SKIP)))
    data = report.to_dict()
    assert data["schema_version"] == 1
    assert data["counts"] == {"pass": 1, "warn": 0, "fail": 0, "skip": 2, "error": 0}


# --- status_of: the one severity -> status rule ------------------------------------------------

INFO, WARN, ERR = Finding(INFO_CODE, "i"), Finding(WARN_CODE, "w"), Finding(ERR_CODE, "e")


@pytest.mark.parametrize(("findings", "status"), [
    ((), Status.PASS),
    ((INFO,), Status.PASS),
    ((INFO, WARN), Status.WARN),
    ((WARN, INFO, WARN), Status.WARN),
    ((WARN, ERR), Status.FAIL),
    ((ERR, INFO), Status.FAIL),
])
def test_status_is_the_worst_severity(findings, status):
    assert status_of(findings) is status
    assert status_of(iter(findings)) is status  # any iterable, read once


def test_status_uses_the_findings_own_severity_over_the_codes():
    assert status_of([Finding(WARN_CODE, "w", severity=Severity.ERROR)]) is Status.FAIL
    assert status_of([Finding(ERR_CODE, "e", severity=Severity.WARNING)]) is Status.WARN
    assert status_of([Finding(ERR_CODE, "e", severity=Severity.INFO)]) is Status.PASS


def test_ignored_findings_are_shown_but_not_judged():
    ignored_err = replace(ERR, ignored="known, fixed next week")
    assert status_of([ignored_err]) is Status.PASS
    assert status_of([ignored_err, WARN]) is Status.WARN
    assert status_of([replace(WARN, ignored="noise")], fail_on_warnings=True) is Status.PASS


def test_fail_on_warnings_all_or_by_code():
    assert status_of([WARN], fail_on_warnings=True) is Status.FAIL
    assert status_of([WARN], fail_on_warnings=("TST001",)) is Status.FAIL
    assert status_of([WARN], fail_on_warnings=("TST999",)) is Status.WARN
    assert status_of([INFO], fail_on_warnings=True) is Status.PASS  # info never fails


def test_report_verdict_and_is_problem_follow_status_of():
    warned = Report("0", "now", (_result(Status.WARN, WARN),), fail_on_warnings=("TST001",))
    assert warned.is_problem(WARN) and warned.exit_code() == 1
    other = replace(warned, fail_on_warnings=("TST999",))
    assert not other.is_problem(WARN) and other.exit_code() == 0
    assert other.is_problem(WARN, strict=True) and other.exit_code(strict=True) == 1
    assert not other.is_problem(replace(ERR, ignored="accepted"))
    # A warning that fails does not outrank a crashed check; an error does.
    crashed = Report("0", "now", (_result(Status.ERROR), _result(Status.WARN, WARN)),
                     fail_on_warnings=True)
    assert crashed.exit_code() == 3


def test_the_status_rule_is_written_only_in_status_of():
    """No other module turns severities into a status or compares severity ranks for one."""
    rederives = re.compile(r"return Status\.(?:PASS|WARN|FAIL)\b|Status\.(?:PASS|WARN|FAIL) if"
                           r"|\.rank\s*[<>]=?|Severity\.\w+\.rank")
    sources = [*(REPO / "src" / "ddp_doctor").rglob("*.py"), *(REPO / "checks").glob("*.py")]
    offenders = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in sources
                 if p != REPO / "src" / "ddp_doctor" / "model.py"
                 for m in rederives.finditer(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_strict_is_read_for_its_truth_not_its_identity():
    """The JUnit renderer passes ``strict`` as an object that is only truthy; a warning must
    fail under it exactly as under ``strict=True``."""

    class Truthy:
        def __bool__(self) -> bool:
            return True

    warned = Report("0", "now", (_result(Status.WARN, WARN),))
    assert warned.is_problem(WARN, Truthy())  # type: ignore[arg-type]
    assert warned.exit_code(Truthy()) == 1  # type: ignore[arg-type]
