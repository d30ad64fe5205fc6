"""``compare``: judge saved machines against each other, offline.

Each input is a facts snapshot (``--save-facts``), a support bundle (its facts.json) or a
JSON report (its ``environment``, which says less). The nodes are judged by
``nodes.agree`` against the majority (with two inputs, OTHER against BASELINE), the same
judgement the multi-node smoke job applies inside the job. Differences that break or often
hurt DDP fail the run (exit 1); an unreadable input is a bad invocation (exit 2).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddp_doctor import __version__
from ddp_doctor.app.outputs import emit, now_iso
from ddp_doctor.app.requests import Common, check_common
from ddp_doctor.facts.snapshot import FactsFileError
from ddp_doctor.inputs import Kind, UnreadableInput, facts_of, read_input
from ddp_doctor.model import CheckResult, Report, Status, status_of
from ddp_doctor.nodes import NodeSummary, compare_nodes, summary_from_facts, summary_from_report
from ddp_doctor.nodes.agree import FIXED, Comparison
from ddp_doctor.usage import UsageError
from ddp_doctor.wording import count


@dataclass(frozen=True)
class CompareRequest:
    """``compare`` as typed: the baseline first, then the others."""

    inputs: tuple[Path, ...]


@dataclass(frozen=True)
class LoadedNode:
    path: Path
    summary: NodeSummary
    kind: str  # "facts snapshot" | "JSON report"
    identities: Any  # what --anonymize learns host names from


_UNREADABLE = {"missing": "no such file", "directory": "a directory, not a file",
               "unreadable": "cannot read: {detail}", "empty": "the file is empty"}


def load_node(path: Path) -> LoadedNode:
    """One input, read once, as a node summary; every unusable input is a one-line
    UsageError."""
    try:
        item = read_input(path)
    except UnreadableInput as exc:
        raise UsageError(f"compare: {path}: "
                         f"{_UNREADABLE[exc.why].format(detail=exc.detail)}") from None
    if item.kind is Kind.LOG:
        if not item.is_json:
            raise UsageError(f"compare: {path}: not JSON, and not a support bundle (.zip or "
                             f".tar.gz)")
        if not isinstance(item.data, dict):
            raise UsageError(f"compare: {path}: not a facts snapshot, JSON report or bundle")
        raise UsageError(f"compare: {path}: not a facts snapshot (--save-facts), JSON "
                         f"report (--json) or support bundle (--bundle) of ddp-doctor")
    if item.kind is Kind.REPORT:
        return LoadedNode(path, summary_from_report(item.data), Kind.REPORT.value, None)
    try:
        facts = facts_of(item)
    except FactsFileError as exc:
        raise UsageError(f"compare: {exc}") from None
    return LoadedNode(path, summary_from_facts(facts), Kind.FACTS.value, facts.to_dict())


def node_names(nodes: list[LoadedNode]) -> list[str]:
    """Host names when every input has its own; file names otherwise (two interpreters of
    one machine, or reports that do not record the host)."""
    hosts = [n.summary.get("host") for n in nodes]
    if all(hosts) and len(set(hosts)) == len(hosts):
        return [str(h) for h in hosts]
    names = [n.path.name for n in nodes]
    if len(set(names)) < len(names):
        names = [str(n.path) for n in nodes]
    return names


def established(comparison: Comparison, summaries: list[NodeSummary], passed: bool) -> str:
    """What the comparison established, for the verdict: how many fields were compared and
    which nodes differ in how many, never "ready" (nothing ran on the nodes)."""
    known = sum(1 for _label, _code, key in FIXED
                if sum(key(s) is not None for s in summaries) >= 2)
    if not comparison.rows:
        if not known:
            return "nothing was compared: no field is known on two of the nodes"
        return (f"the {len(summaries)} nodes agree on every field compared: "
                f"{count(known, 'field')} known on two of them or more")
    differ = Counter(comparison.names[i] for row in comparison.rows for i in row.odd)
    parts = [f"{name} differs in {count(n, 'field')}" if number == 0 else f"{name} in {n}"
             for number, (name, n) in enumerate(differ.most_common())]
    said = ", ".join(parts[:6]) + (" ..." if len(parts) > 6 else "")
    if passed:  # only differences that rarely matter (info)
        return f"the nodes agree on every field that matters; {said}, none of them critical"
    return said


def compare(common: Common, request: CompareRequest) -> int:
    """Judge the inputs against each other; 0 they agree, 1 they differ where it matters."""
    if len(request.inputs) < 2:
        raise UsageError("compare: give a baseline and at least one more input, e.g. "
                         "`ddp-doctor compare good-node.json bad-node.json` (facts snapshots, "
                         "JSON reports or bundles)")
    check_common(common)
    nodes = [load_node(path) for path in request.inputs]
    names = node_names(nodes)
    comparison = compare_nodes(names, [n.summary for n in nodes])
    findings = comparison.findings
    kinds = Counter(n.kind for n in nodes)
    differing = sorted({a for f in findings for a in f.affects})
    summary = (f"{count(len(nodes), 'node')} agree on everything compared" if not findings
               else f"{count(len(differing), 'node')} "
               f"differ{'s' if len(differing) == 1 else ''}: {', '.join(differing[:6])}"
               + (" ..." if len(differing) > 6 else ""))
    result = CheckResult(check_id="nodes.compare", title="The nodes agree", area="nodes",
                         status=status_of(findings, True), summary=summary,
                         findings=findings)
    sources = ", ".join(f"{count(n, kind)}" for kind, n in sorted(kinds.items()))
    report = Report(tool_version=__version__, created_at=now_iso(), results=(result,),
                    facts_source=f"compare: {len(nodes)} inputs ({sources})",
                    nodes=comparison.to_dict(), fail_on_warnings=True,
                    outcome=established(comparison, [n.summary for n in nodes],
                                        result.status is Status.PASS))
    emit(report, common, identities=[n.identities for n in nodes if n.identities])
    return report.exit_code(common.strict)
