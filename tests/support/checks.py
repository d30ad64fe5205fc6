"""Running the real catalogue on recorded machines, and deriving variants of them.

A variant is a fixture with one value changed (``copy.deepcopy`` of the facts, then a
dotted path set), so a test says exactly what differs from the real machine instead of
carrying a near-identical JSON file.
"""

from __future__ import annotations

import copy
from typing import Any

from ddp_doctor.checklist import load_catalogue
from ddp_doctor.facts.snapshot import FactRecord, Facts
from ddp_doctor.model import CheckResult, Finding
from ddp_doctor.runner import run_checks
from tests.conftest import FACTS_DIR, load_fixture_facts

MIB = 1024**2
GIB = 1024**3

FIXTURES = sorted(p.stem for p in FACTS_DIR.glob("*.json"))


def variant(name: str, changes: dict[str, Any] | None = None) -> Facts:
    """Fixture NAME with each ``"fact.key.key": value`` of CHANGES set (deep copies)."""
    facts = copy.deepcopy(load_fixture_facts(name))
    for path, value in (changes or {}).items():
        fact, *keys = path.split(".")
        record = facts.records[fact]
        if not keys:
            facts.records[fact] = FactRecord(fact, ok=True, value=copy.deepcopy(value))
            continue
        target = record.value
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(keys[-1])] = copy.deepcopy(value)
        else:
            target[keys[-1]] = copy.deepcopy(value)
    return facts


def without_fact(facts: Facts, name: str, error: str) -> Facts:
    """Facts where the probe for NAME failed with ERROR."""
    facts = copy.deepcopy(facts)
    facts.records[name] = FactRecord(name, ok=False, error=error)
    return facts


def run(facts: Facts) -> dict[str, CheckResult]:
    """Every check of the built-in catalogue, through the real runner, by check id."""
    catalogue = load_catalogue(entry_points=[])
    assert catalogue.failures == []
    return {r.check_id: r for r in run_checks(catalogue, facts)}


def only_finding(result: CheckResult) -> Finding:
    assert len(result.findings) == 1, [f.title for f in result.findings]
    return result.findings[0]


def evidence(finding: Finding) -> dict[str, str]:
    return {e.label: e.value for e in finding.evidence}


def evidence_sources(finding: Finding) -> dict[str, str]:
    return {e.label: e.source for e in finding.evidence}


def commands(finding: Finding) -> list[str | None]:
    return [s.command for s in finding.remediation]
