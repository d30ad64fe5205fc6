"""The CI policy file: discovery, each key judged on recorded machines, ignore, warnings that
fail, and one clear line (exit 2) for every kind of bad file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from ddp_doctor.codebook import all_codes
from ddp_doctor.model import CheckResult, Report, Status
from ddp_doctor.policy.apply import apply_policy
from ddp_doctor.policy.load import Policy, PolicyError, find_policy, parse_policy
from ddp_doctor.policy.requirements import requirement_findings
from tests.conftest import FACTS_DIR, load_fixture_facts
from tests.support.cli import invoke


def every_code_id() -> set[str]:
    return set(all_codes())

REPO = Path(__file__).resolve().parents[2]
H100 = str(FACTS_DIR / "healthy_8x_h100_nvlink.json")  # 8 GPUs, driver 570.133.20, torch 2.11
V100 = str(FACTS_DIR / "healthy_8x_v100_pcie.json")  # VIS006 warning, driver 470.129.06
LAPTOP = str(FACTS_DIR / "laptop_gpu_newer_than_wheel.json")  # TOR003 error
SANDBOX = str(FACTS_DIR / "sandbox_cpu_container.json")  # DRV001 error, TOR002 warning
KNOWN = {"VIS006", "TOR002", "TOR003", "DRV001", "POL006"}


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def run_json(*args: str) -> tuple[int, dict]:
    result = invoke(*args, "--json", "-")
    return result.exit_code, json.loads(result.stdout)


def finding(report: dict, code: str) -> dict:
    return next(f for f in report["findings"] if f["code"] == code)


def policy_check(report: dict) -> dict:
    return next(c for c in report["checks"] if c["id"] == "policy.requirements")


# --- discovery -----------------------------------------------------------------------------

def test_found_in_the_working_directory(tmp_path):
    path = write(tmp_path, "ddp-doctor.toml", "min-gpus = 2\n")
    policy = find_policy(None, tmp_path, every_code_id)
    assert policy is not None and policy.path == path and policy.min_gpus == 2


def test_found_in_a_parent_directory_through_a_pyproject_without_the_table(tmp_path):
    write(tmp_path, "pyproject.toml", '[tool.ddp-doctor]\nmin-gpus = 4\n')
    inner = tmp_path / "repo" / "sub"
    write(tmp_path / "repo", "pyproject.toml",
          '[project]\nname = "x"\n[tool.ruff]\nline-length = 9\n')
    inner.mkdir()
    policy = find_policy(None, inner, every_code_id)
    assert policy is not None
    assert policy.path == tmp_path / "pyproject.toml" and policy.min_gpus == 4


def test_nearest_wins_and_ddp_doctor_toml_before_pyproject(tmp_path):
    write(tmp_path, "ddp-doctor.toml", "min-gpus = 1\n")
    write(tmp_path / "a", "pyproject.toml", "[tool.ddp-doctor]\nmin-gpus = 2\n")
    write(tmp_path / "a", "ddp-doctor.toml", "min-gpus = 3\n")
    assert find_policy(None, tmp_path / "a", every_code_id).min_gpus == 3
    (tmp_path / "a" / "ddp-doctor.toml").unlink()
    assert find_policy(None, tmp_path / "a", every_code_id).min_gpus == 2


def test_no_policy_anywhere(tmp_path):
    write(tmp_path, "pyproject.toml", '[project]\nname = "x"\n')
    assert find_policy(None, tmp_path, every_code_id) is None


def test_config_wins_over_a_found_file(tmp_path, monkeypatch):
    write(tmp_path, "ddp-doctor.toml", "min-gpus = 16\n")
    chosen = write(tmp_path / "ci", "policy.toml", "min-gpus = 8\n")
    monkeypatch.chdir(tmp_path)
    code, found = run_json("check", "--facts", H100)
    assert code == 1 and finding(found, "POL001")
    code, chosen_report = run_json("check", "--facts", H100, "--config", str(chosen))
    assert code == 0, chosen_report["findings"]
    assert chosen_report["policy"]["file"] == str(chosen)
    assert policy_check(chosen_report)["status"] == "pass"


def test_config_pyproject_without_the_table_is_an_error(tmp_path, monkeypatch):
    path = write(tmp_path, "pyproject.toml", '[project]\nname = "x"\n')
    monkeypatch.chdir(tmp_path)
    assert_usage_error(invoke("check", "--facts", H100, "--config", str(path)),
                       str(path), "[tool.ddp-doctor]")
    assert_usage_error(invoke("check", "--facts", H100, "--config", str(tmp_path / "nope.toml")),
                       "nope.toml", "no such file")


def test_without_a_policy_the_report_has_no_policy_parts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, report = run_json("check", "--facts", H100)
    assert code == 0
    assert "policy" not in report
    assert all(c["area"] != "policy" for c in report["checks"])


# --- each key on recorded machines --------------------------------------------------------

@pytest.mark.parametrize(("key", "ok", "bad", "code", "category"), [
    ("min-gpus", "8", "16", "POL001", "gpu_not_visible"),
    ("min-driver-version", '"570.133.20"', '"575"', "POL002", "driver_too_old"),
    ("torch-versions", '">=2.3"', '">=2.3,<2.7"', "POL003", "package_conflict"),
])
def test_each_facts_requirement_passes_and_fails(tmp_path, monkeypatch, key, ok, bad, code,
                                                 category):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "ddp-doctor.toml", f"{key} = {ok}\n")
    exit_code, report = run_json("check", "--facts", H100)
    assert exit_code == 0 and report["exit_code"] == 0
    assert policy_check(report)["status"] == "pass"
    assert policy_check(report)["summary"] == "1 of 1 requirement met (ddp-doctor.toml)"
    write(tmp_path, "ddp-doctor.toml", f"{key} = {bad}\n")
    exit_code, report = run_json("check", "--facts", H100)
    assert exit_code == 1 and report["exit_code"] == 1 and report["verdict"] == "problems found"
    found = finding(report, code)
    assert found["category"] == category and found["severity"] == "error"
    assert found["evidence"] and found["remediation"]
    assert any(e["label"] == "policy" and key in e["value"] for e in found["evidence"])
    assert policy_check(report)["status"] == "fail"


def test_gpu_count_is_the_checks_count_of_usable_gpus():
    facts = load_fixture_facts("healthy_8x_h100_nvlink")
    facts.add(replace(facts.records["env_vars"], value={"CUDA_VISIBLE_DEVICES": "0,1"}))
    facts.add(replace(facts.records["torch"], value={"importable": False}))  # NVML's count
    [found] = requirement_findings(Policy(Path("p.toml"), min_gpus=4), facts, None)
    assert found.code.id == "POL001"
    assert found.title == "2 usable GPUs; the policy requires 4"
    assert "CUDA_VISIBLE_DEVICES='0,1'" in found.evidence[0].source


@pytest.mark.parametrize(("installed", "spec", "allowed"), [
    ("2.5.1+cu121", ">=2.3,<2.7", True),  # a local label is ignored (PEP 440)
    ("2.7.0", ">=2.3,<2.7", False),
    ("2.7.0.dev20250101+cu126", ">=2.6", True),  # a nightly is judged by its place
    ("2.7.0.dev20250101+cu126", ">=2.3,<2.7", False),  # <2.7 excludes 2.7 pre-releases
    ("2.5.1+cu121", "==2.5.*", True),
])
def test_torch_versions_follow_pep_440(installed, spec, allowed):
    facts = load_fixture_facts("healthy_8x_h100_nvlink")
    facts.records["torch"].value["build"]["version"] = installed
    found = requirement_findings(Policy(Path("p.toml"), torch_versions=spec), facts, None)
    assert (found == []) is allowed, found


@pytest.mark.parametrize(("wanted", "older"), [
    ("570.133.20", False), ("570.133.3", False), ("570", False), ("570.133.21", False),
    ("570.134", True), ("575.51.02", True), ("535.104.05", False),
])
def test_driver_versions_compare_number_by_number(wanted, older):
    facts = load_fixture_facts("healthy_8x_h100_nvlink")
    facts.records["nvml"].value["driver_version"] = "570.133.21"
    found = requirement_findings(Policy(Path("p.toml"), min_driver_version=wanted), facts, None)
    assert [f.code.id for f in found] == (["POL002"] if older else [])


def test_no_driver_is_not_measured_beside_drv001(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "ddp-doctor.toml", 'min-driver-version = "535"\n')
    code, report = run_json("check", "--facts", SANDBOX)
    assert code == 1
    pol = finding(report, "POL006")
    assert pol["severity"] == "warning"
    assert "no NVIDIA driver version could be read" in pol["title"]
    assert finding(report, "DRV001")["severity"] == "error"


SMOKE_OK = {"ok": True, "skipped": None, "device": "cuda", "ranks": 8,
            "measurements": {"allreduce_busbw_gbps": 150.5, "allreduce_bytes": 64 << 20},
            "scaling": {"ranks": 8, "images_per_s_1": 100.0, "images_per_s_n": 720.0,
                        "speedup": 7.2, "efficiency": 0.9}}


def _report(smoke: dict | None) -> Report:
    return Report("0", "2025-01-01T00:00:00+00:00",
                  (CheckResult("driver.x", "X", "driver", Status.PASS, "ok"),), smoke=smoke)


@pytest.mark.parametrize(("key", "field", "low_smoke", "code"), [
    ("min_allreduce_busbw_gbps", 100.0,
     {**SMOKE_OK, "measurements": {"allreduce_busbw_gbps": 12.5, "allreduce_bytes": 64 << 20}},
     "POL004"),
    ("min_scaling_efficiency", 0.8,
     {**SMOKE_OK, "scaling": {**SMOKE_OK["scaling"], "speedup": 4.8, "efficiency": 0.6}},
     "POL005"),
])
def test_smoke_requirements_read_the_smoke_measurements(key, field, low_smoke, code):
    facts = load_fixture_facts("healthy_8x_h100_nvlink")
    policy = Policy(Path("ddp-doctor.toml"), **{key: field})
    passed = apply_policy(_report(SMOKE_OK), policy, facts)
    assert passed.exit_code() == 0 and passed.results[-1].status is Status.PASS
    failed = apply_policy(_report(low_smoke), policy, facts)
    assert failed.exit_code() == 1
    [found] = failed.results[-1].findings
    assert found.code.id == code and found.effective_severity.value == "error"
    assert failed.results[-1].check_id == "policy.requirements"
    assert failed.results[-1].area == "policy"


@pytest.mark.parametrize(("smoke", "why"), [
    (None, "the smoke job did not run"),
    ({"ok": None, "skipped": "blocked by TOR001: torch cannot be imported"},
     "the smoke job was skipped: blocked by TOR001"),
    ({**SMOKE_OK, "measurements": {"allreduce_busbw_gbps": None}, "scaling": None},
     "measured no all-reduce bandwidth"),
])
def test_an_unmeasured_smoke_requirement_is_a_pol006_warning(smoke, why):
    facts = load_fixture_facts("healthy_8x_h100_nvlink")
    policy = Policy(Path("ddp-doctor.toml"), min_allreduce_busbw_gbps=50.0,
                    min_scaling_efficiency=0.5)
    report = apply_policy(_report(smoke), policy, facts)
    found = report.results[-1].findings
    assert [f.code.id for f in found] == ["POL006", "POL006"]
    assert why in found[0].title
    assert report.results[-1].status is Status.WARN
    assert report.exit_code() == 0 and report.exit_code(strict=True) == 1
    assert "0 of 2 requirements met, 2 not measured" in report.results[-1].summary


def test_a_one_gpu_smoke_job_says_why_it_measured_neither_bandwidth_nor_scaling():
    """A one-GPU machine (seen on an H200) runs 1 rank: no link, nothing to scale to."""
    one_rank = {"ok": True, "skipped": None, "device": "cuda", "ranks": 1,
                "measurements": {"allreduce_busbw_gbps": 0.0, "allreduce_bytes": 64 << 20,
                                 "allreduce_note": "1 rank: nothing crosses a link, so busbw "
                                                   "is 0 by nccl-tests' definition"},
                "scaling": {"ranks": 1, "images_per_s_1": None, "images_per_s_n": None,
                            "speedup": None, "efficiency": None, "not_measured":
                            "only 1 rank can run on cuda here; scaling needs 2 or more"}}
    policy = Policy(Path("ddp-doctor.toml"), min_allreduce_busbw_gbps=50.0,
                    min_scaling_efficiency=0.5)
    report = apply_policy(_report(one_rank), policy, load_fixture_facts("healthy_8x_h100_nvlink"))
    busbw, scaling = report.results[-1].findings
    assert busbw.code.id == scaling.code.id == "POL006"
    assert "ran 1 rank: nothing crosses a link" in busbw.title  # not POL004 at 0 GB/s
    assert "only 1 rank can run on cuda here" in scaling.title
    assert report.exit_code() == 0


def test_doctor_runs_the_smoke_job_with_scaling_when_the_policy_asks(tmp_path, monkeypatch):
    """min-scaling-efficiency needs the 1-rank run: the planned smoke options carry it."""
    from ddp_doctor.app import examine
    from ddp_doctor.app.requests import Common, MachineRequest
    from ddp_doctor.smoke import plan as smoke_plan

    seen = []

    def plan(report, torch, numbers, base, nvml_gpus=0):
        seen.append(base.scaling)
        return "not run in this test"

    monkeypatch.setattr(smoke_plan, "plan_smoke", plan)
    # A live run that gathers nothing: "this machine" is the recorded H100 server.
    monkeypatch.setattr(examine, "gather_facts", lambda machine, python, probe_timeout,
                        keep_smi_text, starting=None: (
        load_fixture_facts("healthy_8x_h100_nvlink"), "live"))
    monkeypatch.chdir(tmp_path)
    for text, scaling in (("min-scaling-efficiency = 0.7\n", True), ("min-gpus = 1\n", False)):
        write(tmp_path, "ddp-doctor.toml", text)
        assert examine.run_doctor(Common(quiet=True), MachineRequest()) == 0
        assert seen.pop() is scaling


# --- ignore and warnings that fail --------------------------------------------------------

def test_an_ignored_error_exits_0_and_stays_visible_everywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "pyproject.toml",
          '[tool.ddp-doctor]\nignore = { TOR003 = "laptop GPU, CPU jobs only" }\n')
    md = tmp_path / "r.md"
    result = invoke("check", "--facts", LAPTOP, "--markdown", str(md))
    assert result.exit_code == 0, result.stdout
    assert "ignored by policy: laptop GPU, CPU jobs only" in result.stdout
    assert "TOR003" in result.stdout and "Ready for training" not in result.stdout
    assert "No problems left after the policy ignored TOR003; nothing was trained\n(exit code 0)" \
        in result.stdout
    assert "1 ignored by policy" in result.stdout
    assert "**ignored by policy:** laptop GPU, CPU jobs only" in md.read_text()
    code, report = run_json("check", "--facts", LAPTOP)
    assert code == 0 and report["exit_code"] == 0 and report["verdict"] == "no problems found"
    assert report["proved"] == ("no problems left after the policy ignored TOR003; nothing was "
                                "trained")
    assert finding(report, "TOR003")["ignored"] == "laptop GPU, CPU jobs only"
    owner = next(c for c in report["checks"] if any(f["code"] == "TOR003" for f in c["findings"]))
    assert owner["status"] == "pass" and "TOR003 ignored by policy" in owner["summary"]
    assert report["counts"]["fail"] == 0


def test_without_the_ignore_the_same_machine_fails(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, report = run_json("check", "--facts", LAPTOP)
    assert code == 1 and "ignored" not in finding(report, "TOR003")


@pytest.mark.parametrize(("setting", "exit_code"), [
    ("fail-on-warnings = true", 1),
    ('fail-on-warnings = ["VIS006"]', 1),
    ('fail-on-warnings = ["TOR002"]', 0),
    ("fail-on-warnings = false", 0),
    ('fail-on-warnings = true\nignore = { VIS006 = "shared dev box" }', 0),  # ignore wins
])
def test_warnings_that_fail_the_run(tmp_path, monkeypatch, setting, exit_code):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "ddp-doctor.toml", setting + "\n")
    code, report = run_json("check", "--facts", V100)
    assert code == exit_code == report["exit_code"]
    assert report["verdict"] == ("problems found" if exit_code else "no problems found")
    assert finding(report, "VIS006")["severity"] == "warning"
    owner = next(c for c in report["checks"] if any(f["code"] == "VIS006" for f in c["findings"]))
    assert owner["status"] == {1: "fail", 0: "pass" if "ignore" in setting else "warn"}[exit_code]
    console = invoke("check", "--facts", V100)
    assert console.exit_code == exit_code
    assert f"(exit code {exit_code})" in console.stdout


def test_report_with_policy_validates_against_the_schema(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "ddp-doctor.toml",
          'min-gpus = 16\nmin-allreduce-busbw-gbps = 100\nfail-on-warnings = ["POL006"]\n'
          'ignore = { VIS006 = "shared dev box" }\n')
    code, report = run_json("check", "--facts", V100)
    schema = json.loads((REPO / "docs" / "report.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(report, schema)
    assert code == 1
    assert report["policy"] == {"file": str(tmp_path / "ddp-doctor.toml"),
                                "fail_on_warnings": ["POL006"]}
    assert [f["code"] for f in report["findings"]] == ["POL001", "POL006", "VIS006"]


def test_explain_knows_the_policy_codes():
    result = invoke("explain", "pol004")
    assert result.exit_code == 0
    assert "category: nccl_p2p" in result.stdout and "How to fix" in result.stdout


# --- bad files ------------------------------------------------------------------------------

def assert_usage_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ddp-doctor: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.output + result.stderr


@pytest.mark.parametrize(("name", "text", "fragments"), [
    ("ddp-doctor.toml", "min-gpus = \n", ("not valid TOML", "line 1")),
    ("ddp-doctor.toml", "min-gpu = 8\n", ("min-gpu: unknown key", "did you mean 'min-gpus'?")),
    ("ddp-doctor.toml", "min_driver_version = '535'\n",
     ("did you mean 'min-driver-version'?",)),
    ("pyproject.toml", "[tool.ddp-doctor]\ntorch_versions = '>=2'\n",
     ("[tool.ddp-doctor] torch_versions: unknown key", "did you mean 'torch-versions'?")),
    ("ddp-doctor.toml", "[tool.ddp-doctor]\nmin-gpus = 8\n",
     ("tool: unknown key", "takes the keys at top level")),
    ("pyproject.toml", "[tool]\nddp-doctor = 3\n", ("tool.ddp-doctor: expected a table",)),
    ("ddp-doctor.toml", 'min-gpus = "8"\n', ("min-gpus: expected a whole number", "string")),
    ("ddp-doctor.toml", "min-gpus = true\n", ("min-gpus: expected a whole number", "boolean")),
    ("ddp-doctor.toml", "min-gpus = 0\n", ("min-gpus: expected a whole number 1 or more",)),
    ("ddp-doctor.toml", "min-scaling-efficiency = 80\n",
     ("min-scaling-efficiency: expected a number from 0 to 1, got 80",)),
    ("ddp-doctor.toml", "min-allreduce-busbw-gbps = '100'\n",
     ("min-allreduce-busbw-gbps: expected a number",)),
    ("ddp-doctor.toml", "min-driver-version = 535.1\n",
     ("min-driver-version: expected a string such as \"535.104.05\"",)),
    ("ddp-doctor.toml", "min-driver-version = 'r535'\n", ("not a driver version",)),
    ("ddp-doctor.toml", "torch-versions = '2.5'\n", ("torch-versions: '2.5' is not a PEP 440",)),
    ("ddp-doctor.toml", "ignore = { VIS066 = 'x' }\n",
     ("ignore.VIS066: unknown code 'VIS066'", "did you mean 'VIS006'?")),
    ("ddp-doctor.toml", "ignore = { VIS006 = '' }\n",
     ("ignore.VIS006: give the reason as a non-empty string", "empty string")),
    ("ddp-doctor.toml", "ignore = { VIS006 = true }\n", ("ignore.VIS006: give the reason",)),
    ("ddp-doctor.toml", "ignore = ['VIS006']\n",
     ("ignore: expected a table of CODE = \"reason\"", "got an array")),
    ("ddp-doctor.toml", "fail-on-warnings = 'yes'\n",
     ("fail-on-warnings: expected true, false or a list of codes",)),
    ("ddp-doctor.toml", "fail-on-warnings = ['NOPE01']\n",
     ("fail-on-warnings[0]: unknown code 'NOPE01'",)),
])
def test_every_kind_of_bad_file_is_one_line_and_exit_2(tmp_path, monkeypatch, name, text,
                                                       fragments):
    path = write(tmp_path, name, text)
    monkeypatch.chdir(tmp_path)
    assert_usage_error(invoke("check", "--facts", H100), str(path), *fragments)


def test_a_bad_file_stops_doctor_before_any_work(tmp_path, monkeypatch):
    write(tmp_path, "ddp-doctor.toml", "min-gpus = 'eight'\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r.json"
    assert_usage_error(invoke("doctor", "--facts", H100, "--json", str(out)), "min-gpus")
    assert not out.exists()


def test_an_unreadable_file_is_one_line(tmp_path, monkeypatch):
    path = write(tmp_path, "ddp-doctor.toml", "")
    path.write_bytes(b"min-gpus = 1\n\xff\xfe\n")
    monkeypatch.chdir(tmp_path)
    assert_usage_error(invoke("check", "--facts", H100), str(path), "not valid TOML")


def test_parse_accepts_every_key_and_normalises_codes():
    table = {"min-gpus": 8, "min-driver-version": "535.104.05", "torch-versions": ">=2.3,<2.7",
             "min-allreduce-busbw-gbps": 100, "min-scaling-efficiency": 0.8,
             "ignore": {"vis006": " shared dev box "}, "fail-on-warnings": ["tor002", "TOR002"]}
    policy = parse_policy(Path("ddp-doctor.toml"), table, KNOWN)
    assert (policy.min_gpus, policy.min_driver_version, policy.torch_versions) == (
        8, "535.104.05", ">=2.3,<2.7")
    assert policy.min_allreduce_busbw_gbps == 100.0 and policy.min_scaling_efficiency == 0.8
    assert policy.ignore == {"VIS006": "shared dev box"}
    assert policy.fail_on_warnings == ("TOR002",)
    assert policy.requirements == 5 and policy.wants_scaling
    with pytest.raises(PolicyError):
        parse_policy(Path("ddp-doctor.toml"), {"ignore": {"XYZ123": "r"}}, KNOWN)


def test_the_readme_example_is_a_valid_policy(tmp_path):
    import re

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    example = re.search(r"### Policy file.*?```toml\n(.*?)```", readme, re.S)
    assert example, "README lost its policy example"
    write(tmp_path, "pyproject.toml", example.group(1))
    policy = find_policy(None, tmp_path, every_code_id)
    assert policy is not None and policy.requirements == 6  # every requirement key of the example
    assert policy.ignore and policy.fail_on_warnings


@pytest.mark.slow
@pytest.mark.spawns
def test_the_smoke_command_judges_the_smoke_requirements_only(tmp_path):
    """`ddp-doctor smoke` (the Slurm recipe's cross-node step) applies the smoke job's
    requirements, the bandwidth minimum and GPU training; the machine keys are left to
    `check`/`doctor`, which gather the facts they need. This machine has no GPU: with the
    policy, the CPU fallback is a failed pre-flight. (One real run for both requirements:
    each cost a job of its own before.)"""
    import json
    import subprocess
    import sys

    (tmp_path / "ddp-doctor.toml").write_text("min-allreduce-busbw-gbps = 100000\n"
                                              "min-gpus = 64\n"
                                              "require-gpu-training = true\n")
    done = subprocess.run([sys.executable, "-m", "ddp_doctor", "smoke", "--steps", "4",
                           "--imgsz", "64", "--json", "-"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout)
    codes = [f["code"] for f in report["findings"]]
    assert done.returncode == 1, done.stderr
    assert report["smoke"]["proved"]["cpu_fallback"] is True
    assert {"POL004", "POL007", "SMK017"} <= set(codes), codes
    assert "POL001" not in codes and "POL006" not in codes
    # the failed policy requirements lead, before the smoke job's own warning
    assert codes.index("POL007") < codes.index("SMK017")
    assert report["policy"]["file"] == str(tmp_path / "ddp-doctor.toml")


def test_loading_a_policy_never_imports_the_requirements():
    """load.py finds and validates; apply.py judges. requirements.py needs load's Policy, so
    load importing requirements (or apply) would make a cycle."""
    import ast

    import ddp_doctor.policy.load as load_module

    tree = ast.parse(Path(load_module.__file__).read_text(encoding="utf-8"))
    modules = {node.module for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module}
    assert not modules & {"ddp_doctor.policy.requirements", "ddp_doctor.policy.apply"}
    assert not any(isinstance(node, ast.ImportFrom) and node.module == "ddp_doctor.policy"
                   for node in ast.walk(tree))


# --- require-gpu-training: a CPU fallback never passes a GPU pre-flight ----------------

PROVED_GPU = {"gpu_training": True, "device": "cuda", "backend": "nccl",
              "launcher": "torchrun", "world_size": 8, "mixed_precision": True,
              "cpu_fallback": False}
PROVED_CPU = {**PROVED_GPU, "gpu_training": False, "device": "cpu", "backend": "gloo",
              "world_size": 2, "mixed_precision": False, "cpu_fallback": True}


@pytest.mark.parametrize(("smoke", "code", "severity", "why"), [
    ({**SMOKE_OK, "proved": PROVED_GPU}, None, None, None),
    ({**SMOKE_OK, "device": "cpu", "proved": PROVED_CPU}, "POL007", "error",
     "no GPU was usable, so the smoke job trained on the CPU (SMK017)"),
    ({**SMOKE_OK, "ok": False, "proved": {**PROVED_GPU, "gpu_training": False}}, "POL007",
     "error", "the smoke job did not pass on the GPUs (it ran on cuda and failed)"),
    ({"ok": None, "skipped": "blocked by DRV001: no usable GPU"}, "POL007", "error",
     "the smoke job was skipped: blocked by DRV001"),
    (None, "POL006", "warning", "the smoke job did not run"),
])
def test_require_gpu_training(smoke, code, severity, why):
    policy = Policy(Path("ddp-doctor.toml"), require_gpu_training=True)
    report = apply_policy(_report(smoke), policy, load_fixture_facts("healthy_8x_h100_nvlink"))
    found = report.results[-1].findings
    if code is None:
        assert found == () and report.exit_code() == 0
        return
    [finding] = found
    assert (finding.code.id, finding.effective_severity.value) == (code, severity)
    assert why in finding.title
    assert ("policy", "require-gpu-training = true") in [(e.label, e.value)
                                                        for e in finding.evidence]


def test_require_gpu_training_is_read_and_validated(tmp_path):
    path = tmp_path / "ddp-doctor.toml"
    path.write_text("require-gpu-training = true\n")
    assert parse_policy(path, {"require-gpu-training": True}, ()).require_gpu_training is True
    path.write_text("require-gpu-training = 'yes'\n")
    result = invoke("check", "--config", str(path), "--facts",
                    str(FACTS_DIR / "healthy_8x_h100_nvlink.json"))
    assert result.exit_code == 2
    assert "require-gpu-training: expected true or false, got a string ('yes')" in result.stderr
