"""The code base stays ruff clean and mypy clean: lint runs with the test suite, not beside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


def test_ruff_is_clean():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format", "concise", "src", "checks",
         "train_smoke", "tests", "bench"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def mypy_command() -> list[str]:
    """pyproject's [tool.mypy] when it is there (its ``files``, else src and checks); without
    one, strict mode on src and checks, the probe script left out (it runs in interpreters
    as old as Python 3.6 and is written for them)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    settings = config.get("tool", {}).get("mypy")
    command = [sys.executable, "-m", "mypy"]
    if settings is None:
        return [*command, "--strict", "src", "checks",
                "--exclude", "src/ddp_doctor/facts/python_probe_script.py"]
    return command if settings.get("files") else [*command, "src", "checks"]


@pytest.mark.slow
def test_mypy_is_clean():
    proc = subprocess.run(mypy_command(), cwd=REPO, capture_output=True, text=True,
                          check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
    assert "Success: no issues found" in proc.stdout
