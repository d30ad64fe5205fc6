"""From matched lines to findings: one per cause, symptoms folded in, causes ranked.

A rule may declare itself a symptom of other codes (``symptom_of``; ``"*"`` means "of
any other error"): when such a cause is in the same log, the symptom's lines become
evidence of the cause ("then, line 812: Watchdog caught collective operation timeout")
instead of a finding of their own. A code seen from many ranks is one finding whose
``affects`` names the ranks. Where the text cannot separate causes, the rule's
alternatives and the commands that decide between them travel with the finding.
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.causal_order import root_cause_key
from ddp_doctor.diagnose.rank_prefixes import group_label
from ddp_doctor.diagnose.scan import CodeHits, Quote, ScanResult
from ddp_doctor.logrules import is_fatal_line, is_warning_line
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.wording import count

NOTHING_MATCHED = declare(
    "DIAG001", Category.UNKNOWN, "No known failure signature in the log",
    what="None of the log rules matched: the text holds no error the doctor knows, or the "
         "part of the log that shows the cause was not included.",
    why="Without the lines that show the first failure, the cause cannot be established.",
    fix="Attach the complete output of every rank (not only rank 0, and not only the last "
        "lines), rerun with NCCL_DEBUG=INFO for distributed jobs, and add "
        "`python -m torch.utils.collect_env` and `nvidia-smi` output.",
    severity=Severity.WARNING,
    docs_url="https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications")

DAMAGED_INPUT = declare(
    "DIAG004", Category.UNKNOWN, "Part of the input could not be read",
    what="The input ends early (a .gz cut short by an upload limit) or holds members that "
         "are not text; what could be read was diagnosed.",
    why="The lines that show the cause may be in the part that was lost.",
    fix="Attach the complete file again (compress it whole, check its size), or paste the "
        "log as text.",
    severity=Severity.WARNING)

ATTACH_STEPS: tuple[Step, ...] = (
    Step("Capture the whole job's output, every rank, into one file.",
         command="torchrun --nproc_per_node=N train.py 2>&1 | tee train.log"),
    Step("For distributed failures, run again with NCCL's and torch's own diagnostics.",
         command="NCCL_DEBUG=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun ... 2>&1 "
                 "| tee train.log"),
    Step("Add the environment report and the GPU table.",
         command="python -m torch.utils.collect_env >> train.log; nvidia-smi >> train.log"),
    Step("Then diagnose the file again.", command="ddp-doctor diagnose train.log"),
)


def line_label(document: str, line: int, many_documents: bool) -> str:
    """"line 12", or "rank1.log line 12" when the input held several documents."""
    return f"{document} line {line}" if many_documents else f"line {line}"


def _where(quote: Quote, many_documents: bool) -> str:
    return line_label(quote.document, quote.line, many_documents)


def _folds(hits: dict[str, CodeHits]) -> dict[str, str]:
    """symptom code -> the cause code it is folded into."""
    def is_error(code_hits: CodeHits) -> bool:
        return code_hits.code.severity is Severity.ERROR

    def targets(code_id: str) -> list[str]:
        wanted: set[str] = set()
        for rule in hits[code_id].rules:
            wanted.update(getattr(rule, "symptom_of", ()) or ())
        found = [other for other in hits if other != code_id and other in wanted]
        if "*" in wanted:
            found += [other for other, h in hits.items()
                      if other != code_id and is_error(h) and not _only_wildcard(h)]
        return found

    # A symptom of "any other error" (a survivor's "Connection closed by peer") belongs to
    # the rank that failed, not to a warning every process printed at import.
    failure = any(is_fatal_line(q.text) for h in hits.values() for q in h.quotes)
    demoted = {code_id for code_id, h in hits.items() if failure and _warning_only(h)}
    candidates = {code_id: targets(code_id) for code_id in hits}
    fold: dict[str, str] = {}
    roots = [c for c, found in candidates.items() if not found]
    for code_id, found in candidates.items():
        if not found:
            continue
        into = [t for t in found if t in roots]
        if not into:
            # Symptoms that point only at each other ("Some NCCL operations have failed"
            # and "unhandled system error"): the one the log shows first is the cause.
            into = [t for t in found if hits[t].order < hits[code_id].order]
        if into:
            fold[code_id] = min(into, key=lambda t: _order_key(hits[t], t in demoted))
    for code_id in list(fold):  # follow chains to the code that stays a finding
        seen = {code_id}
        while fold[code_id] in fold and fold[code_id] not in seen:
            seen.add(fold[code_id])
            fold[code_id] = fold[fold[code_id]]
    return fold


def _only_wildcard(code_hits: CodeHits) -> bool:
    return all("*" in (getattr(rule, "symptom_of", ()) or ()) for rule in code_hits.rules)


def _warning_only(code_hits: CodeHits) -> bool:
    return bool(code_hits.quotes) and all(is_warning_line(q.text) for q in code_hits.quotes)


def _order_key(code_hits: CodeHits, demoted: bool = False) -> tuple[int, int, int, int]:
    probe = Finding(code_hits.code, code_hits.code.summary)
    return root_cause_key(probe, code_hits.order, demoted)


def _finding(code_hits: CodeHits, folded: list[CodeHits], many: bool,
             trainer: str | None = None) -> Finding:
    code = code_hits.code
    evidence = [Evidence(_where(q, many), q.text, q.document) for q in code_hits.quotes]
    if code_hits.count > len(code_hits.quotes):
        evidence.append(Evidence("matched lines", f"{code_hits.count} in all"))
    ranks = set(code_hits.ranks)  # the cause's own ranks: a survivor's timeout is not theirs
    quoted = {(q.document, q.line) for q in code_hits.quotes}
    for symptom in folded:
        fresh = [q for q in symptom.quotes if (q.document, q.line) not in quoted]
        if not fresh:
            continue  # the same line, read by a more general rule too
        first = fresh[0]
        who = f"{', '.join(group_label(sorted(symptom.ranks)))}: " if symptom.ranks else ""
        evidence.append(Evidence(f"consequence, {_where(first, many)}",
                                 f"{who}{first.text} ({symptom.code.id})", first.document))
    steps: list[Step] = []
    alternatives: list[str] = []
    deciders: list[Step] = []
    # Where a hand-written rule read some of the code's lines, its remediation is the one
    # given; catalogue entries (rules with a ``catalogue``) add theirs only to a code no
    # hand-written rule read here.
    written = [r for r in code_hits.rules if not getattr(r, "catalogue", "")]
    for matched in written or code_hits.rules:
        # The trainer the log shows (logrules.which_trainer) picks the steps typed in its
        # own options, where the rule has them.
        for_trainer = getattr(matched, "for_trainer", None)
        rule = matched if for_trainer is None else for_trainer(trainer)
        steps += [s for s in rule.steps if s not in steps]
        alternatives += [a for a in getattr(rule, "alternatives", ()) if a not in alternatives]
        deciders += [s for s in getattr(rule, "decide", ()) if s not in deciders]
    for alternative in alternatives:
        evidence.append(Evidence("other possible cause", alternative))
    remediation = [*steps, *(s for s in deciders if s not in steps)]
    return Finding(code, code.summary, evidence=tuple(evidence), remediation=tuple(remediation),
                   affects=tuple(group_label(sorted(ranks))), docs_url=code.docs_url)


def compose(scan: ScanResult, trainer: str | None = None) -> list[tuple[Finding, int]]:
    """Findings from a scan with their first-seen order, symptoms folded into causes;
    ``trainer`` (``logrules.TRAINERS``) picks the remediation written for it."""
    hits = scan.hits
    fold = _folds(hits)
    many = len(scan.documents) > 1
    out: list[tuple[Finding, int]] = []
    for code_id, code_hits in hits.items():
        if code_id in fold:
            continue
        folded = [hits[s] for s, into in fold.items() if into == code_id]
        out.append((_finding(code_hits, folded, many, trainer), code_hits.order))
    return out


# torchrun's own summary of failed ranks, when no rank recorded its exception in an error
# file: the ranks' errors are elsewhere (above, or never captured). --log-dir/--redirects/
# --tee keep each rank's output (https://pytorch.org/docs/stable/elastic/run.html), and
# @record writes each rank's exception into the summary
# (https://pytorch.org/docs/stable/elastic/errors.html).
_SUMMARY_ONLY = ("error_file: <N/A>", "To enable traceback see: https://pytorch.org/docs/stable/"
                 "elastic/errors.html")
RANK_OUTPUT_STEPS: tuple[Step, ...] = (
    Step("This is torchrun's summary of the failed ranks, without their errors. Run again "
         "keeping every rank's own output, in one file.",
         command="torchrun --nproc_per_node=N --log-dir torchrun-logs --redirects 3 --tee 3 "
                 "train.py; find torchrun-logs -name stderr.log -exec cat {} + > ranks.log",
         url="https://pytorch.org/docs/stable/elastic/run.html"),
    Step("Add the environment report and the GPU table.",
         command="python -m torch.utils.collect_env >> ranks.log; nvidia-smi >> ranks.log"),
    Step("Then diagnose that file.", command="ddp-doctor diagnose ranks.log"),
    Step("Or put each rank's exception into the summary itself: decorate the script's entry "
         "point with @record (from torch.distributed.elastic.multiprocessing.errors import "
         "record).", url="https://pytorch.org/docs/stable/elastic/errors.html"),
)


def summary_only(scan: ScanResult) -> bool:
    """Whether the input shows torchrun's failure summary with no rank's recorded error."""
    return any(marker in text for context in scan.contexts
               for text in (context.head, context.tail) for marker in _SUMMARY_ONLY)


def nothing_matched(scan: ScanResult) -> Finding:
    """The ``unknown`` finding: what was read, the last failure lines, what to attach."""
    many = len(scan.documents) > 1
    evidence = [Evidence("read", f"{count(scan.lines, 'line')} in "
                                 f"{count(len(scan.documents), 'file') if many else '1 input'}")]
    evidence += [Evidence(_where(q, many), q.text, q.document) for q in scan.exceptions]
    steps = RANK_OUTPUT_STEPS if summary_only(scan) else ATTACH_STEPS
    return Finding(NOTHING_MATCHED, NOTHING_MATCHED.summary, evidence=tuple(evidence),
                   remediation=steps, docs_url=NOTHING_MATCHED.docs_url)


def damaged_input(notes: list[str]) -> Finding:
    """The warning that part of the input was lost, naming each part."""
    return Finding(DAMAGED_INPUT, DAMAGED_INPUT.summary,
                   evidence=tuple(Evidence("input", note) for note in notes),
                   remediation=(Step("Check the file is complete before attaching it.",
                                     command="gzip -t train.log.gz && ls -l train.log.gz"),))


def env_evidence(finding: Finding, where: str) -> Finding:
    """A finding of a check run on facts read from the text, saying where they came from."""
    from dataclasses import replace

    evidence = tuple(replace(e, source=f"pasted text: {where}") for e in finding.evidence)
    return replace(finding, evidence=(*evidence, Evidence("read from", where)))


