"""Real runs that tests of several modules assert on, each started once per worker.

A real two-rank smoke job costs about 12 CPU-s before it trains (CONTRIBUTING.md, "where
the suite's time goes"); where two tests ask about one kind of run, they read one. A test
that uses a fixture of this module carries ``xdist_group(GROUP)``, so that pytest-xdist
hands every user of the run to the same worker, which starts it once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.smoke import short_tmpdir

GROUP = "real-cli-smoke-run"


@dataclass(frozen=True)
class CliSmokeRun:
    """`ddp-doctor smoke` on the CPU, in a pipe, with a bundle and a JSON report."""

    proc: subprocess.CompletedProcess[str]
    report: dict[str, Any]
    bundle: Path
    tmpdir: Path  # the run's TMPDIR: what the doctor leaves there


@pytest.fixture(scope="session")
def cli_smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two gloo ranks, 12 steps at --imgsz 64 (the loss is judged from 10), its stderr a pipe,
    with a short TMPDIR of its own (``short_tmpdir``: the tests look at what stays there)."""
    out = tmp_path_factory.mktemp("cli-smoke")
    with short_tmpdir("b-") as folder:
        temp = Path(folder)
        proc = subprocess.run(
            [sys.executable, "-m", "ddp_doctor", "smoke", "--device", "cpu", "--steps", "12",
             "--imgsz", "64", "--timeout", "600",  # a deadline a loaded machine cannot reach
             "--bundle", str(out / "smoke.zip"), "--json", str(out / "report.json")],
            capture_output=True, text=True, timeout=660, check=False,
            env={**os.environ, "TMPDIR": str(temp)})
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
        yield CliSmokeRun(proc, report, out / "smoke.zip", temp)
