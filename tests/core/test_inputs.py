"""ddp_doctor.inputs: one test of what a file holds, shared by every command that takes one.

Real inputs: a recorded facts snapshot, the JSON report and the support bundle ``check``
writes from it, a gzipped snapshot, and text that is no JSON (a log).
"""

from __future__ import annotations

import builtins
import gzip
import io
import json
import os
from pathlib import Path

import pytest

from ddp_doctor.app.compare import load_node
from ddp_doctor.facts.snapshot import FactsFileError, load_facts
from ddp_doctor.inputs import (
    Kind,
    UnreadableInput,
    facts_of,
    is_archive,
    json_kind,
    read_facts,
    read_input,
)
from tests.conftest import FACTS_DIR
from tests.support.cli import invoke

SNAPSHOT = FACTS_DIR / "healthy_8x_h100_nvlink.json"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The report and the bundle ``check`` writes from the snapshot."""
    folder = tmp_path_factory.mktemp("inputs")
    report, bundle = folder / "report.json", folder / "ticket.zip"
    result = invoke("check", "--facts", str(SNAPSHOT), "--json", str(report),
                    "--bundle", str(bundle), "-q")
    assert result.exit_code in (0, 1), result.stderr
    packed = folder / "facts.json.gz"
    packed.write_bytes(gzip.compress(SNAPSHOT.read_bytes()))
    log = folder / "train.log"
    log.write_text("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269\n")
    return {"report": report, "bundle": bundle, "packed": packed, "log": log}


def test_each_kind_is_told_apart_by_its_bytes(written, tmp_path):
    renamed = tmp_path / "facts.txt"  # tickets rename files: the name says nothing
    renamed.write_bytes(SNAPSHOT.read_bytes())
    assert read_input(renamed).kind is Kind.FACTS
    assert read_input(written["report"]).kind is Kind.REPORT
    assert read_input(written["bundle"]).kind is Kind.BUNDLE
    assert read_input(written["packed"]).kind is Kind.BUNDLE  # an archive: its facts inside
    assert read_input(written["log"]).kind is Kind.LOG
    other = tmp_path / "other.json"
    other.write_text('{"format": "something-else"}')
    item = read_input(other)
    assert (item.kind, item.is_json) == (Kind.LOG, True)


def test_json_kind_and_archives():
    assert json_kind({"tool": "ddp-doctor", "findings": []}) is Kind.REPORT
    assert json_kind({"tool": "ddp-doctor", "checks": []}) is None  # no findings: no report
    assert json_kind({"format": "ddp-doctor-facts"}) is Kind.FACTS
    assert json_kind({"format": "gpu-doctor-facts"}) is Kind.FACTS  # the tool's old name
    assert json_kind([1, 2]) is None
    assert is_archive(b"PK\x03\x04") and is_archive(b"\x1f\x8b\x08\x00")
    assert not is_archive(b'{"fo')


def test_a_snapshot_a_bundle_and_a_gzipped_snapshot_give_the_same_facts(written):
    expected = load_facts(SNAPSHOT).to_dict()["facts"]
    for path in (SNAPSHOT, written["bundle"], written["packed"]):
        assert read_facts(path).to_dict()["facts"] == expected, path
        assert facts_of(read_input(path)).to_dict()["facts"] == expected, path


def test_unreadable_inputs_say_why(written, tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    for path, why in ((tmp_path / "missing.json", "missing"), (tmp_path, "directory"),
                      (empty, "empty")):
        with pytest.raises(UnreadableInput) as caught:
            read_input(path)
        assert caught.value.why == why
    with pytest.raises(FactsFileError, match="facts file is empty"):
        read_facts(empty)
    with pytest.raises(FactsFileError, match="not valid JSON"):
        facts_of(read_input(FACTS_DIR.parent / "junit" / "junit.xsd"))
    with pytest.raises(FactsFileError, match="not a ddp-doctor facts file"):
        facts_of(read_input(written["report"]))


def test_compare_reads_each_file_once(written, monkeypatch):
    opened: list[str] = []
    real_open = io.open

    def counted(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(file, (str, os.PathLike)):
            opened.append(Path(file).name)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", counted)  # Path.open and zipfile both open through it
    monkeypatch.setattr(builtins, "open", counted)
    for path in (SNAPSHOT, written["report"], written["bundle"]):
        opened.clear()
        node = load_node(path)
        assert opened == [path.name], (path, opened)
        assert node.summary.get("gpu_count") == 8
    assert json.loads(written["report"].read_text())["tool"] == "ddp-doctor"
