"""A support bundle is diagnosed from its own report first.

The bundle's report.json was judged on the machine from measurements; its logs hold
everything that run printed. A line that looks like a cause in the logs of a run that
passed is not one, so it never outranks the recorded verdict.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

from ddp_doctor.bundle.archive import TOP
from ddp_doctor.codebook import all_codes
from ddp_doctor.diagnose import diagnose
from tests.support.cli import invoke

NUMPY_WARNING = ("/venv/lib/python3.11/site-packages/torch/_subclasses/functional_tensor.py:"
                 "368: UserWarning: Failed to initialize NumPy: No module named 'numpy' "
                 "(Triggered internally at /__w/pytorch/pytorch/torch/csrc/utils/"
                 "tensor_numpy.cpp:84.)")
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB."


def recorded(verdict: str, exit_code: int, findings: list[dict], smoke_ok: bool | None
             ) -> dict:
    return {"schema_version": 1, "tool": "ddp-doctor", "tool_version": "0.1.0",
            "verdict": verdict, "exit_code": exit_code, "findings": findings,
            "checks": [], "smoke": None if smoke_ok is None else {"ok": smoke_ok}}


def bundle(tmp_path: Path, report: dict, logs: dict[str, str]) -> Path:
    path = tmp_path / "b.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{TOP}/report.json", json.dumps(report))
        for name, text in logs.items():
            archive.writestr(f"{TOP}/smoke/{name}", text)
    path.write_bytes(buffer.getvalue())
    return path


def test_the_harmless_numpy_warning_of_a_healthy_run_is_not_a_package_conflict(tmp_path):
    path = bundle(tmp_path, recorded("ready", 0, [], smoke_ok=True),
                  {"rank0.stderr": NUMPY_WARNING + "\n", "rank1.stderr": NUMPY_WARNING + "\n"})
    report = diagnose(str(path), known_codes=all_codes).report
    assert [f.code.id for f in report.findings] == []
    assert report.exit_code() == 0
    assert "says 'ready'" in report.results[0].summary


def test_the_numpy_abi_break_is_still_a_package_conflict(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("UserWarning: Failed to initialize NumPy: _ARRAY_API not found\n")
    assert [f.code.id for f in diagnose(str(log)).report.findings] == ["LOG026", "DIAG008"]


def test_an_error_line_in_the_logs_of_a_passed_run_is_only_a_warning(tmp_path):
    path = bundle(tmp_path, recorded("ready", 0, [], smoke_ok=True), {"rank0.stderr": OOM})
    report = diagnose(str(path), known_codes=all_codes).report
    finding, similar = report.findings  # the log's finding, then similar solved threads
    assert (finding.code.id, similar.code.id) == ("LOG005", "DIAG008")
    assert finding.effective_severity.value == "warning"
    assert ("but the run passed", "the report made on the machine says 'ready': these lines "
            "did not stop it") in [(e.label, e.value) for e in finding.evidence]
    assert report.exit_code() == 0


def test_the_recorded_findings_lead_and_log_rules_add_to_them(tmp_path):
    shm = {"code": "HST001", "category": "nccl_shared_memory", "severity": "error",
           "title": "/dev/shm is 64 MiB", "evidence": [{"label": "/dev/shm", "value": "64 MiB",
                                                       "source": "statvfs"}],
           "remediation": [{"text": "Give the container more shared memory.",
                            "command": "docker run --shm-size=16g ...", "url": None}],
           "affects": [], "docs_url": None}
    path = bundle(tmp_path, recorded("problems found", 1, [shm], smoke_ok=False),
                  {"rank1.stderr": OOM})
    report = diagnose(str(path), known_codes=all_codes).report
    assert [f.code.id for f in report.findings] == ["HST001", "LOG005", "DIAG008"]
    lead = report.findings[0]
    assert lead.title == "/dev/shm is 64 MiB" and lead.category.value == "nccl_shared_memory"
    assert lead.remediation[0].command == "docker run --shm-size=16g ..."
    assert lead.evidence[-1].value == "the bundle's report.json (recorded on the machine)"
    # a failed run's log lines keep their weight
    assert report.findings[1].effective_severity.value == "error"
    assert report.exit_code() == 1


def test_a_recorded_code_unknown_here_keeps_its_category(tmp_path):
    other = {"code": "ACME001", "category": "nccl_network", "severity": "warning",
             "title": "a plugin's finding", "evidence": [], "remediation": []}
    path = bundle(tmp_path, recorded("ready", 0, [other], smoke_ok=None), {})
    [finding] = diagnose(str(path), known_codes=all_codes).report.findings
    assert (finding.code.id, finding.category.value, finding.effective_severity.value) == \
        ("ACME001", "nccl_network", "warning")


def test_the_cli_reports_the_recorded_verdict(tmp_path):
    path = bundle(tmp_path, recorded("ready", 0, [], smoke_ok=True),
                  {"rank0.stderr": NUMPY_WARNING + "\n"})
    result = invoke("diagnose", str(path), "--json", "-")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["findings"] == []
    assert "the bundle's own report (made on the machine) says 'ready'" in \
        data["checks"][0]["summary"]
