"""How a supervised run ended, as findings: a RUN code for the end, the log's causes after.

The log is judged by exactly the engine of ``ddp-doctor diagnose`` (it is called on the
log file), so a failure reads the same whether it was pasted later or caught live.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from ddp_doctor.diagnose import InputError, diagnose
from ddp_doctor.job import codes as C
from ddp_doctor.job.supervise import NCCL_DEBUG_ENV, JobOptions, JobOutcome, command_text
from ddp_doctor.model import CheckResult, Evidence, Finding, Severity, Status, Step, status_of

CHECK_ID, CHECK_TITLE, AREA = "run.job", "The supervised command", "run"


def diagnose_log(path: str) -> Optional[CheckResult]:
    """The log's diagnosis (``diagnose`` on the file), or None for an empty log."""
    try:
        return diagnose(path).report.results[0]
    except InputError:
        return None


def job_result(outcome: JobOutcome, options: JobOptions, log: Optional[CheckResult]
               ) -> CheckResult:
    """The run's own result: passed, or the one RUN finding that says how it ended."""
    finding = end_finding(outcome, options, log)
    findings = () if finding is None else (finding,)
    return CheckResult(check_id=CHECK_ID, title=CHECK_TITLE, area=AREA,
                       status=status_of(findings), summary=summary(outcome, options),
                       findings=findings, duration_s=round(outcome.wall_s, 3),
                       command=command_text(options.command))


def summary(outcome: JobOutcome, options: JobOptions) -> str:
    """One line: how the command ended and after how long."""
    took = f"after {outcome.wall_s:.1f} s"
    if outcome.stopped_by == "until":
        said = f"; --nccl-debug: {_debug_env()}" if options.nccl_debug else ""
        return f"--until matched {took}: stopped as a success{said}"
    if outcome.stopped_by == "stall":
        return f"no output for {options.stall_s:g} s: stopped as hung {took}"
    if outcome.stopped_by == "timeout":
        return f"still running at --timeout {options.timeout_s:g} s: stopped"
    if outcome.returncode == 0:
        said = f"; --nccl-debug: {_debug_env()}" if options.nccl_debug else ""
        return f"the command succeeded {took}{said}"
    return f"the command failed ({_status(outcome)}) {took}"


def end_finding(outcome: JobOutcome, options: JobOptions, log: Optional[CheckResult]
                ) -> Optional[Finding]:
    """The RUN finding for a run that did not succeed, None for one that did."""
    if outcome.succeeded:
        return None
    evidence = [Evidence("command", command_text(options.command)),
                Evidence("how it ended", _status(outcome) if outcome.stopped_by is None
                         else f"stopped by the doctor ({outcome.stopped_by}), "
                              f"{_status(outcome)}"),
                Evidence("log", outcome.log_path)]
    lead = _lead(log)
    if outcome.stopped_by == "stall":
        code = C.OUTPUT_STALLED
        title = (f"the command printed nothing for {options.stall_s:g} s and was stopped "
                 "(a hang)")
        evidence += _last_lines(outcome)
    elif outcome.stopped_by == "timeout":
        code = C.TIMED_OUT
        title = (f"the command was still running at --timeout {options.timeout_s:g} s and "
                 "was stopped")
        evidence += _last_lines(outcome)
    else:
        code = C.COMMAND_FAILED
        cause = (f"most likely cause: {lead.code.category.value} ({lead.code.id})"
                 if lead is not None else "no known failure signature in its output")
        title = f"the command failed ({_status(outcome)}); {cause}"
        evidence.append(Evidence(
            "category", f"{lead.code.category.value}, from the log's {lead.code.id}"
            if lead is not None else "unknown: the log matched no known failure signature"))
        if outcome.last_line is not None:
            evidence.append(Evidence("last line", outcome.last_line, source="log"))
    if outcome.stopped_by is not None:
        evidence.append(Evidence(
            "stopped", f"every process it started had ended {outcome.cleanup_s:.1f} s after "
                       f"the deadline (SIGTERM, then SIGKILL after {options.grace_s:g} s)"
            if outcome.left_running == 0 else
            f"{outcome.left_running} of its processes were still alive after SIGKILL"))
    if options.nccl_debug:
        evidence.append(Evidence("--nccl-debug", f"set for the run: {_debug_env()}"))
    steps = [Step(f"read the whole output: {outcome.log_path}")]
    if not options.nccl_debug:
        steps.append(Step("re-run with --nccl-debug for NCCL and torch.distributed detail",
                          command=f"ddp-doctor run --nccl-debug -- "
                                  f"{command_text(options.command)}"))
    return Finding(code=code, title=title, evidence=tuple(evidence),
                   remediation=tuple(steps))


def _lead(log: Optional[CheckResult]) -> Optional[Finding]:
    """The log's first error finding: its most likely cause."""
    if log is None:
        return None
    for finding in log.findings:
        if finding.effective_severity is Severity.ERROR:
            return finding
    return None


def _last_lines(outcome: JobOutcome) -> list[Evidence]:
    found = []
    if outcome.last_line is not None:
        found.append(Evidence("last line", outcome.last_line, source="log"))
    for who, line in outcome.last_by_rank.items():
        found.append(Evidence(f"last line of {who}", line, source="log"))
    return found


def _status(outcome: JobOutcome) -> str:
    if outcome.returncode is None:
        return "no exit status"
    name = outcome.signal_name
    if name is not None:
        return f"killed by {name}"
    return f"exit status {outcome.returncode}"


def _debug_env() -> str:
    return ", ".join(f"{k}={v}" for k, v in NCCL_DEBUG_ENV.items())


def problem_results(results: Sequence[CheckResult]) -> list[CheckResult]:
    """The checks worth reading after a failed run: those with errors or warnings."""
    return [r for r in results if r.status in (Status.FAIL, Status.WARN)]
