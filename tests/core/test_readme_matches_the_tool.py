"""The README is tested against the real tool (issue 24, point 8): its usage block, its code
ranges and its JSON excerpt cannot fall behind the commands, the registry or the report.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ddp_doctor.checklist import load_catalogue
from ddp_doctor.cli import app
from ddp_doctor.codebook import all_codes
from tests.support.cli import invoke, runner

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def usage_block() -> str:
    return README.split("## Usage\n\n```\n", 1)[1].split("```", 1)[0]


def test_the_usage_block_names_every_command():
    """Before: `compare` was missing."""
    text = runner.invoke(app, ["--help"], terminal_width=200).stdout
    commands = re.findall(r"^  (\w+)\s{2,}", text.split("Commands:", 1)[1], re.MULTILINE)
    assert "compare" in commands
    block = usage_block()
    for command in commands:
        shown = "[doctor]" if command == "doctor" else command
        assert re.search(rf"^ddp-doctor {re.escape(shown)}(?=\s)", block, re.MULTILINE), command


def test_every_code_range_reaches_the_last_code_of_its_family():
    """Before: LOG001–LOG061 and SMK001–SMK025 while the codes ran to LOG088 and SMK028."""
    last: dict[str, int] = {}
    for code in all_codes(load_catalogue()):
        prefix, number = re.fullmatch(r"([A-Z]+)(\d+)", code).groups()
        last[prefix] = max(last.get(prefix, 0), int(number))
    shown: dict[str, int] = {}
    for prefix, _start, end in re.findall(r"`([A-Z]+)(\d{3})`–`\1(\d{3})`", README):
        shown[prefix] = max(shown.get(prefix, 0), int(end))
    assert {"LOG", "SMK", "TOR", "DRV"} <= set(shown)
    for prefix, end in shown.items():
        final = f"`{prefix}{last[prefix]:03d}`"  # or named on its own ("... and `POL007`")
        assert end == last[prefix] or final in README, \
            f"README's {prefix} codes end at {end}, the registry's at {last[prefix]}"


def test_the_json_excerpt_is_the_real_report():
    """Before: TOR002's excerpt showed fix steps and a "None" the tool no longer prints."""
    block = README.split("## The JSON report", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    excerpt = json.loads(block)
    command = re.search(r"An excerpt of `ddp-doctor (check [^`]+)`", README).group(1).split()
    real = json.loads(invoke(*command).stdout)
    for key, value in excerpt.items():
        if key in ("findings", "checks"):
            continue
        assert real[key] == value, key
    for finding in excerpt["findings"]:
        assert finding in real["findings"], finding["code"]
    for check in excerpt["checks"]:
        actual = next(c for c in real["checks"] if c["id"] == check["id"])
        assert {k: v for k, v in check.items() if k != "..."}.items() <= actual.items()
