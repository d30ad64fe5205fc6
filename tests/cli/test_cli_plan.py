"""--gpus / --batch / --workers: the launch plan through the CLI (typer's CliRunner)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FACTS_DIR
from tests.support.cli import invoke

HEALTHY_8GPU = str(FACTS_DIR / "healthy_8x_h100_nvlink.json")


def findings(result) -> list[str]:
    return [f["code"] for f in json.loads(result.stdout)["findings"]]


@pytest.mark.parametrize("command", ["doctor", "check"])
def test_a_valid_plan_prints_the_launch_command(command):
    result = invoke(command, "--facts", HEALTHY_8GPU, "--gpus", "8", "--batch", "64")
    assert result.exit_code == 0, result.output
    # The command is on a line of its own, whole, ready to copy.
    assert ("    $ /usr/bin/python3 -m torch.distributed.run --nproc_per_node 8 train.py "
            "--batch 64 "
            "--device 0,1,2,3,4,5,6,7\n") in result.stdout


def test_a_batch_that_does_not_divide_fails_with_the_nearest_sizes():
    result = invoke("check", "--facts", HEALTHY_8GPU, "--gpus", "4", "--batch", "30", "--json", "-")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    [plan] = [r for r in report["checks"] if r["id"] == "launch.plan"]
    assert plan["findings"][0]["title"].endswith("use 28 or 32")
    assert findings(result) == ["PLN002"]


def test_workers_reach_the_host_checks():
    """The V100 server's `ulimit -n` is 1024: harmless alone, too low with 8 workers a rank.
    (Its GPUs are partly busy, so VIS006 warns either way.)"""
    v100 = str(FACTS_DIR / "healthy_8x_v100_pcie.json")
    without = invoke("check", "--facts", v100, "--json", "-")
    result = invoke("check", "--facts", v100, "--workers", "8", "--json", "-")
    assert result.exit_code == 0  # HST005 is a warning
    assert findings(without) == ["VIS006"]
    assert findings(result) == ["VIS006", "HST005"]


@pytest.mark.parametrize(("args", "fragment"), [
    (("--gpus", "0"), "--gpus 0: must be 1 or more"),
    (("--batch", "-3"), "--batch -3: must be 1 or more"),
    (("--gpus", "two"), "--gpus 'two': not a whole number"),
    (("--workers", "-1"), "--workers -1: must be 0 or more"),
])
def test_bad_plan_values_are_one_line_and_exit_2(args, fragment):
    result = invoke("check", "--facts", HEALTHY_8GPU, *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines == [f"ddp-doctor: error: {fragment}"]


def test_a_replayed_snapshot_keeps_its_plan_unless_options_override(tmp_path):
    data = json.loads((FACTS_DIR / "healthy_8x_h100_nvlink.json").read_text())
    data["facts"]["plan"]["value"].update({"gpus": 4, "batch": 30})
    saved = tmp_path / "customer.json"
    saved.write_text(json.dumps(data))
    kept = invoke("check", "--facts", str(saved), "--json", "-")
    assert findings(kept) == ["PLN002"]
    overridden = invoke("check", "--facts", str(saved), "--gpus", "4", "--batch", "32",
                        "--json", "-")
    assert overridden.exit_code == 0
    assert findings(overridden) == []


def test_a_snapshot_without_a_plan_fact_still_runs(tmp_path):
    data = json.loads((FACTS_DIR / "healthy_8x_h100_nvlink.json").read_text())
    del data["facts"]["plan"]
    saved = tmp_path / "old.json"
    saved.write_text(json.dumps(data))
    result = invoke("check", "--facts", str(saved), "--batch", "12", "--json", "-")
    assert findings(result) == ["PLN002"]  # 12 on all 8 GPUs
