"""Shared fixtures: recorded facts of real machines, loaded as ``Facts``."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.facts.snapshot import Facts, load_facts

FIXTURES = Path(__file__).parent / "fixtures"
FACTS_DIR = FIXTURES / "facts"


def load_fixture_facts(name: str) -> Facts:
    """A whole-machine facts snapshot from tests/fixtures/facts/NAME.json."""
    return load_facts(FACTS_DIR / f"{name}.json")


@pytest.fixture
def fixture_facts():
    return load_fixture_facts
