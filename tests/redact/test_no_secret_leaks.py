"""Secrets planted everywhere a run reads never reach anything the run writes.

One real ``ddp-doctor doctor`` (checks, then the CPU smoke job) runs with secrets of every
kind in its environment, printed into every Python process's stderr (so into the smoke
job's launcher and rank logs, which the bundle carries), and inside a log file that
``diagnose`` then reads. Every artifact is collected: console, JSON, Markdown, JUnit,
the saved facts, the GitHub annotations and step summary, every member of the support
bundle; then ``diagnose`` of the log and of the bundle. None may hold a planted value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

HF = "hf_" + "Q8rTzLm3VbNx7KpWc2YdHs9JfGa4UeRi6Oq1"
GHP = "ghp_" + "x7Kq2Lm9Tz4Rb8Nw3Vc6Yh1Jd5Gf0Ps2Ua7E"
GH_PAT = "github_pat_" + "11ABCDEFG0" + "a" * 30 + "B" * 22
WANDB = "9f3c2b1a" * 5
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
PASSWORD = "hunter2-" + "c0rrect"
SERVICE = "svc-" + "8d7f6e5c4b3a2918"
KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + "BKcwggSjAgEAAoIBAQC7"
PRIVATE_KEY = ("-----BEGIN PRIVATE KEY-----\n" + KEY_BODY + "\n-----END PRIVATE KEY-----")
SECRETS = (HF, GHP, GH_PAT, WANDB, AWS_ID, AWS_SECRET, PASSWORD, SERVICE, KEY_BODY)

PLANTED_ENV = {
    "HF_TOKEN": HF, "GITHUB_TOKEN": GHP, "GH_PAT": GH_PAT, "WANDB_API_KEY": WANDB,
    "AWS_ACCESS_KEY_ID": AWS_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
    "MY_SERVICE_TOKEN": SERVICE, "PIP_INDEX_URL": f"https://bot:{PASSWORD}@pypi.example.com/",
    "NCCL_SOCKET_IFNAME": f"eth0,{HF}",  # a secret where a harmless variable should be
}
# Every Python process of the run (the doctor, its probes, torchrun, each rank) prints this
# at start-up: the smoke job's logs then carry the secrets too.
PRINTED = (f"export WANDB_API_KEY={WANDB}\nos.environ[\"HF_TOKEN\"] = \"{HF}\"\n"
           f"AWS_SECRET_ACCESS_KEY {AWS_SECRET}\nwandb login {WANDB}\n"
           f"loading https://bot:{PASSWORD}@models.example.com/w.pt token={GHP}\n"
           f"AWS_ACCESS_KEY_ID={AWS_ID} AWS_SECRET_ACCESS_KEY={AWS_SECRET}\n{PRIVATE_KEY}\n")
SITECUSTOMIZE = f"import sys\nsys.stderr.write({PRINTED!r})\n"
LOG = (f"+ torchrun --nproc_per_node 2 train.py --hf-token {HF}\n"
       f"MY_SERVICE_TOKEN={SERVICE} GH_PAT={GH_PAT}\n"
       f"{PRIVATE_KEY}\n"
       f"[rank0]: RuntimeError: CUDA out of memory while loading https://bot:{PASSWORD}"
       f"@models.example.com/w.pt with AWS_ACCESS_KEY_ID={AWS_ID}\n")


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddp_doctor", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def _archive_texts(path: Path) -> dict[str, str]:
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return {name: archive.read(name).decode("utf-8", "replace")
                    for name in archive.namelist() if not name.endswith("/")}
    with tarfile.open(path) as archive:
        return {m.name: archive.extractfile(m).read().decode("utf-8", "replace")
                for m in archive.getmembers() if m.isfile()}


@pytest.fixture(scope="module")
def doctor_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, dict[str, str]]:
    """The one real ``ddp-doctor doctor`` of this module, with every output and the planted
    secrets: (the finished process, the working folder, its environment)."""
    tmp_path = tmp_path_factory.mktemp("doctor")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    summary = tmp_path / "step-summary.md"
    env = {**os.environ, **PLANTED_ENV, "PYTHONPATH": str(hooks), "GITHUB_ACTIONS": "true",
           "GITHUB_STEP_SUMMARY": str(summary)}
    out = tmp_path / "out"
    out.mkdir()
    doctor = _run(["doctor", "--json", str(out / "report.json"), "--markdown",
                   str(out / "report.md"), "--junit", str(out / "junit.xml"), "--save-facts",
                   str(out / "facts.json"), "--bundle", str(out / "bundle.tar.gz")],
                  env, tmp_path)
    return doctor, tmp_path, env


@pytest.mark.slow
@pytest.mark.spawns
def test_the_doctor_runs_the_checks_then_the_cpu_smoke_job_here(doctor_run) -> None:
    """`ddp-doctor doctor` with no option on this GPU-less machine: every check, then the
    smoke job on the CPU, whose pass proves nothing about GPU training. (The run is this
    module's, with secrets in its environment, as a user's often has: they change nothing
    of the verdict. A run of its own cost ~26 CPU-s more.)"""
    doctor, tmp_path, _ = doctor_run
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    smoke = report["smoke"]
    checks = {c["id"]: c for c in report["checks"]}
    why = [(f["code"], f["title"]) for f in checks["smoke.train"]["findings"]]
    assert smoke["ok"] is True, why
    assert smoke["device"] == "cpu" and smoke["ranks"] == 2
    # No usable GPU here: the job trained on the CPU, which proves nothing about GPU training.
    assert smoke["proved"]["cpu_fallback"] is True and smoke["proved"]["gpu_training"] is False
    assert checks["smoke.train"]["status"] == "warn"
    assert [code for code, _ in why] == ["SMK017"]
    assert report["verdict"] != "ready"
    assert list(checks)[-1] == "smoke.train"  # after every check
    assert doctor.returncode == report["exit_code"]


@pytest.mark.slow
@pytest.mark.spawns
def test_no_planted_secret_reaches_any_artifact(doctor_run) -> None:
    doctor, tmp_path, env = doctor_run
    summary = tmp_path / "step-summary.md"
    out = tmp_path / "out"
    assert doctor.returncode in (0, 1), doctor.stderr
    bundle = _archive_texts(out / "bundle.tar.gz")
    smoke_logs = [name for name in bundle if "/smoke/" in name]
    assert smoke_logs, sorted(bundle)  # the smoke job ran and its logs are in the bundle
    log = tmp_path / "ticket.log"
    log.write_text(LOG)
    diagnosed = _run(["diagnose", str(log), "--json", str(out / "diagnose.json"),
                      "--markdown", str(out / "diagnose.md"), "--junit",
                      str(out / "diagnose.xml")], env, tmp_path)
    assert diagnosed.returncode == 1, diagnosed.stderr
    replayed = _run(["diagnose", str(out / "bundle.tar.gz")], env, tmp_path)
    assert replayed.returncode in (0, 1), replayed.stderr
    # the zip writer and --anonymize, from the saved facts (no second smoke job)
    zipped = _run(["check", "--facts", str(out / "facts.json"), "--anonymize", "--bundle",
                   str(out / "bundle.zip"), "--json", "-"], env, tmp_path)
    assert zipped.returncode in (0, 1), zipped.stderr

    def own(stderr: str) -> str:  # what ddp-doctor itself wrote: the hook's lines removed
        return stderr.replace(PRINTED, "")

    artifacts = {"doctor console": doctor.stdout, "doctor stderr": own(doctor.stderr),
                 "diagnose console": diagnosed.stdout, "diagnose stderr": own(diagnosed.stderr),
                 "bundle diagnosis": replayed.stdout, "step summary": summary.read_text(),
                 "anonymized json": zipped.stdout, "anonymized stderr": own(zipped.stderr),
                 **{f"bundle:{name}": text for name, text in bundle.items()},
                 **{f"zip:{name}": text
                    for name, text in _archive_texts(out / "bundle.zip").items()},
                 **{path.name: path.read_text() for path in out.iterdir()
                    if path.suffix in (".json", ".md", ".xml")}}
    leaks = [(name, secret[:8]) for name, text in artifacts.items() for secret in SECRETS
             if secret in text]
    assert leaks == []
    # the planted values did travel: they were removed, not simply never read
    assert "<redacted>" in bundle["ddp-doctor-bundle/facts.json"]
    assert any("<redacted>" in bundle[name] for name in smoke_logs)
    assert "<redacted>" in (out / "diagnose.json").read_text()
    assert json.loads((out / "facts.json").read_text())["facts"]["env_vars"]["value"][
        "HF_TOKEN"] == "<redacted>"
