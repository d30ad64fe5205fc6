"""docs/codes.md is generated from the code registry and must stay current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddp_doctor.codebook import declared_codes
from ddp_doctor.codes import render_code_text, render_codes_markdown

REPO = Path(__file__).resolve().parents[2]


def test_codes_md_is_current():
    expected = render_codes_markdown(declared_codes().values())
    actual = (REPO / "docs" / "codes.md").read_text(encoding="utf-8")
    assert actual == expected, "docs/codes.md is stale: run python -m ddp_doctor.codebook"


@pytest.mark.spawns  # a fresh interpreter that imports every ddp_doctor module
def test_the_generator_writes_what_the_registry_holds(tmp_path):
    """``python -m ddp_doctor.codebook`` runs the module as __main__, a second copy of the
    book; it must still write every code."""
    target = tmp_path / "codes.md"
    subprocess.run([sys.executable, "-m", "ddp_doctor.codebook", str(target)], check=True,
                   capture_output=True)
    assert target.read_text(encoding="utf-8") == render_codes_markdown(
        declared_codes().values())


def test_every_code_documented_with_the_text_explain_prints():
    doc = (REPO / "docs" / "codes.md").read_text(encoding="utf-8")
    for code in declared_codes().values():
        assert f"## {code.id}" in doc
        assert f"| [{code.id}](#{code.id.lower()}) | {code.family.value} |" in doc
        text = render_code_text(code)
        assert f"family: {code.family.value}" in text
        for section in (code.what, code.why, code.fix):
            assert section in doc and section in text


def test_readme_counts_and_names_every_builtin_check():
    """The README's checks table is written by hand: keep it in step with the catalogue."""
    import re
    from pathlib import Path

    from ddp_doctor.checklist import load_catalogue

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    specs = load_catalogue(entry_points=()).specs  # built-ins only
    match = re.search(r"(\d+) checks in nine areas, (\d+) codes", readme)
    assert match, "README lost its checks summary line"
    assert int(match.group(1)) == len(specs)
    assert int(match.group(2)) == len({c.id for s in specs for c in s.codes})
    for spec in specs:
        named = f"`{spec.id}`" in readme or (
            spec.id.startswith("packages.") and "`packages.*`" in readme)
        assert named, f"README's checks table does not name {spec.id}"
