"""Shared fixtures: recorded facts of real machines, loaded as ``Facts``."""

from __future__ import annotations

import os
import subprocess
import sys
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


@pytest.fixture(scope="session")
def ultralytics_python(tmp_path_factory) -> str:
    """A venv with the registry's torch build (a CUDA build of the same torch version as this
    venv's +cpu one), torchvision and Ultralytics (~80 s, 5 GB), built once per session for
    the Ultralytics tests and the two-node smoke whose nodes differ in their torch build.

    DDP_DOCTOR_ULTRALYTICS_PYTHON names such an interpreter already built (a developer's
    quick loop); CI leaves it unset and builds a fresh one."""
    given = os.environ.get("DDP_DOCTOR_ULTRALYTICS_PYTHON")
    if given:
        return given
    venv = tmp_path_factory.mktemp("ultralytics") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "torch===2.13.0", "torchvision",
                    "ultralytics"], check=True, timeout=1200)
    return python
