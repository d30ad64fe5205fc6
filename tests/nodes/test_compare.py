"""``ddp-doctor compare``: saved machines judged against each other, offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import FACTS_DIR
from tests.support.cli import invoke

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text(encoding="utf-8"))
V100 = FACTS_DIR / "healthy_8x_v100_pcie.json"
H100 = FACTS_DIR / "healthy_8x_h100_nvlink.json"


def report_of(*args: str) -> tuple[int, dict]:
    result = invoke("compare", *args, "--json", "-")
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return result.exit_code, data


def codes(data: dict) -> dict[str, list[str]]:
    return {f["code"]: f["affects"] for f in data["findings"]}


def variant(tmp_path: Path, name: str, host: str, **changes: object) -> Path:
    """The recorded 8x H100 machine under another host name, with some facts changed."""
    data = json.loads(H100.read_text(encoding="utf-8"))
    data["facts"]["os"]["value"]["hostname"] = host
    for dotted, value in changes.items():
        fact, *keys = dotted.split("__")
        target = data["facts"][fact]["value"]
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_the_recorded_v100_box_against_the_h100_box(capsys):
    code, data = report_of(str(V100), str(H100))
    assert code == 1
    found = codes(data)
    for expected in ("NOD001", "NOD002", "NOD003", "NOD006", "NOD007", "NOD008"):
        assert expected in found, found
    assert data["verdict"] == "problems found"
    nccl = next(r for r in data["nodes"]["rows"] if r["code"] == "NOD001")
    assert nccl["values"] == ["2.14.3", "2.28.9"] and nccl["baseline"] == "2.14.3"
    assert nccl["differs"] == [data["nodes"]["nodes"][1]]


def test_one_odd_node_in_five_is_named_with_what_differs(tmp_path):
    paths = [variant(tmp_path, f"n{i}.json", f"gpu-node-{i}") for i in range(5)]
    odd = variant(tmp_path, "n3.json", "gpu-node-3",
                  torch__libraries__nccl_version="2.18.3",
                  env_vars__NCCL_ALGO="Ring")
    assert odd == paths[3]
    code, data = report_of(*map(str, paths))
    assert code == 1
    assert codes(data) == {"NOD001": ["gpu-node-3"], "NOD005": ["gpu-node-3"]}
    assert data["nodes"]["nodes"] == [f"gpu-node-{i}" for i in range(5)]
    result = invoke("compare", *map(str, paths))
    assert "gpu-node-3 differs from the others" in " ".join(result.stdout.split())


def test_identical_machines_agree_with_exit_0(tmp_path):
    a = variant(tmp_path, "a.json", "node-a")
    b = variant(tmp_path, "b.json", "node-b")
    code, data = report_of(str(a), str(b))
    assert code == 0 and data["findings"] == [] and data["nodes"]["rows"] == []
    result = invoke("compare", str(a), str(b))
    assert "The 2 nodes agree on everything compared" in result.stdout


def test_a_kernel_difference_alone_is_info_and_passes(tmp_path):
    a = variant(tmp_path, "a.json", "node-a")
    b = variant(tmp_path, "b.json", "node-b", os__kernel="6.8.0-45-generic")
    code, data = report_of(str(a), str(b))
    assert code == 0 and list(codes(data)) == ["NOD011"]


def test_markdown_shows_the_table_with_the_odd_value_in_bold(tmp_path):
    a = variant(tmp_path, "a.json", "node-a")
    b = variant(tmp_path, "b.json", "node-b", nvml__driver_version="535.183.01")
    out = tmp_path / "r.md"
    assert invoke("compare", str(a), str(b), "--markdown", str(out)).exit_code == 1
    text = out.read_text(encoding="utf-8")
    assert "## Nodes compared" in text
    assert "| driver | NOD006 | 570.133.20 | **535.183.01** |" in text


def test_anonymize_hides_every_node_host_name(tmp_path):
    a = variant(tmp_path, "a.json", "secret-host-a")
    b = variant(tmp_path, "b.json", "secret-host-b", python__version="3.12.3")
    result = invoke("compare", str(a), str(b), "--anonymize", "--json", "-")
    assert "secret-host" not in result.stdout
    assert json.loads(result.stdout)["findings"][0]["code"] == "NOD008"


def test_a_bundle_and_a_json_report_are_inputs_too(tmp_path):
    bundle = tmp_path / "ticket.zip"
    report = tmp_path / "report.json"
    assert invoke("check", "--facts", str(V100), "--bundle", str(bundle), "-q").exit_code in (0, 1)
    assert invoke("check", "--facts", str(H100), "--json", str(report), "-q").exit_code in (0, 1)
    code, data = report_of(str(bundle), str(report))
    assert code == 1
    # The JSON report holds only its environment: NCCL is unknown there, not a difference.
    assert "NOD001" not in codes(data)
    assert {"NOD002", "NOD003", "NOD006", "NOD007", "NOD008"} <= set(codes(data))
    assert data["facts_source"] == "compare: 2 inputs (1 JSON report, 1 facts snapshot)"


@pytest.mark.parametrize("content, says", [
    (None, "give a baseline and at least one more input"),
    (b"", "the file is empty"),
    (b"not json", "not JSON, and not a support bundle"),
    (b'{"format": "something-else"}', "not a facts snapshot (--save-facts), JSON report"),
    (b"[1, 2]", "not a facts snapshot, JSON report or bundle"),
    (b'{"format": "ddp-doctor-facts", "schema_version": 99, "facts": {}}',
     "facts schema version 99 is not supported"),
])
def test_unusable_inputs_are_one_line_and_exit_2(tmp_path, content, says):
    args = [str(H100)]
    if content is not None:
        bad = tmp_path / "bad.json"
        bad.write_bytes(content)
        args.append(str(bad))
    result = invoke("compare", *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr


def test_a_missing_file_is_exit_2(tmp_path):
    result = invoke("compare", str(H100), str(tmp_path / "nope.json"))
    assert result.exit_code == 2 and "no such file" in result.stderr


@pytest.mark.slow
@pytest.mark.spawns
def test_two_real_interpreters_on_this_machine(tmp_path):
    """This interpreter (with torch) against a fresh venv without it."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    here, there = tmp_path / "here.json", tmp_path / "bare.json"
    assert invoke("check", "-q", "--save-facts", str(here)).exit_code in (0, 1)
    assert invoke("check", "-q", "--python", str(bare / "bin" / "python"),
                  "--save-facts", str(there)).exit_code in (0, 1)
    code, data = report_of(str(here), str(there))
    assert code == 1
    torch_row = next(r for r in data["nodes"]["rows"] if r["code"] == "NOD002")
    assert torch_row["values"][1] == "(no torch)"
    assert torch_row["values"][0].startswith("2.")
    assert data["nodes"]["nodes"] == ["here.json", "bare.json"]  # one host: file names
    (finding,) = [f for f in data["findings"] if f["code"] == "NOD002"]
    assert finding["remediation"][1]["command"].startswith("pip install torch==")


def test_save_facts_expands_slurms_node_patterns_one_file_per_node():
    from ddp_doctor.app.examine import node_path

    assert node_path(Path("facts-%n.json"), {"SLURM_NODEID": "3"}, "gpu07.cluster") == \
        Path("facts-3.json")
    assert node_path(Path("out/%N/facts.json"), {}, "gpu07.cluster") == \
        Path("out/gpu07/facts.json")
    assert node_path(Path("100%%-%n.json"), {}, "h") == Path("100%-0.json")
    assert node_path(Path("plain.json"), {"SLURM_NODEID": "3"}, "h") == Path("plain.json")


@pytest.mark.slow
@pytest.mark.spawns
def test_save_facts_with_a_pattern_writes_the_expanded_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_NODEID", "5")
    monkeypatch.chdir(tmp_path)
    result = invoke("check", "-q", "--save-facts", "facts-%n.json")
    assert result.exit_code in (0, 1), result.output
    assert (tmp_path / "facts-5.json").is_file()
