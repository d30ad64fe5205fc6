"""--gpus / --global-batch / --workers: the launch plan through the CLI (typer's CliRunner)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FACTS_DIR
from tests.support.cli import invoke

HEALTHY_8GPU = str(FACTS_DIR / "healthy_8x_h100_nvlink.json")
NO_DRIVER = str(FACTS_DIR / "no_driver.json")  # a GPU on the bus, no driver: 0 usable
CPU_ONLY = str(FACTS_DIR / "sandbox_cpu_container.json")  # no GPU at all


def findings(result) -> list[str]:
    return [f["code"] for f in json.loads(result.stdout)["findings"]]


@pytest.mark.parametrize("command", ["doctor", "check"])
def test_a_valid_plan_prints_the_launch_command(command):
    result = invoke(command, "--facts", HEALTHY_8GPU, "--gpus", "8", "--global-batch", "64")
    assert result.exit_code == 0, result.output
    # The command is on a line of its own, whole, ready to copy.
    assert ("    $ /usr/bin/python3 -m torch.distributed.run --nproc_per_node 8 train.py "
            "--batch 64 "
            "--device 0,1,2,3,4,5,6,7\n") in result.stdout


def test_a_batch_that_does_not_divide_fails_with_the_nearest_sizes():
    result = invoke("check", "--facts", HEALTHY_8GPU, "--gpus", "4", "--global-batch", "30",
                    "--json", "-")
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
    (("--global-batch", "-3"), "--global-batch -3: must be 1 or more"),
    (("--gpus", "two"), "--gpus 'two': not a whole number; use 1 or more"),
    (("--global-batch", "6.5"), "--global-batch '6.5': not a whole number; use 1 or more"),
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
    overridden = invoke("check", "--facts", str(saved), "--gpus", "4", "--global-batch", "32",
                        "--json", "-")
    assert overridden.exit_code == 0
    assert findings(overridden) == []


def test_a_snapshot_without_a_plan_fact_still_runs(tmp_path):
    data = json.loads((FACTS_DIR / "healthy_8x_h100_nvlink.json").read_text())
    del data["facts"]["plan"]
    saved = tmp_path / "old.json"
    saved.write_text(json.dumps(data))
    result = invoke("check", "--facts", str(saved), "--global-batch", "12", "--json", "-")
    assert findings(result) == ["PLN002"]  # 12 on all 8 GPUs


@pytest.mark.parametrize("facts", [NO_DRIVER, CPU_ONLY])
def test_each_plan_problem_is_reported_on_a_machine_without_gpus(facts):
    """No usable GPU and a batch that does not split over the 2 planned: two findings.

    The batch used to be judged only on the GPUs usable here, so with none it was never
    judged and the user fixed one problem only to meet the next."""
    result = invoke("check", "--facts", facts, "--gpus", "2", "--global-batch", "63",
                    "--json", "-")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    [plan] = [r for r in report["checks"] if r["id"] == "launch.plan"]
    assert [f["code"] for f in plan["findings"]] == ["PLN001", "PLN002"]
    assert plan["findings"][0]["title"] == "--gpus 2 but no GPU is usable here"
    assert plan["findings"][1]["title"] == ("--global-batch 63 on 2 GPUs: 63 is not a multiple "
                                            "of 2; use 62 or 64")


def test_a_batch_that_splits_adds_no_finding_on_a_machine_without_gpus():
    result = invoke("check", "--facts", NO_DRIVER, "--gpus", "2", "--global-batch", "64",
                    "--json", "-")
    [plan] = [r for r in json.loads(result.stdout)["checks"] if r["id"] == "launch.plan"]
    assert [f["code"] for f in plan["findings"]] == ["PLN001"]


@pytest.mark.parametrize(("command", "new"), [
    ("check", "--global-batch B (the total batch the planned job splits over --gpus)"),
    ("doctor", "--global-batch B (the total batch the planned job splits over --gpus)"),
    ("smoke", "--batch-per-process B (images each smoke process trains on per step)"),
])
@pytest.mark.parametrize("spelling", [("--batch", "64"), ("--batch=64",)])
def test_the_old_batch_option_names_its_replacement(command, new, spelling):
    """--batch meant the plan's total in check/doctor and images per process in smoke."""
    result = invoke(command, "--facts", HEALTHY_8GPU, *spelling) if command != "smoke" else \
        invoke(command, *spelling)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"ddp-doctor: error: --batch was renamed: use {new}"]
    assert result.stdout == ""
