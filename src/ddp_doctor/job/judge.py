"""How a supervised run ended, as findings: a RUN code for the end, the log's causes after.

The log is judged by exactly the engine of ``ddp-doctor diagnose`` (it is called on the
log file), so a failure reads the same whether it was pasted later or caught live.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Optional

from ddp_doctor.categories import Category
from ddp_doctor.diagnose import InputError, diagnose
from ddp_doctor.forensics.flight_verdict import flight_findings
from ddp_doctor.forensics.verdict import hang_findings
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


def job_result(outcome: JobOutcome, options: JobOptions, log: Optional[CheckResult],
               judged: Optional[str] = None) -> CheckResult:
    """The run's own result: passed, or the one RUN finding that says how it ended;
    ``judged`` names the interpreter whose facts the checks judged."""
    finding = end_finding(outcome, options, log)
    if finding is not None and judged is not None:
        finding = replace(finding, evidence=(*finding.evidence,
                                             Evidence("interpreter judged", judged)))
    # A hang: where each rank waited names the culprit, and leads the run's end finding.
    hung = hang_findings(outcome.stacks, outcome.gone) if outcome.stacks else []
    # --flight-recorder: the collective each rank reached, after the lines they wait on.
    if outcome.stopped_by in ("stall", "timeout") and options.flight_dir is not None:
        hung += flight_findings(outcome.flight, outcome.gone, outcome.fr_analysis)
    findings = (*hung, *(() if finding is None else (finding,)))
    return CheckResult(check_id=CHECK_ID, title=CHECK_TITLE, area=AREA,
                       status=status_of(findings), summary=summary(outcome, options),
                       findings=findings, duration_s=round(outcome.wall_s, 3),
                       command=command_text(options.command))


def summary(outcome: JobOutcome, options: JobOptions) -> str:
    """One line beside the title "The supervised command": how it ended, after how long."""
    took = f"after {outcome.wall_s:.1f} s"
    said = f"; --nccl-debug: {_debug_env()}" if options.nccl_debug else ""
    if outcome.stopped_by == "until":
        return f"stopped at --until {took}, as a success{said}"
    if outcome.stopped_by == "stall":
        return f"printed nothing for {options.stall_s:g} s: stopped as hung {took}"
    if outcome.stopped_by == "timeout":
        return f"still running at --timeout {options.timeout_s:g} s: stopped"
    if outcome.returncode == 0:
        return f"succeeded {took}{said}"
    return f"failed ({_status(outcome)}) {took}"


def established(outcome: JobOutcome, options: JobOptions) -> str:
    """What the run established, for the verdict: how the command ended, never "ready"
    (the doctor cannot tell whether it trained on the GPUs the real job will use)."""
    took = f"after {outcome.wall_s:.1f} s"
    if outcome.stopped_by == "until":
        return f"stopped at --until {took}: the command printed the line it was waited for"
    if outcome.stopped_by == "stall":
        return f"the command printed nothing for {options.stall_s:g} s and was stopped"
    if outcome.stopped_by == "timeout":
        return f"the command was still running at --timeout {options.timeout_s:g} s"
    if outcome.returncode == 0:
        return f"the command succeeded {took}"
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
    if outcome.stacks or outcome.flight:
        read = "the ranks' stacks" + (" and Flight Recorder dumps" if outcome.flight else "")
        evidence.append(Evidence("read before the stop",
                                 f"{read}, in {outcome.capture_s:.1f} s"))
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
    """The checks worth reading after a failed run: those with errors or warnings, and
    those whose findings ``as_context`` turned into context (shown, not counted)."""
    return [r for r in results if r.status in (Status.FAIL, Status.WARN)
            or any(e.label == CONTEXT for f in r.findings for e in f.evidence)]


# Failure categories that only a job using the GPUs can suffer: a finding in one of them
# about this machine (no driver, a CPU-only torch, NCCL's shared memory) is the cause of a
# GPU job's failure and beside the point for a job that never initialised CUDA.
GPU_CATEGORIES = frozenset({
    Category.DRIVER_MISSING, Category.DRIVER_TOO_OLD, Category.DRIVER_LIBRARY_MISMATCH,
    Category.TORCH_CPU_ONLY, Category.TORCH_ARCH_UNSUPPORTED, Category.CUDA_INIT_FAILURE,
    Category.GPU_NOT_VISIBLE, Category.CUDNN_FAILURE, Category.GPU_OUT_OF_MEMORY,
    Category.NCCL_SHARED_MEMORY, Category.NCCL_P2P, Category.NCCL_NETWORK,
    Category.NCCL_UNAVAILABLE, Category.HARDWARE_FAULT,
})
# Words on a command line that ask for GPUs: YOLO's device=0,1, --device cuda / --device 0,
# --gpus 2, Accelerate's --multi_gpu, torchrun's --nproc-per-node gpu, a backend named.
_ASKS_GPUS = re.compile(
    r"(?:^|\s)(?:--?device[= ]|device=)['\"]?(?:cuda|\d)|--gpus?[= ](?!0\b)\S|--multi_gpu|"
    r"--nproc[-_]per[-_]node[= ]gpu\b|\bnccl\b|\bcuda\b", re.IGNORECASE)
# Lines of the output that only a job on the GPUs prints: NCCL's own, a cuda:N device.
_USED_GPUS = re.compile(r"\bNCCL (?:INFO|WARN)\b|\bcuda:\d", re.IGNORECASE)
_SCANNED_BYTES = 32 << 20  # the head of a huge log says as much as its whole
CONTEXT = "context, not the cause"  # the evidence label of a finding as_context demoted


def gpu_use(outcome: JobOutcome, options: JobOptions, log: Optional[CheckResult]
            ) -> Optional[str]:
    """Why the job is taken to have used the GPUs (evidence), or None when nothing shows it:
    the CUDA driver mapped in one of its processes, a command line asking for GPUs, the
    log's GPU failures, or output only NCCL or a CUDA device prints."""
    if outcome.cuda_loaded is not None:
        return f"the CUDA driver library was loaded in {outcome.cuda_loaded}"
    asked = _ASKS_GPUS.search(command_text(options.command))
    if asked:
        return f"the command asks for GPUs ({asked.group().strip()!r})"
    for finding in (log.findings if log is not None else ()):
        if finding.category in GPU_CATEGORIES:
            return f"its output shows a GPU failure ({finding.code.id})"
    try:
        with open(outcome.log_path, "rb") as text:
            for raw in text.readlines(_SCANNED_BYTES):
                line = raw.decode("utf-8", "replace")
                if _USED_GPUS.search(line):
                    return f"its output shows GPU work: {line.strip()[:120]!r}"
    except OSError:
        return None
    return None


def as_context(results: Sequence[CheckResult], why_not: str) -> list[CheckResult]:
    """The checks with their GPU findings turned into context (info) for a job that did
    not use the GPUs: still shown, with the reason, never counted as the failure's cause."""
    out = []
    for result in results:
        findings = tuple(
            replace(f, severity=Severity.INFO,
                    evidence=(*f.evidence, Evidence(CONTEXT, why_not)))
            if f.category in GPU_CATEGORIES and f.effective_severity is not Severity.INFO
            else f for f in result.findings)
        if findings == result.findings:
            out.append(result)
            continue
        status = status_of(findings) if result.status in (Status.FAIL, Status.WARN) \
            else result.status
        out.append(replace(result, findings=findings, status=status))
    return out
