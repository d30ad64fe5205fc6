"""A CI policy applied to a finished Report: its requirements judged, ignores and fails marked.

Kept apart from ``policy.load`` (finding and validating the file) so that the chain is one
way: ``apply`` uses ``load`` and ``requirements``; ``requirements`` uses ``load``'s Policy;
``load`` uses neither.
"""

from __future__ import annotations

from dataclasses import replace

from ddp_doctor.facts.snapshot import Facts
from ddp_doctor.model import CheckResult, Report, Status, status_of
from ddp_doctor.policy.load import Policy
from ddp_doctor.policy.requirements import requirement_findings, requirements_summary

CHECK_ID = "policy.requirements"
CHECK_TITLE = "Policy requirements"
AREA = "policy"


def _judged_status(result: CheckResult, fails: bool | tuple[str, ...]) -> Status:
    """The check's status once ignored findings no longer count and listed warnings fail."""
    if result.status not in (Status.PASS, Status.WARN, Status.FAIL):
        return result.status  # skipped and crashed checks stay as the runner left them
    return status_of(result.findings, fails)


def _with_ignores(result: CheckResult, policy: Policy) -> CheckResult:
    findings = tuple(replace(f, ignored=policy.ignore[f.code.id])
                     if f.code.id in policy.ignore and f.ignored is None else f
                     for f in result.findings)
    marked = replace(result, findings=findings)
    ignored = [f.code.id for f in findings if f.ignored is not None]
    summary = result.summary
    if ignored:
        summary += f" ({', '.join(dict.fromkeys(ignored))} ignored by policy)"
    return replace(marked, status=_judged_status(marked, policy.fail_on_warnings),
                   summary=summary)


def apply_policy(report: Report, policy: Policy, facts: Facts | None) -> Report:
    """The report judged by the policy: its requirements as one more check, ignored codes
    marked (still shown), warnings that fail counted, and where the policy came from."""
    findings = requirement_findings(policy, facts, report.smoke)
    own = CheckResult(CHECK_ID, CHECK_TITLE, AREA, status_of(findings),
                      requirements_summary(policy, findings), findings=tuple(findings))
    results = tuple(_with_ignores(r, policy) for r in (*report.results, own))
    return replace(report, results=results, policy_file=str(policy.path),
                   fail_on_warnings=policy.fail_on_warnings)
