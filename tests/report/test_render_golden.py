"""Golden files: every renderer's whole output for three reports, compared byte for byte.

The reports are the one of this sandbox's recorded facts (tests/fixtures/facts/
sandbox_cpu_container.json, run through the real checks), a hand-built one that
exercises every part of the layouts: findings of each severity with evidence, several
fix steps with commands and URLs, ``affects``, checks skipped because another failed,
a crashed check with its traceback, a plugin that failed to load, probe errors and a
replayed facts file; and the sandbox's report with a smoke-training job that finished
but failed two of its criteria (judged by the smoke job's own verdict code).

Timestamps, durations and the tool version are pinned, so the files change only when
the output does. After an intended change of the output, rewrite the files with::

    DDP_DOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/report/test_render_golden.py

and review ``git diff tests/golden``.
"""

from __future__ import annotations

import dataclasses
import difflib
import io
import os
from pathlib import Path
from typing import Callable

import pytest
from rich.console import Console

from ddp_doctor.categories import Category
from ddp_doctor.checklist import load_catalogue
from ddp_doctor.facts.snapshot import load_facts
from ddp_doctor.model import (
    CheckResult,
    Code,
    Evidence,
    Finding,
    Report,
    Severity,
    Status,
    Step,
)
from ddp_doctor.report.console import render_console
from ddp_doctor.report.json import render_json
from ddp_doctor.report.junit import render_junit
from ddp_doctor.report.markdown import render_markdown
from ddp_doctor.runner import build_report
from ddp_doctor.smoke.junit_codes import SMOKE_CODES
from tests.conftest import FACTS_DIR
from tests.support.smoke_reports import failing_run

GOLDEN_DIR = Path(__file__).parents[1] / "golden"
UPDATE = os.environ.get("DDP_DOCTOR_UPDATE_GOLDEN") == "1"
FIXED_CREATED_AT = "2026-01-01T00:00:00+00:00"
FIXED_TOOL_VERSION = "0.1.0"


def pinned(report: Report) -> Report:
    """The report with everything that varies between runs fixed."""
    return dataclasses.replace(
        report,
        created_at=FIXED_CREATED_AT,
        tool_version=FIXED_TOOL_VERSION,
        results=tuple(dataclasses.replace(r, duration_s=0.0) for r in report.results),
    )


def sandbox_report() -> Report:
    """The real checks (built-ins only: installed plugins would vary) on recorded facts."""
    facts = load_facts(FACTS_DIR / "sandbox_cpu_container.json")
    report = build_report(load_catalogue(entry_points=[]), facts,
                          facts_source="tests/fixtures/facts/sandbox_cpu_container.json")
    return pinned(report)


def smoke_report() -> Report:
    """`doctor` on the sandbox's facts, with its smoke job: flat loss, ranks out of sync."""
    report = sandbox_report()
    smoke = failing_run()
    return pinned(dataclasses.replace(report, results=(*report.results, smoke.check_result()),
                                      smoke=smoke.data))


INSTALL_GUIDE = "https://pytorch.org/get-started/locally/"
TORCH_MISSING = Code("TOR001", Category.TORCH_MISSING, "PyTorch cannot be imported",
                     "w", "w", "w", docs_url=INSTALL_GUIDE)
DRIVER_TOO_OLD = Code("DRV002", Category.DRIVER_TOO_OLD, "Driver older than torch's CUDA",
                      "w", "w", "w", severity=Severity.WARNING)
SHM_TOO_SMALL = Code("HST001", Category.NCCL_SHARED_MEMORY, "/dev/shm too small",
                     "w", "w", "w", severity=Severity.WARNING)
NO_SWAP = Code("HST002", Category.HOST_OUT_OF_MEMORY, "No swap", "w", "w", "w",
               severity=Severity.INFO)

CRASH_TRACEBACK = """\
Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/ddp_doctor/runner.py", line 55, in run_check
    for item in spec.func(facts):
  File "/opt/venv/lib/python3.11/site-packages/acme_gpu_checks/swap.py", line 12, in swap
    if facts["host"]["swap_total"] == 0:
KeyError: 'swap_total'
"""

PLUGIN_TRACEBACK = """\
Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/ddp_doctor/registry.py", line 128, in add_module
    module = load()
ModuleNotFoundError: No module named 'broken_checks'
"""


def full_report() -> Report:
    """A hand-built report with every element the renderers know how to show."""
    torch_missing = Finding(
        TORCH_MISSING,
        "import torch fails: ImportError",
        evidence=(
            Evidence("interpreter", "/opt/venv/bin/python (Python 3.11.9)", "interpreter probe"),
            Evidence("import torch", "ImportError: libcudnn.so.9: cannot open shared object "
                     "file: No such file or directory", "interpreter probe"),
            Evidence("LD_LIBRARY_PATH", "/usr/local/cuda-11.8/lib64 | /opt/cudnn8/lib",
                     "environment"),
        ),
        remediation=(
            Step("Create a clean virtual environment; a half-upgraded torch or mixed CUDA "
                 "libraries in one environment are the usual cause.",
                 command="python -m venv ~/venvs/train && . ~/venvs/train/bin/activate"),
            Step("Reinstall torch there with one command, so every CUDA library comes from "
                 "the same build.",
                 command="pip install torch --index-url https://download.pytorch.org/whl/cu121",
                 url=INSTALL_GUIDE),
            Step("If the error names a missing .so, check that LD_LIBRARY_PATH does not point "
                 "at another CUDA or cuDNN installation.", command="echo $LD_LIBRARY_PATH"),
        ),
    )
    driver_old = Finding(
        DRIVER_TOO_OLD,
        "Driver 525.60.13 is older than CUDA 12.1 needs",
        evidence=(Evidence("driver", "525.60.13", "NVML"),
                  Evidence("needed for CUDA 12.1", ">= 530.30.02", "CUDA release notes")),
        remediation=(Step("Upgrade the driver.", url="https://www.nvidia.com/drivers"),),
        docs_url="https://docs.nvidia.com/deploy/cuda-compatibility/",
    )
    shm_small = Finding(
        SHM_TOO_SMALL,
        "/dev/shm is 64 MiB: NCCL and DataLoader workers need more",
        evidence=(Evidence("/dev/shm size", "64 MiB", "statvfs /dev/shm"),
                  Evidence("container", "docker", "/.dockerenv")),
        remediation=(
            Step("Restart the container with a larger /dev/shm.",
                 command="docker run --shm-size=16g ...",
                 url="https://docs.docker.com/engine/reference/run/"),
            Step("Or share the host's IPC namespace.", command="docker run --ipc=host ..."),
        ),
        affects=("rank:0", "rank:1", "dataloader"),
    )
    no_swap = Finding(
        NO_SWAP,
        "This node has no swap",
        evidence=(Evidence("swap", "0 B", "/proc/meminfo"),),
        severity=Severity.INFO,
    )
    results = (
        CheckResult("plugin:broken (broken_checks)", "Load plugin broken (broken_checks)",
                    "plugins", Status.ERROR,
                    "plugin failed to load: ModuleNotFoundError: No module named "
                    "'broken_checks'", error=PLUGIN_TRACEBACK),
        CheckResult("driver.present", "NVIDIA driver", "driver", Status.PASS,
                    "driver 525.60.13, 2 GPUs"),
        CheckResult("driver.cuda_compat", "Driver supports torch's CUDA", "driver", Status.WARN,
                    driver_old.title, findings=(driver_old,), duration_s=0.0012),
        CheckResult("torch.import", "PyTorch import", "pytorch", Status.FAIL,
                    torch_missing.title, findings=(torch_missing,), duration_s=0.0003),
        CheckResult("torch.cuda_build", "PyTorch CUDA build", "pytorch", Status.SKIP,
                    "blocked by TOR001 (torch.import)",
                    skip_reason="blocked by TOR001 (torch.import)"),
        CheckResult("torch.arch", "GPU architecture support", "pytorch", Status.SKIP,
                    "blocked by TOR001 (torch.import)",
                    skip_reason="blocked by TOR001 (torch.import)"),
        CheckResult("nccl.p2p", "Peer-to-peer access", "nccl", Status.SKIP,
                    "fact 'topology' could not be gathered: nvidia-smi topo -m timed out "
                    "after 10 s",
                    skip_reason="fact 'topology' could not be gathered: nvidia-smi topo -m "
                    "timed out after 10 s"),
        CheckResult("host.shm", "Shared memory (/dev/shm)", "host", Status.WARN,
                    "64 MiB free of 64 MiB", findings=(shm_small, no_swap)),
        CheckResult("acme.swap", "Swap", "host", Status.ERROR,
                    "check crashed: KeyError: 'swap_total'", error=CRASH_TRACEBACK,
                    duration_s=0.0001),
    )
    return pinned(Report(
        tool_version="0.1.0",
        created_at="2026-11-23T09:43:01+00:00",
        results=results,
        facts_source="/home/alice/node07.facts.json",
        environment={
            "os": "Ubuntu 22.04.4 LTS",
            "kernel": "5.15.0-105-generic",
            "wsl": None,
            "container": "docker",
            "python": "3.11.9",
            "python_executable": "/opt/venv/bin/python",
            "driver": "525.60.13",
            "driver_cuda": "12.0",
            "gpus": ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"],
            "torch": None,
            "torch_cuda": None,
            "cuda_available": None,
            "cuda_device_count": None,
        },
        probe_errors={"topology": "nvidia-smi topo -m timed out after 10 s"},
    ))


def console_text(report: Report, **options) -> str:
    console = Console(width=100, record=True, color_system=None, force_terminal=False,
                      file=io.StringIO())
    render_console(report, console, **options)
    return console.export_text()


RENDERINGS: dict[str, tuple[str, Callable[[Report], str]]] = {
    "console": ("txt", lambda r: console_text(r)),
    "console-verbose": ("txt", lambda r: console_text(r, verbose=True)),
    "console-quiet": ("txt", lambda r: console_text(r, quiet=True)),
    "json": ("json", render_json),
    "markdown": ("md", render_markdown),
    "junit": ("xml", lambda r: render_junit(r, smoke_codes=SMOKE_CODES)),
    "junit-strict": ("xml", lambda r: render_junit(r, strict=True, smoke_codes=SMOKE_CODES)),
}
REPORTS: dict[str, Callable[[], Report]] = {"sandbox": sandbox_report, "full": full_report,
                                            "smoke": smoke_report}
CASES = [(r, k) for r in REPORTS for k in RENDERINGS]


def golden_path(report_name: str, kind: str) -> Path:
    return GOLDEN_DIR / f"{report_name}.{kind}.{RENDERINGS[kind][0]}"


def assert_matches_golden(actual: str, path: Path) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8", newline="\n")
        return
    if not path.exists():
        pytest.fail(f"golden file {path} is missing; create it with DDP_DOCTOR_UPDATE_GOLDEN=1")
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile=f"{path.name} (golden)", tofile=f"{path.name} (rendered now)",
        ))
        pytest.fail(f"output differs from {path}; if the change is intended, rerun with "
                    f"DDP_DOCTOR_UPDATE_GOLDEN=1 and review git diff\n{diff}", pytrace=False)


@pytest.mark.parametrize(("report_name", "kind"), CASES, ids=[f"{r}-{k}" for r, k in CASES])
def test_rendering_matches_golden(report_name, kind):
    report = REPORTS[report_name]()
    actual = RENDERINGS[kind][1](report)
    assert_matches_golden(actual, golden_path(report_name, kind))


def test_no_stale_golden_files():
    expected = {golden_path(r, k).name for r, k in CASES}
    present = {p.name for p in GOLDEN_DIR.iterdir()} if GOLDEN_DIR.is_dir() else set()
    assert present <= expected, f"golden files no test renders: {sorted(present - expected)}"


def test_renderings_are_deterministic():
    """Two builds of the same report render identically (no clock, no timing leaks)."""
    for build in REPORTS.values():
        first, second = build(), build()
        for _, render in RENDERINGS.values():
            assert render(first) == render(second)


def test_full_report_covers_what_it_claims():
    report = full_report()
    assert {f.effective_severity for f in report.findings} == set(Severity)
    assert {r.status for r in report.results} == set(Status)
    assert any(r.skip_reason == "blocked by TOR001 (torch.import)" for r in report.results)
    assert report.facts_source != "live"
    assert any(len(f.remediation) > 1 and any(s.command for s in f.remediation)
               and any(s.url for s in f.remediation) for f in report.findings)
    assert any(f.affects for f in report.findings)
