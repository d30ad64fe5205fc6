"""One evidence model: the relations between findings, read from where they are declared.

The knowledge says how findings stand to each other, each relation with its reason, beside
the rule or code it concerns (``logrules.rule``): a code *is a consequence of* another
(``Rule.symptom_of``, folded by ``compose``), *explains* others (``Explains``), or is
*read as* another when the log shows something about the machine (``ReadAs``: WSL, a
container, a CPU-only torch). This module only collects and applies them, so adding a rule,
a catalogue entry or a whole-log code never needs an edit here: it names no code.

The relations form a graph from causes to consequences. A cycle in it (A explains B, B is
read as A) would let each finding replace the other, so one is an error when the relations
are loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ddp_doctor.logrules.rule import Explains, ReadAs, Relation, Rule
from ddp_doctor.model import Code, Evidence, Finding


class RelationError(ValueError):
    """Declared relations that cannot hold: an unknown code or environment, no reason, or
    a cycle between causes and consequences."""


@dataclass(frozen=True)
class Declared:
    """One relation and the code it was declared beside."""

    subject: str
    relation: Relation


class Relations:
    """Every declared relation, checked once, with the look-ups the diagnosis asks for."""

    def __init__(self, declared: Iterable[Declared], codes: Mapping[str, Code],
                 environments: Iterable[str]) -> None:
        self.declared = tuple(declared)
        self._codes = codes
        self._environments = tuple(environments)
        problems = [problem for item in self.declared for problem in self._problems(item)]
        if problems:
            raise RelationError("; ".join(problems))
        self._explained_by: dict[str, list[str]] = {}
        self._readings: dict[str, list[ReadAs]] = {}
        for item in self.declared:
            relation = item.relation
            if isinstance(relation, Explains):
                for code in relation.codes:
                    self._explained_by.setdefault(code, []).append(item.subject)
            else:
                self._readings.setdefault(relation.environment, []).append(
                    _resolved(item.subject, relation))
        cycle = _cycle(self.edges())
        if cycle:
            raise RelationError("relations form a cycle: " + " -> ".join(cycle))

    def _problems(self, item: Declared) -> list[str]:
        relation = item.relation
        where = f"{item.subject}: {type(relation).__name__}"
        found = [] if relation.reason.strip() else [f"{where} has no reason"]
        named = (relation.codes if isinstance(relation, Explains)
                 else (relation.code, *relation.leads))
        found += [f"{where} names unknown code {code!r}" for code in
                  (item.subject, *named) if code and code not in self._codes]
        if isinstance(relation, ReadAs) and relation.environment not in self._environments:
            found.append(f"{where} needs unknown environment {relation.environment!r}")
        return found

    def edges(self) -> list[tuple[str, str]]:
        """(cause, consequence) pairs: what explains, and what a reading replaces.

        A reading by category names no lead code; it stands for every code of those
        categories the diagnosis knows.
        """
        pairs = [(cause, code) for code, causes in self._explained_by.items()
                 for cause in causes]
        for readings in self._readings.values():
            for reading in readings:
                leads = [*reading.leads, *(c.id for c in self._codes.values()
                                           if c.category in reading.categories)]
                pairs += [(reading.code, lead) for lead in leads if lead != reading.code]
        return pairs

    def explainers(self, lead: str) -> tuple[str, ...]:
        """The codes declared to explain ``lead``, in declaration order."""
        return tuple(self._explained_by.get(lead, ()))

    def readings(self, environment: str) -> tuple[ReadAs, ...]:
        """What the log showing ``environment`` reads findings as, in declaration order."""
        return tuple(self._readings.get(environment, ()))

    def reading(self, environment: str, lead: Finding) -> ReadAs | None:
        """The first reading of ``environment`` that applies to ``lead``: one naming its
        code or its category, and not already its code."""
        return next((reading for reading in self.readings(environment)
                     if reading.code != lead.code.id
                     and (lead.code.id in reading.leads
                          or lead.code.category in reading.categories)), None)

    def code(self, code_id: str) -> Code:
        return self._codes[code_id]


def fold_explained(findings: Sequence[Finding], relations: Relations) -> list[Finding]:
    """The findings with each one whose declared cause (``Explains``) is also among them
    folded into that cause: the cause keeps the better of the two places, takes the more
    severe of the two severities, and quotes the consequence as evidence. This is how the
    findings made beside the log rules (nodes compared, NCCL's transports, nccl-tests)
    meet the causes declared for them, wherever either was ranked."""
    out = list(findings)
    at = 0
    while at < len(out):
        consequence = out[at]
        causes = relations.explainers(consequence.code.id)
        cause = next((f for f in out if f is not consequence and f.code.id in causes), None)
        if cause is None:
            at += 1
            continue
        severity = max((cause.effective_severity, consequence.effective_severity),
                       key=lambda s: s.rank)
        folded = replace(cause, severity=severity, evidence=(
            *cause.evidence,
            Evidence(f"consequence, {consequence.code.id}",
                     f"{consequence.title} ({consequence.code.id})", "declared relation")))
        first = min(out.index(cause), at)
        out = [f for f in out if f is not cause and f is not consequence]
        out.insert(first, folded)
        at = first + 1 if first < at else at
    return out


def _resolved(subject: str, reading: ReadAs) -> ReadAs:
    """A reading with the declaring code filled in where it was left implicit: as the code
    read (declared on the reading's rule) or as the lead (declared on the lead's rule)."""
    if not reading.code:
        return ReadAs(reading.environment, reading.reason, subject, reading.leads,
                      reading.categories)
    if not reading.leads and not reading.categories:
        return ReadAs(reading.environment, reading.reason, reading.code, (subject,))
    return reading


def declared_on(rules: Iterable[Rule]) -> list[Declared]:
    """The relations declared on rules (``Rule.relations``), once per code and relation:
    a code read by several rules may carry the same declaration on each."""
    found: dict[tuple[str, Relation], Declared] = {}
    for rule in rules:
        subject = rule.code.id
        for relation in rule.relations:
            found.setdefault((subject, relation), Declared(subject, relation))
    return list(found.values())


def _cycle(edges: list[tuple[str, str]]) -> list[str]:
    """A cycle in the graph (its codes, the first repeated at the end), or []."""
    graph: dict[str, list[str]] = {}
    for cause, consequence in edges:
        graph.setdefault(cause, []).append(consequence)
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in list(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []
