"""Every command's verdict names what it established (issue 24, point 1).

"Ready for training" is a claim that a DDP job trained where it will run; only the smoke
job that trained there earns it. The checks alone, a policy that waves errors through,
``run`` (whose job the doctor cannot see inside) and ``compare`` (nothing runs) each say
what they did prove, on the terminal and in the JSON report's ``verdict`` and ``proved``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from ddp_doctor.checklist import load_catalogue
from ddp_doctor.facts.snapshot import load_facts
from ddp_doctor.model import Report
from ddp_doctor.runner import build_report
from tests.conftest import FACTS_DIR
from tests.support.cli import invoke

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text(encoding="utf-8"))
HEALTHY = FACTS_DIR / "healthy_8x_h100_nvlink.json"
NO_DRIVER = FACTS_DIR / "no_driver.json"


def json_of(*args: str) -> tuple[int, dict]:
    result = invoke(*args, "--json", "-")
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return result.exit_code, data


def test_check_on_a_healthy_machine_says_it_trained_nothing():
    code, data = json_of("check", "--facts", str(HEALTHY))
    assert code == 0
    assert data["verdict"] == "no problems found"
    assert data["proved"].endswith("found no problems; nothing was trained")
    console = invoke("check", "--facts", str(HEALTHY)).stdout
    assert "Ready for training" not in console
    assert "found no problems; nothing was trained (exit code 0)" in console


def test_a_policy_that_ignores_the_errors_is_named_in_the_verdict(tmp_path, monkeypatch):
    """Before: "Ready for training (exit code 0) ... 22 skipped" on a box with no driver."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ddp-doctor.toml").write_text(
        'ignore = { DRV001 = "CPU-only CI runner", TOR001 = "no torch here" }\n')
    code, data = json_of("check", "--facts", str(NO_DRIVER))
    assert code == 0
    ignored = [f["code"] for f in data["findings"] if "ignored" in f
               and f["severity"] == "error"]
    assert "DRV001" in ignored
    assert data["verdict"] == "no problems found"
    assert data["proved"].startswith(f"no problems left after the policy ignored "
                                     f"{', '.join(ignored)}")
    console = invoke("check", "--facts", str(NO_DRIVER)).stdout
    assert "Ready for training" not in console
    assert "No problems left after the policy ignored DRV001" in console


def test_compare_of_a_snapshot_with_itself_says_the_nodes_agree_not_ready(tmp_path):
    """Before: "Ready for training" for two copies of a machine with no driver or torch."""
    other = tmp_path / "b.json"
    other.write_bytes(NO_DRIVER.read_bytes())
    code, data = json_of("compare", str(NO_DRIVER), str(other))
    assert code == 0
    assert data["verdict"] == "nodes agree"
    assert data["proved"].startswith("the 2 nodes agree on every field compared: ")
    console = invoke("compare", str(NO_DRIVER), str(other)).stdout
    assert "Ready for training" not in console
    assert "The 2 nodes agree on every field compared" in console


def test_compare_names_the_node_that_differs_and_in_how_many_fields(tmp_path):
    data = json.loads(HEALTHY.read_text(encoding="utf-8"))
    data["facts"]["os"]["value"]["hostname"] = "node1"
    data["facts"]["python"]["value"]["version"] = "3.8.10"
    data["facts"]["torch"]["value"]["build"]["version"] = "2.0.1+cu128"
    path = tmp_path / "node1.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    code, report = json_of("compare", str(HEALTHY), str(path))
    assert code == 1 and report["verdict"] == "problems found"
    odd = [row for row in report["nodes"]["rows"] if "node1" in row["differs"]]
    assert len(odd) >= 2
    assert report["proved"] == f"node1 differs in {len(odd)} fields"
    assert f"Node1 differs in {len(odd)} fields (exit code 1)" in \
        invoke("compare", str(HEALTHY), str(path)).stdout


def report_with_smoke(proved: dict, ok: bool = True) -> Report:
    report = build_report(load_catalogue(), load_facts(HEALTHY), facts_source="live")
    from dataclasses import replace
    return replace(report, smoke={"ok": ok, "proved": proved})


def test_only_a_smoke_job_that_trained_earns_ready():
    gpus = report_with_smoke({"gpu_training": True, "device": "cuda", "backend": "nccl",
                              "world_size": 8, "cpu_fallback": False})
    assert gpus.verdict() == "ready"
    assert gpus.proved() == "the smoke job trained with DDP on the GPUs: 8 ranks, nccl"
    fallback = report_with_smoke({"gpu_training": False, "device": "cpu", "backend": "gloo",
                                  "world_size": 2, "cpu_fallback": True})
    assert fallback.verdict() == "passed on CPU only"
    assert "GPU training was not proven" in fallback.proved()
    on_cpu = report_with_smoke({"gpu_training": False, "device": "cpu", "backend": "gloo",
                                "world_size": 2, "cpu_fallback": False})
    assert on_cpu.verdict() == "ready"  # --device cpu: trained where it was asked to
    assert on_cpu.proved() == "the smoke job trained with DDP on cpu, as asked: 2 ranks, gloo"
    skipped = report_with_smoke({}, ok=False)
    skipped = Report(skipped.tool_version, skipped.created_at, skipped.results,
                     smoke={"ok": None, "skipped": "no torch in this interpreter"})
    assert skipped.verdict() == "no problems found"
    assert skipped.proved().endswith("found no problems; nothing was trained")


@pytest.mark.slow
@pytest.mark.spawns
@pytest.mark.parametrize(("options", "verdict", "said"), [
    ((), "command succeeded", "The command succeeded after "),
    (("--until", "ok"), "command succeeded", "Stopped at --until after "),
])
def test_run_says_how_the_command_ended_not_ready(tmp_path, options, verdict, said):
    """Before: "Ready for training (exit code 0)" and ``"verdict": "ready"``."""
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "ddp_doctor", "run", *options,
                           "--facts", str(HEALTHY), "--json", str(report), "--",
                           sys.executable, "-c", "print('ok')"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    jsonschema.validate(data, SCHEMA)
    assert data["verdict"] == verdict
    assert data["proved"].startswith(said[0].lower() + said[1:])
    console = subprocess.run([sys.executable, "-m", "ddp_doctor", "run", *options, "--",
                              sys.executable, "-c", "print('ok')"],
                             capture_output=True, text=True, timeout=60, check=False).stdout
    assert "Ready for training" not in console and said in console
    assert "The supervised command the command" not in console
