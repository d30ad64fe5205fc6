"""``ddp-doctor diagnose``: a pasted log, a ``.gz`` or a support bundle in, causes out.

The pipeline is a stream: ``source`` opens and sniffs the input, ``normalize`` turns
bytes into clean lines, ``scan`` finds the lines the log rules match (and captures any
collect_env / nvidia-smi / yolo checks section), ``compose`` folds symptoms into causes,
and the check plugins run on the facts read from the text. The result is an ordinary
``Report``, so ``--json``, ``--markdown`` and the exit codes work as they do for ``check``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import IO, Any

from ddp_doctor import __version__
from ddp_doctor.diagnose.causal_order import rank
from ddp_doctor.diagnose.compose import (
    compose,
    damaged_input,
    env_evidence,
    line_label,
    nothing_matched,
)
from ddp_doctor.diagnose.context import refine
from ddp_doctor.diagnose.recorded import (
    capped_by_passed_run,
    recorded_findings,
    recorded_run_passed,
)
from ddp_doctor.diagnose.scan import Scanner, ScanResult
from ddp_doctor.diagnose.source import InputError, open_input
from ddp_doctor.facts.snapshot import Facts, FactsFileError
from ddp_doctor.model import (
    CheckResult,
    Code,
    Evidence,
    Finding,
    Report,
    Severity,
    Status,
    status_of,
)

__all__ = ["Diagnosis", "InputError", "diagnose", "scan_input"]


@dataclass(frozen=True)
class Diagnosis:
    """The report plus what the scan saw, for callers that want more than the report."""

    report: Report
    scan: ScanResult
    facts: Facts | None


def scan_input(target: str, stdin: IO[bytes] | None = None, rules: Sequence[Any] | None = None
               ) -> tuple[ScanResult, list[dict[str, Any]], list[str], list[dict[str, Any]],
                          list[tuple[str, bytes]]]:
    """Scan every text document of the input.

    Returns the scan, the facts snapshots, reading notes, the reports a bundle recorded,
    and the Flight Recorder dumps it holds (name, bytes).
    """
    from ddp_doctor.logrules import GATES, RULES
    from ddp_doctor.textfacts import SECTION_MARKERS

    opened = open_input(target, stdin)
    scanner = Scanner(RULES if rules is None else rules, GATES, SECTION_MARKERS)
    for document in opened.documents:
        scanner.scan(document)
    return (scanner.result, opened.facts_snapshots, opened.notes, opened.recorded_reports,
            opened.flight_dumps)


def _environment(scan: ScanResult, snapshots: list[dict[str, Any]]
                 ) -> tuple[Facts | None, str]:
    """Facts to run the checks on: a bundle's snapshot, else what the text sections show."""
    for snapshot in snapshots:
        try:
            return Facts.from_dict(snapshot), "the bundle's facts snapshot"
        except FactsFileError:
            continue
    if not scan.sections:
        return None, ""
    from ddp_doctor.textfacts import facts_from_text

    lines: list[str] = []
    starts: list[tuple[int, str, int]] = []  # (offset in joined text, document, first line)
    for section in scan.sections:
        starts.append((len(lines), section.document, section.first_line))
        lines += section.lines
    parsed = facts_from_text("\n".join(lines) + "\n")
    if parsed is None:
        return None, ""
    places = []
    for found in parsed.sections:
        offset, document, first = max((s for s in starts if s[0] < found.first_line),
                                      default=starts[0])
        line = first + found.first_line - 1 - offset
        where = line_label(document, line, len(scan.documents) > 1)
        places.append(f"{found.title} at {where}")
    return parsed.facts, ", ".join(places)


def _env_findings(facts: Facts, where: str) -> list[Finding]:
    from ddp_doctor.checklist import load_catalogue
    from ddp_doctor.runner import run_checks

    found: list[Finding] = []
    for result in run_checks(load_catalogue(), facts):
        if result.status in (Status.FAIL, Status.WARN):
            found += [env_evidence(f, where) for f in result.findings]
    return found


# A log finding that says what a check of the machine's facts says, the pair declared here:
# a bundle's packages.txt naming torch 2.1.0+cpu (LOG112) restates TOR002, which read the same
# build from the interpreter. Declared pair by pair: a category holds unrelated causes.
RESTATED_BY_CHECKS: dict[str, tuple[str, ...]] = {"LOG112": ("TOR002",)}


def _restated_by_checks(findings: list[Finding], machine: list[Finding]) -> list[Finding]:
    """The findings with each log finding that restates one of the machine's own findings
    (the checks on its facts, or the report a bundle recorded: ``RESTATED_BY_CHECKS``)
    folded into it as its evidence: one cause, one finding."""
    out = list(findings)
    for finding in findings:
        wanted = RESTATED_BY_CHECKS.get(finding.code.id, ())
        cause = next((f for f in out if f.code.id in wanted and f in machine), None)
        if cause is None or finding in machine:
            continue
        at = out.index(cause)
        out[at] = replace(cause, evidence=(*cause.evidence, Evidence(
            f"consequence, {finding.code.id}", f"{finding.title} ({finding.code.id})",
            "the log")))
        machine = [out[at] if f is cause else f for f in machine]
        out.remove(finding)
    return out


def _recorded_summary(report: dict[str, Any], first: Finding | None) -> str:
    """The summary line of a bundle diagnosis: the recorded verdict first."""
    verdict = report.get("verdict") or "unknown"
    summary = f"the bundle's own report (made on the machine) says {verdict!r}"
    if first is not None and first.effective_severity is Severity.ERROR:
        summary += f"; most likely cause: {first.code.category.value} ({first.code.id})"
    return summary


def diagnose(target: str, stdin: IO[bytes] | None = None,
             rules: Sequence[Any] | None = None,
             known_codes: Callable[[], Mapping[str, Code]] | None = None) -> Diagnosis:
    """Diagnose a log file, ``-`` (stdin), a ``.gz`` or a bundle; raise InputError if unusable.

    KNOWN_CODES gives every code by id (``ddp_doctor.codebook.all_codes``), to rebuild the
    findings a bundle's recorded report names: the families lie above ``diagnose`` (the
    smoke job and ``run`` call it), so its caller hands them in. Without it, a recorded
    code is rebuilt from what the report itself says of it (``codes.foreign``).
    """
    from ddp_doctor.runner import summarize_environment

    scan, snapshots, notes, recorded, dumps = scan_input(target, stdin, rules)
    if scan.blank and not snapshots and not recorded and not dumps:
        why = f" ({'; '.join(notes)})" if notes else ""
        raise InputError(f"{'stdin' if target == '-' else target}: empty input, nothing to "
                         f"diagnose{why}")
    from ddp_doctor.logrules.nccl import NCCL_SOCKET
    from ddp_doctor.logrules.which_trainer import which_trainer

    trainer = which_trainer(text for context in scan.contexts
                            for text in (context.head, context.tail))
    ordered = refine(compose(scan, trainer), scan, NCCL_SOCKET)
    facts, where = _environment(scan, snapshots)
    env = _env_findings(facts, where) if facts is not None else []
    lead: list[Finding] = []
    if recorded:
        # The machine's own verdict leads; the log rules and a newer catalogue add to it.
        lead = recorded_findings(recorded[0], known_codes() if known_codes else {})
        seen = {f.code.id for f in lead}
        env = [f for f in env if f.code.id not in seen]
        if recorded_run_passed(recorded[0]):
            ordered = [(capped_by_passed_run(f, recorded[0]), i) for f, i in ordered]
    nodes = scan.nodes.judge()  # the hosts of a multi-node log against each other
    between = list(nodes.findings) if nodes is not None else []
    # The path NCCL's data took, host by host, and nccl-tests' verdict on a pasted run.
    from ddp_doctor.diagnose.transport import nccl_tests_findings, transport_findings

    between += transport_findings(scan.nodes) + nccl_tests_findings(scan.nodes)
    # Stacks of a hung job's ranks pasted with the log: where each rank waits leads the
    # watchdog's timeout, which says only that the ranks waited.
    from ddp_doctor.forensics.verdict import hang_findings, lone_stack_findings

    pasted = scan.stacks.stacks()
    hung = hang_findings(pasted) if len(pasted) > 1 else []
    if len(pasted) == 1 and not any(f.effective_severity is Severity.ERROR for f, _ in ordered):
        from ddp_doctor.diagnose.stated_slowness import stated_slowness, stated_timings

        # One pasted stack names a culprit only where nothing failed and nobody said "slow"
        # (a loader-bound rank of a slow job waits there too): a hang, then.
        if stated_slowness(scan) is None and stated_timings(scan) is None:
            hung = lone_stack_findings(pasted)
    if dumps:  # attached Flight Recorder dumps: the collective each rank reached
        from ddp_doctor.forensics.flight import read_dumps
        from ddp_doctor.forensics.flight_verdict import flight_findings

        hung += flight_findings(read_dumps(dumps))
    ordered = [(f, -1000 + i) for i, f in enumerate(hung)] + list(ordered)
    ranked = rank([*ordered, *((f, 5_000 + i) for i, f in enumerate(between)),
                   *((f, 10_000 + i) for i, f in enumerate(env))])
    from ddp_doctor.diagnose.context import RELATIONS
    from ddp_doctor.diagnose.relations import fold_explained

    # A finding made beside the log rules meets the cause declared for it (Explains).
    findings = _restated_by_checks(
        [*lead, *fold_explained([finding for finding, _ in ranked], RELATIONS)], [*lead, *env])
    if not recorded and not any(f.effective_severity is not Severity.INFO for f in findings):
        findings.append(nothing_matched(scan))
        from ddp_doctor.diagnose.data_wait import data_bound, nothing_failed
        from ddp_doctor.diagnose.fallback import fallback_lead
        from ddp_doctor.diagnose.stated_memory import stated_host_memory, stated_kill
        from ddp_doctor.diagnose.stated_slowness import stated_slowness, stated_timings

        # Where no error line reports a failure and nobody says the process was killed: the
        # job's own progress lines showing steps spent waiting for data. Else low-confidence
        # leads, said to be ones: slowness the text states in words, the category the error
        # lines resemble, a killed process or the host's memory gone stated in words,
        # slowness stated in timings.
        quiet = not stated_kill(scan) and nothing_failed(scan)
        guessed = ((data_bound(scan) if quiet else None) or stated_slowness(scan)
                   or fallback_lead(scan) or stated_host_memory(scan) or stated_timings(scan))
        if guessed is not None:
            findings.insert(0, guessed)
    if notes:
        findings.append(damaged_input(notes))
    label = "stdin" if target == "-" else target
    first = findings[0] if findings else None
    if recorded:
        summary = _recorded_summary(recorded[0], first)
    elif first is not None and first.effective_severity is Severity.ERROR:
        summary = f"most likely cause: {first.code.category.value} ({first.code.id})"
    elif first is not None and first.code.id == "DIAG001":
        summary = "no known failure signature"
    elif first is not None and first.code.id.startswith("DIAG1"):
        summary = (f"no known failure signature; low-confidence lead: "
                   f"{first.code.category.value} ({first.code.id})")
    else:
        summary = ("no failure cause found; warnings: "
                   + ", ".join(dict.fromkeys(f.code.id for f in findings)))
    if where:
        summary += f"; environment read from {where}"
    from ddp_doctor.diagnose.similar import similar_findings

    findings += similar_findings(scan, findings)  # context, appended: never the lead
    result = CheckResult(
        check_id="diagnose.log", title="Log diagnosis", area="log",
        status=status_of(findings), summary=summary, findings=tuple(findings))
    report = Report(
        tool_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        results=(result,),
        facts_source=f"log: {label}",
        environment=summarize_environment(facts) if facts is not None else {},
        probe_errors={},
        nodes=nodes.to_dict() if nodes is not None and nodes.rows else None)
    return Diagnosis(report, scan, facts)
