"""The data model: categories come from codes, severities order findings, exit codes."""

from __future__ import annotations

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
)

WARN_CODE = Code("TST001", Category.NCCL_P2P, "warn", "w", "w", "w", severity=Severity.WARNING)
ERR_CODE = Code("TST002", Category.DRIVER_MISSING, "err", "w", "w", "w")


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
