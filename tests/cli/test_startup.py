"""Start-up stays light: ``--help``, ``--version``, a command's ``--help`` and a parse
error load only the command line's own modules, not the flows, the code registry, the
checks or the renderers (issue 25: ``import ddp_doctor.cli`` used to load 120 of them).

Each case runs in a child interpreter, the only place where ``sys.modules`` starts empty,
and the child counts the ``ddp_doctor`` modules it ends with.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spawns  # a child interpreter per case

MOST_MODULES = 15  # the command line, its parser and the modules behind --help's defaults

COUNT = """
import json, sys
from ddp_doctor.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
loaded = sorted(m for m in sys.modules if m == "ddp_doctor" or m.startswith("ddp_doctor."))
sys.stderr.write("@@modules@@ " + json.dumps({"code": code, "loaded": loaded,
                                              "pydantic": "pydantic" in sys.modules}) + "\\n")
"""

COMMANDS = ("doctor", "check", "diagnose", "compare", "smoke", "run", "checks", "codes",
            "explain")


def run_counted(*args: str) -> dict:
    """``ddp-doctor ARGS`` in a child: its exit code, the ddp_doctor modules it loaded and
    whether pydantic was loaded."""
    done = subprocess.run([sys.executable, "-c", COUNT, *args], capture_output=True,
                          text=True, timeout=120)
    line = next(line for line in done.stderr.splitlines() if line.startswith("@@modules@@ "))
    return json.loads(line.split(" ", 1)[1])


def loaded_by(*args: str) -> tuple[int, list[str]]:
    """The exit code of ``ddp-doctor ARGS`` and the ddp_doctor modules it loaded."""
    result = run_counted(*args)
    return result["code"], result["loaded"]


@pytest.mark.parametrize("args", [
    ("--help",), ("-h",), ("--version",), *[(name, "--help") for name in COMMANDS],
], ids=" ".join)
def test_help_and_version_load_only_the_command_line(args):
    code, loaded = loaded_by(*args)
    assert code == 0
    assert len(loaded) <= MOST_MODULES, loaded
    # What --help must never pay for: the flows, the code registry, the checks, the log
    # rules, the renderers and the probe script.
    for heavy in ("ddp_doctor.app", "ddp_doctor.codes", "ddp_doctor.registry",
                  "ddp_doctor.checks", "ddp_doctor.logrules", "ddp_doctor.report",
                  "ddp_doctor.facts.python_probe_script"):
        assert heavy not in loaded, heavy


@pytest.mark.parametrize("args", [
    ("--bogus",), ("chek",), ("check", "--nope"), ("explain",), ("smoke", "--steps"),
], ids=" ".join)
def test_a_parse_error_loads_only_the_command_line(args):
    code, loaded = loaded_by(*args)
    assert code == 2
    assert len(loaded) <= MOST_MODULES, loaded
    assert "ddp_doctor.app" not in loaded


def test_a_command_that_runs_loads_its_flow():
    """The lazy imports are really made when the command runs: ``codes`` lists the
    registry's codes, so the registry and the catalogue flow are loaded then."""
    code, loaded = loaded_by("codes", "--family", "run")
    assert code == 0
    assert {"ddp_doctor.app.catalogue", "ddp_doctor.codes"} <= set(loaded)
    assert "ddp_doctor.app.smoke" not in loaded  # and no other command's flow


def test_a_command_line_with_values_loads_no_pydantic(tmp_path):
    """typer 0.2x coerces values through pydantic adapters; the doctor's text and paths are
    coerced without them (option_values), so neither parsing nor running ``check`` pays
    for importing pydantic (0.2 s, before the torch probe could start)."""
    sandbox = Path(__file__).parents[1] / "fixtures" / "facts" / "healthy_8x_h100_nvlink.json"
    result = run_counted("check", "--facts", str(sandbox), "--json", str(tmp_path / "r.json"),
                         "--gpus", "8", "--quiet")
    assert result["code"] in (0, 1)
    assert (tmp_path / "r.json").is_file()
    assert result["pydantic"] is False
